# Trace sessions and summaries (OTP 27+; on OTP 25 section 1 runs alone).
#
# Run from the project root (scripts/test-otp27 makes an OTP 27 root; run it
# there with `mix run bench/sessions.exs`):
#
#     mix run bench/sessions.exs
#
# About 40 s. FO_SESSIONS_QUICK=1: few repetitions, a smoke test.
#
# Sections:
#
#   1. node-wide tax   an UNTRACED process's fib(22) and Enum/Map pipeline
#                      alone, and beside 1 and 2 concurrent exact traces
#                      (profile/2 mode :nif in other processes). On OTP 27+
#                      each trace has its own session and its own call
#                      patterns, so the breakpoint tax is paid once per
#                      concurrent trace; in the legacy session (OTP 25) the
#                      patterns are shared. Also: the cost of setting up
#                      and ending one exact trace (profile/2 of a no-op).
#   2. summary/2 vs tprof  (OTP 27+) the same workload summarized by
#                      summary/2 and twice by tprof:profile/2 each round (in
#                      a rotating order), for call_time and call_memory: per
#                      function, the median ratio of our value to the mean of
#                      tprof's two, and for scale the median ratio of tprof's
#                      second run to its first (the noise floor of call_time
#                      on this machine). Calls must match exactly.

Code.require_file("support.exs", __DIR__)

defmodule FlameOn.Bench.SessionsWork do
  @moduledoc false
  alias FlameOn.Bench.Work

  def pipeline(n) do
    Enum.each(1..n, fn seed ->
      1..2000
      |> Map.new(&{&1, rem(&1 * 7919 + seed, 1009)})
      |> Enum.map(fn {k, v} -> {k, v * 2} end)
      |> Enum.filter(fn {_k, v} -> v > 300 end)
      |> Enum.sort_by(&elem(&1, 1))
      |> length()
    end)
  end

  def fib(times), do: Work.fibs(22, times)

  def alloc(0, acc), do: acc
  def alloc(n, acc), do: alloc(n - 1, [{n, n} | acc])

  def mixed do
    {Work.fib(20), alloc(20_000, []), Work.loop(200_000), Enum.map(1..20_000, &(&1 * 2))}
  end
end

defmodule FlameOn.Bench.Sessions do
  @moduledoc false
  alias FlameOn.Bench.{Isolated, SessionsWork}
  alias FlameOn.Client.Node.TraceBackend

  @quick System.get_env("FO_SESSIONS_QUICK") == "1"
  @rounds if @quick, do: 3, else: 11

  def run do
    IO.puts(
      "OTP #{:erlang.system_info(:otp_release)}, Elixir #{System.version()}, trace sessions: " <>
        "#{TraceBackend.sessions?()}, #{@rounds} rounds, medians\n"
    )

    tax()
    setup_cost()
    if TraceBackend.sessions?(), do: summary_vs_tprof(), else: IO.puts("\n2. (needs OTP 27+)")
  end

  # --- 1 ----------------------------------------------------------------------

  defp tax do
    IO.puts("1. node-wide tax on an untraced process (ms, ratio to alone)")
    variants = [alone: 0, "beside 1 exact trace": 1, "beside 2 exact traces": 2]

    for {label, work} <- [
          {"fib(22) x5", fn -> SessionsWork.fib(5) end},
          {"Enum/Map pipeline x10", fn -> SessionsWork.pipeline(10) end}
        ] do
      times = interleave(variants, fn {_name, n} -> beside_traces(n, fn -> time_ms(work) end) end)

      base = median(times[:alone])

      for {name, _} <- variants do
        m = median(times[name])

        IO.puts(
          "   #{pad(label, 24)} #{pad(to_string(name), 24)} #{fmt(m)} ms  #{fmt(m / base)}x"
        )
      end
    end
  end

  # Runs `measure` while `n` exact traces run in other processes, each
  # waiting in its traced function (so only their patterns cost anything).
  defp beside_traces(0, measure), do: Isolated.run(measure)

  defp beside_traces(n, measure) do
    parent = self()

    tracers =
      for _ <- 1..n do
        spawn(fn ->
          FlameOn.Client.profile(fn ->
            send(parent, {:tracing, self()})
            receive do: (:stop -> :ok)
          end)
        end)
      end

    for t <- tracers, do: receive(do: ({:tracing, ^t} -> :ok))
    result = Isolated.run(measure)

    for t <- tracers do
      ref = Process.monitor(t)
      send(t, :stop)
      receive do: ({:DOWN, ^ref, _, _, _} -> :ok)
    end

    result
  end

  defp setup_cost do
    times =
      for _ <- 1..@rounds,
          do: Isolated.run(fn -> time_ms(fn -> FlameOn.Client.profile(fn -> :ok end) end) end)

    IO.puts(
      "   setting up and ending one exact trace (profile/2 of a no-op, #{length(:code.all_loaded())} " <>
        "modules loaded): #{fmt(median(times))} ms"
    )
  end

  # --- 2 ----------------------------------------------------------------------

  defp summary_vs_tprof do
    Enum.each([:tools], fn app ->
      :code.root_dir()
      |> Path.join("lib/#{app}-*/ebin")
      |> Path.wildcard()
      |> Enum.each(&:code.add_patha(String.to_charlist(&1)))
    end)

    IO.puts(
      "\n2. summary/2 vs tprof, same workload (ratio of values per function; calls must match)"
    )

    work = &SessionsWork.mixed/0

    for type <- [:call_time, :call_memory] do
      runs =
        for round <- 1..@rounds do
          # the three runs of a round in a rotating order
          steps = [
            ours: fn -> summary(work, type) end,
            a: fn -> tprof(work, type) end,
            b: fn -> tprof(work, type) end
          ]

          {front, back} = Enum.split(steps, rem(round, 3))
          done = Map.new(back ++ front, fn {key, run} -> {key, run.()} end)
          {done.ours, done.a, done.b}
        end

      {ours0, a0, _} = hd(runs)
      top = ours0.entries |> Enum.take(5) |> Enum.map(& &1.mfa)
      IO.puts("   #{type}:")
      IO.puts("     #{pad("function", 40)} #{pad("calls", 8)} ours/tprof tprof b/a")

      for mfa <- top do
        calls_ok =
          Enum.all?(runs, fn {o, a, b} ->
            entry(o, mfa).calls == calls(a, mfa) and calls(a, mfa) == calls(b, mfa)
          end)

        ratio =
          median(
            for {o, a, b} <- runs,
                do: entry(o, mfa).value / max((value(a, mfa) + value(b, mfa)) / 2, 1)
          )

        noise = median(for {_, a, b} <- runs, do: value(b, mfa) / max(value(a, mfa), 1))

        IO.puts(
          "     #{pad(entry(ours0, mfa).function, 40)} #{pad(to_string(calls(a0, mfa)), 8)} " <>
            "#{pad(fmt(ratio), 10)} #{pad(fmt(noise), 10)}#{if calls_ok, do: "", else: "  CALLS DIFFER"}"
        )
      end

      total = median(for {o, a, b} <- runs, do: o.total / max((sum(a) + sum(b)) / 2, 1))
      noise = median(for {_, a, b} <- runs, do: sum(b) / max(sum(a), 1))

      IO.puts(
        "     #{pad("total", 40)} #{pad("", 8)} #{pad(fmt(total), 10)} #{pad(fmt(noise), 10)}"
      )
    end
  end

  defp calls(by_mfa, mfa), do: elem(Map.get(by_mfa, mfa, {0, 0}), 0)
  defp value(by_mfa, mfa), do: elem(Map.get(by_mfa, mfa, {0, 0}), 1)

  defp summary(work, type), do: elem(FlameOn.Client.summary(work, type: type), 1)

  defp tprof(work, type) do
    {_, raw} = apply(:tprof, :profile, [work, %{type: type, report: :return}])
    %{all: {^type, _total, lines}} = apply(:tprof, :inspect, [raw, :total, :measurement])
    Map.new(lines, fn {m, {f, a}, calls, value, _, _} -> {{m, f, a}, {calls, value}} end)
  end

  defp sum(by_mfa), do: by_mfa |> Map.values() |> Enum.map(&elem(&1, 1)) |> Enum.sum()

  defp entry(summary, mfa),
    do: Enum.find(summary.entries, &(&1.mfa == mfa)) || %{calls: 0, value: 0}

  # --- helpers ------------------------------------------------------------------

  # %{variant => [measurement]}, the variants' order rotating each round.
  defp interleave(variants, measure) do
    Enum.reduce(1..@rounds, %{}, fn round, acc ->
      {front, back} = Enum.split(variants, rem(round, length(variants)))

      Enum.reduce(back ++ front, acc, fn {name, _} = variant, acc ->
        Map.update(acc, name, [measure.(variant)], &[measure.(variant) | &1])
      end)
    end)
  end

  defp time_ms(fun) do
    t0 = System.monotonic_time(:microsecond)
    fun.()
    (System.monotonic_time(:microsecond) - t0) / 1000
  end

  defp median(list) do
    sorted = Enum.sort(list)
    Enum.at(sorted, div(length(sorted), 2))
  end

  defp fmt(x), do: :erlang.float_to_binary(x / 1, decimals: 2)
  defp pad(text, w), do: String.pad_trailing(text, w)
end

FlameOn.Bench.Sessions.run()
