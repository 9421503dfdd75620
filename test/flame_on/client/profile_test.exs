# Every test runs in both capture modes: :nif (the NIF is the tracer
# module) and :process (a tracer process feeding ingest/2).
for mode <- [:nif, :process] do
  defmodule Module.concat(
              FlameOn.Client.ProfileTest,
              mode |> Atom.to_string() |> Macro.camelize()
            ) do
    # Tracing is node-global (patterns, flags): never async.
    use ExUnit.Case, async: false

    import FlameOn.Client.TestHelpers

    alias FlameOn.Client
    alias FlameOn.Client.Node.Patterns
    alias FlameOn.Client.Profile
    alias FlameOn.Client.Test.Workloads

    @mode mode
    @fib "FlameOn.Client.Test.Workloads.fib/1"
    @loop "FlameOn.Client.Test.Workloads.loop/2"

    setup do
      assert_node_clean()
      :ok
    end

    defp profile(fun, opts \\ []), do: Client.profile(fun, Keyword.put_new(opts, :mode, @mode))

    test "fib(20) shows the real recursion depth with collapse_recursion: false" do
      {result, profile} = profile(fn -> Workloads.fib(20) end, collapse_recursion: false)

      assert result == 6765
      assert max_frame_count(profile, self(), @fib) >= 15
      # fib(20) cannot be deeper than 20 calls.
      assert max_frame_count(profile, self(), @fib) <= 20
      assert profile.stats.dropped_events == 0
      assert profile.stats.truncated_stacks == 0
      assert_node_clean()
    end

    test "a tail-recursive loop does not grow the stack" do
      {result, profile} = profile(fn -> Workloads.loop(10_000, 0) end)

      assert result == 10_000
      max = max_frame_count(profile, self(), @loop)
      assert max >= 1, "the loop frame is missing: #{inspect(profile.stacks)}"
      assert max <= 2
      assert_node_clean()
    end

    # The SLEEP leaf under Process.sleep/1 is the time the process slept:
    # never less than the 50 ms asked for (-20%), and within 20% of the
    # sleep's own wall time, measured around it (a loaded machine may wake
    # the process late: the leaf must then be as long as the sleep was,
    # not 50 ms).
    test "Process.sleep(50) shows a SLEEP leaf of the time slept: 50 ms or more, its wall time ±20%" do
      {wall, profile} =
        profile(fn ->
          t0 = System.monotonic_time(:microsecond)
          Process.sleep(50)
          System.monotonic_time(:microsecond) - t0
        end)

      slept = time_where(profile, self(), &String.ends_with?(&1, "Process.sleep/1;SLEEP"))
      assert wall >= 50_000
      assert slept >= 40_000, "SLEEP under Process.sleep(50) was #{slept} µs"
      assert_in_delta slept, wall, 0.2 * wall, "SLEEP #{slept} µs for a sleep of #{wall} µs"
      assert_node_clean()
    end

    test "a process's stacks add up to the trace's duration (within 5%)" do
      {_result, profile} = profile(fn -> Workloads.mixed(80) end)

      total = Profile.total_us(profile, self())
      assert profile.duration_us >= 70_000
      diff = abs(total - profile.duration_us)

      assert diff <= 0.05 * profile.duration_us,
             "stacks total #{total} µs, duration #{profile.duration_us} µs"

      assert_node_clean()
    end

    test "the profile's fields" do
      before = System.monotonic_time(:microsecond)
      {_, profile} = profile(fn -> Workloads.fib(10) end, name: "fields")
      after_us = System.monotonic_time(:microsecond)
      {_, other} = profile(fn -> Workloads.fib(10) end)

      assert %Profile{name: "fields", mode: @mode, graph: nil} = profile
      assert profile.pid == self()
      assert is_integer(profile.trace_id) and profile.trace_id > 0
      assert profile.trace_id != other.trace_id
      assert profile.started_at in before..after_us
      assert profile.duration_us in 1..(after_us - before)
      assert other.name == "flame_on"
      assert Map.keys(profile.stacks) == [self()]

      for key <- ~w(events dropped_events malformed_events ignored_events truncated_stacks
                  depth_truncations node_limit_hits frame_limit_hits process_limit_hits
                  stack_overflows clock_skews resyncs memory_bytes nodes processes frames
                  unprocessed_events)a do
        assert is_integer(Map.fetch!(profile.stats, key)), "stat #{key}"
      end

      assert profile.stats.events > 0
      assert profile.stats.processes == 1

      for {stack, us} <- profile.stacks[self()] do
        assert is_binary(stack)
        assert is_integer(us) and us > 0
        refute String.starts_with?(stack, "<")
      end

      stacks = Enum.map(profile.stacks[self()], &elem(&1, 0))
      assert stacks == Enum.uniq(stacks)
      assert_node_clean()
    end

    test "stacks start at FlameOn.Client.profile/2" do
      {_, profile} = profile(fn -> Workloads.fib(5) end)

      # ("": time before the first traced call, at the process's root; a
      # collection in that moment is a GC leaf there)
      for {stack, _us} <- profile.stacks[self()], stack not in ["", "GC_MINOR", "GC_MAJOR"] do
        assert String.starts_with?(stack, "FlameOn.Client.profile/2"), stack
      end

      assert Enum.any?(profile.stacks[self()], fn {stack, _} -> String.ends_with?(stack, @fib) end)

      # Turning the flags off after fun is not part of the profile.
      for {stack, _us} <- profile.stacks[self()] do
        refute stack =~ ~r/erlang:trace|erts_internal|end_mark|monotonic_time/, stack
      end

      assert_node_clean()
    end

    describe "exceptions" do
      test "a raise is re-raised with its original stacktrace and the node is clean" do
        {exception, stacktrace} =
          try do
            profile(&Workloads.boom!/0)
          rescue
            e -> {e, __STACKTRACE__}
          end

        assert %RuntimeError{message: "boom"} = exception
        assert [{Workloads, :boom!, 0, _} | _] = stacktrace
        assert_node_clean()
      end

      test "throw and exit are re-raised as they were" do
        assert catch_throw(profile(fn -> throw(:ball) end)) == :ball
        assert_node_clean()
        assert catch_exit(profile(fn -> exit(:bye) end)) == :bye
        assert_node_clean()
      end

      test "an Erlang error keeps its kind" do
        assert_raise ArithmeticError, fn ->
          profile(fn -> :erlang.+(Enum.random([:a]), 1) end)
        end

        assert_node_clean()
      end
    end

    describe "limits" do
      test "max_depth folds deeper frames into …" do
        {_, profile} =
          profile(fn -> Workloads.fib(20) end, max_depth: 5, collapse_recursion: false)

        assert max_frame_count(profile, self(), @fib) <= 5

        assert Enum.any?(profile.stacks[self()], fn {stack, _} ->
                 String.ends_with?(stack, ";…")
               end)

        assert profile.stats.depth_truncations > 0
        assert profile.stats.truncated_stacks > 0
        assert_node_clean()
      end

      test "max_nodes sends the rest to [truncated]" do
        {_, profile} = profile(fn -> Workloads.fib(15) end, max_nodes: 5)

        assert Enum.any?(profile.stacks[self()], fn {stack, _} ->
                 String.contains?(stack, "[truncated]")
               end)

        assert profile.stats.node_limit_hits > 0
        assert profile.stats.truncated_stacks > 0
        assert_node_clean()
      end
    end

    describe "options" do
      test "are validated with clear ArgumentErrors" do
        ok = fn -> :ok end

        assert_raise ArgumentError, ~r/unknown keys \[:bogus\]/, fn ->
          Client.profile(ok, bogus: 1)
        end

        assert_raise ArgumentError, ~r/expected :name to be a string, got: :atom/, fn ->
          Client.profile(ok, name: :atom)
        end

        for key <- [:max_nodes, :max_depth, :max_processes, :max_frames, :max_stack_frames],
            bad <- [0, -1, 1.5, "10", nil] do
          assert_raise ArgumentError, ~r/expected #{inspect(key)} to be a positive integer/, fn ->
            Client.profile(ok, [{key, bad}])
          end
        end

        for key <- [:max_nodes, :max_depth, :max_processes, :max_frames, :max_stack_frames] do
          assert_raise ArgumentError, ~r/limits out of range/, fn ->
            Client.profile(ok, [{key, 2 ** 31}])
          end
        end

        assert_raise ArgumentError,
                     ~r/expected :timeout to be a positive integer or :infinity/,
                     fn ->
                       Client.profile(ok, timeout: 0)
                     end

        assert_raise ArgumentError, ~r/keyword list/, fn -> Client.profile(ok, :nope) end
        assert_raise ArgumentError, ~r/keyword list/, fn -> Client.profile(ok, [1]) end
        assert_raise ArgumentError, ~r/function of arity 0/, fn -> Client.profile(:nope) end
        assert_raise ArgumentError, ~r/function of arity 0/, fn -> Client.profile(& &1) end

        assert_node_clean()
      end

      test "every option is accepted" do
        {:done, profile} =
          Client.profile(fn -> :done end,
            name: "all",
            max_nodes: 1000,
            max_depth: 64,
            max_processes: 4,
            max_frames: 1000,
            max_stack_frames: 1000,
            timeout: :infinity
          )

        assert profile.name == "all"
        assert_node_clean()
      end
    end

    test "a process traced by another tracer: refused (legacy), traced beside it (sessions)" do
      other = spawn(fn -> receive do: (:stop -> :ok) end)
      :erlang.trace(self(), true, [:send, {:tracer, other}])

      try do
        if FlameOn.Client.Node.TraceBackend.sessions?() do
          # Our trace has a session of its own: the other trace is kept.
          assert {55, profile} = profile(fn -> Workloads.fib(10) end, collapse_recursion: false)
          assert max_frame_count(profile, self(), @fib) >= 9
          assert {:tracer, ^other} = :erlang.trace_info(self(), :tracer)
          assert :erlang.trace_info(self(), :flags) == {:flags, [:send]}
        else
          assert_raise ArgumentError, ~r/already traced/, fn -> profile(fn -> :ok end) end
        end
      after
        :erlang.trace(self(), false, [:send])
        send(other, :stop)
      end

      assert_node_clean()
    end

    test "profile/2 inside profile/2 is refused; the outer trace goes on" do
      {result, profile} =
        profile(
          fn ->
            assert_raise ArgumentError, ~r/already traced/, fn ->
              profile(fn -> :inner end)
            end

            Workloads.fib(10)
          end,
          collapse_recursion: false
        )

      assert result == 55
      assert max_frame_count(profile, self(), @fib) >= 9
      assert_node_clean()
    end

    test "profile/2 inside a flag-only profile/2 is refused too (on OTP 27 the outer one is in the legacy session)" do
      {result, profile} =
        profile(
          fn ->
            assert_raise ArgumentError, ~r/already traced/, fn ->
              profile(fn -> :inner end, mode: :sample)
            end

            Workloads.fib(18)
          end,
          mode: :sample
        )

      assert result == 2584
      assert profile.mode == :sample
      assert_node_clean()
    end

    test "two concurrent profiles both work and patterns are cleared only after both end" do
      parent = self()

      start = fn tag ->
        Task.async(fn ->
          profile(
            fn ->
              send(parent, {:inside, tag, self()})
              receive do: (:go -> :ok)
              Workloads.fib(15)
            end,
            collapse_recursion: false
          )
        end)
      end

      task_a = start.(:a)
      task_b = start.(:b)
      assert_receive {:inside, :a, pid_a}, 5_000
      assert_receive {:inside, :b, pid_b}, 5_000

      assert patterns_set?()
      assert Patterns.users() == 2

      send(pid_a, :go)
      {610, profile_a} = Task.await(task_a)
      assert patterns_set?(), "patterns were cleared while the second trace still ran"
      assert Patterns.users() == 1

      send(pid_b, :go)
      {610, profile_b} = Task.await(task_b)

      assert profile_a.trace_id != profile_b.trace_id
      assert max_frame_count(profile_a, pid_a, @fib) >= 10
      assert max_frame_count(profile_b, pid_b, @fib) >= 10
      # Each trace only holds its own process.
      assert Map.keys(profile_a.stacks) == [pid_a]
      assert Map.keys(profile_b.stacks) == [pid_b]
      assert_node_clean()
    end
  end
end
