defmodule FlameOn.Client.NativeModeTest do
  # mode: :native – CPU samples of the scheduler threads from Linux perf
  # events. The tests tagged :native run in a VM started with +JPperf true
  # where perf_event_open is allowed (scripts/test runs them so); the ones
  # tagged :native_unavailable in a VM where native sampling cannot run
  # (the plain `mix test`). test_helper.exs picks the group this VM can run.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{PerfSampler, TailHold}
  alias FlameOn.Client.Test.Workloads

  @to_me {FlameOn.Client.Shipper.Process, pid: :flame_on_native_mode_test}

  setup do
    ensure_app_started()
    # an earlier test's tail traces (trace/3 with threshold_ms, mode :auto)
    # keep the node's sampler on for idle_ms: the counts of open events
    # below are this test's
    TailHold.off()
    assert_node_clean()
    Process.register(self(), :flame_on_native_mode_test)
    :ok
  end

  # trace/3 ships its profile (here, to the test process)
  defp traced_profile(fun, opts) do
    FlameOn.Client.trace("native", fun, [shipper: @to_me] ++ opts)
    assert_receive {:flame_on_profile, profile}
    profile
  end

  defp on_cpu_us(profile, pid) do
    time_where(profile, pid, &(not String.contains?(&1, "SLEEP")))
  end

  defp open_fds, do: length(File.ls!("/proc/self/fd"))

  defp sampler_idle? do
    stats = Native.perf_stats()
    stats.users == 0 and stats.threads == 0
  end

  describe "where native sampling runs (+JPperf true)" do
    @describetag :native

    test "collapse_recursion: false keeps the sampled recursion's depth" do
      {_, profile} =
        FlameOn.Client.profile(fn -> Workloads.busy(300) end,
          mode: :native,
          collapse_recursion: false
        )

      assert max_frame_count(profile, self(), "FlameOn.Client.Test.Workloads.fib/1") >= 5
      assert profile.stats.collapsed_recursion == 0
      assert_node_clean()
    end

    test "profile/2: CPU samples name the work's frames under the root, no call pattern is set" do
      fds = open_fds()

      {seen, profile} =
        FlameOn.Client.profile(
          fn ->
            Workloads.busy(300)
            {patterns_set?(), patterns_on?({Workloads, :fib, 1}), Native.perf_stats().threads}
          end,
          mode: :native
        )

      {patterns?, fib_pattern?, threads} = seen
      refute patterns?
      refute fib_pattern?
      # one event per scheduler thread at least
      assert threads >= :erlang.system_info(:schedulers_online)
      assert profile.mode == :native
      assert profile.stats.samples > 0
      # the node's sampler took at least these, and lost none
      assert profile.stats.sampler_samples >= profile.stats.samples
      assert profile.stats.sampler_lost == 0

      stacks = profile.stacks[self()]
      busy = time_where(profile, self(), &String.contains?(&1, "Workloads.fib/1"))
      total = on_cpu_us(profile, self())
      # 300 ms of fib: nearly all of the on-CPU time (the rest: the loop's
      # own frame and the trace's start and end)
      assert busy >= 0.8 * total, inspect(Enum.take(stacks, 5))
      # (but for the moment before its first sample, and the waits there)
      assert Enum.all?(stacks, fn {stack, _} ->
               String.starts_with?(stack, "FlameOn.Client.profile/2") or stack in ["", "SLEEP"]
             end)

      # fib's recursion is one frame, as in exact mode (collapse_recursion:
      # true, the default): the samples' call chains are collapsed alike
      assert max_frame_count(profile, self(), "FlameOn.Client.Test.Workloads.fib/1") == 1
      assert profile.stats.collapsed_recursion > 0
      # the stacks add up to the traced wall time (within 10%)
      assert_in_delta Enum.sum(Enum.map(stacks, &elem(&1, 1))),
                      profile.duration_us,
                      profile.duration_us * 0.1

      assert until(&sampler_idle?/0, 100)
      assert open_fds() == fds
      assert_node_clean()
    end

    test "two phases: each gets its share of the on-CPU time" do
      # 20 ms of recursion, 20 ms of an Enum pipeline, ten times: halves
      # (short phases, many times: a moment the machine's other load takes
      # the CPU lands on both)
      work = fn ->
        for _ <- 1..10 do
          Workloads.busy(20)
          enum_for(20)
        end
      end

      {_, profile} = FlameOn.Client.profile(work, mode: :native)
      fib = time_where(profile, self(), &String.contains?(&1, "Workloads.fib/1"))
      enum = time_where(profile, self(), &String.contains?(&1, "enum_until"))
      share = fib / max(fib + enum, 1)
      # ±17 pp: two hundred samples, on a shared machine
      assert share > 0.33 and share < 0.67, "fib #{fib} µs, enum #{enum} µs"
    end

    # Phases with a wait between them are strata: each one's on-CPU time
    # is shared among its own samples, so a short trace splits exactly
    # where its samples alone (a dozen here) would not: shared by counts
    # over the whole trace, 12 ms against 36 ms from ~24 samples is off by
    # 9 pp (one standard deviation), within 5 pp 42% of the time. On a busy
    # machine a preemption that waits 50 µs or more cuts a phase into
    # shorter strata, shared trace-wide: so 5 traces, 4 of them within.
    test "phases between waits get their own on-CPU time (strata)" do
      work = fn ->
        t0 = System.monotonic_time(:microsecond)
        Workloads.busy(12)
        t1 = System.monotonic_time(:microsecond)
        Process.sleep(5)
        t2 = System.monotonic_time(:microsecond)
        enum_for(36)
        {t1 - t0, System.monotonic_time(:microsecond) - t2}
      end

      runs =
        for _ <- 1..5 do
          {{fib_wall, enum_wall}, profile} = FlameOn.Client.profile(work, mode: :native)
          fib = on_cpu_us(profile, self(), "Workloads.")
          # the rest: enum_until, and Enum.filter_list/2's recursion deeper
          # than the kernel walks
          enum = on_cpu_us(profile, self()) - fib
          traced = fib / max(fib + enum, 1)
          inline = fib_wall / (fib_wall + enum_wall)
          refute_foreign_frames(profile)

          {abs(traced - inline) < 0.05, profile.stats.cpu_strata,
           "fib #{fib} µs of #{fib_wall}, enum #{enum} µs of #{enum_wall}"}
        end

      assert Enum.count(runs, &elem(&1, 0)) >= 4, inspect(runs)
      assert Enum.all?(runs, &(elem(&1, 1) >= 1)), inspect(runs)
    end

    # A function caught as it begins or returns (its frame not made yet,
    # or taken down) has a call chain that skips its caller; the loop
    # below is mostly that (a tail call per step), and every sample of it
    # must still be under spin/1 (before: about one in ten was not). The
    # waits and collections hang where its `out`s stopped, which before
    # its first sample is a guess: only the samples' stacks are checked.
    test "a tail-recursive loop's samples stay under its caller" do
      {_, profile} = FlameOn.Client.profile(fn -> spin(3_000_000) end, mode: :native)
      loop = on_cpu_us(profile, self(), "spin_loop/2")
      assert loop > 0

      missing =
        for {stack, us} <- profile.stacks[self()],
            String.contains?(stack, "spin_loop/2"),
            not String.contains?(stack, "NativeModeTest.spin/1;"),
            not (stack =~ ~r/;(GC_MINOR|GC_MAJOR|RUNNABLE|SLEEP)$/),
            do: {stack, us}

      assert missing == []
      refute_foreign_frames(profile)
    end

    # The last slice of a trace (here the whole second phase, after the
    # wait) takes its CPU samples as the session closes: from the
    # sampler's buffers, which must still be there (they were freed first,
    # and its time went to the stack before the wait: 0% for the phase).
    # Short traces are what trace/3 keeps.
    for cross_process <- [false, true] do
      test "the last phase of a short trace gets its samples (cross_process: #{cross_process})" do
        work = fn ->
          Workloads.busy(15)
          Process.sleep(10)
          build(1_000_000, [])
        end

        # three short traces together, on-CPU in its code (its collections'
        # time is exact either way): about half, from some sixty samples
        # (before the fix: none)
        {fib, build} =
          for _ <- 1..3, reduce: {0, 0} do
            {fib, build} ->
              {_, profile} =
                FlameOn.Client.profile(work, mode: :native, cross_process: unquote(cross_process))

              {fib + running_in(profile, "Workloads.fib/1"),
               build + running_in(profile, "NativeModeTest.build/2")}
          end

        assert build / max(fib + build, 1) > 0.2, "fib #{fib} µs, build #{build} µs"
      end
    end

    test "a wait in GenServer.call hangs under the call's frames, as in exact mode" do
      {:ok, server} = Agent.start_link(fn -> :ok end)

      {_, profile} =
        FlameOn.Client.profile(
          fn ->
            for _ <- 1..10 do
              Workloads.busy(5)
              Agent.get(server, fn state -> Process.sleep(20) && state end)
            end
          end,
          mode: :native
        )

      waits = time_where(profile, self(), &String.ends_with?(&1, ";SLEEP"))
      in_call = time_where(profile, self(), &String.contains?(&1, "gen:do_call/4;SLEEP"))
      # 10 waits of 20 ms; the first may hang elsewhere until its stack is read
      assert waits >= 150_000
      assert in_call >= 0.7 * waits, inspect(profile.stacks[self()], limit: 20)
      Agent.stop(server)
    end

    # A request's parse allocates nothing; after its call's reply it
    # renders, which allocates. A collection that starts before any
    # sample of the slice after the reply found the wait's stack on top:
    # it went under gen:do_call/4 (about half of their time here),
    # not to render. It now goes where the collections after a sample
    # went: render's.
    test "collections after a call's reply go with the code after it, not under the wait" do
      {:ok, server} = Agent.start_link(fn -> :ok end)

      request_loop = fn ->
        deadline = System.monotonic_time(:millisecond) + 1_500

        Stream.repeatedly(fn ->
          parse(20_000, 0)
          Agent.get(server, fn state -> Process.sleep(1) && state end)
          for _ <- 1..40, do: build(200, [])
        end)
        |> Enum.find(fn _ -> System.monotonic_time(:millisecond) >= deadline end)
      end

      # a new process, its heap small: many small collections (thousands)
      {pid, profile} =
        Task.async(fn -> {self(), FlameOn.Client.profile(request_loop, mode: :native)} end)
        |> Task.await(10_000)
        |> then(fn {pid, {_, profile}} -> {pid, profile} end)

      gc = &(&1 =~ ~r/;GC_(MINOR|MAJOR)$/)
      collections = time_where(profile, pid, gc)
      in_wait = time_where(profile, pid, &(gc.(&1) and String.contains?(&1, "gen:do_call/4")))
      in_parse = time_where(profile, pid, &(gc.(&1) and String.contains?(&1, ".parse/2")))
      assert profile.stats.gc_minor > 1000
      assert in_wait < 0.1 * collections, inspect(profile.stacks[pid], limit: 30)
      assert in_parse < 0.1 * collections, inspect(profile.stacks[pid], limit: 30)
      Agent.stop(server)
    end

    test "cross_process: true: the callee's CPU work is in its own stacks" do
      {:ok, server} = FlameOn.Client.Test.Server.start()

      {result, profile} =
        FlameOn.Client.profile(fn -> GenServer.call(server, {:spin, 150}) end,
          mode: :native,
          cross_process: true
        )

      assert result == :done
      assert profile.mode == :native
      spun = time_where(profile, server, &String.contains?(&1, "spin_until"))
      # (a sample in the runtime's C code whose chain broke may land on
      # another of its stacks: 114-150 ms of the 150 in eight runs here)
      assert spun >= 90_000, inspect(profile.stacks[server], limit: 10)
      GenServer.stop(server)
      assert until(&sampler_idle?/0, 100)
      assert_node_clean()
    end

    test "cross_process: true: a callee's preemptions stay runnable where they happened" do
      # The callee is preempted hundreds of times in its recursion (a few
      # µs slices) and then in its sort, with no message between: the span
      # graph holds that as one wait until the call ends. Each gap is
      # runnable under the phase it came in (before, all of them went under
      # the sort, where the callee stopped last: 28% of its time there, and
      # 0.4% under the recursion).
      {:ok, server} = FlameOn.Client.Test.Server.start()

      calls = fn ->
        deadline = System.monotonic_time(:millisecond) + 600

        Stream.repeatedly(fn -> GenServer.call(server, {:recurse_then_sort, 22, 20_000}) end)
        |> Enum.find(fn _ -> System.monotonic_time(:millisecond) >= deadline end)
      end

      {_, profile} = FlameOn.Client.profile(calls, mode: :native, cross_process: true)
      in_phase = &time_where(profile, server, fn stack -> String.contains?(stack, &1) end)

      runnable_in =
        &time_where(profile, server, fn stack ->
          String.contains?(stack, &1) and String.ends_with?(stack, "RUNNABLE")
        end)

      recurse = in_phase.("recurse_phase")
      sort = in_phase.("sort_phase")
      assert recurse > 50_000 and sort > 20_000, inspect(profile.stacks[server], limit: 12)
      recurse_rate = runnable_in.("recurse_phase") / recurse
      sort_rate = runnable_in.("sort_phase") / sort
      assert recurse_rate > 0.0, inspect(profile.stacks[server], limit: 12)

      assert recurse_rate >= 0.3 * sort_rate,
             "runnable: #{Float.round(100 * recurse_rate, 1)}% of the recursion's time, " <>
               "#{Float.round(100 * sort_rate, 1)}% of the sort's"

      GenServer.stop(server)
      assert until(&sampler_idle?/0, 100)
      assert_node_clean()
    end

    test "mode :auto (the default of trace/3) runs native here" do
      assert traced_profile(fn -> Workloads.busy(50) end, []).mode == :native
      assert FlameOn.Client.status().native.available == true
    end

    test "the owner killed mid-trace: every perf event is closed" do
      fds = open_fds()
      parent = self()

      pid =
        spawn(fn ->
          FlameOn.Client.profile(
            fn ->
              send(parent, {:tracing, self()})
              Workloads.busy(10_000)
            end,
            mode: :native
          )
        end)

      assert_receive {:tracing, ^pid}
      assert until(fn -> Native.perf_stats().threads > 0 end, 100)
      Process.exit(pid, :kill)
      assert until(&sampler_idle?/0, 200), inspect(Native.perf_stats())
      assert open_fds() == fds
      assert_node_clean()
    end

    test "start_trace/2 and capture_next/2 take mode :native" do
      parent = self()
      worker = spawn(fn -> Workloads.wait_here(parent) end)
      assert_receive {:waiting, ^worker}
      {:ok, ref} = FlameOn.Client.start_trace(worker, mode: :native, shipper: @to_me)
      send(worker, :go)
      Process.sleep(20)
      assert {:ok, profile} = FlameOn.Client.stop_trace(ref)
      assert profile.mode == :native

      task =
        Task.async(fn -> FlameOn.Client.capture_next({Workloads, :busy, 1}, mode: :native) end)

      assert until(fn -> FlameOn.Client.status().captures_waiting != [] end, 200)
      Workloads.busy(30)
      assert {:ok, next} = Task.await(task, 10_000)
      assert next.mode == :native
      assert time_where(next, next.pid, &String.contains?(&1, "fib/1")) > 0
      assert until(&sampler_idle?/0, 100)
    end

    test "mix profile.flame --mode native --frequency writes the work's frames" do
      out = Path.join(System.tmp_dir!(), "flame_on_native_#{System.unique_integer([:positive])}")
      on_exit(fn -> File.rm_rf!(out) end)

      output =
        ExUnit.CaptureIO.capture_io(fn ->
          Mix.Tasks.Profile.Flame.run(
            ~w(--mode native --frequency 999 --no-warmup --format folded --out) ++
              [out, "-e", "FlameOn.Client.Test.Workloads.busy(100)"]
          )
        end)

      assert output =~ ~s|Top 10 functions by self time ("eval", mode native):|
      assert output =~ "FlameOn.Client.Test.Workloads.fib/1"
      folded = File.read!(Path.join(out, "eval.folded"))
      assert folded =~ "FlameOn.Client.Test.Workloads.fib/1"
      assert_node_clean()
    end

    test ":frequency sets the sampler's rate (the first trace's, while it runs)" do
      {rate, _} =
        FlameOn.Client.profile(fn -> PerfSampler.stats().frequency end,
          mode: :native,
          frequency: 199
        )

      assert rate == 199
    end
  end

  describe "where native sampling cannot run" do
    @describetag :native_unavailable

    test "mode :native raises naming the cause and the fix" do
      error =
        assert_raise ArgumentError, fn ->
          FlameOn.Client.profile(fn -> :ok end, mode: :native)
        end

      assert error.message =~ "mode: :native is not available"
      assert error.message =~ "+JPperf true" or error.message =~ "perf_event_paranoid"
      assert sampler_idle?()
      assert_node_clean()
    end

    test "status/0 says why, and mode :auto falls back to :sample" do
      assert %{available: false, reason: reason} = FlameOn.Client.status().native
      assert is_binary(reason) and reason != ""
      assert traced_profile(fn -> Workloads.busy(20) end, mode: :auto).mode == :sample
    end
  end

  defp on_cpu_us(profile, pid, frame) do
    time_where(profile, pid, &(String.contains?(&1, frame) and not String.contains?(&1, "SLEEP")))
  end

  # frames of another process (a stale frame pointer or register left by
  # the process that ran before on the thread: the sampler's helper). On
  # OTP 27 some still come through (a caller the C stack names in a
  # tracer callback at the start of a slice, not by the scheduler's
  # fragment): at most one sample's worth there.
  defp refute_foreign_frames(profile) do
    foreign = for {stack, us} <- profile.stacks[self()], stack =~ "PerfSampler", do: {stack, us}

    # a foreign stack with what hangs under it (its C code, its
    # collections, a RUNNABLE wait) is one stack
    stacks =
      foreign
      |> Enum.map(fn {stack, _us} ->
        String.replace(stack, ~r/;(\[native[^;]*\]|GC_MINOR|GC_MAJOR|RUNNABLE|SLEEP)$/, "")
      end)
      |> Enum.uniq()

    if :erlang.system_info(:otp_release) < ~c"27",
      do: assert(foreign == []),
      else: assert(length(stacks) <= 2, inspect(foreign))
  end

  def spin(n), do: {:ok, spin_loop(n, 0)}
  defp spin_loop(0, acc), do: acc
  defp spin_loop(n, acc), do: spin_loop(n - 1, rem(acc * 31 + n, 1_000_003))

  # time in stacks through frame, but its classes' leaves
  defp running_in(profile, frame) do
    time_where(profile, self(), fn stack ->
      String.contains?(stack, frame) and not (stack =~ ~r/;(GC_MINOR|GC_MAJOR|RUNNABLE|SLEEP)$/)
    end)
  end

  # arithmetic only: no collection
  def parse(0, acc), do: acc
  def parse(n, acc), do: parse(n - 1, rem(acc * 31 + n, 1_000_003))

  # a list of n: few, large collections
  def build(0, acc), do: length(acc)
  def build(n, acc), do: build(n - 1, [rem(n * 7, 13) | acc])

  defp enum_for(ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    enum_until(deadline)
  end

  defp enum_until(deadline) do
    if System.monotonic_time(:millisecond) < deadline do
      1..2_000 |> Enum.map(&(&1 * 3)) |> Enum.filter(&(rem(&1, 2) == 0)) |> Enum.sum()
      enum_until(deadline)
    end
  end
end
