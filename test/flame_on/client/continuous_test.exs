defmodule FlameOn.Client.ContinuousTest do
  # node-global: one continuous profiler per node, backtrace_depth
  use ExUnit.Case, async: false

  alias FlameOn.Client.Continuous
  alias FlameOn.Client.Continuous.Window
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile.Tree

  defmodule PhaseA do
    @moduledoc false
    def spin(0), do: :ok

    def spin(n),
      do:
        (
          _ = :erlang.phash2({n, :a})
          spin(n - 1)
        )
  end

  defmodule PhaseB do
    @moduledoc false
    def spin(0), do: :ok

    def spin(n),
      do:
        (
          _ = :erlang.phash2({n, :b})
          spin(n - 1)
        )
  end

  # One of 10 functions per digit of a counter, each a real (non-tail)
  # frame: five digits are 100 000 distinct stacks.
  defmodule Churn do
    @moduledoc false
    for d <- 0..9 do
      def unquote(:"d#{d}")(digits), do: 1 + Churn.step(digits)
    end

    def step([]),
      do:
        (
          _ = Enum.reduce(1..50, 0, &(&1 + &2))
          0
        )

    def step([d | rest]), do: apply(Churn, :"d#{d}", [rest])

    # the next 1 000 stacks after the last this process ran
    def run(start) do
      n = Process.get(:churn, start)
      for i <- n..(n + 999), do: step(Integer.digits(rem(i, 100_000) + 100_000) |> tl())
      Process.put(:churn, n + 1_000)
    end
  end

  setup do
    Continuous.stop()
    # an earlier test's tail traces keep the sampler on for idle_ms: the
    # frequency and open-event counts below are this test's
    FlameOn.Client.Node.TailHold.off()
    on_exit(&Continuous.stop/0)
  end

  defp backtrace_depth do
    old = :erlang.system_flag(:backtrace_depth, 8)
    :erlang.system_flag(:backtrace_depth, old)
    old
  end

  # Runs `fun` in `until_ms` loops of itself in a new process until told to stop.
  defp busy(fun) do
    spawn_link(fn -> loop(fun) end)
  end

  defp loop(fun) do
    receive do
      {:stop, from} -> send(from, :stopped)
    after
      0 ->
        fun.()
        loop(fun)
    end
  end

  defp halt(pid) do
    send(pid, {:stop, self()})
    assert_receive :stopped
  end

  defp wait_windows(n) do
    Enum.find_value(1..200, fn _ ->
      if length(Continuous.windows()) >= n, do: true, else: Process.sleep(25) && false
    end) || flunk("fewer than #{n} windows closed")
  end

  defp text(profile), do: profile |> Export.folded() |> IO.iodata_to_binary()

  test "a workload that changes phase: each range shows its own phase only" do
    {:ok, _} = Continuous.start(window_ms: 200, hz: 200, mode: :sample)
    worker = busy(fn -> PhaseA.spin(5_000) end)
    t0 = System.os_time(:millisecond)
    Process.sleep(1_500)
    halt(worker)
    switch = System.os_time(:millisecond)
    worker = busy(fn -> PhaseB.spin(5_000) end)
    Process.sleep(1_500)
    halt(worker)
    t1 = System.os_time(:millisecond)
    Process.sleep(300)

    # the ranges end and start at window edges on either side of the
    # switch (a range takes every window that overlaps it)
    windows = Continuous.windows()
    %{to: a_to} = windows |> Enum.filter(&(&1.to <= switch)) |> List.last()
    %{from: b_from} = Enum.find(windows, &(&1.from >= switch))
    assert b_from < t1

    a = Continuous.profile(from: t0, to: a_to)
    b = Continuous.profile(from: b_from, to: t1)

    assert text(a) =~ "PhaseA.spin/1"
    refute text(a) =~ "PhaseB.spin/1"
    assert text(b) =~ "PhaseB.spin/1"
    refute text(b) =~ "PhaseA.spin/1"

    assert a.mode == :sample and a.name == "continuous"
    assert a.stats.windows >= 4 and a.stats.samples > 0
    assert a.duration_us > 0 and is_integer(a.started_at)

    windows = Continuous.windows()
    assert [%{from: f, to: t, samples: s} | _] = windows
    assert is_integer(f) and t > f and is_integer(s)
    assert windows == Enum.sort_by(windows, & &1.from)
  end

  test "every export works on a continuous profile" do
    {:ok, _} = Continuous.start(window_ms: 100, hz: 200)
    worker = busy(fn -> PhaseA.spin(5_000) end)
    wait_windows(4)
    halt(worker)
    profile = Continuous.profile()

    assert [_ | _] = Map.keys(profile.stacks)
    assert profile.samples != %{}
    assert %Tree{} = Tree.of(profile)
    assert profile.tree == Tree.of(profile)

    us =
      for {_pid, entries} <- profile.stacks, {_s, us} <- entries, reduce: 0, do: (acc -> acc + us)

    assert us > 0

    for format <- [:folded, :speedscope, :perfetto, :svg, :pprof] do
      out = IO.iodata_to_binary(apply(Export, format, [profile]))
      assert byte_size(out) > 0, "#{format} is empty"
    end

    decoded = FlameOn.Client.Test.ExportHelpers.pprof_decode!(Export.pprof(profile))
    assert "FlameOn.Client.ContinuousTest.PhaseA.spin/1" in Map.values(decoded.functions)

    dir =
      Path.join(System.tmp_dir!(), "flame_on_continuous_#{System.unique_integer([:positive])}")

    assert [_, _, _, _, _] = Export.write(profile, dir, :all)
    File.rm_rf!(dir)
  end

  test "the ring is bounded by count: oldest dropped first, counted" do
    {:ok, _} = Continuous.start(window_ms: 50, max_windows: 3)
    Process.sleep(500)
    stats = Continuous.stats()
    windows = Continuous.windows()

    assert length(windows) <= 3
    assert stats.windows == length(windows)
    assert stats.dropped_windows >= 3
    # the newest are kept
    assert List.last(windows).to >= System.os_time(:millisecond) - 200
  end

  test "the ring is bounded by bytes: oldest dropped first, counted" do
    {:ok, _} = Continuous.start(window_ms: 50, hz: 500, max_bytes: 3_000)
    worker = busy(fn -> Churn.run(System.unique_integer([:positive])) end)
    Process.sleep(800)
    halt(worker)
    stats = Continuous.stats()

    assert stats.bytes <= 3_000
    assert Enum.sum(Enum.map(Continuous.windows(), & &1.bytes)) == stats.bytes
    assert stats.dropped_windows > 0 or stats.truncated_stacks > 0
  end

  test "a workload churning 100 000 distinct stacks stays under the byte cap" do
    max_bytes = 400_000

    {:ok, _} =
      Continuous.start(window_ms: 100, hz: 1000, max_stacks: 10, max_bytes: max_bytes, top: 4)

    workers = for i <- 1..4, do: busy(fn -> Churn.run(i * 25_000) end)
    Process.sleep(1_200)
    Enum.each(workers, &halt/1)
    stats = Continuous.stats()

    assert stats.bytes <= max_bytes
    assert stats.dropped_stacks > 0
    assert Enum.all?(Continuous.windows(), &(&1.stacks <= 10 + 4))
    assert text(Continuous.profile()) =~ "[truncated]"
  end

  test "one window of 100 000 distinct stacks: capped stacks, capped bytes, drops counted" do
    window = Window.open(0, 10_000)
    opts = [depth: 32, max_stacks: 5_000]
    pid = self()

    window =
      Enum.reduce(0..99_999, window, fn n, w ->
        stack =
          for d <- Integer.digits(n + 100_000) |> tl(),
              do: {Churn, :"d#{d}", 1, [file: ~c"x.ex", line: 1]}

        Window.add(w, "churn", pid, "churn", stack, 1, opts)
      end)

    assert map_size(window.stacks) == 5_001
    assert window.dropped_stacks == 95_000

    closed = Window.close(window, 1_000, 200_000)
    assert closed.bytes <= 200_000
    assert closed.truncated_stacks > 0
    assert closed.samples == 100_000
    # no sample is lost: the dropped ones are on "[truncated]"
    assert Enum.sum(for {_k, e} <- closed.stacks, {_t, n, _r} <- e, do: n) == 100_000
    assert {"[truncated]", _, _} = List.keyfind(closed.stacks["churn"], "[truncated]", 0)
  end

  test "windows merge per process name, the name's first pid shown; stacks in µs of samples" do
    [p1, p2, p3] = for _ <- 1..3, do: spawn(fn -> :ok end)
    opts = [depth: 32, max_stacks: 100]
    stack = [{M, :leaf, 0, []}, {M, :root, 1, []}]

    w1 =
      Window.open(0, 10_000)
      |> Window.add(p1, p1, nil, stack, 5, opts)
      |> Window.add("Worker", p2, "Worker", stack, 7, opts)
      |> Window.close(100, 1_000_000)

    w2 =
      Window.open(100, 20_000)
      |> Window.add("Worker", p1, "Worker", stack, 1, opts)
      |> Window.add(p3, p3, nil, [{M, :other, 0, []}], 2, opts)
      |> Window.close(200, 1_000_000)

    profile = Window.to_profile([w1, w2], name: "x")
    # "Worker" was p2 first; p1 (unnamed in w1) is a process of its own
    assert profile.process_names == %{p2 => "Worker"}
    assert profile.stacks[p2] == [{"M.root/1;M.leaf/0", 10_000 + 20_000}]
    assert profile.samples[p2] == [{"M.root/1;M.leaf/0", 2, 8}]
    assert profile.stacks[p1] == [{"M.root/1;M.leaf/0", 10_000}]
    assert profile.stacks[p3] == [{"M.other/0", 20_000}]
    assert profile.duration_us == 200_000
    assert profile.stats.windows == 2 and profile.stats.samples == 4
    assert profile.stats.processes == 3
  end

  test "stacks are cut at :depth with a … root" do
    window = Window.open(0, 10_000)
    stack = for i <- 1..10, do: {M, :"f#{i}", 0, []}
    window = Window.add(window, "p", self(), nil, stack, 0, depth: 4, max_stacks: 10)
    closed = Window.close(window, 1, 1_000_000)
    assert [{"…;M.f4/0;M.f3/0;M.f2/0;M.f1/0", 1, 0}] = closed.stacks["p"]
  end

  test "stop leaves the node as found: backtrace_depth, no process left" do
    depth = backtrace_depth()
    before = MapSet.new(Process.list())
    collector = self()

    # mode :sample: its stacks' depth + 1 (mode :auto may run native,
    # whose depth is the CPU-sampled one)
    {:ok, pid} =
      Continuous.start(
        window_ms: 100,
        depth: 40,
        mode: :sample,
        shipper: {FlameOn.Client.Shipper.Process, pid: collector}
      )

    assert backtrace_depth() == 41
    status = FlameOn.Client.status()
    assert %{depth: 40, windows: _, hz: 19} = status.continuous
    # continuous profiling is not a trace
    assert status.sample_traces == 0 and status.owners == 0
    worker = busy(fn -> PhaseA.spin(1_000) end)
    assert_receive {:flame_on_profile, %FlameOn.Client.Profile{mode: :sample}}
    halt(worker)

    assert Continuous.stats().shipped >= 1
    ref = Process.monitor(pid)
    assert :ok = Continuous.stop()
    assert_receive {:DOWN, ^ref, :process, _, _}
    refute Continuous.running?()
    assert backtrace_depth() == depth
    assert FlameOn.Client.status().continuous == false
    Process.sleep(50)
    left = MapSet.difference(MapSet.new(Process.list()), before)
    assert Enum.filter(left, &Process.alive?/1) == []
    assert_raise ArgumentError, fn -> Continuous.windows() end
  end

  test "options are validated up front" do
    assert_raise ArgumentError, ~r/:hz/, fn -> Continuous.start(hz: 0) end
    assert_raise ArgumentError, fn -> Continuous.start(bogus: 1) end
    assert_raise ArgumentError, fn -> Continuous.start(shipper: 42) end
    refute Continuous.running?()
  end

  test "config :flame_on_client, continuous: [...] starts it with the application" do
    :ok = Application.stop(:flame_on_client)
    Application.put_env(:flame_on_client, :continuous, window_ms: 100, hz: 50)

    try do
      FlameOn.Client.TestHelpers.ensure_app_started()
      assert Continuous.running?()
      assert Continuous.stats().options[:hz] == 50
      pid = Process.whereis(Continuous)

      assert [{Continuous, ^pid, :worker, _}] =
               Supervisor.which_children(FlameOn.Client.ContinuousSupervisor)

      # stop/0 ends it for good (:transient)
      Continuous.stop()
      Process.sleep(50)
      refute Continuous.running?()
      # and start/1 starts it again, with its own options
      {:ok, pid} = Continuous.start(hz: 7)
      assert Continuous.stats().options[:hz] == 7
      assert {:error, {:already_started, ^pid}} = Continuous.start()
    after
      Application.delete_env(:flame_on_client, :continuous)
      :ok = Application.stop(:flame_on_client)
      FlameOn.Client.TestHelpers.ensure_app_started()
    end

    refute Continuous.running?()
  end

  test "a range without windows is an empty profile that every export takes" do
    {:ok, _} = Continuous.start(window_ms: 10_000)
    now = System.os_time(:millisecond)
    profile = Continuous.profile(from: now - 60_000, to: now)
    assert profile.stacks == %{} and profile.duration_us == 0 and profile.stats.windows == 0

    for format <- [:folded, :speedscope, :perfetto, :svg, :pprof],
        do: apply(Export, format, [profile])
  end

  test "a second start reports the running one" do
    {:ok, pid} = Continuous.start(window_ms: 1_000)
    assert {:error, {:already_started, ^pid}} = Continuous.start()
  end

  # mode :native: CPU samples of every scheduler thread (perf events), in a
  # VM started with +JPperf true (scripts/test-native)
  describe "native sampling (+JPperf true)" do
    @describetag :native

    alias FlameOn.Client.Core.Native
    alias FlameOn.Client.Node.PerfSampler

    # the perf events open in this VM (the kernel names their fds so)
    defp perf_fds do
      Enum.count(File.ls!("/proc/self/fd"), fn fd ->
        File.read_link("/proc/self/fd/" <> fd) == {:ok, "anon_inode:[perf_event]"}
      end)
    end

    defp flat_text(profile),
      do: profile |> Export.folded() |> IO.iodata_to_binary()

    test "mode :auto samples natively: each range shows its own phase only" do
      {:ok, _} = Continuous.start(window_ms: 200, hz: 99)
      assert Continuous.stats().mode == :native
      assert %{mode: :native, hz: 99} = FlameOn.Client.status().continuous
      worker = busy(fn -> PhaseA.spin(5_000) end)
      t0 = System.os_time(:millisecond)
      Process.sleep(1_500)
      halt(worker)
      switch = System.os_time(:millisecond)
      worker = busy(fn -> PhaseB.spin(5_000) end)
      Process.sleep(1_500)
      halt(worker)
      t1 = System.os_time(:millisecond)
      Process.sleep(300)

      windows = Continuous.windows()
      assert Enum.all?(windows, &(&1.mode == :native))
      %{to: a_to} = windows |> Enum.filter(&(&1.to <= switch)) |> List.last()
      %{from: b_from} = Enum.find(windows, &(&1.from >= switch))

      a = Continuous.profile(from: t0, to: a_to)
      b = Continuous.profile(from: b_from, to: t1)

      assert flat_text(a) =~ "PhaseA.spin/1"
      refute flat_text(a) =~ "PhaseB.spin/1"
      assert flat_text(b) =~ "PhaseB.spin/1"
      refute flat_text(b) =~ "PhaseA.spin/1"
      assert a.mode == :native and b.mode == :native
      assert a.stats.samples > 0 and a.stats.sample_hz == 99

      # node-wide: one pseudo-process, not the busy one
      assert [{_pid, "node (all scheduler threads)"}] = Map.to_list(a.process_names)
    end

    test "node-wide stacks hold a busy process's function with no trace flag on it" do
      {:ok, _} = Continuous.start(window_ms: 200, hz: 49, mode: :native)
      worker = busy(fn -> PhaseA.spin(5_000) end)
      wait_windows(5)
      assert :erlang.trace_info(worker, :flags) == {:flags, []}
      assert :erlang.trace_info(worker, :tracer) == {:tracer, []}
      halt(worker)

      profile = Continuous.profile()
      assert flat_text(profile) =~ "PhaseA.spin/1"
      assert profile.mode == :native and profile.tree == Tree.of(profile)

      for format <- [:folded, :speedscope, :perfetto, :svg, :pprof] do
        out = IO.iodata_to_binary(apply(Export, format, [profile]))
        assert byte_size(out) > 0, "#{format} is empty"
      end

      # "continuous;<the pseudo-process>;frames": Erlang frames named as
      # every profile names them, C code as native mode does
      lines = String.split(flat_text(profile), "\n", trim: true)
      assert Enum.any?(lines, &(&1 =~ "FlameOn.Client.ContinuousTest.PhaseA.spin/1"))

      for line <- lines,
          frame <- line |> String.replace(~r/ \d+$/, "") |> String.split(";") |> Enum.drop(2) do
        assert frame =~ ~r{^(\[native(:.+)?\]|…|\[truncated\]|[^\[].*/\d+)$}, frame
      end
    end

    test "a native trace raises the sampler's frequency, continuous profiling thins it back" do
      {cpu0, _} = :erlang.statistics(:runtime)
      {:ok, _} = Continuous.start(window_ms: 200, hz: 19, mode: :native)
      assert Native.perf_stats().frequency == 19
      :ok = PerfSampler.acquire(499)
      assert Native.perf_stats().frequency == 499
      worker = busy(fn -> PhaseA.spin(5_000) end)
      Process.sleep(1_500)
      halt(worker)
      :ok = PerfSampler.release()
      assert Native.perf_stats().frequency == 19
      Process.sleep(300)
      stats = Continuous.stats()
      {cpu1, _} = :erlang.statistics(:runtime)
      kept = stats.samples + stats.open_window_samples
      # at 499 Hz most were thinned (1 in 26 kept); about 19 kept a CPU
      # second of the VM's, whatever the sampler's frequency
      assert stats.thinned > 5 * kept
      assert kept > 0 and kept <= 19 * (cpu1 - cpu0) / 1000 * 1.5 + 10
    end

    test "stop releases the sampler: no perf event left open" do
      assert perf_fds() == 0
      {:ok, _} = Continuous.start(window_ms: 100, mode: :native)
      assert Native.perf_stats().threads > 0
      assert perf_fds() == Native.perf_stats().threads
      wait_windows(2)
      Continuous.stop()
      stats = Native.perf_stats()
      assert stats.users == 0 and stats.threads == 0
      assert perf_fds() == 0
    end
  end

  describe "where native sampling cannot run" do
    @describetag :native_unavailable

    test "mode :auto falls back to sampling the busiest processes; :native says why not" do
      {:ok, _} = Continuous.start(window_ms: 100)
      assert Continuous.stats().mode == :sample
      Continuous.stop()

      assert {:error, {:native_unavailable, why}} = Continuous.start(mode: :native)
      assert is_binary(why)
      refute Continuous.running?()
    end
  end
end
