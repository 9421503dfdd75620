defmodule FlameOn.Client.ExUnitPartsTest do
  # The parts of FlameOn.Client.ExUnit on their own (ex_unit_test.exs runs
  # them together in a real `mix test`). Not async: the configuration is a
  # persistent term and the formatter's table a named table.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO

  alias FlameOn.Client.ExUnit.Formatter
  alias FlameOn.Client.ExUnit.Summary
  alias FlameOn.Client.ExUnit.TestRun
  alias FlameOn.Client.Profile

  doctest FlameOn.Client.ExUnit
  doctest FlameOn.Client.ExUnit.TestRun
  doctest FlameOn.Client.ExUnit.View
  doctest FlameOn.Client.ExUnit.Summary
  doctest FlameOn.Client.ExUnit.Regression

  @config_key {FlameOn.Client.ExUnit.Config, :config}

  # Runs `fun` with `config` as what start/1 stored (nil: not called).
  defp with_config(config, fun) do
    saved = :persistent_term.get(@config_key, :none)

    try do
      if config,
        do: :persistent_term.put(@config_key, config),
        else: :persistent_term.erase(@config_key)

      fun.()
    after
      case saved do
        :none -> :persistent_term.erase(@config_key)
        value -> :persistent_term.put(@config_key, value)
      end
    end
  end

  defp config(select),
    do: %{dir: "out", formats: [:folded], capture: [], select: select, summary: 25}

  describe "which tests are profiled" do
    test "tags and FLAME_ON decide" do
      cases = [
        # {select, flame tag, options or nil}
        {:tagged, nil, nil},
        {:tagged, true, []},
        {:tagged, [], []},
        {:tagged, false, nil},
        {:tagged, [mode: :sample], [mode: :sample]},
        {:all, nil, []},
        {:all, false, nil},
        {:all, [cross_process: true], [cross_process: true]},
        {:none, true, nil},
        {:none, [mode: :sample], nil}
      ]

      for {select, tag, expected} <- cases do
        context = if tag == nil, do: %{}, else: %{flame: tag}

        assert with_config(config(select), fn -> TestRun.options(context) end) == expected,
               "#{select}, flame: #{inspect(tag)}"
      end

      # Without start/1, the tags alone decide.
      assert with_config(nil, fn -> TestRun.options(%{flame: true}) end) == []
      assert with_config(nil, fn -> TestRun.options(%{}) end) == nil
    end

    test "a bad flame tag raises" do
      for tag <- [:yes, "true", [1, 2], %{mode: :nif}] do
        assert_raise ArgumentError,
                     ~r/expected the :flame tag to be true, false or a keyword/,
                     fn ->
                       TestRun.options(%{flame: tag})
                     end
      end
    end

    test "a tagged test without start/1 fails with what to do" do
      context = %{module: __MODULE__, test: :"test x", flame: true}

      assert_raise RuntimeError, ~r/FlameOn.Client.ExUnit.start\/1 was not called/, fn ->
        with_config(nil, fn -> TestRun.profiled(context, fn -> :ok end, []) end)
      end
    end
  end

  describe "start/1" do
    test "bad options and FLAME_ON values raise before anything changes" do
      before = :persistent_term.get(@config_key, :none)

      for {opts, message} <- [
            {[dir: ""], ~r/expected :dir to be a non-empty string/},
            {[dir: :out], ~r/expected :dir to be a non-empty string/},
            {[formats: []], ~r/expected :formats to be a non-empty list/},
            {[formats: [:folded, :html]], ~r/unknown export format :html/},
            {[summary: 0], ~r/expected :summary to be a positive integer or :all/},
            {[regression: :yes], ~r/expected :regression to be false, true or/},
            {[regression: [ratio: 0.5]], ~r/:ratio \(>= 1\) and :min_ms/},
            {[regression: [min_ms: 5, percent: 20]], ~r/:ratio \(>= 1\) and :min_ms/},
            {[name: "x"], ~r/:name is not an option .*named after its test/},
            {:not_a_list, ~r/keyword list/}
          ] do
        assert_raise ArgumentError, message, fn -> FlameOn.Client.ExUnit.start(opts) end
      end

      System.put_env("FLAME_ON", "sometimes")

      try do
        assert_raise ArgumentError, ~r/FLAME_ON=sometimes: expected all, tagged or off/, fn ->
          FlameOn.Client.ExUnit.start()
        end
      after
        System.delete_env("FLAME_ON")
      end

      assert :persistent_term.get(@config_key, :none) == before
    end

    test "tag options are checked the same way" do
      assert {[dir: "d"], [mode: :sample]} =
               FlameOn.Client.ExUnit.split_options!(dir: "d", mode: :sample)

      assert {[regression: false], []} = FlameOn.Client.ExUnit.split_options!(regression: false)

      assert_raise ArgumentError, ~r/:ratio \(>= 1\)/, fn ->
        FlameOn.Client.ExUnit.split_options!(regression: [ratio: -1])
      end

      assert_raise ArgumentError, ~r/:summary is not an option of a flame: tag/, fn ->
        FlameOn.Client.ExUnit.split_options!(summary: 3)
      end
    end
  end

  describe "the test's view of a profile" do
    @closure "FlameOn.Client.ExUnit.TestRun.-trace/4-fun-0-/0"

    test "stacks start at the test's function, the body's frames read as the test's" do
      test_pid = self()
      server = :c.pid(0, 4242, 0)
      root = "FlameOn.Client.profile/2;#{@closure}"

      profile = %Profile{
        pid: test_pid,
        stacks: %{
          test_pid => [
            {"#{root};M.test_x/2;W.f/1", 10},
            # the body tail-called W.g/0
            {"#{root};W.g/0", 5},
            # the profiler's own work, and the closure storing the outcome
            {"FlameOn.Client.profile/2;FlameOn.Client.Capture.Nif.stop/1", 2},
            {"#{root};Process.put/2", 1},
            {"#{root};M.-test_x/1-fun-0-/0;M.test_x/2;M.-test_x/2-fun-0-/1", 6},
            # sample mode, a stack cut to its innermost frames
            {"…;W.deep/0", 4}
          ],
          server => [{"gen_server:loop/7;M.-test_x/2-fun-1-/0", 3}]
        },
        samples: %{test_pid => [{"#{root};M.test_x/2;W.f/1", 2, 100}, {"#{root};W.f/1", 1, 7}]}
      }

      view = TestRun.test_view(profile, M, :"test x")

      assert view.stacks[test_pid] == [
               {"M.test_x/1", 3},
               {"M.test_x/1;M.-test_x/1-fun-0-/1", 6},
               {"M.test_x/1;W.f/1", 10},
               {"M.test_x/1;W.g/0", 5},
               {"M.test_x/1;…;W.deep/0", 4}
             ]

      assert view.stacks[server] == [{"gen_server:loop/7;M.-test_x/1-fun-1-/0", 3}]
      # Stacks that now read the same add up, samples included.
      assert view.samples[test_pid] == [{"M.test_x/1;W.f/1", 3, 107}]
    end

    test "the top stacks merge recursion depths, over every process" do
      pid = self()
      other = :c.pid(0, 4242, 0)

      profile = %Profile{
        pid: pid,
        stacks: %{
          pid => [{"t;f", 1}, {"t;f;f;f", 5}, {"t;f;f", 4}, {"t;g;SLEEP", 7}],
          other => [{"s;h", 8}]
        }
      }

      assert TestRun.top_stacks(profile, 3) == [
               %{pid: pid, stack: "t;f ×1..3", us: 10},
               %{pid: other, stack: "s;h", us: 8},
               %{pid: pid, stack: "t;g;SLEEP", us: 7}
             ]
    end

    test "file names are safe, and long ones are cut with a hash" do
      assert TestRun.file_stem(MyApp.CartTest, :"test describe a/b: c") ==
               "MyApp.CartTest.test_describe_a_b_c"

      long = String.duplicate("x", 200)
      a = TestRun.file_stem(M, :"test #{long}a")
      b = TestRun.file_stem(M, :"test #{long}b")
      assert byte_size(a) == 120 and byte_size(b) == 120
      assert a != b
    end
  end

  describe "the stacktrace ExUnit sees" do
    test "the wrapper's frames go, the body's frames read as the test's" do
      loc = [file: ~c"t.exs", line: 3]

      traced = [
        {W, :raise!, 1, loc},
        {M, :"-test x/2-fun-0-", 1, loc},
        {Enum, :each, 2, loc},
        {M, :"test x", 2, loc},
        {FlameOn.Client.ExUnit.TestRun, :"-trace/4-fun-0-", 0, loc},
        {FlameOn.Client, :profile, 2, loc},
        {FlameOn.Client.ExUnit.TestRun, :trace, 4, loc},
        {M, :"test x", 1, loc},
        {ExUnit.Runner, :exec_test, 1, loc},
        {:timer, :tc, 1, loc}
      ]

      assert TestRun.clean_stacktrace(traced, M, :"test x") == [
               {W, :raise!, 1, loc},
               {M, :"-test x/1-fun-0-", 1, loc},
               {Enum, :each, 2, loc},
               {M, :"test x", 1, loc},
               {ExUnit.Runner, :exec_test, 1, loc},
               {:timer, :tc, 1, loc}
             ]
    end

    test "a stacktrace cut before the runner loses only the wrapper's frames" do
      loc = [line: 1]

      # The body's own call into FlameOn.Client stays: only the block
      # next to the runner (here, the end) is the wrapper's.
      cut = [
        {FlameOn.Client, :profile, 2, loc},
        {M, :"test x", 2, loc},
        {FlameOn.Client.ExUnit.TestRun, :"-trace/4-fun-0-", 0, loc},
        {FlameOn.Client, :profile, 2, loc}
      ]

      assert TestRun.clean_stacktrace(cut, M, :"test x") == [
               {FlameOn.Client, :profile, 2, loc},
               {M, :"test x", 1, loc}
             ]

      # Cut inside the body: nothing of the wrapper, nothing removed.
      body_only = [{W, :a, 0, loc}, {W, :b, 0, loc}]
      assert TestRun.clean_stacktrace(body_only, M, :"test x") == body_only
    end

    test "a FunctionClauseError's arguments lose the body's marker" do
      st = [
        {M, :"test x", [%{a: 1}, :__flame_on_body__], [line: 2]},
        {ExUnit.Runner, :run, 1, []}
      ]

      assert TestRun.clean_stacktrace(st, M, :"test x") ==
               [{M, :"test x", [%{a: 1}], [line: 2]}, {ExUnit.Runner, :run, 1, []}]
    end
  end

  describe "the summary" do
    defp record(test, us, extra \\ []) do
      Map.merge(
        %{
          module: M,
          test: test,
          pid: self(),
          status: :profiled,
          duration_us: us,
          top: [%{pid: self(), stack: "M.#{test}/1;W.f/1", us: div(us, 2)}],
          paths: ["/tmp/x/M.#{test}.folded"],
          warnings: [],
          notes: []
        },
        Map.new(extra)
      )
    end

    test "slowest first, failures marked, tests without a profile last with a note" do
      records = [
        record(:"test fast", 900),
        record(:"test killed", 0, status: :running, top: [], paths: []),
        record(:"test slow", 52_000),
        record(:"test mid", 3_400, warnings: ["truncated_stacks: 4"])
      ]

      text = Summary.render(records, MapSet.new([{M, :"test mid"}, {M, :"test killed"}]))

      assert text =~ "FlameOn: 4 profiled tests, slowest first\n"

      titles = Regex.scan(~r/^  \d+\) (.*)$/m, text, capture: :all_but_first) |> List.flatten()

      assert titles == [
               "test slow (M)  52.0 ms",
               "test mid (M)  3.4 ms, failed",
               "test fast (M)  900 µs",
               "test killed (M), failed"
             ]

      assert text =~ "50.0%    26.0 ms  M.test slow/1 > W.f/1"
      assert text =~ "warning: truncated_stacks: 4"
      assert text =~ "no profile: the test's process ended before its body returned"
      refute text =~ "\e["
    end

    test "past the limit, the rest is counted; colours on request" do
      records = for i <- 1..5, do: record(:"test #{i}", i * 1000)
      text = Summary.render(records, MapSet.new(), limit: 2, colors: true)
      assert length(Regex.scan(~r/^  \d+\) /m, text)) == 2
      assert text =~ "... and 3 more profiled tests, their files in /tmp/x"
      assert text =~ "\e["
    end
  end

  describe "the comparison with the last run" do
    alias FlameOn.Client.ExUnit.Regression

    defp profile(us_by_stack) do
      %Profile{
        name: "M test x",
        pid: self(),
        stacks: %{self() => us_by_stack},
        duration_us: us_by_stack |> Enum.map(&elem(&1, 1)) |> Enum.sum()
      }
    end

    setup do
      dir =
        Path.join(System.tmp_dir!(), "flame_on_regression_#{System.unique_integer([:positive])}")

      on_exit(fn -> File.rm_rf!(dir) end)
      %{dir: dir}
    end

    test "kept, compared, and the diff written only past both thresholds", %{dir: dir} do
      opts = [ratio: 1.2, min_ms: 5]
      base = profile([{"M.x/1;W.a/1", 10_000}, {"M.x/1;W.b/1", 10_000}])
      assert Regression.check(base, dir, "M.x", opts) == nil
      assert File.read!(Path.join(dir, "M.x.last.time")) == "duration_us 20000\n"
      assert File.read!(Path.join(dir, "M.x.last.folded")) =~ "W.a/1 10000"

      # +3 ms: 15%, under both thresholds
      same = profile([{"M.x/1;W.a/1", 13_000}, {"M.x/1;W.b/1", 10_000}])
      assert Regression.check(same, dir, "M.x", opts) == nil
      refute File.exists?(Path.join(dir, "M.x.diff.svg"))

      # 23 ms -> 50 ms: listed, with a.diff where W.a/1 grew in absolute values
      slower = profile([{"M.x/1;W.a/1", 40_000}, {"M.x/1;W.b/1", 10_000}])
      svg = Path.join(dir, "M.x.diff.svg")
      folded = Path.join(dir, "M.x.diff.folded")

      assert %{before_us: 23_000, after_us: 50_000, paths: [^svg, ^folded]} =
               Regression.check(slower, dir, "M.x", opts)

      assert File.read!(folded) =~ "M.x/1;W.a/1 13000 40000\n"
      assert File.read!(folded) =~ "M.x/1;W.b/1 10000 10000\n"
      assert File.read!(svg) =~ "absolute"

      # as slow again: no diff, the one of the run before removed
      assert Regression.check(slower, dir, "M.x", opts) == nil
      refute File.exists?(svg) or File.exists?(folded)

      # 50 ms -> 70 ms is 40% more, but min_ms: 30 asks for more
      slowest = profile([{"M.x/1;W.a/1", 60_000}, {"M.x/1;W.b/1", 10_000}])
      assert Regression.check(slowest, dir, "M.x", ratio: 1.2, min_ms: 30) == nil
    end

    test "a kept file that is not ours is started over", %{dir: dir} do
      File.mkdir_p!(dir)
      File.write!(Path.join(dir, "M.x.last.time"), "garbage")
      File.write!(Path.join(dir, "M.x.last.folded"), "not folded")
      slower = profile([{"M.x/1;W.a/1", 40_000}])
      assert Regression.check(slower, dir, "M.x", ratio: 1.2, min_ms: 5) == nil
      assert File.read!(Path.join(dir, "M.x.last.time")) == "duration_us 40000\n"

      # a time of ours, a folded file not: it raises (the test's summary notes
      # it), and the run is kept all the same
      File.write!(Path.join(dir, "M.x.last.time"), "duration_us 10\n")
      File.write!(Path.join(dir, "M.x.last.folded"), "not folded")

      assert_raise ArgumentError, ~r/not a folded stack/, fn ->
        Regression.check(slower, dir, "M.x", ratio: 1.2, min_ms: 5)
      end

      assert File.read!(Path.join(dir, "M.x.last.folded")) =~ "W.a/1 40000"
    end

    test "the summary lists the slower tests after the others, most grown first" do
      records = [
        record(:"test a", 31_500,
          regression: %{
            before_us: 12_000,
            after_us: 31_500,
            paths: ["/tmp/x/M.a.diff.svg", "/tmp/x/M.a.diff.folded"]
          }
        ),
        record(:"test b", 40_000,
          regression: %{before_us: 30_000, after_us: 40_000, paths: ["/tmp/x/M.b.diff.svg"]}
        ),
        record(:"test c", 1_000, regression: nil),
        record(:"test d", 1_000)
      ]

      text = Summary.render(records, MapSet.new())
      [_, slower] = String.split(text, "FlameOn: 2 tests slower than last run\n")

      assert slower ==
               "  test a (M)  12.0 ms → 31.5 ms (+163%), diff: /tmp/x/M.a.diff.svg\n" <>
                 "  test b (M)  30.0 ms → 40.0 ms (+33%), diff: /tmp/x/M.b.diff.svg\n"

      refute Summary.render([record(:"test c", 1_000)], MapSet.new()) =~ "slower than last run"
    end
  end

  describe "the formatter" do
    test "claims unique file names and prints the summary after the run" do
      output =
        capture_io(fn ->
          # as ExUnit starts its formatters
          {:ok, sup} = DynamicSupervisor.start_link(strategy: :one_for_one)

          {:ok, formatter} =
            DynamicSupervisor.start_child(sup, %{
              id: Formatter,
              start: {GenServer, :start_link, [Formatter, [colors: [enabled: false]]]},
              restart: :temporary
            })

          assert Formatter.claim_stem("d", "M.test_a", :a) == "M.test_a"
          assert Formatter.claim_stem("d", "M.test_a", :a) == "M.test_a"
          assert Formatter.claim_stem("d", "M.test_a", :b) == "M.test_a-2"
          assert Formatter.claim_stem("d", "M.test_a", :c) == "M.test_a-3"
          assert Formatter.claim_stem("other", "M.test_a", :b) == "M.test_a"

          Formatter.put_record({M, :"test a"}, record(:"test a", 2_000))

          GenServer.cast(
            formatter,
            {:test_finished, %{module: M, name: :"test a", state: {:failed, []}}}
          )

          GenServer.cast(formatter, {:suite_finished, %{run: 1, async: 0, load: nil}})
          :ok = GenServer.stop(formatter)
        end)

      assert output =~ "FlameOn: 1 profiled test, slowest first"
      assert output =~ "test a (M)  2.0 ms, failed"
      # The table goes with the formatter; recording without it is a no-op.
      assert :ets.whereis(Formatter) == :undefined
      assert Formatter.put_record({M, :"test b"}, %{}) == :ok
      assert Formatter.claim_stem("d", "M.test_a", :b) == "M.test_a"
    end

    test "prints nothing when no test was profiled" do
      output =
        capture_io(fn ->
          {:ok, formatter} = GenServer.start(Formatter, colors: [enabled: false])
          GenServer.cast(formatter, {:suite_finished, %{run: 1, async: 0, load: nil}})
          :ok = GenServer.stop(formatter)
        end)

      assert output == ""
    end
  end
end
