# The node-wide tax of mode :sample, paired: an UNTRACED process's work
# timed while 0 / 1 / 10 other processes wait inside `profile/2` (untraced
# control, mode :sample, mode :nif for scale), in interleaved blocks (each
# block sets its background up, lets it settle, times 4 runs, tears it
# down), so slow drifts of a shared machine hit every condition alike.
#
#     mix run bench/sample_tax.exs          # about 40 s
#
# Prints best / p25 / median per condition and their ratios to the
# untraced control with the same number of background processes.

defmodule FlameOn.Bench.SampleTax do
  @moduledoc false

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  def pipeline do
    m = Map.new(1..2000, fn k -> {k, rem(k * 7919, 1009)} end)
    m |> Map.values() |> Enum.map(&(&1 * 2)) |> Enum.filter(&(&1 > 300)) |> Enum.sort()
  end

  # µs of `fun` in a fresh process
  def time(fun) do
    parent = self()

    spawn(fn ->
      t0 = System.monotonic_time(:microsecond)
      fun.()
      send(parent, {:took, System.monotonic_time(:microsecond) - t0})
    end)

    receive do
      {:took, us} -> us
    end
  end

  # n processes waiting in receive: untraced, or each inside profile/2
  def background(n, mode) do
    parent = self()

    pids =
      for _ <- 1..n//1 do
        spawn(fn ->
          wait = fn ->
            send(parent, {:ready, self()})
            receive do: (:stop -> :ok)
          end

          if mode == :untraced, do: wait.(), else: FlameOn.Client.profile(wait, mode: mode)
        end)
      end

    for pid <- pids, do: receive(do: ({:ready, ^pid} -> :ok))
    # the samplers' first ticks and the trace setup are over
    Process.sleep(40)
    pids
  end

  def stop(pids) do
    for pid <- pids, do: send(pid, :stop)
    Process.sleep(10)
  end

  def stats(ts) do
    s = Enum.sort(ts)
    {hd(s), Enum.at(s, div(length(s), 4)), Enum.at(s, div(length(s), 2))}
  end
end

alias FlameOn.Bench.SampleTax, as: T

workloads = [
  {"fib(22) x40", fn -> for _ <- 1..40, do: T.fib(22) end},
  {"Enum/Map x10", fn -> for _ <- 1..10, do: T.pipeline() end}
]

conditions = [
  {0, :untraced},
  {1, :untraced},
  {1, :sample},
  {1, :nif},
  {10, :untraced},
  {10, :sample}
]

rounds = 40

IO.puts(
  "flame_on_client sample tax (paired blocks), #{DateTime.utc_now() |> DateTime.truncate(:second)}, " <>
    "OTP #{System.otp_release()}, #{:erlang.system_info(:schedulers_online)} schedulers, #{rounds} rounds x 4 runs"
)

for {name, work} <- workloads do
  T.time(work)

  runs =
    for round <- 1..rounds,
        cond <-
          Enum.drop(conditions, rem(round, length(conditions))) ++
            Enum.take(conditions, rem(round, length(conditions))),
        reduce: %{} do
      acc ->
        {n, mode} = cond
        pids = T.background(n, mode)
        ts = for _ <- 1..4, do: T.time(work)
        T.stop(pids)
        Map.update(acc, cond, ts, &(&1 ++ ts))
    end

  IO.puts("\n#{name}: µs best / p25 / median, and x the untraced control with as many waiting")

  for {n, mode} = cond <- conditions do
    {b, p, m} = T.stats(runs[cond])
    {cb, cp, cm} = T.stats(runs[{n, :untraced}])
    label = if n == 0, do: "alone", else: "#{n} waiting, #{mode}"

    IO.puts(
      String.pad_trailing(label, 22) <>
        "#{b} / #{p} / #{m}" <>
        if(mode == :untraced,
          do: "",
          else:
            "   x #{Float.round(b / cb, 3)} / #{Float.round(p / cp, 3)} / #{Float.round(m / cm, 3)}"
        )
    )
  end
end
