# Tracing overhead of flame_on_client, end to end, beside a floor and a reference.
#
# Run from the project root:
#
#     mix run bench/overhead.exs
#
# It builds bench/build/floor_tracer.so with `make -C bench floor` when
# needed (gcc and erlang-dev). About two minutes. Environment knobs:
#
#   FO_BENCH_REPS=N     repetitions of each timing (default 7; medians are printed)
#   FO_BENCH_QUICK=1    small workloads, for a smoke test of the script itself
#
# For two workloads (call-heavy recursion, and a "realistic" mix of
# GenServer calls, Enum pipelines over maps and file I/O) it prints the
# median wall time of:
#
#   untraced           the workload alone, no trace patterns
#   untraced+patterns  the workload untraced while the global call patterns are set
#                      (the tax every process on the node pays during any trace)
#   floor              traced by a tracer-module NIF whose trace/5 only counts
#                      (bench/floor_tracer.c): what any call tracer pays the VM
#   msg_floor          traced by a pid tracer whose process drops the messages:
#                      what any message-based tracer (process mode) pays the VM
#   nif                FlameOn.Client.profile(fun, mode: :nif), trace + finish
#   process            FlameOn.Client.profile(fun, mode: :process), trace + finish
#   reference          an eflame-style tracer process: messages received one by
#                      one, per-process stack lists, a map of stack => time
#
# with the events traced, ns per event ((time - untraced) / events) and the
# ratios to the floor and to the reference. Trace patterns are held by the
# bench (FlameOn.Client.Patterns.acquire/1) around the traced variants, so no
# variant pays for setting them; that one-off cost is printed on its own.
#
# Then a memory run: a loop over a few small functions (few distinct
# stacks) traced for 1M and 5M events in each mode, sampling the session's
# memory (Native.stats/1 :memory_bytes; in process mode also the session
# process's Process.info(:memory) and mailbox) while it runs.
#
# Finally the targets, PASS/MISS. See bench/README.md and bench/RESULTS.md.

Code.require_file("support.exs", __DIR__)

defmodule FlameOn.Bench.Reference do
  @moduledoc false
  # An eflame-style tracer: a process that receives {:trace_ts, ...}
  # messages one by one, keeps each traced process's stack as a list of
  # MFAs (top first) and folds the time between events into a map of
  # stack => native time. Same stack rules as the C core (caller on top:
  # push; caller below: unwind, push; return_to: unwind to the target).

  def start, do: spawn(fn -> loop(%{}, %{}, 0) end)

  defp loop(procs, acc, n) do
    receive do
      {:trace_ts, pid, :call, mfa, caller, ts} ->
        {stack, acc} = charge(procs, acc, pid, ts)
        loop(Map.put(procs, pid, {call(stack, mfa, caller), ts, :running}), acc, n + 1)

      {:trace_ts, pid, :call, mfa, ts} ->
        {stack, acc} = charge(procs, acc, pid, ts)
        loop(Map.put(procs, pid, {[mfa | stack], ts, :running}), acc, n + 1)

      {:trace_ts, pid, :return_to, mfa, ts} ->
        {stack, acc} = charge(procs, acc, pid, ts)
        loop(Map.put(procs, pid, {return_to(stack, mfa), ts, :running}), acc, n + 1)

      {:trace_ts, pid, :out, _mfa, ts} ->
        {stack, acc} = charge(procs, acc, pid, ts)
        loop(Map.put(procs, pid, {stack, ts, :out}), acc, n + 1)

      {:trace_ts, pid, :in, _mfa, ts} ->
        {stack, acc} = charge(procs, acc, pid, ts)
        loop(Map.put(procs, pid, {stack, ts, :running}), acc, n + 1)

      {:trace_ts, _pid, _tag, _, _} ->
        loop(procs, acc, n + 1)

      {:trace_ts, _pid, _tag, _, _, _} ->
        loop(procs, acc, n + 1)

      {:done, from} ->
        send(from, {:reference_done, n, acc})
    end
  end

  defp charge(procs, acc, pid, ts) do
    case procs do
      %{^pid => {stack, last, state}} ->
        key = if state == :out, do: [:sleep | stack], else: stack
        delta = ts - last
        {stack, Map.update(acc, {pid, key}, delta, &(&1 + delta))}

      _ ->
        {[], acc}
    end
  end

  defp call([caller | _] = stack, mfa, caller), do: [mfa | stack]

  defp call(stack, mfa, caller) when is_tuple(caller) do
    case drop_to(stack, caller) do
      nil -> [mfa, caller | stack]
      rest -> [mfa | rest]
    end
  end

  defp call(stack, mfa, _undefined), do: [mfa | stack]

  defp return_to([_top | below], mfa) when is_tuple(mfa) do
    case drop_to(below, mfa) do
      nil -> [mfa]
      rest -> rest
    end
  end

  defp return_to([_top | below], _undefined), do: below
  defp return_to([], mfa) when is_tuple(mfa), do: [mfa]
  defp return_to([], _), do: []

  defp drop_to([mfa | _] = stack, mfa), do: stack
  defp drop_to([_ | rest], mfa), do: drop_to(rest, mfa)
  defp drop_to([], _mfa), do: nil
end

defmodule FlameOn.Bench do
  @moduledoc false
  alias FlameOn.Bench.{FloorTracer, Reference}
  alias FlameOn.Client.{Native, Patterns}

  @module_flags [:call, :return_to, :running, :arity]
  @message_flags [:call, :return_to, :running, :arity, :monotonic_timestamp]
  @match_spec [{:_, [], [{:message, {:caller}}]}]
  @mib 1024 * 1024

  # --- how each mode is driven ------------------------------------------------

  @doc false
  # Which way each of our modes can be run in this checkout:
  # :profile (FlameOn.Client.profile(fun, mode: m)), :profile_default
  # (profile(fun) without :mode, for :process only) or :by_hand.
  def detect_modes do
    profile? =
      Code.ensure_loaded?(FlameOn.Client) and function_exported?(FlameOn.Client, :profile, 2)

    try_mode = fn mode ->
      isolated(fn ->
        try do
          {:ok, %{stats: %{events: _}}} = FlameOn.Client.profile(fn -> :ok end, mode: mode)
          :profile
        rescue
          e -> {:error, Exception.message(e)}
        end
      end)
    end

    nif = if profile?, do: try_mode.(:nif), else: {:error, "FlameOn.Client.profile/2 missing"}

    process =
      cond do
        not profile? -> {:error, "FlameOn.Client.profile/2 missing"}
        try_mode.(:process) == :profile -> :profile
        true -> :profile_default
      end

    %{
      nif: if(nif == :profile, do: :profile, else: {:by_hand, nif}),
      process: process
    }
  end

  def isolated(fun), do: FlameOn.Bench.Isolated.run(fun)

  defp now, do: :erlang.monotonic_time(:nanosecond)

  def run(:untraced, work, _modes) do
    t0 = now()
    work.()
    %{ns: now() - t0, events: 0}
  end

  def run(:floor, work, _modes) do
    FloorTracer.reset()
    t0 = now()
    :erlang.trace(self(), true, [{:tracer, FloorTracer, []} | @module_flags])
    work.()
    :erlang.trace(self(), false, @module_flags)
    %{ns: now() - t0, events: FloorTracer.count()}
  end

  def run(:nif, work, %{nif: :profile}) do
    t0 = now()
    {_, profile} = FlameOn.Client.profile(work, mode: :nif)
    %{ns: now() - t0, events: profile.stats.events}
  end

  def run(:nif, work, %{nif: {:by_hand, _}}) do
    t0 = now()
    session = Native.new(%{})
    :erlang.trace(self(), true, [{:tracer, Native, session} | @module_flags])
    work.()
    :erlang.trace(self(), false, @module_flags)
    {raw, stats} = Native.finish(session, now())
    _ = FlameOn.Client.Profile.build(raw, stats, pid: self())
    %{ns: now() - t0, events: stats.events}
  end

  def run(:process, work, %{process: how}) do
    opts = if how == :profile, do: [mode: :process], else: []
    t0 = now()
    {_, profile} = FlameOn.Client.profile(work, opts)
    %{ns: now() - t0, events: profile.stats.events}
  end

  # A pid tracer whose process drops every message: the floor of any
  # message-based tracer (mode :process, the reference).
  def run(:msg_floor, work, _modes) do
    t0 = now()
    tracer = spawn(fn -> drop(0) end)
    traced_by(tracer, work)

    send(tracer, {:done, self()})

    receive do
      {:dropped, events} -> %{ns: now() - t0, events: events}
    end
  end

  def run(:reference, work, _modes) do
    t0 = now()
    tracer = Reference.start()
    traced_by(tracer, work)

    send(tracer, {:done, self()})

    receive do
      {:reference_done, events, _stacks} -> %{ns: now() - t0, events: events}
    end
  end

  # Runs work traced by a pid tracer and waits until every message of it
  # has been delivered.
  defp traced_by(tracer, work) do
    :erlang.trace(self(), true, [{:tracer, tracer} | @message_flags])
    work.()
    :erlang.trace(self(), false, @message_flags)
    ref = :erlang.trace_delivered(self())

    receive do
      {:trace_delivered, _, ^ref} -> :ok
    end
  end

  defp drop(n) do
    receive do
      {:done, from} -> send(from, {:dropped, n})
      _ -> drop(n + 1)
    end
  end

  # --- patterns ---------------------------------------------------------------

  def patterns_on do
    Patterns.acquire(nil)
  rescue
    _ -> :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
  catch
    :exit, _ -> :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
  end

  def patterns_off do
    Patterns.release()
  rescue
    _ -> :erlang.trace_pattern({:_, :_, :_}, false, [:local])
  catch
    :exit, _ -> :erlang.trace_pattern({:_, :_, :_}, false, [:local])
  end

  # --- overhead ---------------------------------------------------------------

  @traced [:untraced_patterns, :floor, :msg_floor, :nif, :process, :reference]
  @variants [:untraced | @traced]

  def overhead(label, work, reps, modes) do
    IO.puts("\n== #{label}: #{reps} runs each, medians ==")
    # warm up every path once (code loading, first-call costs)
    measure_round(work, modes, 0)

    samples =
      Enum.reduce(1..reps, %{}, fn rep, acc ->
        round = measure_round(work, modes, rep)
        Map.merge(acc, round, fn _k, old, new -> old ++ new end)
      end)

    med = Map.new(samples, fn {variant, runs} -> {variant, median_run(runs)} end)
    print_table(med)
    med
  end

  # One round: untraced without patterns, then the traced variants with the
  # patterns held, in an order rotated each round so drift hits them alike.
  defp measure_round(work, modes, rep) do
    :erlang.garbage_collect()
    untraced = isolated(fn -> run(:untraced, work, modes) end)
    patterns_on()
    n = length(@traced)
    order = Enum.drop(@traced, rem(rep, n)) ++ Enum.take(@traced, rem(rep, n))

    traced =
      Map.new(order, fn variant ->
        :erlang.garbage_collect()
        kind = if variant == :untraced_patterns, do: :untraced, else: variant
        {variant, [isolated(fn -> run(kind, work, modes) end)]}
      end)

    patterns_off()
    Map.put(traced, :untraced, [untraced])
  end

  defp median_run(runs) do
    sorted = Enum.sort_by(runs, & &1.ns)

    Enum.at(sorted, div(length(sorted), 2))
    |> Map.put(:all_ns, Enum.map(runs, & &1.ns))
  end

  def ns_per_event(med, variant) do
    %{ns: ns, events: events} = med[variant]
    if events > 0, do: (ns - med.untraced.ns) / events, else: nil
  end

  defp print_table(med) do
    floor = ns_per_event(med, :floor)
    ref_ns = med.reference.ns
    ref_per_event = ns_per_event(med, :reference)

    IO.puts(
      pad("variant", 18) <>
        lpad("time ms", 10) <>
        lpad("events", 10) <>
        lpad("ns/event", 10) <>
        lpad("x floor", 9) <>
        lpad("x ref/ev", 9) <> lpad("ref/this", 10) <> "   (runs, ms)"
    )

    for variant <- @variants do
      %{ns: ns, events: events, all_ns: all} = med[variant]
      per_event = ns_per_event(med, variant)

      IO.puts(
        pad(to_string(variant), 18) <>
          lpad(fmt(ns / 1.0e6, 2), 10) <>
          lpad(if(events > 0, do: to_string(events), else: "-"), 10) <>
          lpad(if(per_event, do: fmt(per_event, 0), else: "-"), 10) <>
          lpad(if(per_event, do: fmt(per_event / floor, 2), else: "-"), 9) <>
          lpad(if(per_event, do: fmt(per_event / ref_per_event, 2), else: "-"), 9) <>
          lpad(fmt(ref_ns / ns, 2) <> "x", 10) <>
          "   (" <> Enum.map_join(all, " ", &fmt(&1 / 1.0e6, 1)) <> ")"
      )
    end

    IO.puts(
      "pattern tax on untraced code: #{fmt(med.untraced_patterns.ns / med.untraced.ns, 2)}x; " <>
        "floor vs untraced: #{fmt(med.floor.ns / med.untraced.ns, 1)}x; " <>
        "per event: process = #{fmt(ns_per_event(med, :process) / ns_per_event(med, :msg_floor), 2)}x msg_floor, " <>
        "msg_floor = #{fmt(ns_per_event(med, :msg_floor) / floor, 2)}x floor"
    )
  end

  # --- memory -----------------------------------------------------------------

  # Traces Work.loop/1 for about `events` events in `mode`, sampling memory
  # every 10 ms from a helper process that the traced fun starts.
  def memory_run(mode, events, modes) do
    rounds = div(events, 9)

    isolated(fn ->
      patterns_on()

      work = fn ->
        sampler = start_sampler()
        FlameOn.Bench.Work.loop(rounds)
        send(sampler, {:stop, self()})

        receive do
          {:samples, samples} -> samples
        end
      end

      t0 = now()

      {samples, events_seen} =
        case {mode, modes} do
          {:nif, %{nif: :profile}} ->
            {samples, profile} = FlameOn.Client.profile(work, mode: :nif)
            {samples, profile.stats.events}

          {:nif, _} ->
            session = Native.new(%{})
            :erlang.trace(self(), true, [{:tracer, Native, session} | @module_flags])
            samples = work.()
            :erlang.trace(self(), false, @module_flags)
            {_raw, stats} = Native.finish(session, now())
            {samples, stats.events}

          {:process, %{process: how}} ->
            opts = if how == :profile, do: [mode: :process], else: []
            {samples, profile} = FlameOn.Client.profile(work, opts)
            {samples, profile.stats.events}
        end

      elapsed = now() - t0
      patterns_off()
      summarize_samples(samples, events_seen, elapsed)
    end)
  end

  # The sampler finds the session through the traced process's tracer:
  # {Native, session} in NIF mode, the session pid in process mode (its
  # native session read once with :sys.get_state/2, before the load starts).
  defp start_sampler do
    traced = self()

    pid =
      spawn(fn ->
        {native, session_pid} = find_session(traced)
        send(traced, {:sampler_ready, self()})
        sample_loop(native, session_pid, [])
      end)

    receive do
      {:sampler_ready, ^pid} -> pid
    end
  end

  defp find_session(traced) do
    case :erlang.trace_info(traced, :tracer) do
      {:tracer, {_module, state}} ->
        {if(native_session?(state), do: state), nil}

      {:tracer, pid} when is_pid(pid) ->
        native =
          try do
            pid |> :sys.get_state(5_000) |> state_values() |> Enum.find(&native_session?/1)
          catch
            _, _ -> nil
          end

        {native, pid}

      _ ->
        {nil, nil}
    end
  end

  defp state_values(state) when is_map(state), do: Map.values(state)
  defp state_values(state) when is_tuple(state), do: Tuple.to_list(state)
  defp state_values(_), do: []

  defp native_session?(term) do
    is_reference(term) and is_map(Native.stats(term))
  rescue
    _ -> false
  end

  defp sample_loop(native, session_pid, acc) do
    receive do
      {:stop, from} ->
        send(from, {:samples, Enum.reverse([sample(native, session_pid) | acc])})
    after
      10 -> sample_loop(native, session_pid, [sample(native, session_pid) | acc])
    end
  end

  defp sample(native, session_pid) do
    native_stats =
      try do
        if native, do: Native.stats(native)
      rescue
        _ -> nil
      end

    process = if session_pid, do: Process.info(session_pid, [:memory, :message_queue_len])

    %{
      native_bytes: native_stats && native_stats[:memory_bytes],
      events: native_stats && native_stats[:events],
      process_bytes: process && process[:memory],
      queue: process && process[:message_queue_len],
      vm_bytes: :erlang.memory(:total)
    }
  end

  defp summarize_samples(samples, events, elapsed) do
    max_of = fn key ->
      samples |> Enum.map(& &1[key]) |> Enum.reject(&is_nil/1) |> Enum.max(fn -> nil end)
    end

    last = List.last(samples)
    vm = Enum.map(samples, & &1.vm_bytes)

    %{
      events: events,
      seconds: elapsed / 1.0e9,
      samples: length(samples),
      native_peak: max_of.(:native_bytes),
      native_end: last.native_bytes,
      process_peak: max_of.(:process_bytes),
      process_end: last.process_bytes,
      queue_peak: max_of.(:queue),
      vm_growth: Enum.max(vm) - hd(vm)
    }
  end

  def print_memory(results) do
    IO.puts("\n== memory: Work.loop/1 (few distinct stacks), sampled every 10 ms ==")

    IO.puts(
      pad("mode", 9) <>
        lpad("events", 10) <>
        lpad("s", 7) <>
        lpad("session MiB", 13) <>
        lpad("(end)", 8) <>
        lpad("proc MiB", 10) <>
        lpad("(end)", 8) <> lpad("max queue", 11) <> lpad("VM growth MiB", 15)
    )

    for {mode, target, r} <- results do
      IO.puts(
        pad(to_string(mode), 9) <>
          lpad("#{r.events}", 10) <>
          lpad(fmt(r.seconds, 1), 7) <>
          lpad(mib(r.native_peak), 13) <>
          lpad(mib(r.native_end), 8) <>
          lpad(mib(r.process_peak), 10) <>
          lpad(mib(r.process_end), 8) <>
          lpad(if(r.queue_peak, do: "#{r.queue_peak}", else: "-"), 11) <>
          lpad(mib(r.vm_growth), 15) <> "   (asked for #{target})"
      )
    end
  end

  # --- output helpers -----------------------------------------------------------

  def fmt(nil, _), do: "-"
  def fmt(x, 0), do: x |> round() |> to_string()
  def fmt(x, d), do: :erlang.float_to_binary(x / 1, decimals: d)
  def mib(nil), do: "-"
  def mib(bytes), do: fmt(bytes / @mib, 2)
  def pad(s, n), do: String.pad_trailing(s, n)
  def lpad(s, n), do: String.pad_leading(s, n)
  def mark(true), do: "PASS"
  def mark(false), do: "MISS"
end

alias FlameOn.Bench

quick? = System.get_env("FO_BENCH_QUICK") in ["1", "true"]
reps = String.to_integer(System.get_env("FO_BENCH_REPS") || "7")
{:ok, _} = Application.ensure_all_started(:flame_on_client)

IO.puts("flame_on_client overhead bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

IO.puts(
  "OTP #{System.otp_release()} (erts #{:erlang.system_info(:version)}), Elixir #{System.version()}, " <>
    "#{:erlang.system_info(:schedulers_online)} schedulers, " <>
    "#{length(:code.all_loaded())} modules loaded" <> if(quick?, do: ", QUICK sizes", else: "")
)

case File.read("/proc/loadavg") do
  {:ok, load} ->
    IO.puts("load average at start: #{load |> String.split() |> Enum.take(3) |> Enum.join(" ")}")

  _ ->
    :ok
end

modes = Bench.detect_modes()

case modes.nif do
  :profile ->
    IO.puts("mode :nif     -> FlameOn.Client.profile(fun, mode: :nif)")

  {:by_hand, {:error, why}} ->
    IO.puts(
      "mode :nif     -> NOTE: profile(fun, mode: :nif) unavailable (#{why}); " <>
        "driving FlameOn.Client.Native as tracer module by hand (new, trace, finish, Profile.build)"
    )
end

IO.puts(
  case modes.process do
    :profile -> "mode :process -> FlameOn.Client.profile(fun, mode: :process)"
    :profile_default -> "mode :process -> NOTE: no :mode option yet; FlameOn.Client.profile(fun)"
  end
)

# pattern set + clear, the per-profile constant left out of ns/event
pattern_ms =
  for _ <- 1..5 do
    {us, _} =
      :timer.tc(fn ->
        Bench.patterns_on()
        Bench.patterns_off()
      end)

    us / 1000
  end
  |> Enum.sort()
  |> Enum.at(2)

IO.puts(
  "setting + clearing the global call patterns: #{Bench.fmt(pattern_ms, 1)} ms " <>
    "(once per profile; not in the figures below)"
)

{fib_n, fib_times, rounds} = if quick?, do: {18, 2, 10}, else: {22, 5, 100}

fib_work = fn -> Bench.Work.fibs(fib_n, fib_times) end

{:ok, kv} = Bench.KV.start()
dir = Path.join(System.tmp_dir!(), "flame_on_bench_#{System.unique_integer([:positive])}")
File.mkdir_p!(dir)
realistic_work = fn -> Bench.Work.realistic(kv, dir, rounds) end

heavy = Bench.overhead("call-heavy: fib(#{fib_n}) x #{fib_times}", fib_work, reps, modes)

real =
  Bench.overhead(
    "realistic: #{rounds} rounds of 40 GenServer calls + Enum/Map pipelines, file write/read every 10th",
    realistic_work,
    reps,
    modes
  )

File.rm_rf!(dir)
GenServer.stop(kv)

{small, big} = if quick?, do: {100_000, 500_000}, else: {1_000_000, 5_000_000}

memory =
  for mode <- [:nif, :process], events <- [small, big] do
    {mode, events, Bench.memory_run(mode, events, modes)}
  end

Bench.print_memory(memory)

# --- targets -------------------------------------------------------------------

IO.puts("\n== targets ==")

nif_vs_floor = Bench.ns_per_event(heavy, :nif) / Bench.ns_per_event(heavy, :floor)

IO.puts(
  "#{Bench.mark(nif_vs_floor <= 1.3)}  mode :nif <= 1.3x the floor per event (call-heavy): " <>
    "#{Bench.fmt(nif_vs_floor, 2)}x " <>
    "(nif #{Bench.fmt(Bench.ns_per_event(heavy, :nif), 0)} ns/event, " <>
    "floor #{Bench.fmt(Bench.ns_per_event(heavy, :floor), 0)} ns/event)"
)

# Beside each end-to-end speedup, the most any tracer of that kind could
# reach: the floor's (tracer module) or msg_floor's (messages) speedup.
for {label, med} <- [{"call-heavy", heavy}, {"realistic", real}] do
  speedup = med.reference.ns / med.nif.ns

  IO.puts(
    "#{Bench.mark(speedup >= 4)}  mode :nif >= 4x faster than the reference end to end " <>
      "(#{label}): #{Bench.fmt(speedup, 2)}x " <>
      "(a tracer module doing nothing, the floor: #{Bench.fmt(med.reference.ns / med.floor.ns, 2)}x)"
  )
end

for {label, med} <- [{"call-heavy", heavy}, {"realistic", real}] do
  speedup = med.reference.ns / med.process.ns

  IO.puts(
    "#{Bench.mark(speedup > 1)}  mode :process faster than the reference end to end " <>
      "(#{label}): #{Bench.fmt(speedup, 2)}x " <>
      "(a pid tracer dropping messages, msg_floor: #{Bench.fmt(med.reference.ns / med.msg_floor.ns, 2)}x)"
  )
end

for {mode, events, r} <- memory, events == big do
  peak = r.native_peak

  IO.puts(
    "#{Bench.mark(peak != nil and peak < 16 * 1024 * 1024)}  session memory < 16 MiB " <>
      "for #{r.events} events, mode :#{mode}: peak #{Bench.mib(peak)} MiB" <>
      if(mode == :process,
        do: " (+ session process peak #{Bench.mib(r.process_peak)} MiB)",
        else: ""
      )
  )
end

for mode <- [:nif, :process] do
  [{_, _, s}, {_, _, b}] = for {^mode, e, r} <- memory, do: {mode, e, r}

  IO.puts(
    "#{Bench.mark(s.native_peak != nil and b.native_peak <= s.native_peak)}  " <>
      "session memory does not grow with events, mode :#{mode}: " <>
      "#{s.events} events #{Bench.mib(s.native_peak)} MiB, #{b.events} events #{Bench.mib(b.native_peak)} MiB"
  )
end
