defmodule FlameOn.Client.ExUnitTest do
  # Runs the `mix test` of test/fixtures/exunit_app, an app that depends on
  # this project by path and profiles its own tests with
  # FlameOn.Client.ExUnit, four times: as is; without the profiler
  # (WITHOUT_FLAME_ON=1 leaves out `use FlameOn.Client.ExUnit` and `start/1`:
  # the baseline ExUnit's reports must match); with FLAME_ON=off; and with
  # FLAME_ON=all under --trace. Each run is its own VM: nothing is traced in
  # this one.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers, only: [json_decode!: 1]

  @app Path.expand("../../fixtures/exunit_app", __DIR__)
  @out Path.join(@app, "flame_on_out/tests")
  @exts [".folded", ".svg", ".speedscope.json"]
  @last [".last.folded", ".last.time"]

  @tagged [
    {"ExunitApp.BasicTest", "test computes fib"},
    {"ExunitApp.BasicTest", "test sleeps"},
    {"ExunitApp.BasicTest", "test fails on an assertion"},
    {"ExunitApp.BasicTest", "test raises in a helper"},
    {"ExunitApp.BasicTest", "test passes a tail call"},
    {"ExunitApp.AlphaTest", "test alpha calls the shared server"},
    {"ExunitApp.BetaTest", "test beta calls the shared server"}
  ]
  # FLAME_ON=all adds the tests of modules that use FlameOn.Client.ExUnit,
  # but not those tagged flame: false nor those of other modules. (--trace
  # turns timeouts off, so the test that times out runs to its end.)
  @all @tagged ++
         [
           {"ExunitApp.BasicTest", "test times out"},
           {"ExunitApp.BasicTest", "test untagged"},
           {"ExunitApp.UntaggedTest", "test profiled only with FLAME_ON=all"}
         ]
  @failing [
    {"ExunitApp.BasicTest", "test fails on an assertion"},
    {"ExunitApp.BasicTest", "test raises in a helper"}
  ]
  # Tagged, but killed by its ExUnit timeout before its body returned.
  @timed_out {"ExunitApp.BasicTest", "test times out"}

  setup_all do
    # The first run compiles the app and this project as its dependency.
    default = run_fixture([])
    baseline = run_fixture([{"WITHOUT_FLAME_ON", "1"}])
    off = run_fixture([{"FLAME_ON", "off"}])
    all = run_fixture([{"FLAME_ON", "all"}], ["--trace"])
    %{default: default, baseline: baseline, off: off, all: all}
  end

  # `mix test` in the fixture app; returns its output, exit status and the
  # files it wrote under flame_on_out/tests.
  defp run_fixture(env, args \\ []) do
    File.rm_rf!(Path.join(@app, "flame_on_out"))
    mix = System.find_executable("mix") || flunk("mix is not on the PATH")

    {output, status} =
      System.cmd(mix, ["test", "--seed", "0" | args],
        cd: @app,
        env:
          [{"MIX_ENV", "test"}, {"FLAME_ON", nil}, {"WITHOUT_FLAME_ON", nil}, {"MIX_EXS", nil}] ++
            env,
        stderr_to_stdout: true
      )

    files =
      case File.ls(@out) do
        {:ok, names} -> Enum.sort(names)
        {:error, :enoent} -> []
      end

    folded =
      for name <- files, String.ends_with?(name, ".folded"), into: %{} do
        {name, File.read!(Path.join(@out, name))}
      end

    others =
      for name <- files, not String.ends_with?(name, ".folded"), into: %{} do
        {name, File.read!(Path.join(@out, name))}
      end

    %{output: output, status: status, files: files, folded: folded, others: others}
  end

  # Runs of characters other than letters, digits, ".", "-" and "_" are one "_".
  defp stem({module, test}), do: module <> "." <> String.replace(test, ~r/[^A-Za-z0-9._-]+/, "_")

  # Each test's files in @exts; and a passing test's profile kept for the
  # next run to compare with (FlameOn.Client.ExUnit's :regression).
  defp files_for(tests) do
    for(t <- tests, ext <- @exts ++ if(t in @failing, do: [], else: @last), do: stem(t) <> ext)
    |> Enum.sort()
  end

  # folded lines: [{pid, [frame], µs}]
  defp folded_lines(run, test) do
    run.folded
    |> Map.fetch!(stem(test) <> ".folded")
    |> String.split("\n", trim: true)
    |> Enum.map(fn line ->
      [stack, us] = String.split(line, " ")
      [_name, pid | frames] = String.split(stack, ";")
      {pid, frames, String.to_integer(us)}
    end)
  end

  defp test_frame({module, test}), do: "#{module}.#{String.replace(test, " ", "_")}/1"

  # The test's process: the one whose stacks start at the test's function.
  defp test_pid(lines, test) do
    frame = test_frame(test)
    Enum.find_value(lines, fn {pid, frames, _us} -> if hd(frames) == frame, do: pid end)
  end

  defp time_under(lines, pid, fun) do
    for({^pid, frames, us} <- lines, fun.(frames), do: us) |> Enum.sum()
  end

  # The summary's entries: [%{test: {module, test}, us: .., failed: .., stacks: [..], paths: [..]}]
  defp summary(output) do
    case String.split(output, ~r/^FlameOn: \d+ profiled tests?, slowest first$/m) do
      [_before] ->
        nil

      [_before, text] ->
        text
        |> String.split(~r/^  \d+\) /m, trim: true)
        |> Enum.drop_while(&(String.trim(&1) == ""))
        |> Enum.map(&summary_entry/1)
    end
  end

  defp summary_entry(text) do
    [title | lines] = String.split(text, "\n", trim: true)

    # (groups that match nothing at the end are left out)
    [_, test, module, time, failed | _] =
      Regex.run(~r/^(.+) \((\S+)\)(?:  ([\d.]+ (?:ms|µs)))?(, failed)?$/u, title) ++ ["", ""]

    lines = Enum.map(lines, &String.trim/1)

    %{
      test: {module, test},
      us: if(time == "", do: nil, else: parse_time(time)),
      failed: failed == ", failed",
      stacks: Enum.filter(lines, &Regex.match?(~r/^[\d.]+%/, &1)),
      paths: Enum.filter(lines, &String.starts_with?(&1, "flame_on_out/")),
      notes: Enum.filter(lines, &String.starts_with?(&1, "no profile:"))
    }
  end

  defp parse_time(text) do
    case Float.parse(text) do
      {value, " ms"} -> round(value * 1000)
      {value, " µs"} -> round(value)
    end
  end

  # ExUnit's report of each failed test, without its number: %{title => block}
  defp failure_reports(output) do
    [report | _] = String.split(output, "\nFinished in ")

    Regex.scan(~r/^  \d+\) (test .+?)\n(.*?)\n\n/ms, report, capture: :all_but_first)
    |> Map.new(fn [title, block] -> {title, block} end)
  end

  # ExUnit reports a timed-out test with the stack its process was in when
  # it was killed: with the profiler, the profiler's frames are in it below
  # the test's, the one documented difference. The report up to the test's
  # frame is compared.
  defp without_timeout_stack(reports) do
    {module, test} = @timed_out
    Map.update!(reports, "#{test} (#{module})", &(&1 |> String.split(": (test)") |> hd()))
  end

  defp counts_line(output), do: Regex.run(~r/^\d+ tests?, \d+ failures?.*$/m, output)

  test "files are written exactly for the tagged tests, three formats each", %{default: run} do
    assert run.files == files_for(@tagged), run.output
  end

  test "the exit status and the failure reports are those of a run without the profiler", ctx do
    %{baseline: baseline} = ctx
    assert baseline.status == 2, baseline.output
    assert baseline.files == []
    assert counts_line(baseline.output) == ["12 tests, 3 failures"]
    baseline_reports = failure_reports(baseline.output)
    assert map_size(baseline_reports) == 3

    for {module, test} <- [@timed_out | @failing] do
      assert Map.has_key?(baseline_reports, "#{test} (#{module})"), baseline.output
    end

    # The reports name the test's own function.
    assert baseline_reports["test raises in a helper (ExunitApp.BasicTest)"] =~
             ~r"ExunitApp.Work.check!/1\n.*\n\s+test/basic_fixture.exs:\d+: \(test\)"

    for run <- [ctx.default, ctx.off] do
      assert run.status == baseline.status, run.output
      assert counts_line(run.output) == counts_line(baseline.output)

      assert without_timeout_stack(failure_reports(run.output)) ==
               without_timeout_stack(baseline_reports)
    end
  end

  test "FLAME_ON=off profiles nothing and prints no summary", %{off: run} do
    assert run.files == []
    refute run.output =~ "FlameOn: "
  end

  test "each test's stacks start at the test's function and hold its work", %{default: run} do
    for test <- @tagged do
      lines = folded_lines(run, test)
      test_pid = test_pid(lines, test)
      assert test_pid, inspect(lines)

      for {^test_pid, frames, _us} <- lines do
        assert hd(frames) == test_frame(test), "#{inspect(test)}: #{inspect(frames)}"
        refute Enum.any?(frames, &String.starts_with?(&1, "FlameOn.")), inspect(frames)
        refute Enum.any?(frames, &(&1 =~ "overridable")), inspect(frames)
      end
    end

    fib? = &("ExunitApp.Work.fib/1" in &1)
    fib = {"ExunitApp.BasicTest", "test computes fib"}
    lines = folded_lines(run, fib)
    pid = test_pid(lines, fib)
    # fib(20) is 21891 calls: milliseconds, even untraced.
    assert time_under(lines, pid, fib?) > 1_000

    sleeps = folded_lines(run, {"ExunitApp.BasicTest", "test sleeps"})
    pid = test_pid(sleeps, {"ExunitApp.BasicTest", "test sleeps"})

    assert time_under(sleeps, pid, &(List.last(&1) == "SLEEP" and "Process.sleep/1" in &1)) >=
             55_000

    # A body ending in a tail call still has the test's function at the root.
    tail = folded_lines(run, {"ExunitApp.BasicTest", "test passes a tail call"})
    pid = test_pid(tail, {"ExunitApp.BasicTest", "test passes a tail call"})
    assert time_under(tail, pid, fib?) > 0

    # Failing tests keep the profile of what they did up to the failure.
    failing = folded_lines(run, {"ExunitApp.BasicTest", "test fails on an assertion"})
    pid = test_pid(failing, {"ExunitApp.BasicTest", "test fails on an assertion"})
    assert time_under(failing, pid, fib?) > 0
    raising = folded_lines(run, {"ExunitApp.BasicTest", "test raises in a helper"})
    assert Enum.any?(raising, fn {_, frames, _} -> "ExunitApp.Work.check!/1" in frames end)
  end

  test "concurrent cross-process traces each hold their own callee's work", %{default: run} do
    for {test, mine, theirs} <- [
          {{"ExunitApp.AlphaTest", "test alpha calls the shared server"}, "alpha_work",
           "beta_work"},
          {{"ExunitApp.BetaTest", "test beta calls the shared server"}, "beta_work", "alpha_work"}
        ] do
      lines = folded_lines(run, test)
      test_pid = test_pid(lines, test)
      served = "ExunitApp.Shared.#{mine}/1"

      callee_us = for {pid, frames, us} <- lines, pid != test_pid, served in frames, do: us

      assert Enum.sum(callee_us) > 0, "#{mine}: #{inspect(lines, limit: :infinity)}"

      refute Enum.any?(lines, fn {_, frames, _} -> "ExunitApp.Shared.#{theirs}/1" in frames end),
             "#{mine}'s trace holds #{theirs}"
    end
  end

  test "the other formats are valid", %{default: run} do
    for test <- @tagged do
      json = json_decode!(Map.fetch!(run.others, stem(test) <> ".speedscope.json"))
      assert [_ | _] = json["profiles"]
      assert Enum.any?(json["shared"]["frames"], &(&1["name"] == test_frame(test)))

      svg = Map.fetch!(run.others, stem(test) <> ".svg")
      assert svg =~ "<svg"
      assert svg =~ test_frame(test)
    end
  end

  test "the summary lists the profiled tests slowest first, with their stacks and files",
       %{default: run} do
    entries = summary(run.output)
    assert entries, run.output

    # The test killed before its body returned comes last, with a note.
    {entries, [timed_out]} = Enum.split(entries, -1)
    assert timed_out.test == @timed_out
    assert timed_out.us == nil and timed_out.failed and timed_out.paths == []
    assert [_] = timed_out.notes

    assert Enum.sort(Enum.map(entries, & &1.test)) == Enum.sort(@tagged)
    times = Enum.map(entries, & &1.us)
    assert times == Enum.sort(times, :desc)

    for entry <- entries do
      assert entry.failed == entry.test in @failing, inspect(entry)
      assert length(entry.stacks) in 1..3, inspect(entry)
      assert entry.notes == []

      assert Enum.sort(entry.paths) ==
               Enum.map(Enum.sort(@exts), &("flame_on_out/tests/" <> stem(entry.test) <> &1))
               |> Enum.sort()

      assert Enum.all?(entry.paths, &File.exists?(Path.join(@app, &1)))
    end

    sleeps = Enum.find(entries, &(&1.test == {"ExunitApp.BasicTest", "test sleeps"}))
    assert sleeps.us >= 60_000
    assert hd(sleeps.stacks) =~ "ExunitApp.BasicTest.test_sleeps/1 > Process.sleep/1 > SLEEP"

    # The summary comes after ExUnit's own report.
    [_, after_counts] = String.split(run.output, "12 tests, 3 failures")
    assert after_counts =~ "FlameOn: 8 profiled tests, slowest first"
  end

  test "FLAME_ON=all under --trace profiles every test of the modules that use it", ctx do
    %{all: run, baseline: baseline} = ctx
    {module, test} = @timed_out
    timed_out = "#{test} (#{module})"

    assert Map.delete(failure_reports(run.output), timed_out) ==
             Map.delete(failure_reports(baseline.output), timed_out)

    assert run.output =~ ~r/\* test computes fib \([\d.]+ms\)/
    assert run.files == files_for(@all)

    assert run.status == 2, run.output
    assert counts_line(run.output) == ["12 tests, 2 failures"]
    entries = summary(run.output)
    assert Enum.sort(Enum.map(entries, & &1.test)) == Enum.sort(@all)
    times = Enum.map(entries, & &1.us)
    assert times == Enum.sort(times, :desc)
  end
end
