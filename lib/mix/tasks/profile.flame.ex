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
    * `--mode nif|process|sample` – how the profile is captured (default
      `nif`: exact call stacks; `sample`: stack samples every
      `--interval-us` µs, no call breakpoints)
    * `--interval-us N` – the sampling interval of `--mode sample`
      (default 1000, at least 1000)
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
    * `--summary call_time|call_memory` – per-function counters instead of
      a flame graph (see above); `--mode`, `--cross-process`, `--format` and
      the other capture options do not go with it
    * `--top N` – how many functions to list (default 10)
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

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Profile.Tree
  alias FlameOn.Client.Shipper.Directory

  @formats [:folded, :speedscope, :perfetto, :svg, :pprof]
  @result_key {__MODULE__, :result}

  @switches [
    eval: :keep,
    require: :keep,
    out: :string,
    format: :string,
    name: :string,
    mode: :string,
    interval_us: :integer,
    split_status: :boolean,
    cross_process: :boolean,
    follow: :string,
    sleep: :string,
    max_nodes: :integer,
    max_depth: :integer,
    top: :integer,
    summary: :string,
    next: :string,
    timeout: :integer,
    node: :string,
    sname: :string,
    longname: :string,
    cookie: :string,
    warmup: :boolean,
    start: :boolean,
    compile: :boolean,
    deps_check: :boolean,
    archives_check: :boolean,
    elixir_version_check: :boolean
  ]
  @aliases [e: :eval, r: :require, o: :out, f: :format]

  @usage """
  usage: mix profile.flame [OPTIONS] (-e CODE | FILE [ARGS])
         mix profile.flame --next MODULE.FUN/ARITY [--timeout MS] [OPTIONS] [-e CODE | FILE [ARGS]]

    -e, --eval CODE        the code to profile (or give a FILE)
    -r, --require PATTERN  files to require first
    -o, --out DIR          output directory (default flame_on_out)
    -f, --format LIST      folded,speedscope,perfetto,svg,pprof
        --name NAME        the trace's name
        --mode nif|process|sample  capture mode (default nif)
        --interval-us N    sampling interval of --mode sample (default 1000)
        --split-status     --mode sample: stacks split by process status
        --cross-process    follow messages and calls, print the span graph
        --follow messages|calls
        --sleep default|raw
        --summary call_time|call_memory  per-function counters, written as CSV
        --max-nodes N, --max-depth N, --top N
        --next MODULE.FUN/ARITY  profile the next call of it, by any process
        --timeout MS       --next: wait at most this long (default 30000)
        --node NODE        --next on that node (with --sname/--longname, --cookie)
        --no-warmup, --no-start, --no-compile, --no-deps-check,
        --no-archives-check, --no-elixir-version-check\
  """

  @impl Mix.Task
  def run(args) do
    Mix.Task.reenable("profile.flame")
    {opts, rest, invalid} = OptionParser.parse_head(args, strict: @switches, aliases: @aliases)

    if invalid != [] do
      bad = Enum.map_join(invalid, ", ", fn {switch, _value} -> switch end)
      usage!("invalid option(s): #{bad}")
    end

    if opts[:next], do: run_next(opts, rest), else: run_profile(opts, rest)
    :ok
  end

  defp run_profile(opts, rest) do
    for key <- [:timeout, :node, :sname, :longname, :cookie], Keyword.has_key?(opts, key) do
      usage!("--#{dashed(key)} goes with --next")
    end

    {code, file, argv} = source!(opts, rest)
    config = config!(opts, file)

    start_apps(opts)
    require_files(Keyword.get_values(opts, :require))

    case config.summary do
      nil ->
        profile = profile!(code, file, argv, config)
        paths = write!(profile, config)
        summary(profile, paths, config)

      type ->
        counters = profile!(code, file, argv, config)
        path = write_csv!(counters, config)
        print_counters(counters, path, config, type)
    end
  end

  # --- --next -------------------------------------------------------------------

  defp run_next(opts, rest) do
    if opts[:summary], do: usage!("--summary does not go with --next")

    source = if opts[:eval] == nil and rest == [], do: nil, else: source!(opts, rest)
    config = next_config!(opts, source)
    shell = Mix.shell()

    profile =
      case opts[:node] do
        nil ->
          start_apps(opts)
          require_files(Keyword.get_values(opts, :require))
          capture_here!(opts[:next], config)

        node ->
          if source, do: usage!("--node captures a call the remote node makes: no -e or FILE")
          Mix.Task.run("app.config", [])
          capture_on!(node, opts, config)
      end

    shell.info(
      "Captured the call of #{profile.name} by #{inspect(profile.pid)} (#{profile.duration_us} µs)."
    )

    paths = write!(profile, config)
    summary(profile, paths, config)
  end

  defp next_config!(opts, source) do
    timeout =
      case opts[:timeout] do
        nil -> 30_000
        ms when ms > 0 -> ms
        ms -> usage!("--timeout must be a positive integer of milliseconds, got: #{ms}")
      end

    profile_opts =
      Enum.flat_map([:name, :mode, :sleep], fn key ->
        case {key, opts[key]} do
          {_, nil} ->
            []

          {:name, name} ->
            [name: name]

          {:mode, _} ->
            [
              mode:
                choice!(
                  opts,
                  :mode,
                  %{"nif" => :nif, "process" => :process, "sample" => :sample},
                  nil
                )
            ]

          {:sleep, _} ->
            [sleep: choice!(opts, :sleep, %{"default" => :default, "raw" => :raw}, nil)]
        end
      end) ++
        if(opts[:cross_process], do: [cross_process: true], else: []) ++
        if(opts[:split_status], do: [split_status: true], else: []) ++
        positive!(opts, :interval_us) ++
        positive!(opts, :max_nodes) ++ positive!(opts, :max_depth)

    %{
      capture_opts: [timeout: timeout] ++ profile_opts,
      timeout: timeout,
      out: opts[:out] || "flame_on_out",
      formats: formats!(opts[:format]),
      top: opts |> positive!(:top) |> Keyword.get(:top, 10),
      source: source
    }
  end

  defp capture_here!(text, config) do
    mfa =
      case FlameOn.Client.NextCall.parse(text) do
        {:ok, mfa} -> mfa
        {:error, message} -> Mix.raise("--next: #{message}")
      end

    name = FlameOn.Client.Profile.frame_name(mfa)
    Mix.shell().info("Waiting up to #{config.timeout} ms for the next call of #{name}...")
    task = Task.async(fn -> FlameOn.Client.capture_next(mfa, config.capture_opts) end)

    # the code that makes the call runs once the capture waits
    if config.source do
      await_armed(mfa, task)
      {code, file, argv} = config.source
      run_code(code, file, argv)
    end

    case Task.await(task, :infinity) do
      {:ok, profile} -> profile
      {:error, :timeout} -> Mix.raise("no process called #{name} within #{config.timeout} ms")
      {:error, reason} -> Mix.raise("could not capture #{name}: #{inspect(reason)}")
    end
  end

  defp await_armed(mfa, task, tries \\ 500) do
    cond do
      Enum.any?(FlameOn.Client.Node.Gates.waiting(), &match?({^mfa, _}, &1)) -> :ok
      Task.yield(task, 0) != nil -> Mix.raise("the capture ended before the code ran")
      tries == 0 -> Mix.raise("the capture did not start")
      true -> Process.sleep(10) && await_armed(mfa, task, tries - 1)
    end
  end

  defp run_code(code, file, argv) do
    previous_argv = System.argv()
    System.argv(argv)

    try do
      Code.eval_string(code, [], file: file || "nofile")
    after
      System.argv(previous_argv)
    end
  end

  defp capture_on!(node_text, opts, config) do
    node = String.to_atom(node_text)
    start_distribution!(node, opts)

    unless Node.connect(node) do
      Mix.raise("could not connect to #{node} (is it running, with the same cookie?)")
    end

    remote = fn module, fun, args, timeout ->
      try do
        :erpc.call(node, module, fun, args, timeout)
      catch
        :error, {:erpc, reason} -> Mix.raise("#{node}: #{inspect(reason)}")
        kind, reason -> Mix.raise("#{node}: #{Exception.format(kind, reason)}")
      end
    end

    unless remote.(Code, :ensure_loaded?, [FlameOn.Client.NextCall], 10_000) do
      Mix.raise("#{node} does not have flame_on_client (FlameOn.Client.NextCall is not loaded)")
    end

    mfa =
      case remote.(FlameOn.Client.NextCall, :parse, [opts[:next]], 10_000) do
        {:ok, mfa} -> mfa
        {:error, message} -> Mix.raise("--next on #{node}: #{message}")
      end

    name = FlameOn.Client.Profile.frame_name(mfa)

    Mix.shell().info(
      "Waiting up to #{config.timeout} ms for the next call of #{name} on #{node}..."
    )

    # the call's own time limit (max_duration_ms) plus the wait, and slack
    erpc_timeout = config.timeout + 70_000

    case remote.(FlameOn.Client, :capture_next, [mfa, config.capture_opts], erpc_timeout) do
      {:ok, profile} ->
        profile

      {:error, :timeout} ->
        Mix.raise("no process on #{node} called #{name} within #{config.timeout} ms")

      {:error, reason} ->
        Mix.raise("could not capture #{name} on #{node}: #{inspect(reason)}")
    end
  end

  defp start_distribution!(node, opts) do
    {name, type} =
      case {opts[:sname], opts[:longname]} do
        {nil, nil} -> {:"flame_on_#{System.unique_integer([:positive])}", :shortnames}
        {sname, nil} -> {String.to_atom(sname), :shortnames}
        {nil, name} -> {String.to_atom(name), :longnames}
        _ -> usage!("give --sname or --longname, not both")
      end

    unless Node.alive?() do
      case Node.start(name, type) do
        {:ok, _} ->
          :ok

        {:error, reason} ->
          Mix.raise(
            "could not start distribution as #{name} (#{inspect(reason)}; is epmd running? " <>
              "`epmd -daemon` starts it)"
          )
      end
    end

    if cookie = opts[:cookie], do: Node.set_cookie(node, String.to_atom(cookie))
  end

  # --- options ----------------------------------------------------------------

  defp source!(opts, rest) do
    case {Keyword.get_values(opts, :eval), rest} do
      {[], []} ->
        usage!("give the code to profile with -e CODE or a FILE")

      {[], [file | argv]} ->
        unless File.regular?(file), do: Mix.raise("No such file: #{file}")
        {File.read!(file), file, argv}

      {evals, []} ->
        {Enum.join(evals, "\n"), nil, []}

      {_evals, [extra | _]} ->
        usage!("give either -e CODE or a FILE, not both (got #{inspect(extra)})")
    end
  end

  defp config!(opts, file) do
    profile_opts =
      [
        name: opts[:name] || default_name(file),
        mode:
          choice!(opts, :mode, %{"nif" => :nif, "process" => :process, "sample" => :sample}, :nif),
        sleep: choice!(opts, :sleep, %{"default" => :default, "raw" => :raw}, :default),
        follow: choice!(opts, :follow, %{"messages" => :messages, "calls" => :calls}, :messages)
      ] ++
        if(opts[:cross_process], do: [cross_process: true], else: []) ++
        if(opts[:split_status], do: [split_status: true], else: []) ++
        positive!(opts, :interval_us) ++
        positive!(opts, :max_nodes) ++ positive!(opts, :max_depth)

    %{
      summary: summary_type!(opts),
      profile_opts: profile_opts,
      out: opts[:out] || "flame_on_out",
      formats: formats!(opts[:format]),
      top: opts |> positive!(:top) |> Keyword.get(:top, 10),
      warmup: Keyword.get(opts, :warmup, true)
    }
  end

  # The capture options that only go with a flame graph.
  @profile_only [
    :mode,
    :cross_process,
    :format,
    :split_status,
    :interval_us,
    :sleep,
    :max_nodes,
    :max_depth
  ]

  defp summary_type!(opts) do
    case choice!(opts, :summary, %{"call_time" => :call_time, "call_memory" => :call_memory}, nil) do
      nil ->
        nil

      type ->
        case Enum.filter(@profile_only, &Keyword.has_key?(opts, &1)) do
          [] -> :ok
          [key | _] -> usage!("--#{dashed(key)} does not go with --summary")
        end

        try do
          FlameOn.Client.Capture.Counters.check_release!(type)
        rescue
          error in ArgumentError -> Mix.raise(Exception.message(error))
        end

        type
    end
  end

  defp default_name(nil), do: "eval"
  defp default_name(file), do: file |> Path.basename() |> Path.rootname()

  defp choice!(opts, key, choices, default) do
    case opts[key] do
      nil ->
        default

      text ->
        Map.get_lazy(choices, text, fn ->
          expected = choices |> Map.keys() |> Enum.sort() |> Enum.join(" or ")
          usage!("--#{dashed(key)} must be #{expected}, got: #{inspect(text)}")
        end)
    end
  end

  defp positive!(opts, key) do
    case opts[key] do
      nil -> []
      n when n > 0 -> [{key, n}]
      n -> usage!("--#{dashed(key)} must be a positive integer, got: #{n}")
    end
  end

  defp formats!(nil), do: if(Directory.export?(), do: [:folded, :svg], else: [:folded])

  defp formats!(text) do
    names = text |> String.split(",", trim: true) |> Enum.map(&String.trim/1)
    known = Map.new(@formats, &{Atom.to_string(&1), &1})

    formats =
      Enum.map(names, fn name ->
        Map.get_lazy(known, name, fn ->
          usage!(
            "unknown format #{inspect(name)}, expected a comma-separated list of " <>
              Enum.join(@formats, ", ")
          )
        end)
      end)

    cond do
      formats == [] ->
        usage!("--format needs at least one format")

      not Directory.export?() and formats -- [:folded] != [] ->
        Mix.raise(
          "format(s) #{Enum.join(Enum.uniq(formats -- [:folded]), ", ")} need " <>
            "FlameOn.Client.Export, which this build does not have; use --format folded"
        )

      true ->
        Enum.uniq(formats)
    end
  end

  defp dashed(key), do: key |> Atom.to_string() |> String.replace("_", "-")

  defp usage!(message), do: Mix.raise("#{message}\n\n#{@usage}")

  # --- running ----------------------------------------------------------------

  defp start_apps(opts) do
    args =
      for {key, flag} <- [
            compile: "--no-compile",
            deps_check: "--no-deps-check",
            archives_check: "--no-archives-check",
            elixir_version_check: "--no-elixir-version-check"
          ],
          opts[key] == false,
          do: flag

    if opts[:start] == false do
      Mix.Task.run("app.config", args)
    else
      Mix.Task.run("app.start", args)
    end

    # Its pattern owner and session supervisor are needed even with
    # --no-start.
    {:ok, _} = Application.ensure_all_started(:flame_on_client)
  end

  defp require_files(patterns) do
    Enum.each(patterns, fn pattern ->
      case Path.wildcard(pattern) do
        [] -> Mix.raise("No files matched pattern #{inspect(pattern)} given to --require")
        files -> Enum.each(files, &Code.require_file/1)
      end
    end)
  end

  # The code is compiled (not evaluated) inside a function, as mix
  # profile.eprof does: the profile then shows the code's own calls rather
  # than the evaluator's.
  defp profile!(code, file, argv, config) do
    file = file || "nofile"
    quoted = Code.string_to_quoted!(code, file: file)
    previous_argv = System.argv()
    System.argv(argv)

    try do
      Process.delete(@result_key)

      Code.compile_quoted(
        quote do
          unquote(__MODULE__).__profile__(
            fn -> unquote(quoted) end,
            unquote(Macro.escape(config))
          )
        end,
        file
      )

      Process.delete(@result_key) || Mix.raise("the code did not run")
    after
      System.argv(previous_argv)
    end
  end

  @doc false
  # Called by the compiled code with the code as a function.
  @spec __profile__((() -> term()), map()) :: term()
  def __profile__(fun, config) do
    shell = Mix.shell()

    if config.warmup do
      shell.info("Warmup...")
      fun.()
    end

    shell.info("Profiling...")
    started = System.monotonic_time(:millisecond)

    {_result, profile} =
      case config.summary do
        nil -> FlameOn.Client.profile(fun, config.profile_opts)
        type -> FlameOn.Client.summary(fun, type: type, name: config.profile_opts[:name])
      end

    shell.info("Profiled in #{System.monotonic_time(:millisecond) - started} ms.")
    Process.put(@result_key, profile)
  end

  defp write_csv!(summary, %{out: out}) do
    path = Path.join(out, "#{Directory.safe_name(summary.name)}.summary.csv")

    with :ok <- File.mkdir_p(out),
         :ok <- File.write(path, FlameOn.Client.Summary.csv(summary)) do
      path
    else
      {:error, reason} -> Mix.raise("could not write #{path}: #{inspect(reason)}")
    end
  end

  defp print_counters(summary, path, config, type) do
    shell = Mix.shell()
    shell.info("  #{path} (csv, every function)")

    what = if type == :call_time, do: "time", else: "memory"

    shell.info(
      "\nTop #{config.top} functions by #{what} (#{inspect(summary.name)}, #{type}, " <>
        "#{map_size(summary.by_process)} #{plural(map_size(summary.by_process), "process", "processes")}, " <>
        "#{summary.duration_us} µs wall):"
    )

    shell.info(FlameOn.Client.Summary.table(summary, top: config.top))
  end

  defp write!(profile, %{out: out, formats: formats}) do
    n = length(formats)
    Mix.shell().info("Writing #{n} #{plural(n, "file")} to #{out}...")

    with :ok <- File.mkdir_p(out),
         {:ok, paths} <- Directory.write(profile, out, formats) do
      paths
    else
      {:error, reason} -> Mix.raise("could not write the profile to #{out}: #{inspect(reason)}")
    end
  end

  # --- summary ----------------------------------------------------------------

  defp summary(profile, paths, config) do
    shell = Mix.shell()
    Enum.each(paths, fn {format, path} -> shell.info("  #{path} (#{format})") end)

    self_times = self_times(profile)
    total = self_times |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    stacks = profile.stacks |> Map.values() |> Enum.map(&length/1) |> Enum.sum()
    processes = map_size(profile.stacks)

    shell.info(
      "\nTop #{config.top} functions by self time " <>
        "(#{inspect(profile.name)}, mode #{profile.mode}):"
    )

    shell.info("    SELF µs       %  FUNCTION")

    for {frame, us} <- Enum.take(self_times, config.top) do
      shell.info("  #{pad(us, 9)}  #{percent(us, total)}  #{frame}")
    end

    shell.info(
      "Total: #{total} µs in #{stacks} #{plural(stacks, "stack")} of #{processes} " <>
        "#{plural(processes, "process", "processes")} (#{profile.duration_us} µs wall)"
    )

    if profile.graph, do: spans(profile.graph)
    warnings(profile.stats)
  end

  @doc false
  # `[{frame, self_us}]`, largest first: the time of the stacks each frame
  # is the leaf of, over every process of the profile.
  @spec self_times(Profile.t()) :: [{String.t(), non_neg_integer()}]
  def self_times(%Profile{stacks: stacks} = profile) do
    tree = Tree.of(profile)

    stacks
    |> Map.keys()
    |> Enum.reduce(%{}, fn pid, acc ->
      Tree.reduce(tree, pid, acc, fn
        {_depth, _name, 0, _total, _s, _w}, acc ->
          acc

        {_depth, name, us, _total, _s, _w}, acc ->
          Map.update(acc, leaf(tree, name), us, &(&1 + us))
      end)
    end)
    |> Enum.sort_by(fn {frame, us} -> {-us, frame} end)
  end

  defp leaf(tree, name), do: Tree.name(tree, name) || "(no traced function)"

  @max_spans_shown 20

  defp spans(graph) do
    shell = Mix.shell()
    depth = span_depths(graph.spans)
    shell.info("\nSpans (#{length(graph.spans)}):")
    shell.info("    SELF µs  ATTRIBUTED µs  UNATTRIBUTED µs  PROCESS")

    # The first spans in trace order (the root and its first callees); a
    # long trace's full list is in the Perfetto file.
    {shown, rest} = Enum.split(graph.spans, @max_spans_shown)

    for span <- shown do
      indent = String.duplicate("  ", Map.get(depth, span.span_id, 0))
      status = if span.status == :ok, do: "", else: "  #{inspect(span.status)}"
      kind = if span.kind == :root, do: "", else: " (#{span.kind})"
      # a span on another node (a trace across nodes) says which
      on = if span.node in [nil, node()], do: "", else: " on #{span.node}"

      shell.info(
        "  #{pad(span.self_us, 9)}  #{pad(span.attributed_wait_us, 13)}  " <>
          "#{pad(span.unattributed_wait_us, 15)}  #{indent}#{span_label(span)}#{kind}#{on}" <>
          "#{causes(span)}#{status}"
      )
    end

    if rest != [] do
      shell.info("  ... #{length(rest)} more spans (write --format perfetto to see them all)")
    end

    edges(graph)

    if graph.stats != %{} do
      counters =
        for {key, n} <- Enum.sort(graph.stats), is_integer(n) and n != 0, do: "#{key}: #{n}"

      if counters != [], do: shell.info("Graph: " <> Enum.join(counters, ", "))
      nodes(graph.stats)
    end
  end

  # A trace across nodes: the nodes that took part, and those that could not.
  defp nodes(stats) do
    for {node, n} <- Enum.sort(Map.get(stats, :nodes, %{})) do
      Mix.shell().info(
        "Node #{node}: #{n.spans} spans, clock offset #{n.clock_offset_us} µs " <>
          "± #{n.clock_uncertainty_us} µs, #{n.bytes} bytes"
      )
    end

    for {node, reason} <-
          Map.get(stats, :unreachable_nodes, []) ++ Map.get(stats, :lost_nodes, []) do
      Mix.shell().info("Node #{node}: not in the trace (#{inspect(reason)})")
    end
  end

  defp span_label(span), do: span.name || inspect(span.pid)

  # What ended the unattributed wait, when there is any.
  defp causes(%{unattributed_by: by}) do
    case for {cause, us} <- Enum.sort_by(by, fn {_, us} -> -us end), us > 0, do: "#{cause} #{us}" do
      [] -> ""
      parts -> "  [" <> Enum.join(parts, ", ") <> "]"
    end
  end

  @max_edges_shown 10

  # The waits other spans explained, largest first.
  defp edges(%{edges: []}), do: :ok

  defp edges(%{edges: edges, spans: spans}) do
    shell = Mix.shell()
    by_id = Map.new(spans, &{&1.span_id, &1})
    shell.info("\nWaits explained by other spans (#{length(edges)}):")
    shell.info("         µs  WAKES  WAITER -> WAKER")

    edges
    |> Enum.sort_by(&{-&1.attributed_us, &1.waiter_span_id})
    |> Enum.take(@max_edges_shown)
    |> Enum.each(fn edge ->
      waiter = by_id[edge.waiter_span_id]
      waker = by_id[edge.waker_span_id]

      shell.info(
        "  #{pad(edge.attributed_us, 9)}  #{pad(edge.wakes, 5)}  " <>
          "#{edge.waiter_span_id} #{span_label(waiter)} -> #{edge.waker_span_id} #{span_label(waker)}"
      )
    end)

    if length(edges) > @max_edges_shown,
      do: shell.info("  ... #{length(edges) - @max_edges_shown} more")
  end

  defp span_depths(spans) do
    parents = Map.new(spans, &{&1.span_id, &1.parent_span_id})
    Map.new(spans, &{&1.span_id, depth_of(&1.span_id, parents, 0)})
  end

  defp depth_of(id, parents, depth) do
    case parents do
      %{^id => parent} when parent != nil and depth < 64 -> depth_of(parent, parents, depth + 1)
      _ -> depth
    end
  end

  defp warnings(stats) do
    for key <- [:dropped_events, :truncated_stacks, :malformed_events],
        n = Map.get(stats, key, 0),
        is_integer(n) and n > 0 do
      Mix.shell().info(
        "Warning: #{key}: #{n} (a limit was reached; see the options of FlameOn.Client)"
      )
    end
  end

  defp pad(n, width), do: n |> Integer.to_string() |> String.pad_leading(width)

  defp percent(_us, 0), do: "     -"

  defp percent(us, total),
    do:
      :erlang.float_to_binary(us * 100 / total, decimals: 1)
      |> String.pad_leading(5)
      |> Kernel.<>("%")

  defp plural(1, word), do: word
  defp plural(_n, word), do: word <> "s"
  defp plural(1, word, _plural), do: word
  defp plural(_n, _word, plural), do: plural
end
