defmodule FlameOn.Client.SampleModeTest do
  # mode: :sample – stack samples and the :running flag, no call
  # breakpoints: the node's code is never patched, the stacks still add up
  # to the traced wall time and hold the work's frames, and the node's
  # backtrace_depth comes back.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Test.Workloads

  # Functions the workloads below call: none may get a trace pattern.
  @probes [
    {Workloads, :fib, 1},
    {Workloads, :busy, 1},
    {Enum, :map, 2},
    {:lists, :reverse, 1},
    {FlameOn.Client, :profile, 2}
  ]

  setup do
    ensure_app_started()
    assert_node_clean()
    on_exit(fn -> :erlang.system_flag(:backtrace_depth, depth()) end)
    :ok
  end

  defp depth do
    old = :erlang.system_flag(:backtrace_depth, 8)
    :erlang.system_flag(:backtrace_depth, old)
    old
  end

  defp untraced_probes, do: Enum.map(@probes, &{&1, patterns_on?(&1)})

  test "no call pattern is ever set, and backtrace_depth is raised only while it runs" do
    before = depth()

    {seen, profile} =
      FlameOn.Client.profile(
        fn ->
          Workloads.busy(30)
          {untraced_probes(), depth(), patterns_set?()}
        end,
        mode: :sample
      )

    {probes, during, patterns?} = seen
    assert Enum.all?(probes, fn {_mfa, traced} -> traced == false end), inspect(probes)
    refute patterns?
    assert during == FlameOn.Client.Capture.Sample.backtrace_depth(%{max_depth: 512})
    assert during == 64
    assert depth() == before
    assert profile.mode == :sample
    assert profile.stats.samples > 0
    assert_node_clean()
  end

  test "stacks hold the sampled work and add up to the traced wall time" do
    {_, profile} = FlameOn.Client.profile(fn -> Workloads.busy(80) end, mode: :sample)
    stacks = Map.fetch!(profile.stacks, self())
    total = stacks |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    # Every microsecond of the trace is charged somewhere (rounding per stack).
    assert_in_delta total, profile.duration_us, max(profile.duration_us * 0.05, 50)

    fib_us = time_where(profile, self(), &String.contains?(&1, "Workloads.fib/1"))
    on_cpu = time_where(profile, self(), &(not String.ends_with?(&1, "SLEEP")))
    # busy/1 is fib calls and clock reads: most on-CPU time is under fib.
    assert fib_us >= 0.5 * on_cpu, inspect(Enum.sort_by(stacks, &(-elem(&1, 1))) |> Enum.take(5))

    assert Enum.all?(stacks, fn {stack, _} ->
             stack == "" or stack =~ ~r/^FlameOn\.Client\.profile\/2/
           end)
  end

  test "a trace shorter than the interval: its stacks fit in its wall time" do
    for _ <- 1..5 do
      {_, profile} = FlameOn.Client.profile(fn -> Workloads.fib(18) end, mode: :sample)
      total = profile.stacks |> Map.fetch!(self()) |> Enum.map(&elem(&1, 1)) |> Enum.sum()
      # rounding: at most 1 µs per stack
      assert total <= profile.duration_us + length(profile.stacks[self()]),
             "stacks #{total} µs in a #{profile.duration_us} µs trace"
    end
  end

  test "a stack deeper than the VM's 64-frame backtrace gets a cut root" do
    {_, profile} =
      FlameOn.Client.profile(fn -> Workloads.deep_even(100, fn -> Workloads.busy(30) end) end,
        mode: :sample
      )

    stacks = Map.fetch!(profile.stacks, self())
    cut = Enum.filter(stacks, fn {stack, _} -> String.starts_with?(stack, "…;") end)
    assert cut != [], inspect(Enum.take(stacks, 3))
    # the innermost frames are the ones kept
    assert Enum.any?(cut, fn {stack, _} -> stack =~ "Workloads.fib/1" end)
    # "…", then at most the VM's 64 frames (and a SLEEP, RUNNABLE or GC leaf)
    frames = fn stack ->
      stack
      |> String.split(";")
      |> Enum.reject(&(&1 in ["…", "SLEEP", "RUNNABLE", "GC_MINOR", "GC_MAJOR"]))
    end

    assert Enum.all?(cut, fn {stack, _} -> length(frames.(stack)) <= 64 end)
  end

  test "trace/3 and its shippers work in sample mode" do
    dir = Path.join(System.tmp_dir!(), "flame_on_sample_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)

    shippers = [
      {FlameOn.Client.Shipper.Process, pid: self()},
      {FlameOn.Client.Shipper.Directory, dir: dir}
    ]

    # (80 ms: on a loaded machine the sampler may tick late, and a
    # shorter burst end before its first tick: bench/RESULTS.md)
    result =
      FlameOn.Client.trace("sampled trace", fn -> Workloads.busy(80) end,
        mode: :sample,
        shipper: shippers
      )

    assert is_integer(result) and result > 0

    # the process shipper got the sampled profile of the work
    assert_receive {:flame_on_profile, %Profile{} = profile}
    refute_received {:flame_on_profile, _}
    assert profile.name == "sampled trace" and profile.mode == :sample
    assert profile.pid == self()
    assert profile.stats.samples > 0
    assert time_where(profile, self(), &String.contains?(&1, "Workloads.fib/1")) > 0

    # the directory shipper wrote the same profile's folded stacks
    assert File.ls!(dir) == ["sampled_trace-#{profile.trace_id}"]
    path = Path.join([dir, "sampled_trace-#{profile.trace_id}", "sampled_trace.folded"])
    assert File.read!(path) == IO.iodata_to_binary(Profile.folded(profile))
    assert_node_clean()
  end

  test "time off-CPU stays a SLEEP leaf under the stack that waited" do
    {_, profile} =
      FlameOn.Client.profile(fn -> Process.sleep(40) end, mode: :sample, interval_us: 2_000)

    sleep_us = time_where(profile, self(), &(&1 =~ ~r/Process\.sleep\/1;SLEEP$/))
    assert sleep_us >= 30_000 and sleep_us <= profile.duration_us
  end

  test "split_status puts the sampled status at the root of each stack" do
    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          Workloads.busy(80)
          Process.sleep(20)
        end,
        mode: :sample,
        split_status: true
      )

    roots =
      profile.stacks
      |> Map.fetch!(self())
      |> Enum.map(fn {stack, _} -> stack |> String.split(";") |> hd() end)
      |> Enum.uniq()

    assert Enum.any?(roots, &(&1 in ["[running]", "[runnable]"])), inspect(roots)
    assert Enum.any?(roots, &(&1 == "[waiting]")), inspect(roots)
    assert Enum.all?(roots, &(&1 == "" or &1 =~ ~r/^\[[a-z_]+\]$/)), inspect(roots)

    assert Profile.frame_name(FlameOn.Client.Sampling.Sampler.status_frame(:runnable)) ==
             "[runnable]"
  end

  test "each sample's metrics are in profile.metrics" do
    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          for i <- 1..3, do: send(self(), {:note, i})
          Workloads.busy(30)
          for _ <- 1..3, do: receive(do: ({:note, _} -> :ok))
        end,
        mode: :sample
      )

    series = Map.fetch!(profile.metrics, self())
    assert length(series) == profile.stats.samples
    assert series != []

    for m <- series do
      assert is_integer(m.t_us) and is_atom(m.status)
      assert m.memory > 0 and m.reductions > 0 and m.message_queue_len >= 0
    end

    assert Enum.any?(series, &(&1.message_queue_len >= 3))
    times = Enum.map(series, & &1.t_us)
    assert times == Enum.sort(times)
    reds = Enum.map(series, & &1.reductions)
    assert reds == Enum.sort(reds) and List.last(reds) > hd(reds)
  end

  test "profile.samples counts the samples and reductions of each stack" do
    {_, profile} = FlameOn.Client.profile(fn -> Workloads.busy(60) end, mode: :sample)
    entries = Map.fetch!(profile.samples, self())
    series = Map.fetch!(profile.metrics, self())
    assert Map.keys(profile.samples) == [self()]

    # every applied sample landed on exactly one stack
    assert entries |> Enum.map(&elem(&1, 1)) |> Enum.sum() == profile.stats.samples
    assert length(series) == profile.stats.samples
    assert Enum.all?(entries, fn {_stack, samples, reds} -> samples > 0 and reds >= 0 end)

    # each sample weighs the reductions since the previous one: they add up
    # to the growth of the series, the first sample weighing 0
    reductions = entries |> Enum.map(&elem(&1, 2)) |> Enum.sum()
    assert reductions == List.last(series).reductions - hd(series).reductions
    assert reductions > 0

    # one entry per stack, in the stacks' own strings (a stack sampled just
    # before the process's next event may hold for less than 0.5 µs, so
    # not be in profile.stacks)
    stacks = entries |> Enum.map(&elem(&1, 0))
    assert stacks == Enum.uniq(stacks) and stacks == Enum.sort(stacks)
    timed = profile.stacks |> Map.fetch!(self()) |> Map.new()

    assert Enum.all?(stacks, &(&1 == "" or &1 =~ ~r/^FlameOn\.Client\.profile\/2/)),
           inspect(stacks)

    # A sample that found the process waiting (a `;SLEEP` stack: a
    # preemption seen as a wait, on a slow VM) is off-CPU time the trace
    # events class (RUNNABLE when no message ended it), not under that
    # string: twice in a fresh OTP 27 root, two such stacks of four.
    on_cpu = Enum.reject(stacks, &String.ends_with?(&1, ";SLEEP"))
    assert Enum.count(on_cpu, &Map.has_key?(timed, &1)) >= length(on_cpu) - 2, inspect(stacks)

    # busy/1 is fib calls: the reductions are under fib
    fib_reds =
      for {stack, _n, reds} <- entries,
          stack =~ "Workloads.fib/1",
          reduce: 0,
          do: (acc -> acc + reds)

    assert fib_reds >= 0.5 * reductions, inspect(Enum.sort_by(entries, &(-elem(&1, 2))))
  end

  test "a sample taken while the process waits counts on its SLEEP leaf" do
    {_, profile} =
      FlameOn.Client.profile(fn -> Process.sleep(30) end, mode: :sample, interval_us: 2_000)

    sleeping =
      for {stack, n, _reds} <- Map.fetch!(profile.samples, self()),
          stack =~ ~r/Process\.sleep\/1;SLEEP$/,
          reduce: 0,
          do: (acc -> acc + n)

    # 30 ms asleep, a sample every 2 ms
    assert sleeping >= 5, inspect(profile.samples)
  end

  test "the other modes have no samples" do
    for mode <- [:nif, :process] do
      {_, profile} = FlameOn.Client.profile(fn -> Workloads.busy(5) end, mode: mode)
      assert profile.samples == %{}
      assert profile.stacks != %{}
    end
  end

  test "max_samples bounds the metrics series and counts the rest" do
    {_, profile} =
      FlameOn.Client.profile(fn -> Workloads.busy(40) end, mode: :sample, max_samples: 3)

    assert length(profile.metrics[self()]) == 3
    assert profile.stats.dropped_metrics == profile.stats.samples - 3
    assert profile.stats.dropped_metrics > 0
  end

  test "options are validated" do
    assert_raise ArgumentError, ~r/interval_us/, fn ->
      FlameOn.Client.profile(fn -> :ok end, mode: :sample, interval_us: 10)
    end

    assert_raise ArgumentError, ~r/split_status/, fn ->
      FlameOn.Client.profile(fn -> :ok end, mode: :sample, split_status: :yes)
    end

    assert_node_clean()
  end

  test "a raise is re-raised, and the node and backtrace_depth are restored" do
    before = depth()

    assert_raise RuntimeError, "boom", fn ->
      FlameOn.Client.profile(fn -> Workloads.boom!() end, mode: :sample)
    end

    assert depth() == before
    assert_node_clean()
  end

  # A process inside a sample trace that never ends.
  defp sampled_forever do
    test = self()

    pid =
      spawn(fn ->
        FlameOn.Client.profile(
          fn ->
            send(test, :sampling)
            Process.sleep(:infinity)
          end,
          mode: :sample
        )
      end)

    assert_receive :sampling
    # a test that fails before it kills the process must not leave it traced
    on_exit(fn -> Process.exit(pid, :kill) end)
    pid
  end

  defp samplers do
    for pid <- Process.list(),
        # Sampler's code anywhere on its stack: now and then it is in a
        # call out of the module (the NIF, the budget) when asked
        sampler_on_stack?(pid),
        do: pid
  end

  defp sampler_on_stack?(pid) do
    case Process.info(pid, :current_stacktrace) do
      {:current_stacktrace, frames} ->
        Enum.any?(frames, &match?({FlameOn.Client.Sampling.Sampler, _, _, _}, &1))

      nil ->
        false
    end
  end

  test "a sampled process killed mid-trace: backtrace_depth comes back, its sampler ends" do
    before = depth()
    pid = sampled_forever()
    assert depth() == 64
    # the sampler runs on another scheduler: it may not have started yet
    Enum.find(1..100, fn _ -> samplers() != [] or (Process.sleep(5) && false) end)
    assert [_] = samplers()
    assert FlameOn.Client.status().sample_traces == 1
    Process.exit(pid, :kill)
    assert_node_clean()
    Process.sleep(50)
    assert samplers() == []
    # Patterns restores it when it sees the sampler's owner go.
    Patterns.users()
    assert depth() == before
  end

  test "Patterns killed mid-trace: the sweep of its successor restores backtrace_depth" do
    before = :erlang.system_flag(:backtrace_depth, 8)
    pid = sampled_forever()
    assert depth() > 8
    Process.exit(Process.whereis(Patterns), :kill)
    Process.exit(pid, :kill)
    assert_no_trace_leftovers(1_000)
    ensure_app_started()
    assert depth() == 8
    :erlang.system_flag(:backtrace_depth, before)
    assert_node_clean()
  end
end

defmodule FlameOn.Client.SampleGraphTest do
  # mode: :sample with cross_process: true – the span graph as in exact
  # mode, the callees' stacks from samples taken while they serve the
  # trace, and still no call pattern anywhere.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.Test.Workloads

  setup do
    ensure_app_started()
    assert_node_clean()
    :ok
  end

  test "callees are sampled while they serve the trace, and spans link like in exact mode" do
    {:ok, a} = Server.start()
    {:ok, b} = Server.start()

    {traced, profile} =
      FlameOn.Client.profile(
        fn ->
          GenServer.call(a, {:spin, 30})
          GenServer.call(a, {:forward, 10, b, {:spin, 20}})
          {patterns_on?({Server, :handle_call, 3}), patterns_set?()}
        end,
        mode: :sample,
        cross_process: true
      )

    assert traced == {false, false}
    assert profile.mode == :sample
    spans = profile.graph.spans
    root = Enum.find(spans, &(&1.pid == self()))
    a_spans = Enum.filter(spans, &(&1.pid == a))
    [b_span] = Enum.filter(spans, &(&1.pid == b))
    assert length(a_spans) == 2
    assert Enum.all?(a_spans, &(&1.parent_span_id == root.span_id))
    assert b_span.parent_span_id in Enum.map(a_spans, & &1.span_id)
    # 30 + 10 + 20 ms of callee work explain most of the root's wait
    assert root.attributed_wait_us >= 50_000

    for {pid, spin_ms} <- [{a, 40}, {b, 20}] do
      spin_us = time_where(profile, pid, &String.contains?(&1, "Server.spin_until/1"))
      # a callee is sampled from its first request on: its first sample comes
      # a little after the span starts (a message to the owner, a spawn)
      assert spin_us >= spin_ms * 1000 * 0.7, "#{inspect(pid)}: #{spin_us} µs in spin_until"
      # only while serving: the callee's stacks are its spans' time (wait
      # another callee explains leaves the stacks)
      span_us =
        for s <- spans, s.pid == pid, reduce: 0 do
          acc -> acc + s.self_us + s.gc_us + s.runnable_us + s.unattributed_wait_us
        end

      assert_in_delta Enum.sum(Enum.map(profile.stacks[pid], &elem(&1, 1))),
                      span_us,
                      span_us * 0.1 + 500
    end

    assert profile.stats.sampled_processes == 3
    assert Map.keys(profile.metrics) |> Enum.sort() == Enum.sort([self(), a, b])
    assert_node_clean()
  end

  test "a refused start (system tracer taken) holds no raised backtrace_depth" do
    other = spawn(fn -> receive do: (:never -> :ok) end)
    :seq_trace.set_system_tracer(other)

    assert_raise ArgumentError, ~r/system tracer/, fn ->
      FlameOn.Client.profile(fn -> :ok end, mode: :sample, cross_process: true)
    end

    assert FlameOn.Client.status().sample_traces == 0
    :seq_trace.set_system_tracer(false)
    Process.exit(other, :kill)
    assert_node_clean()
  end

  # A process outside the trace that calls `server` once the trace's first
  # request got the server working: started before the trace and polling the
  # server's reductions, so nothing of the trace reaches it (a process the
  # traced function spawns or messages joins the trace) and a slow trace
  # start cannot move its call before the trace's first request.
  defp foreign_call_once_busy(server, request) do
    {:reductions, before} = Process.info(server, :reductions)

    spawn(fn ->
      wait_busy(server, before + 2_000)
      GenServer.call(server, request)
    end)
  end

  defp wait_busy(server, reductions) do
    case Process.info(server, :reductions) do
      {:reductions, now} when now >= reductions ->
        :ok

      _ ->
        Process.sleep(1)
        wait_busy(server, reductions)
    end
  end

  test "a callee's sampler sleeps through its wait and wakes for the work after it" do
    {:ok, a} = Server.start()

    {_, profile} =
      FlameOn.Client.profile(fn -> GenServer.call(a, {:sleep_spin, 50, 30}) end,
        mode: :sample,
        cross_process: true
      )

    # woken by the callee's `in` (its events come through the graph
    # tracer): the 30 ms of work after the 50 ms wait are sampled
    on_spin =
      for {stack, n, _} <- profile.samples[a],
          stack =~ "spin_until",
          reduce: 0,
          do: (acc -> acc + n)

    assert on_spin >= 5, inspect(profile.samples[a])
    assert time_where(profile, a, &(&1 =~ "spin_until")) >= 20_000
    assert profile.stats.slept_samples >= 20, inspect(profile.stats)
    assert_node_clean()
  end

  test "a callee idle between the trace's requests is not sampled" do
    {:ok, a} = Server.start()
    # the server works for someone else meanwhile: not this trace
    foreign_call_once_busy(a, {:spin, 30})

    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          GenServer.call(a, {:spin, 10})
          Workloads.busy(40)
          GenServer.call(a, {:spin, 10})
        end,
        mode: :sample,
        cross_process: true
      )

    total = Enum.sum(Enum.map(profile.stacks[a], &elem(&1, 1)))
    spans = for s <- profile.graph.spans, s.pid == a, do: s.ended_at - s.started_at
    assert length(spans) == 2
    # the 30 ms spin for someone else would show on top of the spans
    assert total <= Enum.sum(spans) * 1.05 + 2_000,
           "the server's foreign work was charged: #{total} µs for spans #{inspect(spans)}"

    assert_node_clean()
  end

  test "a callee's samples weigh only its reductions while it serves the trace" do
    {:ok, a} = Server.start()
    # 30 ms of work for someone else between the trace's requests
    foreign_call_once_busy(a, {:spin, 30})

    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          GenServer.call(a, {:spin, 15})
          Workloads.busy(40)
          GenServer.call(a, {:spin, 15})
        end,
        mode: :sample,
        cross_process: true
      )

    for pid <- [self(), a] do
      entries = Map.fetch!(profile.samples, pid)
      # every sample of the process landed on one of its stacks
      assert entries |> Enum.map(&elem(&1, 1)) |> Enum.sum() == length(profile.metrics[pid])
    end

    series = profile.metrics[a]
    grew = List.last(series).reductions - hd(series).reductions
    weighed = profile.samples[a] |> Enum.map(&elem(&1, 2)) |> Enum.sum()
    # 30 of the 60 ms the server spun between its first and last sample were
    # for someone else; the first sample after the gap weighs 0
    assert weighed > 0 and weighed < 0.75 * grew, "#{weighed} of #{grew} reductions weighed"
    assert_node_clean()
  end
end

defmodule FlameOn.Client.SampleDefaultsTest do
  # App-code entry points (trace/3, start_trace/2, telemetry) sample by
  # default: no call breakpoints for production traces.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Telemetry
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Test.Workloads

  @to_me {Shipper.Process, pid: :flame_on_sample_defaults_test}

  setup do
    ensure_app_started()
    assert_node_clean()
    Application.delete_env(:flame_on_client, :mode)
    Process.register(self(), :flame_on_sample_defaults_test)
    :ok
  end

  test "trace/3 samples by default and sets no call pattern" do
    patterns? =
      Tracing.trace("default", fn -> Workloads.busy(20) && patterns_set?() end, shipper: @to_me)

    refute patterns?
    assert_received {:flame_on_profile, %Profile{mode: :sample} = profile}
    assert profile.stats.samples > 0
    assert time_where(profile, self(), &(&1 =~ "Workloads.fib/1")) > 0
    assert_node_clean()
  end

  test "the application environment's :mode overrides the default" do
    Application.put_env(:flame_on_client, :mode, :nif)
    Tracing.trace("exact", fn -> Workloads.fib(10) end, shipper: @to_me)
    assert_received {:flame_on_profile, %Profile{mode: :nif}}
  after
    Application.delete_env(:flame_on_client, :mode)
  end

  test "start_trace/2 samples another process by default" do
    test = self()

    pid =
      spawn(fn ->
        receive do: (:go -> Workloads.busy(40))
        send(test, {:done, patterns_set?()})
        receive do: (:never -> :ok)
      end)

    {:ok, ref} = Tracing.start_trace(pid, name: "worker", shipper: @to_me)
    send(pid, :go)
    assert_receive {:done, false}
    assert {:ok, %Profile{mode: :sample, pid: ^pid} = profile} = Tracing.stop_trace(ref)
    assert time_where(profile, pid, &(&1 =~ "Workloads.fib/1")) >= 20_000
    assert [_ | _] = profile.metrics[pid]
    assert_received {:flame_on_profile, %Profile{name: "worker"}}
    Process.exit(pid, :kill)
    assert_node_clean()
  end

  test "a sampled process that exits ends its start_trace/2 trace with its profile" do
    pid = spawn(fn -> receive do: (:go -> Workloads.busy(20)) end)
    {:ok, ref} = Tracing.start_trace(pid)
    ref_down = Process.monitor(pid)
    send(pid, :go)
    assert_receive {:DOWN, ^ref_down, :process, ^pid, _}
    assert {:ok, %Profile{mode: :sample} = profile} = Tracing.stop_trace(ref)
    assert time_where(profile, pid, &(&1 =~ "Workloads.fib/1")) > 0
    assert_node_clean()
  end

  test "whole node: the busiest processes by reductions are sampled together" do
    test = self()

    busy =
      for _ <- 1..3 do
        spawn(fn ->
          send(test, :started)
          Workloads.busy(1_500)
        end)
      end

    idle = for _ <- 1..2, do: spawn(fn -> receive do: (:never -> :ok) end)
    for _ <- busy, do: assert_receive(:started)

    {:ok, ref} = Tracing.start_trace({:top, 3}, window_ms: 200, shipper: @to_me)
    assert Enum.sort(ref.pid) == Enum.sort(busy)
    Process.sleep(100)
    patterns? = patterns_set?()
    assert {:ok, %Profile{mode: :sample, pid: nil} = profile} = Tracing.stop_trace(ref)
    refute patterns?

    for pid <- busy do
      assert time_where(profile, pid, &(&1 =~ "Workloads.fib/1")) > 0, inspect(pid)
      assert [_ | _] = profile.metrics[pid]
    end

    assert Enum.all?(Map.keys(profile.stacks), &(&1 in busy))
    assert profile.stats.sampled_processes == 3
    Enum.each(busy ++ idle, &Process.exit(&1, :kill))
    assert_node_clean()
  end

  test "start_trace/2 checks the sampling options as profile/2 does" do
    assert_raise ArgumentError, ~r/interval_us/, fn ->
      Tracing.start_trace(self(), interval_us: 10)
    end

    assert_raise ArgumentError, ~r/max_samples/, fn ->
      Tracing.start_trace(self(), max_samples: 0)
    end

    assert_node_clean()
  end

  test "whole node: options are checked" do
    assert_raise ArgumentError, ~r/:top/, fn -> Tracing.start_trace({:top, 0}) end

    assert_raise ArgumentError, ~r/:mode/, fn ->
      Tracing.start_trace({:top, 1}, mode: :process)
    end
  end

  test "telemetry spans sample by default" do
    config = [shipper: @to_me]
    :ok = Telemetry.handle_event([:job, :start], %{}, %{}, config)
    patterns? = patterns_set?()
    Workloads.busy(30)
    :ok = Telemetry.handle_event([:job, :stop], %{}, %{}, config)
    refute patterns?
    assert_received {:flame_on_profile, %Profile{mode: :sample, name: "job"} = profile}
    assert time_where(profile, self(), &(&1 =~ "Workloads.fib/1")) >= 15_000
    assert our_flags(self()) == []
    assert_node_clean()
  end
end

defmodule FlameOn.Client.SampleCostTest do
  # What sampling costs the node: a waiting process is not woken to repeat
  # a stack it cannot have changed, and the samplers share the node's
  # sample budget.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Sampling.Budget
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Sampling.Budget

  setup do
    ensure_app_started()
    assert_node_clean()
    on_exit(fn -> Application.delete_env(:flame_on_client, :sample_budget) end)
    :ok
  end

  test "a process that only waits is asked for its stack once, then sampled without a signal" do
    test = self()
    pid = spawn(fn -> Workloads.wait_here(test) end)
    assert_receive {:waiting, ^pid}
    {:ok, ref} = Tracing.start_trace(pid, interval_us: 1_000)
    Process.sleep(20)
    {:reductions, before} = Process.info(pid, :reductions)
    Process.sleep(40)
    {:reductions, later} = Process.info(pid, :reductions)
    {:ok, profile} = Tracing.stop_trace(ref)

    assert profile.stats.samples >= 10, inspect(profile.stats)
    # every sample after the first (or the second: setting the trace flag
    # is a signal the process may answer after the first stack request)
    # repeats the stack: the process never ran
    assert profile.stats.same_samples >= profile.stats.samples - 2, inspect(profile.stats)
    # not even to answer a stack request (each costs it a reduction)
    assert later == before
    assert time_where(profile, pid, &(&1 =~ ~r/Workloads\.wait_here\/1;SLEEP$/)) >= 50_000
    [{stack, n, _reds}] = profile.samples[pid]
    assert stack =~ ~r/Workloads\.wait_here\/1;SLEEP$/
    assert n == profile.stats.samples
    send(pid, :go)
    assert_node_clean()
  end

  test "a sampler sleeps while its process waits and wakes when it runs" do
    test = self()

    pid =
      spawn(fn ->
        send(test, {:waiting, self()})
        receive do: (:go -> :ok)
        # (80 ms: on a loaded machine the sampler may tick late, and a
        # shorter burst end before its first tick: bench/RESULTS.md)
        Workloads.busy(80)
        send(test, :worked)
        receive do: (:done -> :ok)
      end)

    assert_receive {:waiting, ^pid}
    before = MapSet.new(Process.list())
    {:ok, ref} = Tracing.start_trace(pid, interval_us: 1_000)
    Process.sleep(20)

    [sampler] =
      for p <- Process.list(),
          not MapSet.member?(before, p),
          match?({:current_stacktrace, [_ | _]}, Process.info(p, :current_stacktrace)),
          {:current_stacktrace, frames} = Process.info(p, :current_stacktrace),
          Enum.any?(frames, &match?({FlameOn.Client.Sampling.Sampler, _, _, _}, &1)),
          do: p

    # asleep once its first ticks are done (later on a loaded machine)
    asleep_from = settled_reductions(sampler, 1_000)
    Process.sleep(50)
    {:reductions, asleep_to} = Process.info(sampler, :reductions)
    send(pid, :go)
    assert_receive :worked, 5_000
    Process.sleep(20)
    {:ok, profile} = Tracing.stop_trace(ref)

    # a polling sampler ticks 50 times in 50 ms (tens of reductions each)
    assert asleep_to - asleep_from < 20,
           "the sampler ran while its process waited: #{asleep_from} -> #{asleep_to}, #{inspect(profile.stats)}"

    assert profile.stats.slept_samples >= 30, inspect(profile.stats)
    # woken by the work: it was sampled (fib for 80 ms)
    on_fib = for {stack, n, _} <- profile.samples[pid], stack =~ "Workloads.fib/1", do: n
    assert Enum.sum(on_fib) >= 5, inspect(profile.samples[pid])
    assert time_where(profile, pid, &(&1 =~ "Workloads.fib/1")) >= 15_000
    # the ticks slept through count where the waits went, one metric each
    on_waits = for {stack, n, _} <- profile.samples[pid], stack =~ ~r/;SLEEP$/, do: n
    assert Enum.sum(on_waits) >= profile.stats.slept_samples
    assert length(profile.metrics[pid]) == profile.stats.samples
    send(pid, :done)
    assert_node_clean()
  end

  test "a process that runs between samples is asked again" do
    {_, profile} =
      FlameOn.Client.profile(
        fn -> for _ <- 1..6, do: Workloads.busy(4) && Process.sleep(4) end,
        mode: :sample,
        interval_us: 1_000
      )

    # only a sample of the process waiting may repeat a stack (the stack
    # it waits in); while it computes each sample asks. A repeat that
    # races with its wake-up lands in the slice the wait ended, on
    # Process.sleep/1 itself (a loaded machine's sampler, late, races
    # often): a repeat of a computing stack would land on fib/1.
    waiting =
      for {stack, n, _} <- profile.samples[self()],
          stack =~ ~r/;Process\.sleep\/1(;SLEEP)?$/,
          reduce: 0,
          do: (acc -> acc + n)

    on_fib =
      for {stack, n, _} <- profile.samples[self()],
          stack =~ "Workloads.fib/1",
          reduce: 0,
          do: (acc -> acc + n)

    assert profile.stats.same_samples <= waiting + 1, inspect({profile.stats, profile.samples})
    assert on_fib >= 2, inspect(profile.samples)
    # 24 ms of fib; a burst's start goes to the stack it was first seen in
    assert time_where(profile, self(), &(&1 =~ "Workloads.fib/1")) >= 5_000
  end

  test "the node's sample budget stretches every sampler's interval" do
    Application.put_env(:flame_on_client, :sample_budget, 100)
    {_, slow} = FlameOn.Client.profile(fn -> Workloads.busy(80) end, mode: :sample)
    Application.put_env(:flame_on_client, :sample_budget, :infinity)
    {_, fast} = FlameOn.Client.profile(fn -> Workloads.busy(80) end, mode: :sample)

    # 100 samples/s for one sampler: one every 10 ms (jittered), not every 1 ms
    assert slow.stats.samples <= 14, inspect(slow.stats)
    assert slow.stats.throttled_ticks >= slow.stats.samples - 2
    assert fast.stats.throttled_ticks == 0
    assert fast.stats.samples >= 2 * slow.stats.samples, inspect({fast.stats, slow.stats})
    # time stays exact either way; the stack shape has fewer samples
    for p <- [slow, fast] do
      total = p.stacks[self()] |> Enum.map(&elem(&1, 1)) |> Enum.sum()
      assert_in_delta total, p.duration_us, 0.05 * p.duration_us
    end

    assert time_where(slow, self(), &(&1 =~ "Workloads.fib/1")) >= 40_000
    assert time_where(fast, self(), &(&1 =~ "Workloads.fib/1")) >= 60_000
  end

  test "the budget is shared: each active sampler gets its part" do
    assert Budget.active() == 0
    Application.put_env(:flame_on_client, :sample_budget, 400)
    test = self()

    pids =
      for _ <- 1..4 do
        spawn(fn -> Workloads.wait_here(test) && Workloads.busy(100_000) end)
      end

    for pid <- pids, do: assert_receive({:waiting, ^pid})
    refs = for pid <- pids, do: elem(Tracing.start_trace(pid), 1)
    for pid <- pids, do: send(pid, :go)
    Process.sleep(20)
    assert Budget.active() == 4
    Process.sleep(180)
    profiles = for ref <- refs, do: elem(Tracing.stop_trace(ref), 1)
    for pid <- pids, do: Process.exit(pid, :kill)

    # 400 samples/s for the node, shared by the 4 (about 20 each in 200 ms,
    # not 200). The traces stop one after the other, and each one stopped
    # leaves the others a bigger part, so the bound is on the node's total
    # over the longest trace, not on each trace.
    longest_s = profiles |> Enum.map(& &1.duration_us) |> Enum.max() |> Kernel./(1_000_000)
    total = profiles |> Enum.map(& &1.stats.samples) |> Enum.sum()

    assert total <= 1.5 * 400 * longest_s + 4 * 3,
           inspect(Enum.map(profiles, &{&1.duration_us, &1.stats.samples}))

    assert Enum.all?(profiles, &(&1.stats.throttled_ticks > 0))
    assert Budget.active() == 0
    assert_node_clean()
  end

  test "a bad budget is refused when a sample trace starts" do
    Application.put_env(:flame_on_client, :sample_budget, 0)

    assert_raise ArgumentError, ~r/sample_budget/, fn ->
      FlameOn.Client.profile(fn -> :ok end, mode: :sample)
    end

    assert_node_clean()
  end

  # pid's reduction count once two reads 10 ms apart agree (it stopped
  # running), within timeout_ms; the last read otherwise.
  defp settled_reductions(pid, timeout_ms) do
    {:reductions, first} = Process.info(pid, :reductions)
    Process.sleep(10)
    {:reductions, second} = Process.info(pid, :reductions)

    if first == second or timeout_ms <= 0,
      do: second,
      else: settled_reductions(pid, timeout_ms - 10)
  end
end
