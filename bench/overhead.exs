# Tracing overhead of flame_on_client, per event and end to end, beside a
# floor and a reference.
#
# Run from the project root:
#
#     mix run bench/overhead.exs
#
# It builds bench/build/floor_tracer.so with `make -C bench floor` and
# bench/core_replay with `make -C bench core_replay` when needed (gcc and
# erlang-dev). About three minutes. Environment knobs:
#
#   FO_BENCH_REPS=N     repetitions of each timing (default 7; the best is kept)
#   FO_BENCH_QUICK=1    small workloads, for a smoke test of the script itself
#   FO_BENCH_ALLOC=1    profile with alloc: true (allocation profiles: every
#                       garbage collection's heap sizes decoded and charged)
#
# The floor of everything below is a tracer-module NIF whose trace/5 only
# counts (bench/floor_tracer.c): what any call tracer pays the VM.
#
# 1. Per event, on fib (call-heavy), an Enum/Map/sort pipeline and a
#    "realistic" mix of GenServer calls, Enum pipelines and file I/O: the
#    best wall time of
#
#      untraced           the workload alone, no trace patterns
#      untraced+patterns  the workload untraced while the global call patterns are set
#                         (the tax every process on the node pays during any trace)
#      floor              traced by the counting tracer module
#      msg_floor          traced by a pid tracer whose process drops the messages:
#                         what any message-based tracer (process mode) pays the VM
#      nif                FlameOn.Client.profile(fun, mode: :nif), trace + finish
#      process            FlameOn.Client.profile(fun, mode: :process), trace + finish
#      reference          an eflame-style tracer process: messages received one by
#                         one, per-process stack lists, a map of stack => time
#
#    with the events traced, ns per event ((time - untraced) / events) and
#    the ratios to the floor and to the reference. The bench holds the trace
#    patterns around these variants (FlameOn.Client.Node.Patterns.acquire/1), so
#    none pays for setting them.
#
# 2. End to end, on fib, the pipeline and a body recursion 10 000 deep: what
#    a user pays for FlameOn.Client.profile/2 with default options (setting
#    the patterns, tracing, clearing them, finishing, building the profile)
#    against the floor doing the same pattern setting, tracing and clearing.
#
# 3. Depth: the deep recursion profiled with max_depth: 10_000 against the
#    default max_depth (512), end to end, both with collapse_recursion:
#    false (beside the default options, where the recursion is one frame);
#    and the same for a recursion that calls a leaf function at every level
#    (informational: its stack texts add up to depth^2 frames, which
#    :max_stack_bytes bounds).
#
# 4. Memory: a loop over a few small functions (few distinct stacks)
#    traced for 1M and 5M events in each mode, sampling the sessions' memory.
#
# 5. The C core alone: bench/core_replay.
#
# Finally the targets, PASS/MISS. Every timing is the best of FO_BENCH_REPS
# runs, each in a fresh process, with the variants of a round in an order
# rotated from round to round so drift hits them alike: noise on a shared
# machine only ever adds time. See bench/README.md and bench/RESULTS.md.

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
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns

  @module_flags [:call, :return_to, :running, :arity]
  @message_flags [:call, :return_to, :running, :arity, :monotonic_timestamp]
  @match_spec [{:_, [], [{:message, {:caller}}]}]
  @mib 1024 * 1024

  def isolated(fun), do: FlameOn.Bench.Isolated.run(fun)

  defp now, do: :erlang.monotonic_time(:nanosecond)

  # --- the variants -----------------------------------------------------------

  def run(:untraced, work) do
    t0 = now()
    work.()
    %{ns: now() - t0, events: 0}
  end

  def run(:floor, work) do
    FloorTracer.reset()
    t0 = now()
    :erlang.trace(self(), true, [{:tracer, FloorTracer, []} | @module_flags])
    work.()
    :erlang.trace(self(), false, @module_flags)
    %{ns: now() - t0, events: FloorTracer.count()}
  end

  # The floor end to end: the same pattern setting and clearing as a trace
  # of ours does (FlameOn.Client.Node.Patterns: modules loaded later, then every
  # loaded function), around the counting tracer.
  def run(:floor_e2e, work) do
    FloorTracer.reset()
    t0 = now()
    :erlang.trace_pattern(:on_load, @match_spec, [:local])
    :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
    :erlang.trace(self(), true, [{:tracer, FloorTracer, []} | @module_flags])
    work.()
    :erlang.trace(self(), false, @module_flags)
    :erlang.trace_pattern({:_, :_, :_}, false, [:local])
    :erlang.trace_pattern(:on_load, false, [:local])
    %{ns: now() - t0, events: FloorTracer.count()}
  end

  def run({:profile, opts}, work) do
    opts =
      if System.get_env("FO_BENCH_ALLOC") in ["1", "true"], do: [alloc: true] ++ opts, else: opts

    t0 = now()
    {_, profile} = FlameOn.Client.profile(work, opts)
    %{ns: now() - t0, events: profile.stats.events, stats: profile.stats}
  end

  def run(:nif, work), do: run({:profile, [mode: :nif]}, work)
  def run(:process, work), do: run({:profile, [mode: :process]}, work)

  # A pid tracer whose process drops every message: the floor of any
  # message-based tracer (mode :process, the reference).
  def run(:msg_floor, work) do
    t0 = now()
    tracer = spawn(fn -> drop(0) end)
    traced_by(tracer, work)

    send(tracer, {:done, self()})

    receive do
      {:dropped, events} -> %{ns: now() - t0, events: events}
    end
  end

  def run(:reference, work) do
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

  def patterns_on, do: :ok = Patterns.acquire(nil)
  def patterns_off, do: :ok = Patterns.release()

  # --- rounds -------------------------------------------------------------------

  # Runs each variant `reps` times (after one warm-up round), each run in a
  # fresh process; `around` wraps each round (e.g. holding the patterns).
  # The first two variants are a pair, run back to back at the start of
  # every round in alternating order (so their paired ratio, see paired/4,
  # compares runs made under the same load); the others follow in an order
  # rotated every round. Returns %{variant => best run}, each best run with
  # :all_ns, every run's time in round order.
  def rounds(variants, work, reps, around \\ fn round -> round.() end) do
    {pair, rest} = Enum.split(variants, 2)

    one = fn rep ->
      pair = if rem(rep, 2) == 0, do: pair, else: Enum.reverse(pair)
      n = max(length(rest), 1)
      rest = Enum.drop(rest, rem(rep, n)) ++ Enum.take(rest, rem(rep, n))

      around.(fn ->
        Map.new(pair ++ rest, fn {name, kind} ->
          :erlang.garbage_collect()
          {name, [isolated(fn -> run(kind, work) end)]}
        end)
      end)
    end

    one.(0)

    1..reps
    |> Enum.map(one)
    |> Enum.reduce(fn round, acc -> Map.merge(acc, round, fn _k, a, b -> a ++ b end) end)
    |> Map.new(fn {name, runs} ->
      best = Enum.min_by(runs, & &1.ns)
      {name, Map.put(best, :all_ns, Enum.map(runs, & &1.ns))}
    end)
  end

  # The median over rounds of (a - base) / (b - base), a and b the two
  # variants' runs of one round (base: a constant subtracted from both, e.g.
  # the untraced time): the ratio of runs made back to back, so a load
  # that comes and goes hits both sides alike.
  def paired(best, a, b, base \\ 0) do
    ratios =
      Enum.zip_with(best[a].all_ns, best[b].all_ns, fn x, y -> (x - base) / max(y - base, 1) end)

    ratios |> Enum.sort() |> Enum.at(div(length(ratios), 2))
  end

  # --- 1. per event -------------------------------------------------------------

  # floor and nif first: the pair of every round
  @traced [
    floor: :floor,
    nif: :nif,
    untraced_patterns: :untraced,
    msg_floor: :msg_floor,
    process: :process,
    reference: :reference
  ]

  def per_event(label, work, reps) do
    IO.puts("\n== per event: #{label}: best of #{reps} ==")
    untraced = rounds([untraced: :untraced], work, reps)

    traced =
      rounds(@traced, work, reps, fn round ->
        patterns_on()

        try do
          round.()
        after
          patterns_off()
        end
      end)

    best = Map.merge(untraced, traced)
    print_per_event(best)
    best
  end

  def paired_per_event(best), do: paired(best, :nif, :floor, best.untraced.ns)

  def ns_per_event(best, variant) do
    %{ns: ns, events: events} = best[variant]
    if events > 0, do: (ns - best.untraced.ns) / events, else: nil
  end

  defp print_per_event(best) do
    floor = ns_per_event(best, :floor)
    ref_ns = best.reference.ns
    ref_per_event = ns_per_event(best, :reference)

    IO.puts(
      pad("variant", 18) <>
        lpad("time ms", 10) <>
        lpad("events", 10) <>
        lpad("ns/event", 10) <>
        lpad("x floor", 9) <>
        lpad("x ref/ev", 9) <> lpad("ref/this", 10) <> "   (runs, ms)"
    )

    for variant <- [:untraced, :untraced_patterns, :floor, :msg_floor, :nif, :process, :reference] do
      %{ns: ns, events: events, all_ns: all} = best[variant]
      per_event = ns_per_event(best, variant)

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
      "nif per event, paired with the floor run next to it: #{fmt(paired_per_event(best), 2)}x " <>
        "(median of the rounds' ratios)"
    )

    IO.puts(
      "pattern tax on untraced code: #{fmt(best.untraced_patterns.ns / best.untraced.ns, 2)}x; " <>
        "floor vs untraced: #{fmt(best.floor.ns / best.untraced.ns, 1)}x; " <>
        "per event: process = #{fmt(ns_per_event(best, :process) / ns_per_event(best, :msg_floor), 2)}x msg_floor, " <>
        "msg_floor = #{fmt(ns_per_event(best, :msg_floor) / floor, 2)}x floor"
    )
  end

  # --- 2. and 3. end to end -----------------------------------------------------

  # profile/2 (default options, and :process for comparison) against the
  # floor doing the same pattern setting, tracing and clearing.
  def end_to_end(label, work, reps) do
    variants = [floor_e2e: :floor_e2e, nif: {:profile, []}, process: {:profile, [mode: :process]}]
    best = e2e_table("end to end: #{label}", variants, :floor_e2e, work, reps)

    IO.puts(
      "profile/2 paired with the floor run next to it: #{fmt(paired(best, :nif, :floor_e2e), 2)}x " <>
        "(median of the rounds' ratios)"
    )

    best
  end

  # The same work profiled with the default max_depth and with max_depth:
  # 10_000, every level a frame (collapse_recursion: false); and with the
  # default options, where direct recursion is one frame.
  def depth(label, work, reps) do
    variants = [
      default_depth: {:profile, [collapse_recursion: false]},
      max_depth_10000: {:profile, [max_depth: 10_000, collapse_recursion: false]},
      collapsed: {:profile, []},
      floor_e2e: :floor_e2e
    ]

    best = e2e_table("depth: #{label}", variants, :default_depth, work, reps)

    IO.puts(
      "max_depth: 10_000 paired with the default run next to it: " <>
        "#{fmt(paired(best, :max_depth_10000, :default_depth), 2)}x (median of the rounds' ratios)"
    )

    best
  end

  defp e2e_table(title, variants, base, work, reps) do
    IO.puts("\n== #{title}: best of #{reps} ==")
    best = rounds(variants, work, reps)
    print_e2e(best, Enum.sort_by(Keyword.keys(variants), &(&1 != :floor_e2e)), base)
    best
  end

  defp print_e2e(best, variants, base) do
    IO.puts(
      pad("variant", 18) <>
        lpad("time ms", 10) <>
        lpad("events", 10) <>
        lpad("nodes", 8) <>
        lpad("x " <> to_string(base), 16) <> lpad("x floor", 9) <> "   (runs, ms)"
    )

    for variant <- variants do
      %{ns: ns, events: events, all_ns: all} = run = best[variant]
      nodes = get_in(run, [:stats, :nodes])

      IO.puts(
        pad(to_string(variant), 18) <>
          lpad(fmt(ns / 1.0e6, 2), 10) <>
          lpad(to_string(events), 10) <>
          lpad(if(nodes, do: to_string(nodes), else: "-"), 8) <>
          lpad(fmt(ns / best[base].ns, 2), 16) <>
          lpad(fmt(ns / best.floor_e2e.ns, 2), 9) <>
          "   (" <> Enum.map_join(all, " ", &fmt(&1 / 1.0e6, 1)) <> ")"
      )
    end
  end

  # --- 4. memory -----------------------------------------------------------------

  # Traces Work.loop/1 for about `events` events in `mode`, sampling memory
  # every 10 ms from a helper process that the traced fun starts.
  def memory_run(mode, events) do
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
      {samples, profile} = FlameOn.Client.profile(work, mode: mode)
      elapsed = now() - t0
      patterns_off()

      samples
      |> summarize_samples(profile.stats.events, elapsed)
      |> Map.merge(%{
        tables_end: profile.stats.memory_bytes,
        buffer: Map.get(profile.stats, :buffer_bytes, 0)
      })
    end)
  end

  # The bench runs one trace at a time, so the node-wide sum of the
  # sessions' tables (Native.session_bytes/0) is this session's; in process
  # mode the tracer is the session process, whose own memory and mailbox
  # are sampled too.
  defp start_sampler do
    traced = self()

    pid =
      spawn(fn ->
        session_pid =
          case :erlang.trace_info(traced, :tracer) do
            {:tracer, pid} when is_pid(pid) -> pid
            _ -> nil
          end

        send(traced, {:sampler_ready, self()})
        sample_loop(session_pid, [])
      end)

    receive do
      {:sampler_ready, ^pid} -> pid
    end
  end

  defp sample_loop(session_pid, acc) do
    receive do
      {:stop, from} ->
        send(from, {:samples, Enum.reverse([sample(session_pid) | acc])})
    after
      10 -> sample_loop(session_pid, [sample(session_pid) | acc])
    end
  end

  defp sample(session_pid) do
    process = if session_pid, do: Process.info(session_pid, [:memory, :message_queue_len])

    %{
      native_bytes: Native.session_bytes(),
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
        lpad("tables MiB", 12) <>
        lpad("buffer MiB", 12) <>
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
          lpad(mib(r.tables_end), 12) <>
          lpad(mib(r.buffer), 12) <>
          lpad(mib(r.process_peak), 10) <>
          lpad(mib(r.process_end), 8) <>
          lpad(if(r.queue_peak, do: "#{r.queue_peak}", else: "-"), 11) <>
          lpad(mib(r.vm_growth), 15) <> "   (asked for #{target})"
      )
    end
  end

  # --- 5. the core alone ---------------------------------------------------------

  # bench/core_replay's output, and its best run's rate in events/s (as
  # everywhere here: the run the machine's other tenants disturbed least).
  def core_replay(quick?) do
    FlameOn.Bench.Make.make!(["core_replay"])
    args = if quick?, do: ["-n", "2000000", "-r", "3"], else: []
    {out, 0} = System.cmd(Path.join(__DIR__, "core_replay"), args, stderr_to_stdout: true)
    IO.puts("\n== the C core alone: bench/core_replay #{Enum.join(args, " ")} ==")
    IO.write(out)

    ~r/run \d+: [\d.]+ s, ([\d.]+) M events\/s/
    |> Regex.scan(out)
    |> Enum.map(fn [_, rate] -> String.to_float(rate) * 1.0e6 end)
    |> Enum.max()
  end

  # --- output helpers -----------------------------------------------------------

  # A target on two variants of a table: their best runs' ratio and their
  # paired ratio must both be within limit.
  def target(best, a, b, limit, what) do
    ratio = best[a].ns / best[b].ns
    paired = paired(best, a, b)

    IO.puts(
      "#{mark(ratio <= limit and paired <= limit)}  #{what}: #{fmt(ratio, 2)}x best, " <>
        "#{fmt(paired, 2)}x paired (#{fmt(best[a].ns / 1.0e6, 1)} ms vs #{fmt(best[b].ns / 1.0e6, 1)} ms)"
    )
  end

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

# pattern set + clear, a per-profile constant: in the end-to-end figures,
# not in the per-event ones
pattern_ms =
  for _ <- 1..5 do
    {us, _} =
      :timer.tc(fn ->
        Bench.patterns_on()
        Bench.patterns_off()
      end)

    us / 1000
  end
  |> Enum.min()

IO.puts(
  "setting + clearing the global call patterns: #{Bench.fmt(pattern_ms, 1)} ms " <>
    "(once per profile; in the end-to-end figures, not in the per-event ones)"
)

{fib_n, fib_times, fib_e2e_n, rounds, keys, deep_n} =
  if quick?, do: {18, 2, 16, 10, 200, 1_000}, else: {22, 5, 21, 100, 2_000, 10_000}

fib_work = fn -> Bench.Work.fibs(fib_n, fib_times) end
pipeline_work = fn -> Bench.Work.pipeline(keys) end

{:ok, kv} = Bench.KV.start()
dir = Path.join(System.tmp_dir!(), "flame_on_bench_#{System.unique_integer([:positive])}")
File.mkdir_p!(dir)
realistic_work = fn -> Bench.Work.realistic(kv, dir, rounds) end

per_event = [
  heavy: Bench.per_event("call-heavy: fib(#{fib_n}) x #{fib_times}", fib_work, reps),
  pipeline:
    Bench.per_event(
      "pipeline: Enum/Map/sort over #{keys} keys (body recursion #{keys} deep)",
      pipeline_work,
      reps
    ),
  realistic:
    Bench.per_event(
      "realistic: #{rounds} rounds of 40 GenServer calls + Enum/Map pipelines, file write/read every 10th",
      realistic_work,
      reps
    )
]

File.rm_rf!(dir)
GenServer.stop(kv)

e2e = [
  {"fib(#{fib_e2e_n})",
   Bench.end_to_end("fib(#{fib_e2e_n})", fn -> Bench.Work.fib(fib_e2e_n) end, reps)},
  {"pipeline over #{keys} keys",
   Bench.end_to_end("pipeline: Enum/Map/sort over #{keys} keys", pipeline_work, reps)},
  {"recursion #{deep_n} deep",
   Bench.end_to_end("body recursion #{deep_n} deep", fn -> Bench.Work.deep(deep_n) end, reps)}
]

depth = [
  {"recursion #{deep_n} deep",
   Bench.depth("body recursion #{deep_n} deep", fn -> Bench.Work.deep(deep_n) end, reps)},
  {"recursion #{deep_n} deep, a leaf call at every level",
   Bench.depth(
     "body recursion #{deep_n} deep calling a leaf at every level (its stack texts add up to depth² frames)",
     fn -> Bench.Work.deep_with_leaves(deep_n) end,
     reps
   )}
]

{small, big} = if quick?, do: {100_000, 500_000}, else: {1_000_000, 5_000_000}

memory =
  for mode <- [:nif, :process], events <- [small, big] do
    {mode, events, Bench.memory_run(mode, events)}
  end

Bench.print_memory(memory)

core_rate = Bench.core_replay(quick?)

# --- targets -------------------------------------------------------------------

IO.puts("\n== targets ==")

# Per event: the best runs' ratio, and the median of the ratios of runs
# made back to back (robust to a load that comes and goes); both must hold.
for {key, label} <- [heavy: "call-heavy", pipeline: "pipeline", realistic: "realistic"] do
  best = per_event[key]
  ratio = Bench.ns_per_event(best, :nif) / Bench.ns_per_event(best, :floor)
  paired = Bench.paired_per_event(best)

  IO.puts(
    "#{Bench.mark(ratio <= 1.3 and paired <= 1.3)}  mode :nif <= 1.3x the floor per event (#{label}): " <>
      "#{Bench.fmt(ratio, 2)}x best, #{Bench.fmt(paired, 2)}x paired " <>
      "(nif #{Bench.fmt(Bench.ns_per_event(best, :nif), 0)} ns/event, " <>
      "floor #{Bench.fmt(Bench.ns_per_event(best, :floor), 0)} ns/event)"
  )
end

for {label, best} <- e2e do
  Bench.target(
    best,
    :nif,
    :floor_e2e,
    1.3,
    "profile/2 end to end <= 1.3x the floor (#{label}, default options)"
  )
end

[{label, deep} | _] = depth

Bench.target(
  deep,
  :max_depth_10000,
  :default_depth,
  2,
  "max_depth: 10_000 <= 2x the default max_depth (#{label})"
)

for {label, key} <- [{"call-heavy", :heavy}, {"realistic", :realistic}] do
  best = per_event[key]
  speedup = best.reference.ns / best.nif.ns

  IO.puts(
    "#{Bench.mark(speedup >= 4)}  mode :nif >= 4x faster than the reference (#{label}, trace + finish): " <>
      "#{Bench.fmt(speedup, 2)}x (a tracer module doing nothing, the floor: " <>
      "#{Bench.fmt(best.reference.ns / best.floor.ns, 2)}x)"
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

# The tables (the core's, at the end of the trace) hold what is distinct,
# so they must not grow with the events; the event buffer of mode :nif is
# bounded by :buffer_events (4096 records by default).
buffer_bound = 4_096 * 56

for mode <- [:nif, :process] do
  [s, b] = for {^mode, _e, r} <- memory, do: r

  IO.puts(
    "#{Bench.mark(b.tables_end <= s.tables_end and b.buffer <= buffer_bound)}  " <>
      "session memory does not grow with events, mode :#{mode}: tables " <>
      "#{Bench.mib(s.tables_end)} MiB at #{s.events} events, #{Bench.mib(b.tables_end)} MiB at " <>
      "#{b.events}; event buffer #{Bench.mib(s.buffer)} / #{Bench.mib(b.buffer)} MiB " <>
      "(bound #{Bench.mib(buffer_bound)} MiB)"
  )
end

IO.puts(
  "#{Bench.mark(core_rate >= 20.0e6)}  the C core >= 20 M events/s: " <>
    "#{Bench.fmt(core_rate / 1.0e6, 1)} M events/s (best run)"
)
