# capture_next/2: what waiting for the next call of a function costs the
# node, and how soon after the call the capture is on it.
#
# Run from the project root:
#
#     mix run bench/next_call.exs
#
# About 40 s. FO_NEXT_QUICK=1: small sizes, few repetitions (a smoke test).
#
# Sections:
#
#   1. per call     an untraced process calling one small function 200 000
#                   times (ns per call): nothing set; the function waited on
#                   by a capture in mode :sample before its call (the
#                   capture's only pattern, on ANOTHER function: what every
#                   other function pays); the function's own meta pattern
#                   with its gate already taken (what a caller pays between
#                   the captured call and the pattern's removal: breakpoint
#                   + one enabled/3 asking the gate); and the call patterns
#                   an exact (:nif) capture or profile/2 sets on every
#                   function (what mode :nif costs while it waits).
#   2. node work    an untraced Enum/Map pipeline and fib(22): alone, while a
#                   :sample capture waits on an unrelated function, while a
#                   :nif capture waits (call patterns on).
#   3. latency      over 30 captures of a call made by one of 8 processes at
#                   once (mode :sample): from the call's entry to the
#                   pattern's removal (how long the other callers pay the
#                   breakpoint), and to the first stack sample.
#
# Medians; variants interleaved (order rotating each round), each timing in
# a fresh process. Compare figures as ratios inside one run.

Code.require_file("support.exs", __DIR__)

defmodule FlameOn.Bench.NextWork do
  @moduledoc false
  def target(n), do: n + 1
  def unrelated(n), do: n * 2

  def calls(0, acc), do: acc
  def calls(n, acc), do: calls(n - 1, target(acc))

  def pipeline(seed) do
    1..2000
    |> Map.new(fn i -> {i, rem(i * seed, 97)} end)
    |> Enum.map(fn {k, v} -> {k, v * 2} end)
    |> Enum.filter(fn {_k, v} -> rem(v, 3) == 0 end)
    |> Enum.sort_by(fn {_k, v} -> v end)
    |> Enum.reduce(0, fn {_k, v}, acc -> acc + v end)
  end

  def pipelines(n), do: Enum.each(1..n, &pipeline/1)

  def spin(ms), do: spin_until(System.monotonic_time(:microsecond) + ms * 1000, 0)

  defp spin_until(deadline, acc) do
    if System.monotonic_time(:microsecond) < deadline,
      do: spin_until(deadline, acc + 1),
      else: acc
  end
end

defmodule FlameOn.Bench.Next do
  @moduledoc false
  alias FlameOn.Bench.{Isolated, NextWork, Work}
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Node.Gates

  @quick System.get_env("FO_NEXT_QUICK") == "1"
  @calls if @quick, do: 20_000, else: 200_000
  @rounds if @quick, do: 3, else: 9
  @captures if @quick, do: 5, else: 30

  def run do
    IO.puts("capture_next: cost of waiting, and latency (#{@rounds} rounds, medians)\n")
    per_call()
    node_work()
    latency()
  end

  defp median(xs), do: xs |> Enum.sort() |> Enum.at(div(length(xs), 2))

  defp time_us(fun) do
    Isolated.run(fn ->
      t0 = System.monotonic_time(:nanosecond)
      fun.()
      System.monotonic_time(:nanosecond) - t0
    end)
  end

  # Runs each variant's setup, its timing, its teardown, rotating the
  # order each round; medians by variant.
  defp interleave(variants, work) do
    names = Enum.map(variants, &elem(&1, 0))

    results =
      Enum.reduce(0..(@rounds - 1), %{}, fn round, acc ->
        {a, b} = Enum.split(variants, rem(round, length(variants)))

        Enum.reduce(b ++ a, acc, fn {name, setup, teardown}, acc ->
          state = setup.()
          ns = time_us(work)
          teardown.(state)
          Map.update(acc, name, [ns], &[ns | &1])
        end)
      end)

    for name <- names, do: {name, median(results[name])}
  end

  # a capture waiting, in its own process, on mfa
  defp waiting_capture(mfa, mode) do
    task = Task.async(fn -> FlameOn.Client.capture_next(mfa, mode: mode, timeout: 600_000) end)
    wait_until(fn -> Enum.any?(Gates.waiting(), &match?({^mfa, _}, &1)) end)
    task
  end

  defp stop_capture(task) do
    Task.shutdown(task, :brutal_kill)
    wait_until(fn -> Gates.waiting() == [] and Patterns.users() == 0 end)
  end

  defp wait_until(fun) do
    if fun.(), do: :ok, else: Process.sleep(2) && wait_until(fun)
  end

  # the meta pattern of a capture whose gate is already taken
  defp closed_gate(mfa) do
    native = Native.new(%{})
    gate = Native.next_new(native, self(), [])
    :fired = Native.enabled(:call, {:next, gate}, self()) |> then(fn :trace -> :fired end)
    Native.trace(:call, {:next, gate}, self(), {:m, :f, 0}, %{})
    ms = [{:_, [], [{:exception_trace}]}]
    1 = :erlang.trace_pattern(mfa, ms, [{:meta, Native, {:next, gate}}])

    receive do
      {:flame_on_next, ^gate, :fired, _, _, _} -> :ok
    end

    mfa
  end

  defp per_call do
    target = {NextWork, :target, 1}

    variants = [
      {"untraced", fn -> nil end, fn _ -> :ok end},
      {":sample capture waits on another function",
       fn -> waiting_capture({NextWork, :unrelated, 1}, :sample) end, &stop_capture/1},
      {"the function's meta pattern, gate taken", fn -> closed_gate(target) end,
       fn mfa -> :erlang.trace_pattern(mfa, false, [:meta]) end},
      {":nif capture waits (call patterns on)",
       fn -> waiting_capture({NextWork, :unrelated, 1}, :nif) end, &stop_capture/1}
    ]

    results = interleave(variants, fn -> NextWork.calls(@calls, 0) end)
    {_, base} = hd(results)
    IO.puts("1. per call: #{@calls} calls of a small function by an untraced process")
    IO.puts("   variant                                        ns/call   ratio")

    for {name, ns} <- results do
      IO.puts(
        "   #{String.pad_trailing(name, 45)} #{pad(Float.round(ns / @calls, 1), 8)}   #{ratio(ns, base)}"
      )
    end

    IO.puts("")
  end

  defp node_work do
    n = if @quick, do: 5, else: 30
    fib = if @quick, do: 18, else: 22

    variants = [
      {"alone", fn -> nil end, fn _ -> :ok end},
      {":sample capture waiting", fn -> waiting_capture({NextWork, :unrelated, 1}, :sample) end,
       &stop_capture/1},
      {":nif capture waiting", fn -> waiting_capture({NextWork, :unrelated, 1}, :nif) end,
       &stop_capture/1}
    ]

    IO.puts("2. node work: an untraced process's work while a capture waits elsewhere")
    IO.puts("   variant                       pipelines ms  ratio    fib(#{fib}) ms  ratio")
    pipes = interleave(variants, fn -> NextWork.pipelines(n) end)
    fibs = interleave(variants, fn -> Work.fib(fib) end)
    {_, pbase} = hd(pipes)
    {_, fbase} = hd(fibs)

    for {{name, p}, {_, f}} <- Enum.zip(pipes, fibs) do
      IO.puts(
        "   #{String.pad_trailing(name, 28)} #{pad(Float.round(p / 1.0e6, 1), 10)}  #{ratio(p, pbase)}" <>
          "  #{pad(Float.round(f / 1.0e6, 1), 10)}  #{ratio(f, fbase)}"
      )
    end

    IO.puts("")
  end

  defp latency do
    mfa = {NextWork, :spin, 1}

    samples =
      for _ <- 1..@captures do
        parent = self()

        callers =
          for _ <- 1..8 do
            spawn(fn ->
              receive do
                :go -> NextWork.spin(30)
              end

              send(parent, :done)
            end)
          end

        # when the pattern went: polled from a high-priority process
        watcher =
          spawn(fn ->
            Process.flag(:priority, :high)
            wait_until(fn -> Gates.ours?(mfa) end)
            wait_until(fn -> not Gates.ours?(mfa) end)
            send(parent, {:cleared, System.monotonic_time(:microsecond)})
          end)

        task = waiting_capture(mfa, :sample)
        _ = watcher
        Enum.each(callers, &send(&1, :go))
        {:ok, profile} = Task.await(task, 30_000)
        for _ <- callers, do: receive(do: (:done -> :ok))

        cleared =
          receive do
            {:cleared, t} -> t
          end

        first_sample =
          case profile.metrics[profile.pid] do
            [%{t_us: t} | _] -> t - profile.started_at
            _ -> nil
          end

        {cleared - profile.started_at, first_sample}
      end

    cleared = Enum.map(samples, &elem(&1, 0))
    firsts = for {_, f} <- samples, f != nil, do: f

    IO.puts(
      "3. latency after the call's entry, 8 callers at once (#{@captures} captures, mode :sample)"
    )

    IO.puts(
      "   pattern removed (other callers stop paying): median #{median(cleared)} µs, max #{Enum.max(cleared)} µs"
    )

    if firsts != [],
      do:
        IO.puts(
          "   first stack sample:                          median #{median(firsts)} µs, max #{Enum.max(firsts)} µs (#{length(firsts)}/#{@captures} captures sampled)"
        )

    IO.puts("")
  end

  defp ratio(x, base), do: :erlang.float_to_binary(x / base, decimals: 2) <> "x"
  defp pad(x, width), do: x |> to_string() |> String.pad_leading(width)
end

FlameOn.Bench.Next.run()
