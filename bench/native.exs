# Native mode (#23): fidelity against the untraced truth, the node's and the
# traced process's tax, and what +JPperf true costs by itself.
#
#     ERL_FLAGS="+JPperf true" mix run bench/native.exs             # about 4 min
#     ERL_FLAGS="+JPperf true" mix run bench/native.exs fidelity    # one part:
#       fidelity | tax | jpperf (ONLY=C-heavy: the fidelity workloads whose
#       name holds that)
#
# Fidelity: each workload alternates two phases; the truth is each phase
# timed inline, untraced (the passes' sums over 2 s). The same workload
# runs for SECONDS (default 6) under :native, :sample and :nif, in ROUNDS
# (default 3) turns taken with the truth's passes, and
# each phase's share of the traced process's on-CPU time is read from its
# stacks (the time of the stacks holding the phase's frame, waits left out).
# A row passes when native is within 3 pp of the truth. "rootless" is the
# share of native's samples charged to no Erlang frame of their process.
#
# Tax: an untraced process's work timed while another process runs a
# native trace (and an untraced control), in paired blocks; and the traced
# process's own work inside profile/2 against the same work untraced.
#
# +JPperf: the same workloads in fresh VMs started with and without the
# flag, alternating, best of each.

defmodule FlameOn.Bench.Native do
  @moduledoc false

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  # --- phases ---------------------------------------------------------------
  # Each phase's function keeps its frame while its work runs (no tail call
  # into the work: it wraps the result), so its name finds its stacks.

  def parse(n), do: {:ok, parse_loop(n, 0)}
  defp parse_loop(0, acc), do: acc
  defp parse_loop(n, acc), do: parse_loop(n - 1, rem(acc * 31 + n, 1_000_003))

  def render(n), do: {:ok, render_loop(n, [])}
  defp render_loop(0, acc), do: length(acc)
  defp render_loop(n, acc), do: render_loop(n - 1, [rem(n * 7, 13) | acc])

  def encode(term), do: {:ok, :erlang.term_to_binary(term)}

  def compute(n), do: {:ok, fib(n)}

  def pipeline(n) do
    m = Map.new(1..n, fn k -> {k, rem(k * 7919, 1009)} end)
    {:ok, m |> Map.values() |> Enum.map(&(&1 * 2)) |> Enum.filter(&(&1 > 300)) |> Enum.sort()}
  end

  def recurse(n), do: {:ok, fib(n)}

  def tokenize(source), do: {:ok, Code.string_to_quoted!(source)}
  def format(ast), do: {:ok, Macro.to_string(ast)}

  # --- calibration: a phase's size so it takes about `us` ---------------------

  def median_us(fun, runs) do
    ts =
      for _ <- 1..runs do
        t0 = System.monotonic_time(:nanosecond)
        fun.()
        System.monotonic_time(:nanosecond) - t0
      end

    Enum.at(Enum.sort(ts), div(runs, 2)) / 1000
  end

  def calibrate(make, n, us) do
    took = median_us(fn -> make.(n).() end, 50)
    max(1, round(n * us / max(took, 1)))
  end
end

defmodule FlameOn.Bench.Native.Server do
  @moduledoc false
  use GenServer
  alias FlameOn.Bench.Native, as: N

  def init(s), do: {:ok, s}

  # waits ms (the request-shaped workload's call)
  def handle_call({:fetch, ms}, from, s) do
    Process.send_after(self(), {:reply, from}, ms)
    {:noreply, s}
  end

  # CPU work in the callee: two phases of its own
  def handle_call({:work, a, b}, _from, s), do: {:reply, {N.recurse(a), N.pipeline(b)}, s}

  def handle_info({:reply, from}, s) do
    GenServer.reply(from, :data)
    {:noreply, s}
  end
end

alias FlameOn.Bench.Native, as: N
alias FlameOn.Bench.Native.Server

unless FlameOn.Client.Node.PerfSampler.available?() do
  {:error, why} = FlameOn.Client.Node.PerfSampler.availability()
  IO.puts("native sampling is not available in this VM: #{why}")
  System.halt(1)
end

parts = if System.argv() == [], do: ["fidelity", "tax", "jpperf"], else: System.argv()
seconds = String.to_integer(System.get_env("SECONDS", "6"))

IO.puts(
  "flame_on_client native mode, #{DateTime.utc_now() |> DateTime.truncate(:second)}, " <>
    "OTP #{:erlang.system_info(:otp_release)}, #{:erlang.system_info(:schedulers_online)} schedulers, " <>
    "frequency #{FlameOn.Client.Options.sampling_defaults()[:frequency]} Hz, #{seconds} s a run"
)

defmodule FlameOn.Bench.Native.Fidelity do
  @moduledoc false
  alias FlameOn.Bench.Native, as: N

  # MODES=native,sample: the modes to compare (default all three)
  defp modes,
    do:
      System.get_env("MODES", "native,sample,nif")
      |> String.split(",")
      |> Enum.map(&String.to_atom/1)

  # ROUNDS (default 3): the truth and each mode's traced run take turns,
  # so the machine's drift over the run (its load, its clock) weighs on
  # all alike
  defp rounds, do: String.to_integer(System.get_env("ROUNDS", "3"))

  # A workload: {name, setup, phases, pid_of}: setup.() -> context; each
  # phase {frame_text, fun(context)}; the loop runs the phases in order
  # (and `between`, untimed: a call that waits) until the deadline.
  def run({name, setup, phases, between, opts}, seconds) do
    ctx = setup.()
    rounds = rounds()
    traced_ms = max(div(seconds * 1000, rounds), 500)

    {passes, by_mode} =
      Enum.reduce(1..rounds, {[], %{}}, fn _, {passes, by_mode} ->
        passes = truth_passes(ctx, phases, between, max(div(2000, rounds), 300)) ++ passes

        by_mode =
          Enum.reduce(modes(), by_mode, fn mode, acc ->
            {us, stats, inline} = traced(ctx, phases, between, mode, opts, traced_ms)
            sum = fn a, b -> Map.merge(a, b, fn _, x, y -> x + y end) end

            Map.update(acc, mode, {us, stats, inline}, fn {us0, stats0, inline0} ->
              {sum.(us0, us), add_counts(stats0, stats), sum.(inline0, inline)}
            end)
          end)

        {passes, by_mode}
      end)

    truth =
      shares(
        Map.new(phases, fn {frame, _} -> {frame, Enum.sum(Enum.map(passes, & &1[frame]))} end)
      )

    rows = for mode <- modes(), {us, stats, _} = by_mode[mode], do: {mode, shares(us), stats}

    # the phases timed inline in native's traced runs (a callee's: not timed)
    inline =
      case by_mode[:native] do
        {_, _, inline} when map_size(inline) == length(phases) -> shares(inline)
        _ -> nil
      end

    {name, truth, rows, inline}
  end

  defp shares(by_phase) do
    total = by_phase |> Map.values() |> Enum.sum()
    Map.new(by_phase, fn {frame, t} -> {frame, t / max(total, 1)} end)
  end

  defp add_counts(a, b),
    do: Map.merge(a, b, fn _, x, y -> if is_integer(x) and is_integer(y), do: x + y, else: y end)

  # each phase timed inline while the loop runs untraced for ms: the
  # passes' times (their sums against the traced runs' sums)
  defp truth_passes(ctx, phases, between, ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    truth_loop(ctx, phases, between, deadline, [])
  end

  defp truth_loop(ctx, phases, between, deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline do
      acc
    else
      pass =
        Map.new(phases, fn {frame, fun} ->
          t0 = System.monotonic_time(:nanosecond)
          fun.(ctx)
          {frame, System.monotonic_time(:nanosecond) - t0}
        end)

      between.(ctx)
      truth_loop(ctx, phases, between, deadline, [pass | acc])
    end
  end

  # the traced loop times its phases inline too: what the trace's own cost
  # did to the phases' shares (the "inline" row), apart from how well the
  # stacks tell them
  defp loop(ctx, phases, between, deadline, inline) do
    if System.monotonic_time(:millisecond) < deadline do
      inline =
        Enum.reduce(phases, inline, fn {frame, fun}, inline ->
          t0 = System.monotonic_time(:nanosecond)
          fun.(ctx)
          took = System.monotonic_time(:nanosecond) - t0
          Map.update(inline, frame, took, &(&1 + took))
        end)

      between.(ctx)
      loop(ctx, phases, between, deadline, inline)
    else
      inline
    end
  end

  defp traced(ctx, phases, between, mode, opts, ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    # a callee's workload: the traced loop makes the call, the callee runs the phases
    work =
      case opts[:call] do
        nil -> fn -> loop(ctx, phases, between, deadline, %{}) end
        call -> fn -> loop(ctx, [{"", call}], between, deadline, %{}) end
      end

    {inline, profile} =
      FlameOn.Client.profile(work, [mode: mode] ++ Keyword.take(opts, [:cross_process]))

    pid = if opts[:callee], do: opts[:callee].(ctx), else: profile.pid
    stacks = profile.stacks[pid] || []

    on_cpu =
      stacks
      |> Enum.reject(fn {s, _} ->
        String.contains?(s, "SLEEP") or String.contains?(s, "WAITING")
      end)

    # each phase against the phases together, as the truth is
    by_phase =
      Map.new(phases, fn {frame, _} ->
        us =
          on_cpu
          |> Enum.filter(fn {s, _} -> String.contains?(s, frame) end)
          |> Enum.map(&elem(&1, 1))
          |> Enum.sum()

        {frame, us}
      end)

    # on-CPU time under the "…" root: call chains deeper than the kernel
    # walks (127 frames) whose outer frames were never seen; counted in no
    # phase
    cut =
      on_cpu
      |> Enum.filter(fn {s, _} -> String.starts_with?(s, "…") end)
      |> Enum.map(&elem(&1, 1))

    all = on_cpu |> Enum.map(&elem(&1, 1)) |> Enum.sum()

    {by_phase, Map.merge(profile.stats, %{bench_cut_us: Enum.sum(cut), bench_on_cpu_us: all}),
     inline}
  end
end

fidelity = fn ->
  IO.puts(
    "\n== fidelity: each phase's share of the traced process's on-CPU time (%), truth = untraced inline =="
  )

  workloads = [
    {"request: parse, GenServer.call (2 ms wait), render",
     fn ->
       {:ok, server} = GenServer.start(Server, nil)
       p = N.calibrate(fn n -> fn -> N.parse(n) end end, 20_000, 250)
       r = N.calibrate(fn n -> fn -> N.render(n) end end, 20_000, 400)
       %{server: server, p: p, r: r}
     end,
     [
       {"FlameOn.Bench.Native.parse", fn c -> N.parse(c.p) end},
       {"FlameOn.Bench.Native.render", fn c -> N.render(c.r) end}
     ], fn c -> :data = GenServer.call(c.server, {:fetch, 2}) end, []},
    {"C-heavy: term_to_binary of a large list (~1.2 ms), then recursion (~0.4 ms)",
     fn ->
       n =
         N.calibrate(
           fn n ->
             l = Enum.to_list(1..n)
             fn -> N.encode(l) end
           end,
           60_000,
           1200
         )

       f = Enum.find(15..30, fn k -> N.median_us(fn -> N.fib(k) end, 20) >= 400 end) || 24
       %{list: Enum.to_list(1..n), f: f}
     end,
     [
       {"FlameOn.Bench.Native.encode", fn c -> N.encode(c.list) end},
       {"FlameOn.Bench.Native.compute", fn c -> N.compute(c.f) end}
     ], fn _ -> :ok end, []},
    {"Enum/Map pipeline against recursion",
     fn ->
       m = N.calibrate(fn n -> fn -> N.pipeline(n) end end, 2_000, 500)
       f = Enum.find(15..30, fn k -> N.median_us(fn -> N.fib(k) end, 20) >= 500 end) || 22
       %{m: m, f: f}
     end,
     [
       {"FlameOn.Bench.Native.pipeline", fn c -> N.pipeline(c.m) end},
       {"FlameOn.Bench.Native.recurse", fn c -> N.recurse(c.f) end}
     ], fn _ -> :ok end, []},
    {"a GenServer callee's CPU work (cross_process: true): recursion, then Enum/Map",
     fn ->
       {:ok, server} = GenServer.start(Server, nil)
       # a few ms a call: a trace's spans are bounded (max_spans), and a
       # long run of short calls would pass the bound
       f = Enum.find(15..30, fn k -> N.median_us(fn -> N.fib(k) end, 20) >= 3000 end) || 27
       m = N.calibrate(fn n -> fn -> N.pipeline(n) end end, 20_000, 2000)
       %{server: server, f: f, m: m}
     end,
     [
       {"FlameOn.Bench.Native.recurse", fn c -> N.recurse(c.f) end},
       {"FlameOn.Bench.Native.pipeline", fn c -> N.pipeline(c.m) end}
     ], fn _ -> :ok end,
     [
       cross_process: true,
       call: fn c -> GenServer.call(c.server, {:work, c.f, c.m}) end,
       callee: fn c -> c.server end
     ]},
    {"Elixir's parser and printer on a large file",
     fn ->
       source = File.read!("lib/flame_on/client/options.ex")
       %{source: source, ast: Code.string_to_quoted!(source)}
     end,
     [
       {"FlameOn.Bench.Native.tokenize", fn c -> N.tokenize(c.source) end},
       {"FlameOn.Bench.Native.format", fn c -> N.format(c.ast) end}
     ], fn _ -> :ok end, []}
  ]

  # ONLY=text: just the workloads whose name holds it
  only = System.get_env("ONLY", "")

  results =
    for w <- workloads, String.contains?(elem(w, 0), only) do
      {name, truth, rows, inline} = FlameOn.Bench.Native.Fidelity.run(w, seconds)
      IO.puts("\n#{name}")
      frames = Map.keys(truth)

      IO.puts(
        String.pad_trailing("", 10) <>
          Enum.map_join(
            frames,
            "",
            &String.pad_leading(&1 |> String.split(".") |> List.last(), 12)
          ) <>
          "   samples  rootless  cut"
      )

      line = fn label, shares ->
        String.pad_trailing(label, 10) <>
          Enum.map_join(
            frames,
            "",
            &String.pad_leading(:erlang.float_to_binary(100 * shares[&1], decimals: 1), 12)
          )
      end

      IO.puts(line.("truth", truth))
      if inline, do: IO.puts(line.("(inline)", inline) <> "   native's runs timed inline")

      for {mode, shares, stats} <- rows do
        extra =
          if mode == :native,
            do:
              "   #{String.pad_leading(Integer.to_string(stats.samples), 7)}  " <>
                "#{:erlang.float_to_binary(100 * Map.get(stats, :cpu_rootless, 0) / max(stats.samples, 1), decimals: 1)}%" <>
                "  #{:erlang.float_to_binary(100 * stats.bench_cut_us / max(stats.bench_on_cpu_us, 1), decimals: 1)}%",
            else: ""

        IO.puts(line.(Atom.to_string(mode), shares) <> extra)
      end

      {_, native, stats} = Enum.find(rows, &(elem(&1, 0) == :native))
      worst = frames |> Enum.map(&abs(100 * (native[&1] - truth[&1]))) |> Enum.max()
      rootless = 100 * Map.get(stats, :cpu_rootless, 0) / max(stats.samples, 1)
      {name, worst, rootless}
    end

  IO.puts(
    "\n== fidelity targets (native within 3 pp of the truth on every phase; rootless <= 5%) =="
  )

  for {name, worst, rootless} <- results do
    verdict = if worst <= 3.0 and rootless <= 5.0, do: "PASS", else: "MISS"

    IO.puts(
      "#{verdict}  #{name}: worst phase #{Float.round(worst, 1)} pp, rootless #{Float.round(rootless, 1)}%"
    )
  end
end

defmodule FlameOn.Bench.Native.Tax do
  @moduledoc false
  alias FlameOn.Bench.Native, as: N

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

  # a traced process that works in bursts and waits, as a request handler
  def background(:untraced), do: spawn(fn -> busy_loop() end)

  def background(:native) do
    spawn(fn -> FlameOn.Client.profile(fn -> busy_loop() end, mode: :native) end)
  end

  defp busy_loop do
    receive do
      :stop -> :ok
    after
      1 ->
        N.fib(16)
        busy_loop()
    end
  end

  def stats(ts) do
    s = Enum.sort(ts)
    {hd(s), Enum.at(s, div(length(s), 4)), Enum.at(s, div(length(s), 2))}
  end

  def ratio(a, b), do: Float.round(a / b, 3)
end

tax = fn ->
  alias FlameOn.Bench.Native.Tax, as: T
  IO.puts("\n== tax: µs best / p25 / median, and x its control ==")

  workloads = [
    {"fib(22) x20", fn -> for _ <- 1..20, do: N.fib(22) end},
    {"Enum/Map x10", fn -> for _ <- 1..10, do: N.pipeline(2000) end}
  ]

  for {wname, work} <- workloads do
    # the node: an untraced process's work while another runs traced
    by =
      Enum.reduce(1..30, %{untraced: [], native: []}, fn _, acc ->
        Enum.reduce(Enum.shuffle([:untraced, :native]), acc, fn cond, acc ->
          bg = T.background(cond)
          Process.sleep(30)
          ts = for _ <- 1..3, do: T.time(work)
          send(bg, :stop)
          Process.sleep(5)
          Map.update!(acc, cond, &(ts ++ &1))
        end)
      end)

    {ub, up, um} = T.stats(by.untraced)
    {nb, np, nm} = T.stats(by.native)
    IO.puts("#{wname}, untraced process while another is traced")
    IO.puts("  control              #{ub} / #{up} / #{um}")

    IO.puts(
      "  native trace beside  #{nb} / #{np} / #{nm}   x #{T.ratio(nb, ub)} / #{T.ratio(np, up)} / #{T.ratio(nm, um)}"
    )

    # the traced process itself
    own =
      Enum.reduce(1..30, %{untraced: [], native: []}, fn _, acc ->
        Enum.reduce(Enum.shuffle([:untraced, :native]), acc, fn
          :untraced, acc ->
            Map.update!(acc, :untraced, &[T.time(work) | &1])

          :native, acc ->
            # the work's own time, timed inside the trace
            timed = fn ->
              t0 = System.monotonic_time(:microsecond)
              work.()
              System.monotonic_time(:microsecond) - t0
            end

            {inner, _} = FlameOn.Client.profile(timed, mode: :native)
            Map.update!(acc, :native, &[inner | &1])
        end)
      end)

    {ub, up, um} = T.stats(own.untraced)
    {nb, np, nm} = T.stats(own.native)
    IO.puts("#{wname}, the traced process itself")
    IO.puts("  untraced             #{ub} / #{up} / #{um}")

    IO.puts(
      "  inside profile/2     #{nb} / #{np} / #{nm}   x #{T.ratio(nb, ub)} / #{T.ratio(np, up)} / #{T.ratio(nm, um)}"
    )
  end
end

jpperf = fn ->
  IO.puts(
    "\n== +JPperf true by itself: fresh VMs with and without it, alternating; µs best of 10 VMs each =="
  )

  script = ~S"""
  defmodule W do
    def fib(n) when n < 2, do: n
    def fib(n), do: fib(n - 1) + fib(n - 2)
  end
  m = Map.new(1..2000, fn k -> {k, rem(k * 7919, 1009)} end)
  t = fn f -> for _ <- 1..15, reduce: :infinity do best ->
    t0 = System.monotonic_time(:microsecond); f.(); min(best, System.monotonic_time(:microsecond) - t0) end end
  a = t.(fn -> W.fib(24) end)
  b = t.(fn -> m |> Map.values() |> Enum.map(&(&1 * 2)) |> Enum.filter(&(&1 > 300)) |> Enum.sort() end)
  IO.puts("#{a} #{b}")
  """

  path = Path.join(System.tmp_dir!(), "flame_on_jpperf_#{System.unique_integer([:positive])}.exs")
  File.write!(path, script)
  elixir = System.find_executable("elixir")

  runs =
    for _ <- 1..10, flag <- [:with, :without] do
      env = [{"ERL_FLAGS", if(flag == :with, do: "+JPperf true", else: "")}]
      {out, 0} = System.cmd(elixir, [path], env: env)
      [a, b] = out |> String.trim() |> String.split() |> Enum.map(&String.to_integer/1)
      {flag, a, b}
    end

  File.rm(path)

  best = fn flag, i ->
    runs |> Enum.filter(&(elem(&1, 0) == flag)) |> Enum.map(&elem(&1, i)) |> Enum.min()
  end

  for {label, i} <- [{"fib(24)", 1}, {"Enum/Map", 2}] do
    w = best.(:with, i)
    wo = best.(:without, i)

    IO.puts(
      "  #{String.pad_trailing(label, 10)} without #{wo}  with #{w}   x #{Float.round(w / wo, 3)}"
    )
  end
end

if "fidelity" in parts, do: fidelity.()
if "tax" in parts, do: tax.()
if "jpperf" in parts, do: jpperf.()
