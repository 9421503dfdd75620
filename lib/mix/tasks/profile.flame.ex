defmodule Mix.Tasks.Profile.Flame do
  @shortdoc "Profiles the given file or expression and writes flame graphs"

  @moduledoc """
  Profiles the given file or expression with `FlameOn.Client.profile/2`,
  writes flame graph files and prints the most expensive functions.

  Like `mix profile.eprof` and `mix profile.fprof`, it takes the code the
  way `mix run` does:

      mix profile.flame -e "MyApp.work()"
      mix profile.flame --cross-process --format folded,perfetto -e "MyApp.handle(:req)"
      mix profile.flame my_script.exs arg1 arg2 arg3
      mix profile.flame --summary call_time -e "MyApp.work()"

  Options go before the script's name; what follows the script is its
  `System.argv/0`. The task starts the application first (`app.start`),
  runs the code once untraced to load its modules (`--no-warmup` skips
  that), then runs it traced, writes the files to `--out` and prints:

    * where each file went;
    * the top functions by **self time**: for each function, the time of
      the stacks it is the leaf of, summed over stacks and processes
      (`SLEEP` and `WAITING` are the time processes spent scheduled out);
    * the total, and with `--cross-process` the spans of the graph (the
      process and what it did for the trace, its self time, its wait split
      into attributed and unattributed wait, and what ended the
      unattributed wait) and the waits explained by other spans (the
      graph's edges, largest first).

  With `--alloc` the trace also weighs its stacks by the heap words they
  allocated (`alloc: true`, see the README's "Allocation profiles"): the
  task writes the same formats in words as `NAME.alloc.<extension>` (but
  perfetto) and prints the top functions by words allocated.

  With `--summary call_time` or `--summary call_memory` it runs
  `FlameOn.Client.summary/2` instead (no flame graph): the VM counts calls
  and time (µs) or heap memory (words) per function, as `mix
  profile.tprof` does; the task prints the top functions with their calls,
  time or words, per call and share, and writes every function to
  `OUT/NAME.summary.csv`. `call_memory` needs Erlang/OTP 26 or later.

  This task is automatically re-enabled, so it can run several times in one
  Mix invocation.

  ## The next call of a function

  `--next Module.fun/arity` (or `module:fun/arity`) waits for the next call
  of that function by any process and profiles that one call, from its
  entry to its return (`FlameOn.Client.capture_next/2`), then writes and
  prints it like any profile:

      # the application is started by the task; hit the endpoint meanwhile
      mix profile.flame --next MyAppWeb.PageController.index/2 --timeout 60000

      # or give the code that makes the call: it runs once the capture waits
      mix profile.flame --next MyApp.Orders.checkout/2 -e "MyApp.Demo.place_orders(10)"

  `--mode` defaults to capture_next's (`sample`: nothing but the one
  function's pattern is set while waiting); `--cross-process`, limits and
  `--name` apply.

  **On a running node.** `--node NAME` captures on another node of a
  cluster instead (its code must include flame_on_client, and its
  application must run there); this task joins the cluster as `--sname
  NAME` (short names) or `--longname NAME@HOST` (long names; default: a
  random short name) with `--cookie` (default: `~/.erlang.cookie`), calls `FlameOn.Client.capture_next/2` there with
  `:erpc`, and writes the profile here:

      mix profile.flame --next MyApp.Orders.checkout/2 --timeout 60000 \\
        --node myapp@myhost --sname flame --cookie "$COOKIE"

  The project is compiled but not started with `--node`. Nothing is left on
  the remote node after the call, a timeout, or the end of this task
  (the capture there is owned by the `:erpc` call's process).

  ## Diffs

  `--diff-base FILE` compares this run with an earlier one: FILE is a
  `.folded` file (this task's, from before a change, or any tool's
  `frame;frame;... count` lines). It is read before anything is profiled
  (a missing or unparseable FILE fails the task at once, and this run
  may then overwrite it), and after the profile is written the task
  writes the diff (`FlameOn.Client.diff/3`, all processes merged) in the
  chosen formats that apply to a diff, prints where, and lists the
  functions whose self time changed most:

      mix profile.flame -e "MyApp.work()" --format folded              # before
      cp flame_on_out/eval.folded before.folded
      # ... change MyApp ...
      mix profile.flame -e "MyApp.work()" --format folded,svg,pprof --diff-base before.folded
      #   flame_on_out/eval.diff.folded (folded)   stack base new, for flamegraph.pl
      #   flame_on_out/eval.diff.svg (svg)         red grew, blue shrank
      #   flame_on_out/eval.base.pb.gz, eval.new.pb.gz (pprof)
      #   go tool pprof -diff_base=flame_on_out/eval.base.pb.gz flame_on_out/eval.new.pb.gz

  The new run is scaled so that its typical stack is unchanged
  (`--diff-normalize median`, the default: a run slower as a whole, on a
  busy machine say, shows no change, and a function that did 4x the work
  shows +300%); `total` scales it to the base's total (shares of the
  whole), `none` compares absolute times. `perfetto` is skipped for the
  diff (it has no timeline).

  ## Command line options

    * `--eval`, `-e` – the code to profile
    * `--require`, `-r` – requires files (a pattern) before profiling
    * `--out DIR`, `-o` – where files go (default `flame_on_out`)
    * `--format LIST`, `-f` – comma-separated formats among `folded`,
      `speedscope`, `perfetto`, `svg` and `pprof` (default `folded`, plus
      `svg` when `FlameOn.Client.Export` is available; every format but
      `folded` needs it)
    * `--name NAME` – the trace's name, the first field of the folded
      lines (default `eval` for `-e`, the script's base name otherwise)
    * `--mode nif|process|sample|native|auto` – how the profile is
      captured (default `nif`: exact call stacks; `sample`: stack samples
      every `--interval-us` µs, no call breakpoints; `native`: CPU samples
      from Linux perf events, no call breakpoints, in a VM started with
      `+JPperf true`, e.g. `ERL_FLAGS="+JPperf true" mix profile.flame
      --mode native -e ...`; `auto`: `native` where it can run, else
      `sample`)
    * `--interval-us N` – the sampling interval of `--mode sample`
      (default 1000, at least 1000)
    * `--frequency HZ` – CPU samples a second of `--mode native` (default
      499, at most 10000)
    * `--split-status` – `--mode sample`: put each sample's process status
      (`[running]`, `[runnable]`, `[waiting]`, ...) at the root of its stack
    * `--cross-process` – follow the processes the code sends messages to
      or spawns (GenServer calls, tasks, plain messages) and build the span
      graph
    * `--follow messages|calls` – with `--cross-process`: follow every
      message (default) or `GenServer.call`s only
    * `--sleep default|raw` – `raw` keeps every scheduled-out interval as
      `SLEEP` in cross-process traces
    * `--max-nodes N`, `--max-depth N` – limits (see `FlameOn.Client`)
    * `--no-collapse-recursion` – keep direct recursion at its real depth
      (exact stacks; `--max-depth` then counts every call). By default a
      function calling itself is one frame (`collapse_recursion: true`, see
      `FlameOn.Client`), so a deep `Enum.map/2` stays readable
    * `--summary call_time|call_memory` – per-function counters instead of
      a flame graph (see above); `--mode`, `--cross-process`, `--format` and
      the other capture options do not go with it
    * `--top N` – how many functions to list (default 10)
    * `--diff-base FILE` – also write the diff against FILE, an earlier
      run's `.folded` file (see above)
    * `--diff-normalize median|total|none` – how the diff scales the new
      run (default `median`)
    * `--next FUNCTION` – profile the next call of `FUNCTION` instead
      (see above); `-e`/`FILE` become optional: the code that makes the call
    * `--timeout MS` – `--next`: how long to wait for the call (default
      30000)
    * `--node NODE`, `--sname NAME`, `--longname NAME@HOST`, `--cookie
      COOKIE` – `--next` on another node (see above)
    * `--no-warmup` – skips the warmup run
    * `--no-compile` – does not compile even if files require compilation
    * `--no-deps-check` – does not check dependencies
    * `--no-archives-check` – does not check archives
    * `--no-start` – does not start applications after compilation (the
      `:flame_on_client` application itself is still started)
    * `--no-elixir-version-check` – does not check the Elixir version from
      `mix.exs`

  ## Output

      Profiling...
      Profiled in 4 ms.
      Writing 1 file to flame_on_out...
        flame_on_out/eval.folded (folded)

      Top 10 functions by self time ("eval", mode nif):
          SELF µs       %  FUNCTION
             1711   51.3%  Enum.reduce_range/5
              ...
      Total: 3335 µs in 12 stacks of 1 process (3402 µs wall)

  Render the folded file with `flamegraph.pl`, inferno, or open it in
  speedscope.
  """

  use Mix.Task

  alias FlameOn.Client.CLI.{Diff, Options, Remote, Report, Run}

  @impl Mix.Task
  def run(args) do
    Mix.Task.reenable("profile.flame")
    {opts, rest} = Options.parse!(args)

    if opts[:next], do: run_next(opts, rest), else: run_profile(opts, rest)
    :ok
  end

  defp run_profile(opts, rest) do
    for key <- [:timeout, :node, :sname, :longname, :cookie], Keyword.has_key?(opts, key) do
      Options.usage!("--#{Options.dashed(key)} goes with --next")
    end

    {code, file, argv} = Options.source!(opts, rest)
    config = Options.config!(opts, file)
    base = Diff.read_base!(config.diff_base)

    Run.start_apps(opts)
    Run.require_files(Keyword.get_values(opts, :require))

    case config.summary do
      nil ->
        profile = Run.profile!(code, file, argv, config)
        paths = Run.write!(profile, config)
        Report.summary(profile, paths, config)
        Diff.write!(base, profile, config)

      type ->
        counters = Run.profile!(code, file, argv, config)
        path = Run.write_csv!(counters, config)
        Report.print_counters(counters, path, config, type)
    end
  end

  defp run_next(opts, rest) do
    if opts[:summary], do: Options.usage!("--summary does not go with --next")

    source = if opts[:eval] == nil and rest == [], do: nil, else: Options.source!(opts, rest)
    config = Options.next_config!(opts, source)
    base = Diff.read_base!(config.diff_base)
    shell = Mix.shell()

    profile =
      case opts[:node] do
        nil ->
          Run.start_apps(opts)
          Run.require_files(Keyword.get_values(opts, :require))
          Run.capture_here!(opts[:next], config)

        node ->
          if source,
            do: Options.usage!("--node captures a call the remote node makes: no -e or FILE")

          Mix.Task.run("app.config", [])
          Remote.capture_on!(node, opts, config)
      end

    shell.info(
      "Captured the call of #{profile.name} by #{inspect(profile.pid)} (#{profile.duration_us} µs)."
    )

    paths = Run.write!(profile, config)
    Report.summary(profile, paths, config)
    Diff.write!(base, profile, config)
  end
end
