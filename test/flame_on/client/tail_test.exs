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

  describe "where native sampling runs (+JPperf true)" do
    @describetag :native

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

    test "the hold turns off by itself after idle_ms" do
      Application.put_env(:flame_on_client, :tail, idle_ms: 100)
      FlameOn.Client.Tracing.trace("fast", &Work.fast/0, threshold_ms: 100, mode: :native)
      assert TailHold.stats().on
      # off, then the sampler released once no tail trace runs
      assert wait_until(fn -> not TailHold.stats().on end, 3_000)
      assert wait_until(fn -> Native.perf_stats().users == 0 end, 3_000)
    end

    test "a request that runs in more slices than an entry holds is truncated, and says so" do
      :ok = TailHold.off()
      Application.put_env(:flame_on_client, :tail, max_slices: 20)

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
      assert Enum.sort(flags) == [:garbage_collection, :running]
      Work.slow(120, 180)
      event.(:stop)
      assert :erlang.trace_info(self(), :flags) == {:flags, []}

      assert [profile] = kept()
      assert profile.name == "tail_test.req"
      assert profile.mode == :native_tail
      assert time_in(profile, "TailTest.Work.slow_compute/1") >= 60_000
      assert TailHold.stats().in_use == 0
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
