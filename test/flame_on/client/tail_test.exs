defmodule FlameOn.Client.TailTest.Work do
  @moduledoc false
  # A request: fast ones do a little work around a short sleep; the slow
  # one computes in slow_compute/1 and waits in slow_wait/1.

  def fast do
    burst(300)
    Process.sleep(1)
    burst(300)
  end

  def slow(compute_ms, wait_ms) do
    {:ok, _} = slow_compute(compute_ms)
    {:ok, :waited} = slow_wait(wait_ms)
    burst(300)
  end

  def slow_compute(ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    {:ok, compute_loop(deadline, 0)}
  end

  def other_compute(ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    {:ok, other_loop(deadline, 0)}
  end

  defp other_loop(deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline,
      do: acc,
      else: other_loop(deadline, acc + fib(14))
  end

  def slow_wait(ms) do
    Process.sleep(ms)
    {:ok, :waited}
  end

  defp compute_loop(deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline,
      do: acc,
      else: compute_loop(deadline, acc + fib(14))
  end

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  def burst(n), do: Enum.reduce(1..n, 0, fn k, acc -> rem(acc * 31 + k, 1_000_003) end)

  # a list of n (allocation)
  def build(n), do: build(n, [])
  defp build(0, acc), do: length(acc)
  defp build(n, acc), do: build(n - 1, [rem(n * 7, 13) | acc])
end

defmodule FlameOn.Client.TailTest do
  # Tail-based tracing (#28): trace/3 with sample_rate 1.0 and threshold_ms
  # over a load of fast requests with a slow one among them. Where native
  # sampling runs (tagged :native, see native_mode_test.exs) the shared
  # path runs (FlameOn.Client.Tracing.Tail, profile.mode :native_tail);
  # elsewhere, and in mode :sample, each trace has its own session and a
  # fast one builds no profile.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{PerfSampler, TailHold}
  alias FlameOn.Client.TailTest.Work
  alias FlameOn.Client.Telemetry

  @to_me {FlameOn.Client.Shipper.Process, pid: :flame_on_tail_test}

  setup do
    ensure_app_started()
    # what other tests' tail traces left lingering (in processes alive or
    # not) goes, so the counts below are this test's
    TailHold.off()
    assert_node_clean()
    Process.register(self(), :flame_on_tail_test)

    on_exit(fn ->
      Application.delete_env(:flame_on_client, :tail)
      TailHold.off()
    end)

    :ok
  end

  # `workers` processes, each making `per` fast requests; one of them
  # makes the slow one among its fast ones. Every request is traced.
  defp load(opts, workers, per, slow_at) do
    parent = self()

    pids =
      for w <- 1..workers do
        spawn_link(fn ->
          for i <- 1..per do
            {name, fun} =
              if w == 1 and i == slow_at,
                do: {"slow", fn -> Work.slow(120, 180) end},
                else: {"fast", &Work.fast/0}

            FlameOn.Client.Tracing.trace(name, fun, [sample_rate: 1.0, shipper: @to_me] ++ opts)
          end

          send(parent, {:done, self()})
        end)
      end

    for pid <- pids, do: assert_receive({:done, ^pid}, 60_000)
    pids
  end

  defp kept do
    receive do
      {:flame_on_profile, profile} -> [profile | kept()]
    after
      200 -> []
    end
  end

  defp time_in(profile, frame) do
    for {_pid, stacks} <- profile.stacks,
        {stack, us} <- stacks,
        String.contains?(stack, frame),
        reduce: 0,
        do: (acc -> acc + us)
  end

  # 60 calls to an Agent that waits 2 ms, CPU between them, traced with
  # a 60 ms threshold: the server and the kept profile.
  defp calls_profile do
    {:ok, server} = Agent.start_link(fn -> :ok end)

    request = fn ->
      for _ <- 1..60 do
        Work.burst(3_000)
        Agent.get(server, fn state -> Process.sleep(2) && state end)
      end
    end

    FlameOn.Client.Tracing.trace("calls", request,
      threshold_ms: 60,
      mode: :native,
      shipper: @to_me
    )

    assert_receive {:flame_on_profile, profile}, 5_000
    {server, profile}
  end

  defp build_until(deadline) do
    if System.monotonic_time(:millisecond) < deadline do
      Work.build(2_000)
      build_until(deadline)
    end
  end

  defp lingering(state), do: if(Native.tail_state(state) == :lingering, do: state)

  defp flags_left(pids) do
    for pid <- pids,
        Process.alive?(pid),
        flags = :erlang.trace_info(pid, :flags),
        flags != {:flags, []},
        do: {pid, flags}
  end

  defp assert_slow_profile(profile, mode) do
    assert profile.name == "slow"
    assert profile.mode == mode
    assert profile.duration_us >= 250_000
    compute = time_in(profile, "TailTest.Work.slow_compute/1")
    # its stacks: the slow function's frames; its wait an off-CPU leaf
    # where it waited
    assert compute >= 60_000, inspect(profile.stacks, limit: :infinity)
    assert time_in(profile, "TailTest.Work.fib/1") > 0
    waited = time_in(profile, "TailTest.Work.slow_wait/1;Process.sleep/1;SLEEP")
    assert waited >= 120_000, inspect(profile.stacks, limit: :infinity)
  end

  # A slow request of 10 ms of CPU and a 30 ms wait, kept without a
  # shipper: the store holds the copy of its slices and samples
  # (Native.tail_keep/3), replayed into its profile on each read.
  # `at_least`: the CPU time placed in slow_compute and the share of the
  # 30 ms wait placed in slow_wait. Without flags a request's slices come
  # from its samples until its half threshold (5 ms): its time there is
  # where its samples fell, and the start of its wait may hang under the
  # CPU work before it.
  defp assert_kept_as_copy({compute_at_least, wait_at_least} \\ {7_000, 25_000}) do
    FlameOn.Client.TraceStore.clear()
    # its stops asked about from 5 ms on (half its threshold): its wait's
    FlameOn.Client.trace("short", fn -> Work.slow(10, 30) end, mode: :native, threshold_ms: 10)

    assert [summary] = FlameOn.Client.TraceStore.list()
    assert summary.name == "short" and summary.processes == 1

    # the store holds the copy (its records and named samples), not a tree
    [{_, _, bytes, _, pending}] =
      :ets.lookup(FlameOn.Client.TraceStore, {:trace, summary.trace_id})

    assert %FlameOn.Client.Profile.Pending{tree: nil, make: {_, _, _}} = pending
    assert bytes == summary.bytes and bytes > pending.bytes and pending.bytes < 256 * 1024

    # replayed on each read, the same each time: 10 ms of CPU in
    # slow_compute (its slices' time), 30 ms asleep in slow_wait
    assert {:ok, profile} = FlameOn.Client.TraceStore.get(summary.trace_id)
    assert {:ok, ^profile} = FlameOn.Client.TraceStore.get(summary.trace_id)
    assert profile.mode == :native_tail and profile.stats.samples > 0
    assert profile.stats.tail_dropped_samples == 0 and profile.stats.tail_truncated == false
    compute = time_in(profile, "TailTest.Work.slow_compute/1")

    assert compute >= compute_at_least and compute <= 30_000,
           inspect(profile.stacks, limit: :infinity)

    waited = time_in(profile, "TailTest.Work.slow_wait/1;Process.sleep/1;SLEEP")
    assert waited >= wait_at_least, inspect(profile.stacks, limit: :infinity)
    assert time_in(profile, "SLEEP") >= 25_000, inspect(profile.stacks, limit: :infinity)
    :ok = TailHold.off()
    assert_node_clean()
    profile
  end

  # A request kept (2 ms over a 1 ms threshold), its profile shipped to `to`.
  defp kept_request(to) do
    FlameOn.Client.Tracing.trace("kept", fn -> Process.sleep(2) end,
      sample_rate: 1.0,
      threshold_ms: 1,
      mode: :native,
      shipper: {FlameOn.Client.Shipper.Process, pid: to}
    )
  end

  # A request of the calling process (its table entry, no flags) that ran
  # 5 ms, found slow over 1 ms, then `then` run: {its state, its time from
  # tail_end/2}.
  defp slow_request_ended(then) do
    assert TailHold.on?(499)
    {:tail, _, _} = state = Native.tail_begin(0, nil, false)
    Process.sleep(5)
    assert {:slow, took_ns} = Native.tail_end(state, 1_000_000)
    then.()
    {state, took_ns}
  end

  defp sampled_session,
    do:
      Native.new(%{
        cpu_sampled: true,
        native_per_second: System.convert_time_unit(1, :second, :native)
      })

  # the tail path's flags (`attribution: :flags`), with `config` beside
  defp put_tail_env(config),
    do: Application.put_env(:flame_on_client, :tail, Keyword.merge([attribution: :flags], config))

  describe "with trace flags (attribution: :flags), where native sampling runs (+JPperf true)" do
    @describetag :native

    setup do
      put_tail_env([])
      :ok
    end

    test "every request traced: exactly the slow one is kept, with its stacks; nothing left after" do
      pids = load([mode: :native, threshold_ms: 200], 8, 15, 5)

      assert [profile] = kept()
      assert_slow_profile(profile, :native_tail)
      assert profile.stats.tail_truncated == false
      assert profile.stats.samples > 0

      stats = TailHold.stats()
      assert stats.on
      assert stats.in_use == 0
      assert stats.kept >= 1
      assert flags_left([self() | pids]) == []

      # tail tracing stops: the sampler closes
      :ok = TailHold.off()
      refute TailHold.stats().on
      perf = Native.perf_stats()
      assert perf.users == 0 and perf.threads == 0
      assert PerfSampler.stats().holders == 0
      assert_node_clean()
    end

    test "without a shipper the store keeps the slow request's data, built into its profile when read" do
      FlameOn.Client.TraceStore.clear()
      kept_before = FlameOn.Client.TraceStore.stats().kept

      for _ <- 1..10,
          do: FlameOn.Client.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)

      FlameOn.Client.trace("slow", fn -> Work.slow(120, 180) end, mode: :native, threshold_ms: 200)

      assert FlameOn.Client.TraceStore.stats().kept == kept_before + 1
      assert [summary] = FlameOn.Client.TraceStore.list()
      assert summary.name == "slow" and summary.mode == :native_tail
      assert summary.pid == self() and summary.processes == 1
      assert summary.duration_us >= 250_000

      # the profile is made on each read, the same each time
      assert {:ok, profile} = FlameOn.Client.TraceStore.get(summary.trace_id)
      assert profile.trace_id == summary.trace_id
      assert_slow_profile(profile, :native_tail)
      assert profile.process_names[self()] == FlameOn.Client.ProcessName.read(self())
      assert {:ok, ^profile} = FlameOn.Client.TraceStore.get(summary.trace_id)
      # what the store holds is the folded data, not the profile's texts
      assert summary.bytes < :erlang.external_size(profile)
      :ok = TailHold.off()
      assert_node_clean()
    end

    test "a short slow request is kept as the copy of its slices and samples, replayed when read" do
      assert assert_kept_as_copy().stats.tail_attribution == :flags
    end

    test "a kept request's time preempted is RUNNABLE under the code it runs; its sleep stays SLEEP" do
      # one scheduler, a busy process beside the request: its loop is
      # preempted half the time; then it sleeps 100 ms
      online = :erlang.system_flag(:schedulers_online, 1)

      try do
        hog = spawn(fn -> Work.other_compute(5_000) end)

        try do
          FlameOn.Client.trace("starved", fn -> Work.slow(300, 100) end,
            mode: :native,
            threshold_ms: 100,
            shipper: {FlameOn.Client.Shipper.Process, pid: self()}
          )
        after
          Process.exit(hog, :kill)
        end
      after
        :erlang.system_flag(:schedulers_online, online)
      end

      assert_receive {:flame_on_profile, %{name: "starved"} = profile}, 5_000
      assert profile.mode == :native_tail
      classes = profile.time_classes[self()]
      stacks = profile.stacks[self()]
      label = "#{inspect(classes)} #{inspect(stacks)}"

      time = fn pattern ->
        for {stack, us} <- stacks, stack =~ pattern, reduce: 0, do: (acc -> acc + us)
      end

      # preempted: about half of the loop's 300 ms
      assert classes.runnable_us >= 60_000, label
      assert time.(~r/slow_compute\/1;.*RUNNABLE$/) >= 0.9 * classes.runnable_us, label
      # the sleep: a wait, not time it could run
      assert time.(~r/slow_wait\/1;.*SLEEP$/) >= 95_000, label
      assert time.(~r/slow_wait\/1;.*RUNNABLE$/) < 5_000, label
      :ok = TailHold.off()
      assert_node_clean()
    end

    test "the hold turns off by itself after idle_ms" do
      put_tail_env(idle_ms: 100)
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, threshold_ms: 100, mode: :native)
      assert TailHold.stats().on
      # off, then the sampler released once no tail trace runs
      assert wait_until(fn -> not TailHold.stats().on end, 3_000)
      assert wait_until(fn -> Native.perf_stats().users == 0 end, 3_000)
    end

    test "a request that runs in more slices than an entry holds is truncated, and says so" do
      :ok = TailHold.off()
      put_tail_env(max_slices: 20)

      FlameOn.Client.Tracing.trace("long", fn -> Work.slow_compute(100) end,
        threshold_ms: 50,
        mode: :native,
        shipper: @to_me
      )

      assert_receive {:flame_on_profile, profile}
      assert profile.mode == :native_tail
      assert profile.stats.tail_truncated
      assert profile.stats.tail_slices == 20
      assert profile.stats.tail_dropped_slices > 0
      # what is held is not stretched over what is not
      on_cpu = time_in(profile, "TailTest.Work")
      assert on_cpu < profile.duration_us
      assert TailHold.stats().truncated >= 1
    end

    test "a kept request no sample landed on has its CPU under its root frame" do
      # two bursts of ~20 µs at the hold's 499 Hz: almost never sampled
      for _ <- 1..5 do
        FlameOn.Client.Tracing.trace("short", &Work.fast/0,
          threshold_ms: 1,
          mode: :native,
          shipper: @to_me
        )

        assert_receive {:flame_on_profile, profile}
        assert profile.mode == :native_tail
        stacks = Enum.flat_map(profile.stacks, fn {_pid, stacks} -> stacks end)
        on_cpu = for {stack, us} <- stacks, not String.ends_with?(stack, "SLEEP"), do: {stack, us}
        assert on_cpu != []
        # none on the bare process (the stack ""): all in the trace's root
        for {stack, _us} <- on_cpu,
            do: assert(String.starts_with?(stack, "FlameOn.Client.Tracing.Tail.call/1"))
      end
    end

    # A tail trace asks where its stops are only from half its threshold
    # on. A wait in GenServer.call before that, in a function asked about
    # later, hangs where the later read says: before, it was taken as a
    # call from the last sample's stack (gen:do_call/4 under the compute
    # loop), about a sixth of the waits here.
    test "waits before the first stop read hang where a later read of the same function says" do
      {server, profile} = calls_profile()
      assert profile.mode == :native_tail
      stacks = Enum.flat_map(profile.stacks, fn {_pid, stacks} -> stacks end)
      waits = for {stack, us} <- stacks, stack =~ ~r/gen:do_call\/4;SLEEP$/, do: {stack, us}
      all = Enum.sum(Enum.map(waits, &elem(&1, 1)))
      in_call = for {stack, us} <- waits, stack =~ "GenServer.call/3;gen:do_call/4", do: us
      # 60 waits of 2 ms
      assert all >= 100_000
      assert Enum.sum(in_call) >= 0.95 * all, inspect(waits, limit: 10)
      Agent.stop(server)
    end

    # After a call's reply, until the slice's first sample, the stack on
    # top is still the wait's; render's collections there went under
    # gen:do_call/4 (most of their time here). The tail path's
    # `receive` flag tells such a slice, as mode :native's receive events.
    test "a kept request's collections after a call's reply go with the code after it" do
      {:ok, server} = Agent.start_link(fn -> :ok end)

      request = fn ->
        for _ <- 1..150 do
          Work.burst(3_000)
          Agent.get(server, fn state -> Process.sleep(1) && state end)
          for _ <- 1..40, do: Work.build(200)
        end
      end

      # a new process, its heap small: many small collections
      Task.async(fn ->
        FlameOn.Client.Tracing.trace("collects", request,
          threshold_ms: 50,
          mode: :native,
          shipper: @to_me
        )
      end)
      |> Task.await(10_000)

      assert_receive {:flame_on_profile, profile}, 5_000
      assert profile.mode == :native_tail
      stacks = Enum.flat_map(profile.stacks, fn {_pid, stacks} -> stacks end)
      gc = for {stack, us} <- stacks, stack =~ ~r/;GC_(MINOR|MAJOR)$/, do: {stack, us}
      all = Enum.sum(Enum.map(gc, &elem(&1, 1)))
      in_wait = for {stack, us} <- gc, String.contains?(stack, "gen:do_call/4"), do: us
      assert profile.stats.gc_minor > 300
      assert Enum.sum(in_wait) < 0.1 * all, inspect(Enum.sort_by(gc, &(-elem(&1, 1))), limit: 8)
      Agent.stop(server)
    end

    test "telemetry traces with threshold_ms take the shared path too" do
      config = [mode: :native, threshold_ms: 200, shipper: @to_me]

      event = fn suffix ->
        Telemetry.handle_event([:tail_test, :req, suffix], %{}, %{}, config)
      end

      for _ <- 1..20 do
        event.(:start)
        Work.fast()
        event.(:stop)
      end

      event.(:start)
      assert {:flags, flags} = :erlang.trace_info(self(), :flags)
      assert Enum.sort(flags) == [:garbage_collection, :receive, :running]
      Work.slow(120, 180)
      event.(:stop)
      # lingering for its next request (linger_ms), until the hold is off
      assert {:flags, [_ | _]} = :erlang.trace_info(self(), :flags)

      assert [profile] = kept()
      assert profile.name == "tail_test.req"
      assert profile.mode == :native_tail
      assert time_in(profile, "TailTest.Work.slow_compute/1") >= 60_000
      assert TailHold.stats().in_use == 0
      :ok = TailHold.off()
      assert :erlang.trace_info(self(), :flags) == {:flags, []}
    end

    test "a telemetry :start whose :stop never comes: its flag goes when the hold turns off" do
      config = [mode: :native, threshold_ms: 200, shipper: @to_me]
      parent = self()

      pid =
        spawn(fn ->
          Telemetry.handle_event([:tail_test, :lost, :start], %{}, %{}, config)
          send(parent, :started)
          Process.sleep(:infinity)
        end)

      assert_receive :started
      assert {:flags, [_ | _]} = :erlang.trace_info(pid, :flags)
      :ok = TailHold.off(50)
      assert :erlang.trace_info(pid, :flags) == {:flags, []}
      assert Native.perf_stats().users == 0
      Process.exit(pid, :kill)
      # its entry is given back once it is gone
      assert wait_until(fn -> Native.tail_owners() == [] end, 3_000)
      assert TailHold.stats().in_use == 0
    end

    test "a process's next tail trace takes its lingering flags again; the sweep removes them after linger_ms" do
      put_tail_env(linger_ms: 200)
      before = TailHold.stats()
      opts = [mode: :native, threshold_ms: 200, shipper: @to_me]
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
      assert {:tracer, {Native, {:tail, _, _} = state}} = :erlang.trace_info(self(), :tracer)

      for _ <- 1..4 do
        FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
        # the same flags, set once
        assert :erlang.trace_info(self(), :tracer) == {:tracer, {Native, state}}
      end

      stats = TailHold.stats()
      assert stats.begun - before.begun == 5
      assert stats.resumed - before.resumed == 4
      assert stats.lingering == 1
      assert stats.in_use == 0
      assert kept() == []

      # idle: swept between 200 and 300 ms later
      assert wait_until(fn -> :erlang.trace_info(self(), :flags) == {:flags, []} end, 3_000)
      assert TailHold.stats().lingering == 0
      assert TailHold.stats().swept > before.swept
      assert TailHold.stats().on
      assert_node_clean()

      # and the next one sets them again
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
      assert {:tracer, {Native, {:tail, _, _} = again}} = :erlang.trace_info(self(), :tracer)
      assert again != state
    end

    test "slow traces linger too; each profile holds its own request only" do
      opts = [mode: :native, threshold_ms: 150, shipper: @to_me]
      FlameOn.Client.Tracing.trace("first", fn -> Work.slow(120, 60) end, opts)
      assert {:flags, [_ | _]} = :erlang.trace_info(self(), :flags)
      resumed = TailHold.stats().resumed

      FlameOn.Client.Tracing.trace(
        "second",
        fn ->
          {:ok, _} = Work.other_compute(100)
          Work.slow_wait(150)
        end,
        opts
      )

      assert TailHold.stats().resumed == resumed + 1

      assert [first, second] = kept()
      assert first.name == "first" and second.name == "second"
      # (CPU time: what the loaded machine gave them)
      assert time_in(first, "TailTest.Work.slow_compute/1") > 0
      assert time_in(first, "TailTest.Work.other_compute/1") == 0
      # nothing of the first request (nor of the first's replay) in the second
      assert time_in(second, "TailTest.Work.other_compute/1") > 0
      assert time_in(second, "TailTest.Work.slow_compute/1;") == 0
      assert second.duration_us < 400_000
      assert time_in(second, "TailTest.Work.slow_wait/1") >= 100_000
      assert TailHold.stats().in_use == 0
    end

    test "the hold turning off removes every lingering flag; a process that died needs nothing" do
      parent = self()

      pids =
        for _ <- 1..4 do
          spawn(fn ->
            FlameOn.Client.Tracing.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)
            send(parent, {:traced, self()})
            receive do: (:exit -> :ok)
          end)
        end

      for pid <- pids, do: assert_receive({:traced, ^pid})
      for pid <- pids, do: assert({:flags, [_ | _]} = :erlang.trace_info(pid, :flags))
      assert TailHold.stats().lingering == 4

      # one dies lingering: its entry goes at the next sweep
      [dead | alive] = pids
      ref = Process.monitor(dead)
      send(dead, :exit)
      assert_receive {:DOWN, ^ref, :process, ^dead, _}
      assert wait_until(fn -> TailHold.stats().lingering == 3 end, 2_000)

      :ok = TailHold.off()
      for pid <- alive, do: assert(:erlang.trace_info(pid, :flags) == {:flags, []})
      assert TailHold.stats().lingering == 0
      assert_node_clean()
      for pid <- alive, do: send(pid, :exit)
    end

    test "lingering flags go when the application stops, and when the hold is killed" do
      parent = self()

      linger = fn ->
        spawn(fn ->
          FlameOn.Client.Tracing.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)
          send(parent, {:traced, self()})
          receive do: (:exit -> :ok)
        end)
      end

      pid = linger.()
      assert_receive {:traced, ^pid}
      assert {:flags, [_ | _]} = :erlang.trace_info(pid, :flags)
      :ok = Application.stop(:flame_on_client)
      assert :erlang.trace_info(pid, :flags) == {:flags, []}
      assert_no_trace_leftovers()
      ensure_app_started()

      other = linger.()
      assert_receive {:traced, ^other}
      assert {:flags, [_ | _]} = :erlang.trace_info(other, :flags)
      hold = Process.whereis(TailHold)
      ref = Process.monitor(hold)
      Process.exit(hold, :kill)
      assert_receive {:DOWN, ^ref, :process, ^hold, :killed}
      # the hold that restarts takes them back
      assert wait_until(fn -> :erlang.trace_info(other, :flags) == {:flags, []} end, 2_000)
      assert TailHold.stats().lingering == 0
      assert_node_clean()

      # and the processes trace as before
      send(pid, :exit)
      send(other, :exit)
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)
      assert {:flags, [_ | _]} = :erlang.trace_info(self(), :flags)
    end

    test "a process whose dictionary was erased while lingering: its next tail trace takes its flags again" do
      opts = [mode: :native, threshold_ms: 200]
      parent = self()

      spawn_link(fn ->
        FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
        {:tracer, {Native, {:tail, _, _} = state}} = :erlang.trace_info(self(), :tracer)
        resumed = TailHold.stats().resumed
        :erlang.erase()
        traced? = FlameOn.Client.Tracing.traced?()
        result = FlameOn.Client.Tracing.trace("fast", fn -> :done end, opts)
        tracer = :erlang.trace_info(self(), :tracer)
        # noted again: the next one does not ask the VM
        noted = TailHold.lingering_self()
        send(parent, {state, traced?, result, tracer, TailHold.stats().resumed - resumed, noted})
      end)

      assert_receive {state, traced?, result, tracer, resumed, noted}, 5_000
      refute traced?
      assert result == :done
      assert tracer == {:tracer, {Native, state}}
      assert resumed == 1
      assert noted == state
    end

    test "linger_ms 0: the flags go when each trace ends" do
      put_tail_env(linger_ms: 0)
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)
      assert :erlang.trace_info(self(), :flags) == {:flags, []}
      stats = TailHold.stats()
      assert stats.lingering == 0 and stats.linger_ms == 0
    end

    test "past max_lingering a trace's flags go at once, counted" do
      put_tail_env(max_lingering: 2)
      parent = self()
      full = TailHold.stats().linger_full

      pids =
        for _ <- 1..4 do
          pid =
            spawn(fn ->
              FlameOn.Client.Tracing.trace("fast", &Work.fast/0, mode: :native, threshold_ms: 200)
              send(parent, {:traced, self()})
              receive do: (:exit -> :ok)
            end)

          assert_receive {:traced, ^pid}
          pid
        end

      with_flags = Enum.filter(pids, &(:erlang.trace_info(&1, :flags) != {:flags, []}))
      assert with_flags == Enum.take(pids, 2)
      assert TailHold.stats().lingering == 2
      assert TailHold.stats().linger_full == full + 2
      for pid <- pids, do: send(pid, :exit)
    end

    test "a lingering process can be profiled, and traced by another process" do
      opts = [mode: :native, threshold_ms: 200]
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
      assert {:tracer, {Native, {:tail, _, _} = state}} = :erlang.trace_info(self(), :tracer)
      refute FlameOn.Client.Tracing.traced?()

      # profile/2 takes the flags back first
      {_, profile} = FlameOn.Client.profile(fn -> Work.slow_compute(60) end, mode: :native)
      assert time_in(profile, "TailTest.Work.slow_compute/1") > 0
      assert :erlang.trace_info(self(), :flags) == {:flags, []}
      assert Native.tail_state(state) == :gone

      # start_trace/2 of a process lingering
      parent = self()

      pid =
        spawn(fn ->
          FlameOn.Client.Tracing.trace("fast", &Work.fast/0, opts)
          send(parent, :traced)

          receive do
            :work -> Work.slow_compute(50)
          end

          receive do: (:exit -> :ok)
        end)

      assert_receive :traced
      assert {:tracer, {Native, {:tail, _, _} = other}} = :erlang.trace_info(pid, :tracer)
      assert {:ok, ref} = FlameOn.Client.Tracing.start_trace(pid, mode: :sample)
      assert Native.tail_state(other) == :gone
      send(pid, :work)
      Process.sleep(100)
      assert {:ok, traced} = FlameOn.Client.Tracing.stop_trace(ref)
      assert time_in(traced, "TailTest.Work.slow_compute/1") > 0
      send(pid, :exit)
      assert_node_clean()
    end

    test "a trace/3 nested in a tail trace runs untraced; the outer one keeps its flags" do
      opts = [mode: :native, threshold_ms: 100, shipper: @to_me]

      FlameOn.Client.Tracing.trace(
        "outer",
        fn ->
          assert FlameOn.Client.Tracing.traced?()
          FlameOn.Client.Tracing.trace("inner", fn -> Work.slow(60, 60) end, opts)
        end,
        opts
      )

      assert [profile] = kept()
      assert profile.name == "outer"
      assert time_in(profile, "TailTest.Work.slow_compute/1") > 30_000
    end

    test "the NIF times a request: under the threshold it ends at once, over it waits for the keep" do
      assert TailHold.on?(499)
      started = System.monotonic_time(:nanosecond)
      {:tail, _, _} = state = Native.tail_begin(0, nil, false)
      Process.sleep(30)
      # 30 ms over a 20 ms threshold: left as it is, its time given
      assert {:slow, took_ns} = Native.tail_end(state, 20_000_000)
      elapsed = System.monotonic_time(:nanosecond) - started
      assert took_ns >= 30_000_000 and took_ns <= elapsed
      assert Native.tail_state(state) == :active
      assert Native.tail_end(state, false) in [:ok, :linger]
      refute Native.tail_state(state) == :active

      # under the threshold: ended (lingering or freed), no second call
      {:tail, _, _} =
        state =
        Native.tail_begin(0, (Native.tail_state(state) == :lingering && state) || nil, false)

      assert Native.tail_end(state, 60_000_000_000) in [:ok, :linger]
      refute Native.tail_state(state) == :active

      for bad <- [-1, 1.5, :maybe, true] do
        {:tail, _, _} = state = Native.tail_begin(0, lingering(state), false)
        assert_raise ArgumentError, fn -> Native.tail_end(state, bad) end
        Native.tail_end(state, false)
      end

      if lingering(state), do: assert(TailHold.unlinger(self(), state) == :ok)
      assert Native.tail_state(state) == :gone
    end

    test "a kept request's copy holds at most max_samples samples: the rest counted, the trace marked truncated" do
      FlameOn.Client.TraceStore.clear()

      FlameOn.Client.trace("capped", fn -> Work.slow(20, 5) end,
        mode: :native,
        threshold_ms: 10,
        max_samples: 1
      )

      assert [summary] = FlameOn.Client.TraceStore.list()
      assert {:ok, profile} = FlameOn.Client.TraceStore.get(summary.trace_id)
      # 20 ms of CPU at 499 Hz: about 10 samples, one kept
      assert profile.stats.samples == 1
      assert profile.stats.tail_dropped_samples >= 3
      assert profile.stats.tail_truncated == true
      :ok = TailHold.off()
      assert_node_clean()
    end

    test "a slow request ends at the call that finds it slow: what its process does before the keep is not its time" do
      # its process goes on (a module loaded, a collection) before the keep
      {state, took_ns} = slow_request_ended(fn -> Process.sleep(20) end)
      assert {_, kept, _, 0, _, _} = Native.tail_keep(state, 100, 1_000)

      session = sampled_session()
      :ok = Native.tail_replay(session, kept)
      {tree, stats} = Native.finish(session, :stop)
      took_us = div(took_ns, 1000)

      fields = [
        trace_id: 1,
        name: "ended",
        mode: :native_tail,
        pid: self(),
        started_at: 0,
        duration_us: took_us
      ]

      profile = FlameOn.Client.Profile.build(tree, stats, fields)

      total =
        for {_pid, stacks} <- profile.stacks, {_, us} <- stacks, reduce: 0, do: (acc -> acc + us)

      assert total >= took_us - 100 and total <= took_us + 100, inspect({total, took_us})
      if lingering(state), do: assert(TailHold.unlinger(self(), state) == :ok)
    end

    test "tail_keep/3 copies a kept request once; tail_replay/2 replays only a copy, into a CPU-sampled session" do
      {state, _took_ns} = slow_request_ended(fn -> :ok end)

      for {samples, frames} <- [{-1, 10}, {10, :many}, {1.5, 10}],
          do: assert_raise(ArgumentError, fn -> Native.tail_keep(state, samples, frames) end)

      # no flags, no samples named: a copy of its time, and of the slice
      # it ran in as it ended
      assert {ended, kept, slices, 0, _, bytes} = Native.tail_keep(state, 10, 10)
      assert ended in [:ok, :linger]
      assert is_reference(kept) and slices <= 1 and bytes > 0
      # the entry is its process's again (lingering) or free: copied once
      assert_raise ArgumentError, fn -> Native.tail_keep(state, 10, 10) end

      sampled = sampled_session()
      plain = Native.new(%{native_per_second: System.convert_time_unit(1, :second, :native)})

      for {session, copy} <- [
            {sampled, make_ref()},
            {sampled, state},
            {plain, kept},
            {kept, kept}
          ],
          do: assert_raise(ArgumentError, fn -> Native.tail_replay(session, copy) end)

      assert Native.tail_replay(sampled, kept) == :ok
      assert {_tree, %{}} = Native.finish(sampled, :stop)
      Native.finish(plain, :stop)
      if lingering(state), do: assert(TailHold.unlinger(self(), state) == :ok)
      assert Native.tail_state(state) == :gone
    end

    test "cross_process and mode :sample take the own-session path" do
      FlameOn.Client.Tracing.trace("slow", fn -> Work.slow(120, 180) end,
        mode: :sample,
        threshold_ms: 200,
        shipper: @to_me
      )

      assert_receive {:flame_on_profile, profile}
      assert profile.mode == :sample
      refute TailHold.stats().on
    end
  end

  # Samples name the process they caught on x86-64 (the JIT's r13,
  # c_src/core/fo_identity.h): there tail traces with `attribution:
  # :samples` take no flags.
  defp flagless? do
    x86? =
      :erlang.system_info(:system_architecture) |> to_string() |> String.starts_with?("x86_64")

    Application.put_env(:flame_on_client, :tail, attribution: :samples)
    route = TailHold.route(499)
    assert route
    if x86?, do: assert(route == :flagless)
    route == :flagless
  end

  describe "without trace flags (attribution: :samples), where native sampling runs (+JPperf true)" do
    @describetag :native

    test "a short slow request is kept as the copy of its slices and samples, replayed when read" do
      if flagless?(),
        do: assert(assert_kept_as_copy({2_000, 15_000}).stats.tail_attribution == :samples)
    end

    test "every request traced: exactly the slow one is kept, with its CPU stacks and its wait where it waited" do
      if flagless?() do
        pids = load([mode: :native, threshold_ms: 200], 8, 15, 5)

        assert [profile] = kept()

        assert_slow_profile(profile, :native_tail)
        assert profile.stats.tail_attribution == :samples
        assert profile.stats.samples > 0
        assert flags_left([self() | pids]) == []

        stats = Native.tail_stats()
        assert stats.in_use == 0 and stats.flagless == 0
        assert stats.flagless_begun >= 120
        # the slow one got its flags at half its threshold (TailHold)
        assert stats.promotions >= 1

        :ok = TailHold.off()
        assert Native.perf_stats().users == 0
        assert_node_clean()
      end
    end

    test "no request gets a flag; the slow one's CPU stacks are its own samples', none of another process's" do
      if flagless?() do
        parent = self()
        before = Native.tail_stats()
        identified = Native.perf_stats().identified
        opts = [mode: :native, threshold_ms: 200, sample_rate: 1.0, shipper: @to_me]

        flags_inside = fn fun ->
          fn ->
            send(
              parent,
              {:inside, :erlang.trace_info(self(), :flags), FlameOn.Client.Tracing.traced?()}
            )

            fun.()
          end
        end

        # two processes, so the other's samples are there to be told apart
        other = Task.async(fn -> Work.other_compute(400) end)

        for _ <- 1..10,
            do: FlameOn.Client.Tracing.trace("fast", flags_inside.(&Work.fast/0), opts)

        FlameOn.Client.Tracing.trace("slow", flags_inside.(fn -> Work.slow(150, 150) end), opts)
        Task.await(other)

        for _ <- 1..11, do: assert_receive({:inside, {:flags, []}, true})
        assert :erlang.trace_info(self(), :flags) == {:flags, []}

        assert [profile] = kept()
        assert profile.name == "slow"
        assert profile.mode == :native_tail
        assert profile.stats.tail_attribution == :samples
        assert profile.duration_us >= 300_000
        # its CPU: the slow function's (150 ms, at least half sampled on a
        # loaded machine), none of the other process's
        compute = time_in(profile, "TailTest.Work.slow_compute/1")
        assert compute >= 60_000, inspect(profile.stacks, limit: :infinity)
        assert time_in(profile, "other_compute") == 0
        # the rest of its time off-CPU
        waited = time_in(profile, "SLEEP")
        assert waited >= 100_000, inspect(profile.stacks, limit: :infinity)

        stats = Native.tail_stats()
        assert stats.flagless_begun - before.flagless_begun == 11
        assert stats.flagless == 0 and stats.in_use == 0
        assert Native.perf_stats().identified > identified
      end
    end

    test "waits in calls hang under the call: the helpers read where it waits, until its flags are set" do
      if flagless?() do
        # nobody sets its flags: its waits are all placed by the reads
        Native.tail_promoter(nil)
        reads = Native.tail_stats().wait_reads
        {server, profile} = calls_profile()
        assert profile.stats.tail_attribution == :samples
        stacks = Enum.flat_map(profile.stacks, fn {_pid, stacks} -> stacks end)
        waits = for {stack, us} <- stacks, String.ends_with?(stack, ";SLEEP"), do: {stack, us}
        all = Enum.sum(Enum.map(waits, &elem(&1, 1)))

        in_call =
          for {stack, us} <- waits, stack =~ "GenServer.call/3;gen:do_call/4;SLEEP", do: us

        # 60 waits of 2 ms; the reads start at half the threshold, and a
        # wait before the request's first sample hangs under its root
        assert all >= 100_000
        assert Enum.sum(in_call) >= 0.75 * all, inspect(waits, limit: 10)
        assert Native.tail_stats().wait_reads > reads
        Agent.stop(server)
      end
    end

    test "a request that may be slow gets its flags: from then on its slices, collections and stops are exact" do
      if flagless?() do
        request = fn ->
          Work.slow_compute(30)
          deadline = System.monotonic_time(:millisecond) + 150
          build_until(deadline)
          Work.slow_wait(60)
        end

        # a new process, its heap small: many small collections
        Task.async(fn ->
          FlameOn.Client.Tracing.trace("promoted", request,
            threshold_ms: 40,
            mode: :native,
            shipper: @to_me
          )

          # its flags went with its request
          assert :erlang.trace_info(self(), :flags) == {:flags, []}
        end)
        |> Task.await(10_000)

        assert_receive {:flame_on_profile, profile}, 5_000
        assert profile.stats.tail_attribution == :samples
        stats = Native.tail_stats()
        # its collections after the promotion are GC time
        assert stats.promotions >= 1 and profile.stats.gc_minor > 0

        assert time_in(profile, "TailTest.Work.slow_wait/1;Process.sleep/1;SLEEP") >= 50_000
        assert time_in(profile, "TailTest.Work.slow_compute/1") >= 20_000
      end
    end

    test "telemetry traces take no flags either" do
      if flagless?() do
        config = [mode: :native, threshold_ms: 200, shipper: @to_me]

        event = fn suffix ->
          Telemetry.handle_event([:tail_test, :req, suffix], %{}, %{}, config)
        end

        event.(:start)
        assert :erlang.trace_info(self(), :flags) == {:flags, []}
        assert FlameOn.Client.Tracing.traced?()
        Work.slow(120, 180)
        event.(:stop)
        refute FlameOn.Client.Tracing.traced?()

        assert [profile] = kept()
        assert profile.name == "tail_test.req"
        assert profile.stats.tail_attribution == :samples
        assert time_in(profile, "TailTest.Work.slow_compute/1") >= 60_000
        # (no root frame: a read where it waits is not anchored, nothing
        # is read; its wait hangs under the stack sampled before it)
        assert time_in(profile, ";SLEEP") >= 120_000
      end
    end

    test "a request no sample caught: its time is all off-CPU, under its root" do
      if flagless?() do
        FlameOn.Client.Tracing.trace("idle", fn -> Process.sleep(30) end,
          threshold_ms: 10,
          mode: :native,
          shipper: @to_me
        )

        assert_receive {:flame_on_profile, profile}
        stacks = Enum.flat_map(profile.stacks, fn {_pid, stacks} -> stacks end)
        total = Enum.sum(Enum.map(stacks, &elem(&1, 1)))

        assert total >= 30_000 and total <= profile.duration_us + 1_000,
               inspect({total, profile.duration_us, stacks})

        for {stack, _us} <- stacks,
            do: assert(String.starts_with?(stack, "FlameOn.Client.Tracing.Tail.call/1"))
      end
    end

    test "turned on again after it idled, the hold starts the way it last ran; turned off on purpose, it forgets" do
      if flagless?() do
        Application.put_env(:flame_on_client, :tail, idle_ms: 100)
        me = self()

        # from a new process each time (a process's lingering flags serve
        # its next request whatever the hold's way)
        request = fn ->
          Task.async(fn -> kept_request(me) end) |> Task.await()

          assert_receive {:flame_on_profile, profile}, 5_000
          profile.stats.tail_attribution
        end

        assert wait_until(
                 fn ->
                   for _ <- 1..20, do: request.()
                   TailHold.stats().attribution == :flags
                 end,
                 3_000
               )

        # it idles off (its sampler closed), and the next request turns it
        # on with flags
        assert wait_until(fn -> not TailHold.stats().on end, 3_000)
        assert request.() == :flags

        # off on purpose: without flags again
        :ok = TailHold.off()
        assert request.() == :samples
        flush_profiles()
        :ok = TailHold.off()
        assert_node_clean()
      end
    end

    test "where most requests are kept, new ones take flags from the start; back without when few are" do
      if flagless?() do
        me = self()
        # every request kept (2 ms over a 1 ms threshold), from one process
        slow = fn -> kept_request(me) end

        for _ <- 1..150, do: slow.()
        assert wait_until(fn -> TailHold.stats().attribution == :flags end, 2_000)
        before = Native.tail_stats().flagless_begun
        slow.()
        assert_receive {:flame_on_profile, %{stats: %{tail_attribution: :flags}}}, 5_000
        # its flags linger, as on the path with flags from the start
        assert {:flags, [_ | _]} = :erlang.trace_info(self(), :flags)
        assert Native.tail_stats().flagless_begun == before

        # then fast ones only (none kept): back without flags; this
        # process's lingering flags serve its next requests until swept
        fast = fn ->
          for _ <- 1..50 do
            FlameOn.Client.Tracing.trace("fast", fn -> :ok end,
              sample_rate: 1.0,
              threshold_ms: 250,
              mode: :native
            )
          end

          TailHold.stats().attribution == :samples
        end

        assert wait_until(fast, 3_000)
        flush_profiles()
        TailHold.off()
        assert flags_left([self()]) == []
        assert_node_clean()
      end
    end

    test "many requests promoted at once turn new ones to flags before any of them is kept" do
      if flagless?() do
        me = self()
        kept_before = Native.tail_stats().kept

        # 60 requests at once, each slow (300 ms over a 1 ms threshold):
        # promoted at half a millisecond, none ended for 300 ms
        tasks =
          for _ <- 1..60 do
            Task.async(fn ->
              FlameOn.Client.Tracing.trace("slow", fn -> Process.sleep(300) end,
                sample_rate: 1.0,
                threshold_ms: 1,
                mode: :native,
                shipper: {FlameOn.Client.Shipper.Process, pid: me}
              )
            end)
          end

        assert wait_until(fn -> TailHold.stats().attribution == :flags end, 200)
        assert Native.tail_stats().kept == kept_before

        Task.await_many(tasks, 5_000)
        for _ <- 1..60, do: assert_receive({:flame_on_profile, %{name: "slow"}}, 5_000)
        TailHold.off()
        assert_node_clean()
      end
    end

    test "requests just under their threshold (promoted, never kept) keep flags from the start" do
      if flagless?() do
        me = self()

        # 14 ms requests under a 20 ms threshold: past half of it, so each
        # would be promoted without flags, and none is kept
        workers =
          for _ <- 1..40 do
            spawn_link(fn ->
              loop = fn loop ->
                FlameOn.Client.Tracing.trace("near", fn -> Process.sleep(14) end,
                  sample_rate: 1.0,
                  threshold_ms: 20,
                  mode: :native,
                  shipper: {FlameOn.Client.Shipper.Process, pid: me}
                )

                receive do
                  :stop -> send(me, {:stopped, self()})
                after
                  0 -> loop.(loop)
                end
              end

              loop.(loop)
            end)
          end

        assert wait_until(fn -> TailHold.stats().attribution == :flags end, 2_000)
        # let the requests begun without flags end
        Process.sleep(50)
        before = Native.tail_stats()
        # several looks (every 50 ms): none turns them back without flags
        Process.sleep(400)
        now = Native.tail_stats()
        assert now.begun - before.begun > 200
        assert now.flagless_begun == before.flagless_begun
        assert now.kept == before.kept
        assert TailHold.stats().attribution == :flags

        for w <- workers, do: send(w, :stop)
        for w <- workers, do: assert_receive({:stopped, ^w}, 5_000)
        refute_received {:flame_on_profile, _}
        TailHold.off()
        assert_node_clean()
      end
    end

    test "the NIF: a request without flags begins and ends as one with them; bad arguments raise" do
      if flagless?() do
        assert Native.tail_flagless()
        {:tail, index, _} = state = Native.tail_begin(0, nil, true)
        assert Native.tail_state(state) == :active
        assert Native.tail_stats().flagless == 1
        assert Native.tail_end(state, 60_000_000_000) == :ok
        assert Native.tail_state(state) == :gone
        assert Native.tail_stats().flagless == 0
        # its entry again, named by the last state
        assert {:tail, ^index, _} = state = Native.tail_begin(0, state, true)
        assert Native.tail_end(state, false) == :ok
        assert_raise ArgumentError, fn -> Native.tail_begin(0, nil, :maybe) end
        assert_raise ArgumentError, fn -> Native.tail_begin(-1, nil, true) end
      end
    end
  end

  test "without the shared path: exactly the slow request is kept, fast ones build nothing" do
    pids = load([mode: :sample, threshold_ms: 200], 6, 8, 4)
    assert [profile] = kept()
    assert profile.name == "slow"
    assert profile.mode == :sample
    assert time_in(profile, "TailTest.Work.slow_compute/1") > 0
    assert time_in(profile, "TailTest.Work.slow_wait/1") >= 120_000
    assert flags_left([self() | pids]) == []
    assert Native.open_sessions() == 0
    assert_node_clean()
  end

  defp flush_profiles do
    receive do
      {:flame_on_profile, _} -> flush_profiles()
    after
      0 -> :ok
    end
  end

  defp wait_until(fun, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Enum.reduce_while(Stream.repeatedly(fn -> :ok end), false, fn _, _ ->
      cond do
        fun.() -> {:halt, true}
        System.monotonic_time(:millisecond) > deadline -> {:halt, false}
        true -> Process.sleep(20) && {:cont, false}
      end
    end)
  end
end
