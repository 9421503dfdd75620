# Tail-based tracing (#28): trace every request, keep the slow ones. What
# does a request traced and thrown away cost the node, and where does it go?
#
#     ERL_FLAGS="+JPperf true +sbwt none +sbwtdcpu none +sbwtdio none" mix run bench/tail.exs
#     ... bench/tail.exs load        # one part: load | breakdown | fidelity | mixed
#
# `+sbwt none` (and the dirty schedulers' ones) stops idle schedulers from
# spinning, so the node's CPU time is the work done; `+JPperf true` lets
# mode :native run (its rows are left out otherwise).
#
# Load: WORKERS (50) processes make REQUESTS (2 000) requests in all, each
# two small CPU bursts around a 1 ms sleep, once untraced and once per
# trace/3 variant, the variants interleaved over ROUNDS (3) rounds
# (VARIANTS="all kept,none kept" runs those whose names hold a part). A
# variant's cost is the node's CPU time (every thread of the OS process,
# /proc/self/task/*/schedstat, so the drainer thread and samplers count)
# against the untraced phase's: the ratio, and the extra CPU per request.
# "kept" counts the profiles the variant's shipper got (a process that
# counts them), or for the "stored" rows, which have no shipper, the
# traces the trace store took (kept pending: built only when read).
#
# Breakdown: one process makes sequential requests (no sleep) through the
# steps of trace/3 (FlameOn.Client.profile/2 inlined) and times each step;
# the node CPU per request shows what runs outside the request's own
# process (samplers, the owner's work).

defmodule FlameOn.Bench.Tail do
  @moduledoc false

  alias FlameOn.Client.{Capture, Options}
  alias FlameOn.Client.Node.{PerfSampler, TraceBackend}

  @workers String.to_integer(System.get_env("WORKERS", "50"))
  @requests String.to_integer(System.get_env("REQUESTS", "2000"))
  @rounds String.to_integer(System.get_env("ROUNDS", "3"))
  @burst String.to_integer(System.get_env("BURST", "1000"))

  # --- the request ----------------------------------------------------------

  def request(n \\ @burst) do
    burst(n)
    Process.sleep(1)
    burst(n)
  end

  def burst(n), do: Enum.reduce(1..n, 0, fn k, acc -> rem(acc * 31 + k, 1_000_003) end)

  # --- node CPU -------------------------------------------------------------

  def cpu_ns do
    case File.ls("/proc/self/task") do
      {:ok, tasks} ->
        Enum.reduce(tasks, 0, fn task, acc ->
          case File.read("/proc/self/task/#{task}/schedstat") do
            {:ok, text} -> acc + String.to_integer(hd(String.split(text)))
            _ -> acc
          end
        end)

      _ ->
        0
    end
  end

  # --- load -----------------------------------------------------------------

  def variants do
    native? = PerfSampler.available?()

    base = [
      {"untraced", nil},
      {"trace/3, sample_rate 0 (the API's floor)", [mode: :sample, sample_rate: 0.0]},
      {"sample, keep all", [mode: :sample, sample_rate: 1.0, threshold_ms: 0]},
      {"sample, threshold 250 (none kept)", [mode: :sample, sample_rate: 1.0, threshold_ms: 250]}
    ]

    # the shared tail path as it runs by default (tail: [attribution:
    # :samples]: without flags until a request may be slow, where samples
    # name processes), with the `running`, `garbage_collection` and
    # `receive` flags from the start (attribution: :flags), and
    # explicitly without flags
    native =
      if native?,
        do: [
          {"native, keep all", [mode: :native, sample_rate: 1.0, threshold_ms: 0]},
          {"native, threshold 250 (none kept)",
           [mode: :native, sample_rate: 1.0, threshold_ms: 250]},
          # every request lasts over 1 ms (its sleep): all kept, on the
          # shared tail path
          {"native, threshold 1 (all kept)", [mode: :native, sample_rate: 1.0, threshold_ms: 1]},
          {"native, flags, threshold 250 (none kept)",
           {:flags, [mode: :native, sample_rate: 1.0, threshold_ms: 250]}},
          {"native, flags, threshold 1 (all kept)",
           {:flags, [mode: :native, sample_rate: 1.0, threshold_ms: 1]}},
          {"native, no flags, threshold 250 (none kept)",
           {:samples, [mode: :native, sample_rate: 1.0, threshold_ms: 250]}},
          {"native, no flags, threshold 1 (all kept)",
           {:samples, [mode: :native, sample_rate: 1.0, threshold_ms: 1]}},
          # no shipper: the trace store keeps each kept request's data,
          # its profile built only when read (FlameOn.Client.Profile.Pending)
          {"native, threshold 1 (all kept, stored)",
           {:stored, [mode: :native, sample_rate: 1.0, threshold_ms: 1]}},
          {"native, flags, threshold 1 (all kept, stored)",
           {:stored, {:flags, [mode: :native, sample_rate: 1.0, threshold_ms: 1]}}}
        ],
        else: []

    all = base ++ native ++ extra_variants(native?)

    # VARIANTS="keep all,none kept": those whose names hold one of these
    # (the untraced phase always runs: the ratios are against it)
    case System.get_env("VARIANTS") do
      nil ->
        all

      wanted ->
        parts = String.split(wanted, ",", trim: true)

        Enum.filter(all, fn {name, _} ->
          name == "untraced" or Enum.any?(parts, &String.contains?(name, &1))
        end)
    end
  end

  # The tail path's own-session fallback where native sampling runs (what
  # mode :native with threshold_ms cost before the shared path).
  # And the tail path's hold alone: untraced requests while the sampler
  # runs for tail tracing (what the node pays for the sampler itself).
  # And the shared path without lingering (tail: [linger_ms: 0]: the flags
  # on and off per request, as before linger_ms).
  def extra_variants(true),
    do: [
      {"native, threshold 250, linger_ms 0",
       {:linger0, [mode: :native, sample_rate: 1.0, threshold_ms: 250]}},
      {"native, threshold 250, own session",
       {:own, [mode: :native, sample_rate: 1.0, threshold_ms: 250]}},
      {"untraced, tail hold on (sampler only)", :hold},
      # one tail trace with flags around all of a worker's requests: their
      # time slices' callbacks and records, none of trace/3's own work per
      # request (the floor of the flags)
      {"native, flags' floor (1 trace a worker)",
       {:one, [mode: :native, sample_rate: 1.0, threshold_ms: 3_600_000]}}
    ]

  def extra_variants(false), do: []

  def load do
    IO.puts(
      "== load: #{@workers} workers, #{@requests} requests of 2 bursts (#{@burst}) around a 1 ms sleep, #{@rounds} rounds =="
    )

    if PerfSampler.available?() do
      IO.puts(
        "(the default rows run " <>
          if(FlameOn.Client.Core.Native.tail_flagless(),
            do: "without flags until a request may be slow: samples name processes here)",
            else: "with flags: samples cannot name processes here)"
          )
      )
    end

    variants = variants()
    # warm up every path once
    for {_, opts} <- variants, do: phase(opts, 100)

    results =
      for _round <- 1..@rounds, {name, opts} <- variants, reduce: %{} do
        acc ->
          :erlang.garbage_collect()
          r = phase(opts, @requests)
          Map.update(acc, name, [r], &[r | &1])
      end

    untraced = best(results["untraced"])

    IO.puts(
      String.pad_trailing("variant", 40) <>
        "  cpu ms   ratio  +cpu µs/req  wall ms  kept"
    )

    for {name, _} <- variants do
      r = best(results[name])
      ratio = r.cpu_ns / untraced.cpu_ns
      extra = (r.cpu_ns - untraced.cpu_ns) / @requests / 1000

      IO.puts(
        String.pad_trailing(name, 40) <>
          String.pad_leading("#{round(r.cpu_ns / 1.0e6)}", 8) <>
          String.pad_leading(:erlang.float_to_binary(ratio, decimals: 2) <> "x", 8) <>
          String.pad_leading(:erlang.float_to_binary(extra, decimals: 1), 13) <>
          String.pad_leading("#{round(r.wall_us / 1000)}", 9) <>
          String.pad_leading("#{r.kept}", 6) <>
          "   (rounds' ratios: " <>
          Enum.map_join(Enum.reverse(results[name]), " ", fn x ->
            :erlang.float_to_binary(x.cpu_ns / untraced.cpu_ns, decimals: 2)
          end) <> ")"
      )
    end
  end

  # The round with the least CPU (the least disturbed by the machine's load).
  defp best(rounds), do: Enum.min_by(rounds, & &1.cpu_ns)

  def phase(opts, requests) do
    parent = self()
    per = div(requests, @workers)
    shipper = spawn(fn -> count_loop(0) end)

    {stored?, opts} =
      with {:stored, opts} <- opts, do: {true, opts}, else: (opts -> {false, opts})

    {config, opts} =
      case opts do
        {:own, opts} -> {[shared: false], opts}
        {:one, opts} -> {[shared: true, attribution: :flags], {:one, opts}}
        {:linger0, opts} -> {[shared: true, linger_ms: 0, attribution: :flags], opts}
        {:samples, opts} -> {[shared: true, attribution: :samples], opts}
        {:flags, opts} -> {[shared: true, attribution: :flags], opts}
        :hold -> {[shared: true], :hold}
        opts -> {[shared: true], opts}
      end

    tail_config!(config)
    opts = if opts == :hold, do: FlameOn.Client.Node.TailHold.on?(499) && nil, else: opts

    shipper_opt =
      if stored?, do: [], else: [shipper: {FlameOn.Client.Shipper.Process, pid: shipper}]

    stored_before = FlameOn.Client.TraceStore.stats().kept

    opts =
      case opts do
        nil -> nil
        {:one, opts} -> {:one, opts ++ shipper_opt}
        opts -> opts ++ shipper_opt
      end

    cpu0 = cpu_ns()
    t0 = System.monotonic_time(:microsecond)

    workers =
      for _ <- 1..@workers do
        spawn_link(fn ->
          case opts do
            {:one, opts} ->
              FlameOn.Client.Tracing.trace(
                "requests",
                fn -> for _ <- 1..per, do: request() end,
                opts
              )

            _ ->
              for _ <- 1..per do
                if opts,
                  do: FlameOn.Client.Tracing.trace("request", &request/0, opts),
                  else: request()
              end
          end

          send(parent, {:done, self()})
        end)
      end

    for w <- workers, do: receive(do: ({:done, ^w} -> :ok))
    wall = System.monotonic_time(:microsecond) - t0
    cpu = cpu_ns() - cpu0
    send(shipper, {:count, self()})
    shipped = receive(do: ({:kept, n} -> n))
    kept = if stored?, do: FlameOn.Client.TraceStore.stats().kept - stored_before, else: shipped
    %{cpu_ns: cpu, wall_us: wall, kept: kept}
  end

  # `config :flame_on_client, tail: config`: read when the hold turns on,
  # so it is turned off on a change (and on again, outside what is
  # measured, as it was before)
  def shared!(shared), do: tail_config!(shared: shared)

  def tail_config!(config) do
    if Application.get_env(:flame_on_client, :tail, []) != config do
      Application.put_env(:flame_on_client, :tail, config)
      FlameOn.Client.Node.TailHold.off(0)
      if config[:shared] and PerfSampler.available?(), do: FlameOn.Client.Node.TailHold.on?(499)
    end
  end

  defp count_loop(n) do
    receive do
      {:flame_on_profile, _} -> count_loop(n + 1)
      {:count, to} -> send(to, {:kept, n})
    end
  end

  # --- mixed ----------------------------------------------------------------
  # The issue's check: fast requests with a few slow ones mixed, trace/3
  # with `sample_rate: 1.0, threshold_ms: 250` and no other option (the
  # default path), against the same load untraced. WORKERS processes make
  # 40 requests each; in each phase the 20th request of the first three
  # is slow (about 150 ms of CPU, then a 150 ms sleep). Prints the node CPU
  # ratio (best of MIXED_ROUNDS rounds each), which requests were kept,
  # and the share of a kept one's time in its CPU loop.

  # a fixed amount of work (about 150 ms of CPU here), not a deadline: a
  # loop until a time burns what CPU it gets, traced or not
  def slow_mixed do
    busy(60)
    Process.sleep(150)
  end

  def busy(0), do: :ok

  def busy(chunks) do
    burst(200_000)
    busy(chunks - 1)
  end

  defp mixed_phase(traced?) do
    me = self()
    cpu0 = cpu_ns()

    workers =
      for w <- 1..@workers do
        spawn_link(fn ->
          for i <- 1..40 do
            {name, fun} =
              if w <= 3 and i == 20, do: {"slow", &slow_mixed/0}, else: {"fast", &request/0}

            if traced?,
              do:
                FlameOn.Client.trace(name, fun,
                  sample_rate: 1.0,
                  threshold_ms: 250,
                  shipper: {FlameOn.Client.Shipper.Process, pid: me}
                ),
              else: fun.()
          end

          send(me, {:done, self()})
        end)
      end

    for w <- workers, do: receive(do: ({:done, ^w} -> :ok))
    cpu_ns() - cpu0
  end

  def mixed do
    rounds = String.to_integer(System.get_env("MIXED_ROUNDS", "5"))

    IO.puts(
      "\n== mixed: #{@workers} workers x 40 requests, 3 of them slow (300 ms), threshold 250 =="
    )

    tail_config!(shared: true)
    # warm up both
    mixed_phase(true)
    mixed_phase(false)
    _ = collect_profiles()

    runs = for _ <- 1..rounds, traced? <- [false, true], do: {traced?, mixed_phase(traced?)}

    best = fn t ->
      runs |> Enum.filter(&(elem(&1, 0) == t)) |> Enum.map(&elem(&1, 1)) |> Enum.min()
    end

    profiles = collect_profiles()
    names = Enum.frequencies(Enum.map(profiles, & &1.name))
    modes = Enum.frequencies(Enum.map(profiles, & &1.mode))

    IO.puts(
      "node CPU traced / untraced: #{:erlang.float_to_binary(best.(true) / best.(false), decimals: 3)}x"
    )

    IO.puts(
      "kept: #{inspect(names)} (#{3 * rounds} slow requests traced), modes #{inspect(modes)}"
    )

    for profile <- Enum.take(profiles, 1) do
      stacks = for {_pid, stacks} <- profile.stacks, entry <- stacks, do: entry
      total = Enum.sum(Enum.map(stacks, &elem(&1, 1)))

      IO.puts(
        "a kept one's heaviest stacks (of #{total} µs, its duration #{profile.duration_us} µs):"
      )

      for {stack, us} <- stacks |> Enum.sort_by(&(-elem(&1, 1))) |> Enum.take(4),
          do: IO.puts("  #{pct(us / total)}  #{stack}")
    end
  end

  defp collect_profiles do
    receive do
      {:flame_on_profile, profile} -> [profile | collect_profiles()]
    after
      500 -> []
    end
  end

  # --- fidelity -------------------------------------------------------------
  # A slow request of two CPU phases and a wait: the render phase's share
  # of the two phases' CPU, untraced (each phase timed inline) against
  # the profiles the shared tail path keeps.

  def parse(n), do: {:ok, parse_loop(n, 0)}
  defp parse_loop(0, acc), do: acc
  defp parse_loop(n, acc), do: parse_loop(n - 1, rem(acc * 31 + n, 1_000_003))

  def render(n), do: {:ok, render_loop(n, [])}
  defp render_loop(0, acc), do: length(acc)
  defp render_loop(n, acc), do: render_loop(n - 1, [rem(n * 7, 13) | acc])

  def compute(n), do: {:ok, fib(n)}
  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  # render: list building (allocation, garbage collection), or with
  # FIDELITY_SECOND=compute a phase that allocates nothing (fib)
  @second if System.get_env("FIDELITY_SECOND") == "compute", do: :compute, else: :render
  @second_arg if @second == :compute, do: 29, else: 1_000_000

  def second, do: apply(__MODULE__, @second, [@second_arg])

  def slow_request do
    {:ok, _} = parse(1_500_000)
    Process.sleep(20)
    {:ok, _} = second()
  end

  def fidelity do
    IO.puts(
      "\n== fidelity: the slow request's #{@second} share of its CPU (parse + #{@second}) =="
    )

    runs = String.to_integer(System.get_env("FIDELITY_RUNS", "30"))

    modes =
      if PerfSampler.available?(),
        do: [
          {"native, shared (flags)", :native, [shared: true, attribution: :flags]},
          {"native, shared, no flags", :native, [shared: true, attribution: :samples]},
          {"native, own session", :native, [shared: false]}
        ],
        else: []

    for {label, mode, config} <- modes ++ [{"sample", :sample, [shared: true]}] do
      tail_config!(config)
      me = self()

      # each traced run beside an untraced one, so the machine's load
      # weighs on both alike; all runs' time together (a run holds a few
      # dozen samples)
      runs =
        for _ <- 1..runs do
          t0 = System.monotonic_time(:microsecond)
          parse(1_500_000)
          t1 = System.monotonic_time(:microsecond)
          second()
          t2 = System.monotonic_time(:microsecond)

          FlameOn.Client.Tracing.trace("slow", &slow_request/0,
            mode: mode,
            threshold_ms: 1,
            shipper: {FlameOn.Client.Shipper.Process, pid: me}
          )

          receive do
            {:flame_on_profile, p} ->
              {t2 - t1, t1 - t0, stack_time(p, "Tail.#{@second}/1"),
               stack_time(p, "Tail.parse/1"), p.mode}
          end
        end

      share = fn r, q -> r / max(r + q, 1) end
      truth = share.(sum(runs, 0), sum(runs, 1))
      traced = share.(sum(runs, 2), sum(runs, 3))
      mode_ran = elem(hd(runs), 4)

      IO.puts(
        "#{String.pad_trailing(label, 26)} #{pct(traced)}, untraced #{pct(truth)}: " <>
          "#{Float.round((traced - truth) * 100, 1)} pp (profile.mode #{mode_ran})"
      )
    end
  end

  defp sum(runs, i), do: Enum.sum(for run <- runs, do: elem(run, i))

  defp stack_time(profile, frame) do
    for {_pid, stacks} <- profile.stacks,
        {stack, us} <- stacks,
        String.contains?(stack, frame),
        not String.ends_with?(stack, "SLEEP"),
        reduce: 0,
        do: (acc -> acc + us)
  end

  defp pct(x), do: "#{Float.round(x * 100, 1)}%"

  # --- breakdown ------------------------------------------------------------

  def breakdown do
    IO.puts(
      "\n== breakdown: where a traced, thrown-away request's cost goes (sequential, µs, median of 300) =="
    )

    modes = if PerfSampler.available?(), do: [:sample, :native], else: [:sample]

    for mode <- modes do
      steps = for _ <- 1..300, do: steps(mode)
      cpu0 = cpu_ns()
      t0 = System.monotonic_time(:microsecond)
      for _ <- 1..300, do: steps(mode)
      cpu_per = (cpu_ns() - cpu0) / 300 / 1000
      wall_per = (System.monotonic_time(:microsecond) - t0) / 300
      cpu0 = cpu_ns()
      for _ <- 1..300, do: _ = burst(@burst) + burst(@burst)
      base = (cpu_ns() - cpu0) / 300 / 1000

      IO.puts(
        "mode #{mode}: node CPU per request #{Float.round(cpu_per, 1)} µs " <>
          "(the untraced bursts alone #{Float.round(base, 1)}), wall #{Float.round(wall_per, 1)} µs"
      )

      for key <- Keyword.keys(hd(steps)) do
        values = Enum.sort(Enum.map(steps, &Keyword.fetch!(&1, key)))
        IO.puts("  #{String.pad_trailing(Atom.to_string(key), 22)} #{Enum.at(values, 150)}")
      end
    end
  end

  # The shared tail path (mode :native, threshold_ms 250), step by step
  # as FlameOn.Client.trace/3 and FlameOn.Client.Tracing.Tail run it, in ns.
  def shared_breakdown do
    if PerfSampler.available?() do
      IO.puts("\n== breakdown: the shared tail path, a fast request (ns, median of 2000) ==")

      for {label, config} <- [
            {"linger_ms 0 (flags on and off)", [shared: true, linger_ms: 0]},
            {"lingering (the default)", [shared: true]}
          ] do
        IO.puts(label)
        tail_config!(config)
        linger? = config[:linger_ms] != 0
        steps = for _ <- 1..2000, do: if(linger?, do: linger_steps(), else: shared_steps())

        for key <- Keyword.keys(hd(steps)) do
          values = Enum.sort(Enum.map(steps, &Keyword.fetch!(&1, key)))
          IO.puts("  #{String.pad_trailing(Atom.to_string(key), 26)} #{Enum.at(values, 1000)}")
        end
      end
    end
  end

  # The shared path with the process's flags lingering from its last
  # request (its entry taken again, no erlang:trace/3 call), as
  # FlameOn.Client.trace/3 and Tracing.Tail.shared/4 run it.
  defp linger_steps do
    alias FlameOn.Client.Tracing.Tail
    t = fn -> System.monotonic_time(:nanosecond) end
    opts = [mode: :native, sample_rate: 1.0, threshold_ms: 250]
    t0 = t.()
    {settings, capture} = Options.trace!(opts)
    t1 = t.()
    _ = Capture.sampled?(settings.sample_rate) and not Capture.traced?()
    t2 = t.()
    {:ok, tail} = Tail.start(capture, {Tail, :call, 1}, 250, "request")
    t3 = t.()
    nil = Tail.stop(tail, 250)
    t4 = t.()

    [
      "Options.trace!": t1 - t0,
      "sampled?, traced?": t2 - t1,
      "Tail.start (resumed)": t3 - t2,
      "Tail.stop (lingers)": t4 - t3,
      total: t4 - t0
    ]
  end

  defp shared_steps do
    alias FlameOn.Client.Core.Native
    alias FlameOn.Client.Node.TailHold
    t = fn -> System.monotonic_time(:nanosecond) end
    opts = [mode: :native, sample_rate: 1.0, threshold_ms: 250]
    t0 = t.()
    {settings, capture} = Options.trace!(opts)
    t1 = t.()
    _ = Capture.sampled?(settings.sample_rate) and not Capture.traced?()
    t2 = t.()
    t3 = t.()
    true = TailHold.on?(capture.frequency)
    t4 = t.()
    state = Native.tail_begin(125_000_000, nil, false)
    t5 = t.()
    handle = TraceBackend.legacy({Native, state})
    TraceBackend.set_flags(self(), [{handle, [:running]}])
    t6 = t.()
    TraceBackend.trace(handle, self(), false, [:running])
    t7 = t.()
    _ = Native.tail_end(state, false)
    t8 = t.()

    [
      "Options.trace!": t1 - t0,
      "sampled?, traced?": t2 - t1,
      "TailHold.on?": t4 - t3,
      tail_begin: t5 - t4,
      "flags on": t6 - t5,
      "flags off": t7 - t6,
      tail_end: t8 - t7,
      total: t8 - t0
    ]
  end

  # trace/3 with threshold_ms 250 and the request without its sleep,
  # step by step (as FlameOn.Client.trace/3 and profile/2 run them).
  defp steps(mode) do
    t = fn -> System.monotonic_time(:nanosecond) end
    us = fn a, b -> div(b - a, 1000) end
    t0 = t.()
    {settings, _} = Options.trace!(mode: mode, sample_rate: 1.0, threshold_ms: 250)
    _ = Capture.sampled?(settings.sample_rate) and not Capture.traced?()
    t1 = t.()
    opts = Options.profile!(name: "request", mode: mode)
    capture = Capture.start({:self, {FlameOn.Client, :profile, 2}}, opts)
    t2 = t.()
    started = :erlang.monotonic_time()
    capture = Capture.begin(capture, self())
    t3 = t.()
    TraceBackend.set_flags(self(), capture.flags)
    t4 = t.()
    _ = burst(@burst) + burst(@burst)
    t5 = t.()
    end_ts = Capture.stop(capture)
    Capture.detach(capture)
    t6 = t.()
    {:ok, profile} = Capture.finish(capture, started, end_ts)
    t7 = t.()
    FlameOn.Client.TraceStore.keep(profile, settings)
    t8 = t.()

    [
      "options, sampled?": us.(t0, t1),
      "start (session, ...)": us.(t1, t2),
      begin: us.(t2, t3),
      set_flags: us.(t3, t4),
      "work (traced)": us.(t4, t5),
      "stop + detach": us.(t5, t6),
      "finish (profile)": us.(t6, t7),
      "keep (threshold)": us.(t7, t8),
      total: us.(t0, t8)
    ]
  end
end

Logger.configure(level: :info)

case System.argv() do
  ["load"] ->
    FlameOn.Bench.Tail.load()

  ["fidelity"] ->
    FlameOn.Bench.Tail.fidelity()

  ["mixed"] ->
    FlameOn.Bench.Tail.mixed()

  ["breakdown"] ->
    FlameOn.Bench.Tail.breakdown()
    FlameOn.Bench.Tail.shared_breakdown()

  _ ->
    FlameOn.Bench.Tail.load()
    FlameOn.Bench.Tail.breakdown()
    FlameOn.Bench.Tail.shared_breakdown()
    FlameOn.Bench.Tail.fidelity()
    FlameOn.Bench.Tail.mixed()
end
