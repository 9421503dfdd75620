# Where the time of one tracer-module event goes: prices each step that
# FlameOn.Client.Core.Native's trace/5 (c_src/nif/trace/fo_tracer.c) does, on the
# call-heavy workload of overhead.exs (bench/support.exs); with
# FO_ANATOMY_REALISTIC=1 also on the realistic one (much noisier: it
# involves a server process, I/O and scheduling).
#
# Run from the project root:
#
#     mix run bench/anatomy.exs
#
# It builds bench/build/floor_tracer.so, bench/build/anatomy_tracer.so and
# bench/build/anatomy_lean_tracer.so (`make -C bench floor anatomy`). About 40 seconds; FO_BENCH_REPS=N
# changes the repetitions (default 7, medians printed).
#
# Each row is a tracer module doing the steps named, cumulatively:
#
#   floor      bench/floor_tracer.c: enabled/3 -> :trace, trace/5 counts
#   +resource  state resource looked up in enabled/3 and trace/5, tag check in enabled/3
#   +clock     enif_monotonic_time(ERL_NIF_NSEC) per event
#   +decode    local pid, opts map lookup of the caller, {M,F,A} decoding
#   +ts lookup opts map lookup of :timestamp (replay support)
#   +lock      the session mutex around the apply
#   +core      fo_session_apply: the whole of what the real trace/5 does
#   full -X    everything but step X; "saves N": what X costs in context
#   full, raw clock   clock_gettime(CLOCK_MONOTONIC) instead of enif_monotonic_time
#   full, spinlock    an atomic_flag spinlock instead of the ErlNifMutex
#   proposed   resource + raw clock + decode + spinlock + core, no ts lookup:
#              the glue changes suggested in RESULTS.md, core unchanged
#   proposed, lean enabled   the same with an enabled/3 that reads one global
#              atomic instead of looking the resource up (anatomy_lean_tracer.so)
#   lean + tsc  and with rdtsc instead of clock_gettime (x86; uncalibrated
#              ticks: only prices the clock read)
#   Native     FlameOn.Client.Core.Native itself, for comparison with "+core"

Code.require_file("support.exs", __DIR__)
FlameOn.Bench.Make.make!(["anatomy"])

# The anatomy tracer, and the same built with -DANATOMY_LEAN (enabled/3
# reads one global atomic).
for {name, so} <- [AnatomyTracer: "anatomy_tracer", AnatomyLeanTracer: "anatomy_lean_tracer"] do
  defmodule Module.concat(FlameOn.Bench, name) do
    @moduledoc false
    @on_load :load_nif
    def load_nif do
      :erlang.load_nif(String.to_charlist(Path.join([__DIR__, "build", unquote(so)])), 0)
    end

    def new(_steps), do: :erlang.nif_error(:nif_not_loaded)
    def events(_state), do: :erlang.nif_error(:nif_not_loaded)
    def enabled(_tag, _state, _tracee), do: :erlang.nif_error(:nif_not_loaded)
    def trace(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:nif_not_loaded)
  end
end

defmodule FlameOn.Bench.Anatomy do
  @moduledoc false
  import Bitwise
  alias FlameOn.Bench.{AnatomyLeanTracer, AnatomyTracer, FloorTracer}
  alias FlameOn.Client.Core.Native

  @flags [:call, :return_to, :running, :arity]
  @resource 1
  @clock 2
  @decode 4
  @ts_lookup 8
  @lock 16
  @core 32
  @raw_clock 64
  @spin 128
  @tsc 256
  @full @resource ||| @clock ||| @decode ||| @ts_lookup ||| @lock ||| @core

  def rows do
    [
      {"floor", :floor},
      {"+resource", @resource},
      {"+clock", @resource ||| @clock},
      {"+decode", @resource ||| @clock ||| @decode},
      {"+ts lookup", @resource ||| @clock ||| @decode ||| @ts_lookup},
      {"+lock", @resource ||| @clock ||| @decode ||| @ts_lookup ||| @lock},
      {"+core (full)", @full},
      {"full -clock", @full &&& ~~~@clock},
      {"full -ts lookup", @full &&& ~~~@ts_lookup},
      {"full -lock", @full &&& ~~~@lock},
      {"full -core", @full &&& ~~~@core},
      {"full, raw clock", (@full &&& ~~~@clock) ||| @raw_clock},
      {"full, spinlock", (@full &&& ~~~@lock) ||| @spin},
      {"proposed", @resource ||| @raw_clock ||| @decode ||| @spin ||| @core},
      {"proposed, lean enabled",
       {:lean, @resource ||| @raw_clock ||| @decode ||| @spin ||| @core}},
      {"lean + tsc", {:lean, @resource ||| @tsc ||| @decode ||| @spin ||| @core}},
      {"Native", :native}
    ]
  end

  def isolated(fun), do: FlameOn.Bench.Isolated.run(fun)

  defp now, do: :erlang.monotonic_time(:nanosecond)

  def run(:untraced, work) do
    t0 = now()
    work.()
    {now() - t0, 0}
  end

  def run(:floor, work) do
    FloorTracer.reset()
    traced({FloorTracer, []}, work, fn -> FloorTracer.count() end)
  end

  def run(:native, work) do
    session = Native.new(%{})

    traced({Native, session}, work, fn ->
      Native.finish(session, nil) |> elem(1) |> Map.fetch!(:events)
    end)
  end

  def run({:lean, steps}, work) do
    state = AnatomyLeanTracer.new(steps)

    traced({AnatomyLeanTracer, state}, work, fn ->
      state |> AnatomyLeanTracer.events() |> elem(0)
    end)
  end

  def run(steps, work) do
    state = AnatomyTracer.new(steps)
    traced({AnatomyTracer, state}, work, fn -> state |> AnatomyTracer.events() |> elem(0) end)
  end

  # Only the traced run is timed, not the session's finish.
  defp traced({module, state}, work, events) do
    t0 = now()
    :erlang.trace(self(), true, [{:tracer, module, state} | @flags])
    work.()
    :erlang.trace(self(), false, @flags)
    t = now() - t0
    {t, events.()}
  end

  @match_spec [{:_, [], [{:message, {:caller}}]}]

  def measure(label, work, reps) do
    rows = rows()
    IO.puts("\n== #{label}: #{reps} runs each, medians ==")

    samples =
      Enum.reduce(0..reps, %{}, fn rep, acc ->
        untraced = isolated(fn -> run(:untraced, work) end)
        :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
        k = rem(rep, length(rows))
        order = Enum.drop(rows, k) ++ Enum.take(rows, k)

        round =
          Map.new(order, fn {name, what} ->
            :erlang.garbage_collect()
            {name, isolated(fn -> run(what, work) end)}
          end)

        :erlang.trace_pattern({:_, :_, :_}, false, [:local])
        round = Map.put(round, :untraced, untraced)
        # round 0 warms up
        if rep == 0,
          do: acc,
          else:
            Map.merge(acc, Map.new(round, fn {k, v} -> {k, [v]} end), fn _, a, b -> a ++ b end)
      end)

    print(rows, samples)
  end

  defp median(runs), do: runs |> Enum.sort() |> Enum.at(div(length(runs), 2))

  defp print(rows, samples) do
    {untraced_ns, _} = median(samples.untraced)

    per_event = fn name ->
      {ns, events} = median(samples[name])
      {(ns - untraced_ns) / events, events}
    end

    {floor_pe, _} = per_event.("floor")
    {full, _} = per_event.("+core (full)")
    IO.puts("untraced: #{Float.round(untraced_ns / 1.0e6, 2)} ms")

    IO.puts(
      String.pad_trailing("row", 24) <>
        String.pad_leading("events", 10) <>
        String.pad_leading("ns/event", 10) <>
        String.pad_leading("step ns", 12) <> String.pad_leading("x floor", 9)
    )

    Enum.reduce(rows, nil, fn {name, _}, prev ->
      {pe, events} = per_event.(name)

      step =
        cond do
          String.starts_with?(name, "full") or String.starts_with?(name, "proposed") or
              String.starts_with?(name, "lean") ->
            "saves #{round(full - pe)}"

          name == "Native" or prev == nil ->
            ""

          true ->
            "#{if pe >= prev, do: "+", else: "-"}#{abs(round(pe - prev))}"
        end

      IO.puts(
        String.pad_trailing(name, 24) <>
          String.pad_leading("#{events}", 10) <>
          String.pad_leading("#{round(pe)}", 10) <>
          String.pad_leading(step, 12) <>
          String.pad_leading(:erlang.float_to_binary(pe / floor_pe, decimals: 2), 9)
      )

      pe
    end)
  end
end

alias FlameOn.Bench.{Anatomy, Work}
reps = String.to_integer(System.get_env("FO_BENCH_REPS") || "7")

IO.puts(
  "tracer-module anatomy, OTP #{System.otp_release()}, " <>
    "#{DateTime.utc_now() |> DateTime.truncate(:second)}"
)

Anatomy.measure("call-heavy: fib(22) x 5", fn -> Work.fibs(22, 5) end, reps)

if System.get_env("FO_ANATOMY_REALISTIC") in ["1", "true"] do
  {:ok, kv} = FlameOn.Bench.KV.start()
  dir = Path.join(System.tmp_dir!(), "flame_on_anatomy_#{System.unique_integer([:positive])}")
  File.mkdir_p!(dir)
  Anatomy.measure("realistic: 100 rounds", fn -> Work.realistic(kv, dir, 100) end, reps)
  File.rm_rf!(dir)
end
