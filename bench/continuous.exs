# The always-on node tax of continuous profiling (FlameOn.Client.Continuous),
# paired: the same untraced work (two processes on the two schedulers,
# fib and an Enum/Map pipeline) timed with continuous profiling off and on
# at several frequencies (two long-lived workers: see `workers/1`), in interleaved blocks whose order rotates each
# round (each block starts or leaves off the profiler, lets it settle,
# times `runs` runs, stops it), beside 10 000 idle processes so that the
# once-a-window scan of every process's reductions costs what it would on
# a real node. Timed runs see ticks only (default 10 s windows, timed
# between the first choice of processes and the first window's end); the
# scan of every process once a window is timed apart and added.
#
#     ERL_FLAGS="+sbwt none +sbwtdcpu none +sbwtdio none" mix run bench/continuous.exs   # ~2 min
#     ROUNDS=6 HZ=19,99 mix run bench/continuous.exs
#
# CONTINUOUS_MODE=native measures the native path (CPU samples of every scheduler
# thread from perf events, drained once a second; needs +JPperf true):
#
#     CONTINUOUS_MODE=native ERL_FLAGS="+JPperf true +sbwt none +sbwtdcpu none +sbwtdio none" mix run bench/continuous.exs
#
# (CONTINUOUS_MODE=sample, the default, forces the sampling of the busiest processes
# even in a VM that could sample natively.)
#
# Prints, per condition, the wall time's best / p25 / median and the VM's
# mean CPU time a run, as ratios to "off" (the schedulers' busy wait off,
# so that idle spinning is not counted as CPU).

defmodule FlameOn.Bench.Continuous do
  @moduledoc false

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  def pipeline do
    m = Map.new(1..2000, fn k -> {k, rem(k * 7919, 1009)} end)
    m |> Map.values() |> Enum.map(&(&1 * 2)) |> Enum.filter(&(&1 > 300)) |> Enum.sort()
  end

  # Long-lived workers (continuous profiling samples the processes that
  # were busy in the previous window: fresh processes per run would never
  # be sampled, and the bench would measure nothing but the profiler's own
  # ticks).
  def workers(n) do
    for _ <- 1..n, do: spawn(fn -> serve() end)
  end

  defp serve do
    receive do
      {:run, fun, from} ->
        fun.()
        send(from, :done)
        serve()

      :stop ->
        :ok
    end
  end

  # {wall µs, VM CPU µs} for every worker to run `fun` once. The VM's CPU
  # time (all its threads, :erlang.statistics(:runtime)) is what the work
  # and the profiler together cost, and hardly moves with the load other
  # programs put on the machine; wall time does.
  def time(fun, workers) do
    {cpu0, _} = :erlang.statistics(:runtime)
    t0 = System.monotonic_time(:microsecond)
    for w <- workers, do: send(w, {:run, fun, self()})
    for _ <- workers, do: receive(do: (:done -> :ok))
    wall = System.monotonic_time(:microsecond) - t0
    {cpu1, _} = :erlang.statistics(:runtime)
    {wall, (cpu1 - cpu0) * 1000}
  end

  def stats(ts) do
    s = Enum.sort(ts)
    {hd(s), Enum.at(s, div(length(s), 4)), Enum.at(s, div(length(s), 2))}
  end
end

import Bitwise

alias FlameOn.Bench.Continuous, as: B
alias FlameOn.Client.Continuous

rounds = String.to_integer(System.get_env("ROUNDS", "10"))
mode = String.to_existing_atom(System.get_env("CONTINUOUS_MODE", "sample"))
true = mode in [:sample, :native]
runs = 10

hzs =
  System.get_env("HZ", "19,49,99")
  |> String.split(",", trim: true)
  |> Enum.map(&String.to_integer/1)

workloads = [
  {"fib(33), 2 processes", fn -> B.fib(33) end},
  {"Enum/Map x120, 2 processes", fn -> for _ <- 1..120, do: B.pipeline() end}
]

conditions = [:off | Enum.map(hzs, &{:on, &1})]

workers = B.workers(2)
idle = for _ <- 1..10_000, do: spawn(fn -> receive do: (:stop -> :ok) end)
Continuous.stop()

IO.puts(
  "flame_on_client continuous tax, #{DateTime.utc_now() |> DateTime.truncate(:second)}, " <>
    "OTP #{System.otp_release()}, #{:erlang.system_info(:schedulers_online)} schedulers, " <>
    "#{length(Process.list())} processes, #{rounds} rounds x #{runs} runs, mode #{mode}" <>
    if(mode == :sample, do: ", top 20", else: "")
)

# warm up
for {_, fun} <- workloads, do: B.time(fun, workers)

results =
  Enum.reduce(1..rounds, %{}, fn round, acc ->
    order =
      Enum.drop(conditions, rem(round, length(conditions))) ++
        Enum.take(conditions, rem(round, length(conditions)))

    Enum.reduce(order, acc, fn condition, acc ->
      case condition do
        :off -> :ok
        {:on, hz} -> {:ok, _} = Continuous.start(hz: hz, mode: mode)
      end

      # Busy workers while the profiler picks its first window's processes
      # (a tenth of a window after it starts), in every condition alike:
      # the timed runs see the steady state, ticks only. The once-a-window
      # scan is timed apart (below) and added.
      settle = System.monotonic_time(:millisecond) + 1_100

      Stream.repeatedly(fn -> B.time(elem(hd(workloads), 1), workers) end)
      |> Enum.find(fn _ -> System.monotonic_time(:millisecond) > settle end)

      if condition != :off and mode == :sample, do: true = Continuous.stats().targets >= 2

      acc =
        Enum.reduce(workloads, acc, fn {name, fun}, acc ->
          ts = for _ <- 1..runs, do: B.time(fun, workers)
          acc = Map.put(acc, {name, condition, round}, ts)
          Map.update(acc, {name, condition}, ts, &(ts ++ &1))
        end)

      stats = if condition != :off, do: Continuous.stats()
      Continuous.stop()

      if stats do
        Map.update(acc, {:stats, condition}, [stats], &[stats | &1])
      else
        acc
      end
    end)
  end)

for {:on, hz} = c <- conditions -- [:off] do
  all = results[{:stats, c}]
  sum = fn key -> Enum.sum(Enum.map(all, &Map.fetch!(&1, key))) end

  IO.puts(
    "  #{String.pad_leading("#{hz}", 3)} Hz: #{sum.(:samples) + sum.(:open_window_samples)} samples, " <>
      "#{sum.(:ticks)} ticks (#{sum.(:late_ticks)} late)"
  )
end

for {name, _} <- workloads do
  off = results[{name, :off}]
  {best0, p250, med0} = B.stats(Enum.map(off, &elem(&1, 0)))
  cpu0 = Enum.sum(Enum.map(off, &elem(&1, 1))) / length(off)

  IO.puts(
    "\n#{name}: off wall best #{best0} µs, p25 #{p250}, median #{med0}; " <>
      "VM CPU #{round(cpu0)} µs a run (mean)"
  )

  for {:on, hz} = c <- conditions -- [:off] do
    on = results[{name, c}]
    {best, p25, med} = B.stats(Enum.map(on, &elem(&1, 0)))
    cpu = Enum.sum(Enum.map(on, &elem(&1, 1))) / length(on)

    # paired: each round's on block against that round's off block
    mean_cpu = fn ts -> Enum.sum(Enum.map(ts, &elem(&1, 1))) / length(ts) end

    paired =
      Enum.sort(
        for r <- 1..rounds,
            do: mean_cpu.(results[{name, c, r}]) / mean_cpu.(results[{name, :off, r}])
      )

    q = fn f -> Float.round(Enum.at(paired, min(round(f * (rounds - 1)), rounds - 1)), 3) end

    IO.puts(
      "  on #{String.pad_leading("#{hz}", 3)} Hz: wall best #{Float.round(best / best0, 3)}x  " <>
        "p25 #{Float.round(p25 / p250, 3)}x  median #{Float.round(med / med0, 3)}x; " <>
        "VM CPU #{Float.round(cpu / cpu0, 3)}x pooled, paired by round median #{q.(0.5)}x " <>
        "(p25 #{q.(0.25)}, p75 #{q.(0.75)})"
    )
  end
end

# The native path's own work, timed apart: one drain (a second of node-wide
# samples of 2 busy schedulers taken, named and folded into a window), and
# the sampler's samples. The sampling itself (the kernel's interrupt on the
# sampled thread) is in the paired VM CPU ratios above.
if mode == :native do
  IO.puts("\n== the profiler's own work (native) ==")
  alias FlameOn.Client.Continuous.Window
  alias FlameOn.Client.Core.Native

  busy =
    for _ <- 1..2, do: spawn(fn -> Stream.repeatedly(fn -> B.fib(20) end) |> Stream.run() end)

  for hz <- hzs do
    :ok = FlameOn.Client.Node.PerfSampler.acquire(hz)
    {from, _, _, _, _} = Native.nodewide_take(1 <<< 62, 1, 1)

    {drains, _} =
      Enum.map_reduce(1..5, from, fn _, from ->
        Process.sleep(1_000)

        {us, {n, to}} =
          :timer.tc(fn ->
            {to, _f, samples, _, _} = Native.nodewide_take(from, hz, 1_000_000)

            # folded as Continuous folds them (the window is dropped)
            open = Window.open(0, div(1_000_000, hz), :native)
            limits = [depth: 32, max_stacks: 5_000]

            _window =
              Enum.reduce(samples, open, fn {_cut, frames}, w ->
                Window.add(w, "node", self(), "node", frames, 0, limits)
              end)

            {length(samples), to}
          end)

        {{us, n}, to}
      end)

    :ok = FlameOn.Client.Node.PerfSampler.release()
    {us, n} = Enum.sort(drains) |> Enum.at(2)

    IO.puts(
      "  #{String.pad_leading("#{hz}", 3)} Hz: a drain of 1 s (#{n} samples kept, 2 busy schedulers) " <>
        "#{us} µs (median of 5) = #{Float.round(us / 20_000, 3)}% of 2 schedulers"
    )
  end

  Enum.each(busy, &Process.exit(&1, :kill))
  Enum.each(idle ++ workers, &send(&1, :stop))
  System.halt(0)
end

# The profiler's own work, timed apart (noise-free where the paired rounds
# are not): a tick at the defaults (status of 20 processes, the stacks of
# the 2 busy ones) and the once-a-window scan of every process.
IO.puts("\n== the profiler's own work ==")
waiting = Enum.take(idle, 18)
busy = for _ <- 1..2, do: spawn(fn -> Stream.repeatedly(fn -> B.fib(20) end) |> Stream.run() end)
targets = busy ++ waiting
Process.flag(:priority, :high)
Process.sleep(50)

tick = fn ->
  for pid <- targets do
    case :erlang.process_info(pid, [:status, :reductions]) do
      [status: s, reductions: _] when s in [:running, :runnable] ->
        :erlang.process_info(pid, :current_stacktrace)

      _ ->
        :ok
    end
  end
end

tick_us = for(_ <- 1..500, do: elem(:timer.tc(tick), 0)) |> Enum.sort() |> Enum.at(250)

Process.flag(:priority, :normal)

scan = fn ->
  for pid <- Process.list(),
      {:reductions, r} <- [:erlang.process_info(pid, :reductions)],
      into: %{},
      do: {pid, r}
end

scan_us = for(_ <- 1..20, do: elem(:timer.tc(scan), 0)) |> Enum.sort() |> Enum.at(10)
Enum.each(busy, &Process.exit(&1, :kill))

for hz <- hzs do
  per_s = tick_us * hz + scan_us / 10

  IO.puts(
    "  #{String.pad_leading("#{hz}", 3)} Hz: tick #{tick_us} µs (median; caller waits for the stacks), " <>
      "scan of #{length(Process.list())} processes #{scan_us} µs a window: " <>
      "#{Float.round(per_s / 1000, 2)} ms a second with 10 s windows = " <>
      "#{Float.round(per_s / 20_000, 3)}% of 2 schedulers"
  )
end

Enum.each(idle ++ workers, &send(&1, :stop))
