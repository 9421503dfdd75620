# Where the time went, per mode (#24): the same three workloads traced in
# every mode (and across processes), each process's time split into
# running, GC, RUNNABLE and waiting, printed side by side with the
# targets' checks.
#
# Run from the project root (mode :native where the VM can sample):
#
#     ERL_FLAGS="+JPperf true" mix run bench/time_classes.exs
#
# About 30 s. Workloads:
#   * gc: binary_to_list/1 of a 200 KB binary, then length/1, 6 times;
#     the truth is an independent :erlang.trace of the same work with
#     garbage_collection (the GC time it measures);
#   * starved: one scheduler online and a busy process beside the traced
#     one, which spins 400 ms: its time off a CPU is runnable;
#   * sleeping: 20 Process.sleep(10): its time off a CPU is waiting.
# Targets: gc >= 80% of the independent GC time as GC; starved >= 80% of
# off-CPU as RUNNABLE and < 5% waiting; sleeping the other way round; the
# modes agree on each class's share within 5 pp.

defmodule FlameOn.Bench.TimeClasses do
  @moduledoc false

  def build_lists(times) do
    bin = :binary.copy(<<1>>, 200_000)
    for _ <- 1..times, reduce: 0, do: (acc -> acc + length(:erlang.binary_to_list(bin)))
  end

  def spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline), else: :ok
  end

  def spin(ms), do: spin_until(System.monotonic_time(:microsecond) + ms * 1000)

  def sleeps, do: for(_ <- 1..20, do: Process.sleep(10))

  def one_scheduler(fun) do
    online = :erlang.system_flag(:schedulers_online, 1)

    try do
      fun.()
    after
      :erlang.system_flag(:schedulers_online, online)
    end
  end

  # profile/2 in a fresh process (its heap as small as the independent
  # trace's worker's): {its pid, the profile}
  def fresh_profile(fun, opts) do
    parent = self()

    pid =
      spawn(fn ->
        {_, profile} = FlameOn.Client.profile(fun, opts)
        send(parent, {:profiled, self(), profile})
      end)

    receive do: ({:profiled, ^pid, profile} -> {pid, profile})
  end

  def starved(opts) do
    one_scheduler(fn ->
      hog = spawn(fn -> spin(5_000) end)

      try do
        fresh_profile(fn -> spin(400) end, opts)
      after
        Process.exit(hog, :kill)
      end
    end)
  end

  # An independent :erlang.trace of the same work: its GC time (µs).
  def traced_gc(fun) do
    parent = self()
    worker = spawn(fn -> receive(do: (:go -> send(parent, {:done, fun.()}))) end)
    :erlang.trace(worker, true, [:garbage_collection, :monotonic_timestamp])
    send(worker, :go)
    receive do: ({:done, _} -> :ok)
    gc_time(worker, nil, 0)
  end

  defp gc_time(pid, started, us) do
    receive do
      {:trace_ts, ^pid, tag, _, ts} when tag in [:gc_minor_start, :gc_major_start] ->
        gc_time(pid, ts, us)

      {:trace_ts, ^pid, tag, _, ts} when tag in [:gc_minor_end, :gc_major_end] ->
        gc_time(pid, nil, us + :erlang.convert_time_unit(ts - started, :native, :microsecond))
    after
      200 -> us
    end
  end

  # The process's classes as shares of its traced time (%).
  def shares(profile, pid) do
    c = profile.time_classes[pid]
    gc = c.gc_minor_us + c.gc_major_us
    total = max(c.running_us + gc + c.runnable_us + c.waiting_us, 1)

    %{
      running: 100 * c.running_us / total,
      gc: 100 * gc / total,
      runnable: 100 * c.runnable_us / total,
      waiting: 100 * c.waiting_us / total,
      gc_us: gc,
      off_us: c.runnable_us + c.waiting_us,
      runnable_us: c.runnable_us,
      waiting_us: c.waiting_us,
      # how its time off a CPU splits (the exact modes' own cost makes its
      # slices longer, so their shares of the whole differ by design)
      runnable_of_off: 100 * c.runnable_us / max(c.runnable_us + c.waiting_us, 1)
    }
  end
end

alias FlameOn.Bench.TimeClasses, as: W

native? = FlameOn.Client.Node.PerfSampler.availability() == :ok

modes =
  for mode <- [:nif, :process, :sample, :native],
      mode != :native or native?,
      cp <- [false, true],
      do: {mode, cp}

label = fn {mode, cp} -> "#{mode}#{if cp, do: " cross_process", else: ""}" end

IO.puts(
  "flame_on_client time classes, #{DateTime.utc_now() |> DateTime.truncate(:second)}, " <>
    "OTP #{System.otp_release()}, #{System.schedulers_online()} schedulers" <>
    if(native?, do: "", else: " (mode :native not available here: left out)")
)

row = fn name, s, extra ->
  IO.puts(
    "  #{String.pad_trailing(name, 24)}" <>
      Enum.map_join([:running, :gc, :runnable, :waiting], "", fn k ->
        String.pad_leading(:erlang.float_to_binary(s[k] * 1.0, decimals: 1), 9)
      end) <> "   " <> extra
  )
end

header = fn title ->
  IO.puts("\n== #{title} ==")

  IO.puts(
    "  #{String.pad_trailing("mode", 24)}" <>
      Enum.map_join(~w(running gc runnable waiting), "", &String.pad_leading(&1, 9)) <>
      "   check"
  )
end

spread = fn results ->
  for k <- [:running, :gc, :runnable, :waiting, :runnable_of_off], into: %{} do
    values = Enum.map(results, fn {_, s} -> s[k] end)
    {k, Enum.max(values) - Enum.min(values)}
  end
end

verdict = fn ok -> if ok, do: "PASS", else: "MISS" end

median = fn xs -> xs |> Enum.sort() |> Enum.at(div(length(xs), 2)) end
# GC time swings between runs of the same work (heap sizes): medians of
# runs, each in a fresh process
truth_gc = median.(for _ <- 1..7, do: W.traced_gc(fn -> W.build_lists(6) end))

header.(
  "gc: binary_to_list of 200 KB x6 (independent trace: #{truth_gc} µs of GC, median of 7), % of the process's time (the median run of 5)"
)

gc_results =
  for m <- modes do
    {mode, cp} = m

    runs =
      for _ <- 1..5 do
        {pid, p} = W.fresh_profile(fn -> W.build_lists(6) end, mode: mode, cross_process: cp)
        W.shares(p, pid)
      end

    s = Enum.min_by(runs, &abs(&1.gc_us - median.(Enum.map(runs, fn r -> r.gc_us end))))
    share = s.gc_us / max(truth_gc, 1)

    row.(
      label.(m),
      s,
      "#{verdict.(share >= 0.8)} GC #{round(100 * share)}% of the independent trace's"
    )

    {m, s}
  end

header.("starved: one scheduler, a busy process beside it, % of the process's time")

starved_results =
  for m <- modes do
    {mode, cp} = m
    {pid, p} = W.starved(mode: mode, cross_process: cp)
    s = W.shares(p, pid)
    off = max(s.off_us, 1)
    ok = s.runnable_us >= 0.8 * off and s.waiting_us < 0.05 * off

    row.(
      label.(m),
      s,
      "#{verdict.(ok)} off CPU #{div(s.off_us, 1000)} ms: RUNNABLE #{round(100 * s.runnable_us / off)}%"
    )

    {m, s}
  end

header.("sleeping: 20 x Process.sleep(10), % of the process's time")

sleeping_results =
  for m <- modes do
    {mode, cp} = m

    {pid, p} =
      W.one_scheduler(fn -> W.fresh_profile(&W.sleeps/0, mode: mode, cross_process: cp) end)

    s = W.shares(p, pid)
    off = max(s.off_us, 1)

    row.(
      label.(m),
      s,
      "#{verdict.(s.waiting_us >= 0.95 * off)} off CPU #{div(s.off_us, 1000)} ms: waiting #{round(100 * s.waiting_us / off)}%"
    )

    {m, s}
  end

IO.puts(
  "\n== the modes agree: the largest difference of a class's share between modes (pp; target <= 5; runnable_of_off: RUNNABLE's share of the time off a CPU) =="
)

for {name, results} <- [gc: gc_results, starved: starved_results, sleeping: sleeping_results] do
  d = spread.(results)
  worst = d |> Map.delete(:runnable_of_off) |> Map.values() |> Enum.max()

  IO.puts(
    "  #{String.pad_trailing(to_string(name), 10)}" <>
      Enum.map_join(d, "  ", fn {k, v} -> "#{k} #{:erlang.float_to_binary(v, decimals: 1)}" end) <>
      "   #{verdict.(worst <= 5)}"
  )
end
