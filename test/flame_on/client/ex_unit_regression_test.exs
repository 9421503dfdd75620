defmodule FlameOn.Client.ExUnitRegressionTest do
  # FlameOn.Client.ExUnit's comparison with the last run, end to end: the
  # fixture app's test/regression_fixture.exs run three times (each its
  # own VM). Its "gets slower" test naps EXUNIT_APP_WORK times 10 ms: 10 ms
  # in the first run, 80 ms in the second (8x, 70 ms more: past the
  # default 20% and 5 ms however loaded the machine), 80 ms in the third.
  use ExUnit.Case, async: false

  @app Path.expand("../../fixtures/exunit_app", __DIR__)
  @out Path.join(@app, "flame_on_out/tests")
  @slower "ExunitApp.RegressionTest.test_gets_slower"
  @same "ExunitApp.RegressionTest.test_stays_the_same"
  @unchecked "ExunitApp.RegressionTest.test_gets_slower_unchecked"

  setup_all do
    File.rm_rf!(Path.join(@app, "flame_on_out"))
    first = run_fixture("1")
    second = run_fixture("8")
    second_files = File.ls!(@out)
    svg = File.read!(Path.join(@out, @slower <> ".diff.svg"))
    folded = File.read!(Path.join(@out, @slower <> ".diff.folded"))
    third = run_fixture("8")
    third_files = File.ls!(@out)
    File.rm_rf!(Path.join(@app, "flame_on_out"))

    %{
      first: first,
      second: second,
      third: third,
      second_files: second_files,
      third_files: third_files,
      svg: svg,
      folded: folded
    }
  end

  defp run_fixture(work) do
    mix = System.find_executable("mix") || flunk("mix is not on the PATH")

    {output, status} =
      System.cmd(mix, ["test", "test/regression_fixture.exs", "--seed", "0"],
        cd: @app,
        env: [
          {"MIX_ENV", "test"},
          {"FLAME_ON", nil},
          {"WITHOUT_FLAME_ON", nil},
          {"MIX_EXS", nil},
          {"EXUNIT_APP_WORK", work}
        ],
        stderr_to_stdout: true
      )

    assert status == 0, output
    output
  end

  # The "slower than last run" lines: [{test, before ms, after ms, percent, diff path}]
  defp slower(output) do
    case String.split(output, ~r/^FlameOn: \d+ tests? slower than last run$/m) do
      [_] ->
        []

      [_, text] ->
        Regex.scan(
          ~r/^  (test .+) \((\S+)\)  ([\d.]+) ms → ([\d.]+) ms \(\+(\d+)%\), diff: (\S+)$/mu,
          text,
          capture: :all_but_first
        )
    end
  end

  test "the first run has nothing to compare with: no diff, the run kept for the next", ctx do
    assert slower(ctx.first) == []
    refute ctx.first =~ "slower than last run"
  end

  test "a test slower than in the last run gets its diff, listed after the summary", ctx do
    assert [[test, module, before_ms, after_ms, percent, path]] = slower(ctx.second), ctx.second
    assert {test, module} == {"test gets slower", "ExunitApp.RegressionTest"}
    assert path == "flame_on_out/tests/#{@slower}.diff.svg"
    {before_ms, _} = Float.parse(before_ms)
    {after_ms, _} = Float.parse(after_ms)
    assert before_ms >= 10 and after_ms >= 80 and after_ms > before_ms
    # (from the times in µs; the ms shown are rounded)
    shown = (after_ms - before_ms) * 100 / before_ms
    assert_in_delta String.to_integer(percent), shown, max(3, shown * 0.02)

    # after ExUnit's report and the list of profiled tests
    [_, after_report] = String.split(ctx.second, "3 tests, 0 failures")
    assert after_report =~ ~r/FlameOn: 3 profiled tests.*slower than last run/s

    # the diff: naps grew (red), in absolute values; fib's test is not in it
    assert ctx.svg =~ "<svg"
    assert ctx.svg =~ "absolute"

    assert [_, fill] =
             Regex.run(
               ~r{<title>ExunitApp\.Work\.naps/1 \(base [^<]*</title><rect [^>]*fill="([^"]+)"},
               ctx.svg
             )

    assert fill =~ ~r/^rgb\(255,\d+,\d+\)$/

    # the naps' sleep, 5x the base's: absolute values, not scaled
    {base, new} =
      for line <- String.split(ctx.folded, "\n", trim: true),
          [stack, base, new] = String.split(line, " "),
          String.ends_with?(stack, "Process.sleep/1;SLEEP"),
          reduce: {0, 0},
          do: ({b, n} -> {b + String.to_integer(base), n + String.to_integer(new)})

    assert base >= 10_000 and new >= 4 * base, ctx.folded

    # the unchanged test and the one with regression: false have no diff
    assert (@slower <> ".diff.svg") in ctx.second_files
    assert (@slower <> ".diff.folded") in ctx.second_files
    refute Enum.any?(ctx.second_files, &String.starts_with?(&1, @same <> ".diff"))
    refute Enum.any?(ctx.second_files, &String.starts_with?(&1, @unchecked <> ".diff"))
    [_, section] = String.split(ctx.second, "slower than last run\n")
    refute section =~ "stays the same"
    refute section =~ "unchecked"
  end

  test "each run is compared with the one before it: as slow again, no diff, the old one gone",
       ctx do
    assert slower(ctx.third) == []
    refute Enum.any?(ctx.third_files, &String.contains?(&1, ".diff."))
    # the last run kept for the next one, for the tests that compare
    assert (@slower <> ".last.folded") in ctx.third_files
    assert (@slower <> ".last.time") in ctx.third_files
    assert (@same <> ".last.time") in ctx.third_files
    refute (@unchecked <> ".last.time") in ctx.third_files
  end
end
