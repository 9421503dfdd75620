defmodule FlameOn.Client.CLI.Options do
  @moduledoc false
  # mix profile.flame's command line: the switches, the usage text, and
  # each option checked into the configuration of a run (the capture
  # options go to FlameOn.Client.Options, which checks them again).

  alias FlameOn.Client.Shipper.Directory

  @formats [:folded, :speedscope, :perfetto, :svg, :pprof]

  @switches [
    eval: :keep,
    require: :keep,
    out: :string,
    format: :string,
    name: :string,
    mode: :string,
    interval_us: :integer,
    frequency: :integer,
    split_status: :boolean,
    alloc: :boolean,
    cross_process: :boolean,
    follow: :string,
    sleep: :string,
    max_nodes: :integer,
    max_depth: :integer,
    collapse_recursion: :boolean,
    top: :integer,
    summary: :string,
    diff_base: :string,
    diff_normalize: :string,
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

  @doc "The switches and their aliases, as OptionParser takes them."
  @spec parser() :: keyword()
  def parser, do: [strict: @switches, aliases: @aliases]

  @usage """
  usage: mix profile.flame [OPTIONS] (-e CODE | FILE [ARGS])
         mix profile.flame --next MODULE.FUN/ARITY [--timeout MS] [OPTIONS] [-e CODE | FILE [ARGS]]

    -e, --eval CODE        the code to profile (or give a FILE)
    -r, --require PATTERN  files to require first
    -o, --out DIR          output directory (default flame_on_out)
    -f, --format LIST      folded,speedscope,perfetto,svg,pprof
        --name NAME        the trace's name
        --mode MODE        capture mode (default nif; see --mode below)
        --interval-us N    sampling interval of --mode sample (default 1000)
        --frequency HZ     CPU samples a second of --mode native (default 499)
        --split-status     --mode sample: stacks split by process status
        --alloc            also weigh the stacks by heap words allocated
                           (writes NAME.alloc.* and prints the top allocators)
        --cross-process    follow messages and calls, print the span graph
        --follow messages|calls
        --sleep default|raw
        --summary call_time|call_memory  per-function counters, written as CSV
        --max-nodes N, --max-depth N, --top N
        --no-collapse-recursion  keep direct recursion at its real depth
                           (exact stacks; --max-depth then counts every call)
        --diff-base FILE   also write the diff against FILE (an earlier run's .folded)
        --diff-normalize median|total|none  how the diff scales the new run (median)
        --next MODULE.FUN/ARITY  profile the next call of it, by any process
        --timeout MS       --next: wait at most this long (default 30000)
        --node NODE        --next on that node (with --sname/--longname, --cookie)
        --no-warmup, --no-start, --no-compile, --no-deps-check,
        --no-archives-check, --no-elixir-version-check\
  """

  @doc "Argv into `{opts, rest}`: options before the script, the script and its argv."
  @spec parse!([String.t()]) :: {keyword(), [String.t()]}
  def parse!(args) do
    {opts, rest, invalid} = OptionParser.parse_head(args, parser())

    if invalid != [] do
      bad = Enum.map_join(invalid, ", ", fn {switch, _value} -> switch end)
      usage!("invalid option(s): #{bad}")
    end

    {opts, rest}
  end

  @doc "The configuration of a `--next` run."
  @spec next_config!(keyword(), tuple() | nil) :: map()
  def next_config!(opts, source) do
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
              mode: choice!(opts, :mode, modes(:capture_next), nil)
            ]

          {:sleep, _} ->
            [sleep: choice!(opts, :sleep, %{"default" => :default, "raw" => :raw}, nil)]
        end
      end) ++
        if(opts[:cross_process], do: [cross_process: true], else: []) ++
        if(opts[:split_status], do: [split_status: true], else: []) ++
        if(opts[:collapse_recursion] == false, do: [collapse_recursion: false], else: []) ++
        if(opts[:alloc], do: [alloc: true], else: []) ++
        positive!(opts, :interval_us) ++
        positive!(opts, :frequency) ++
        positive!(opts, :max_nodes) ++ positive!(opts, :max_depth)

    %{
      capture_opts: [timeout: timeout] ++ profile_opts,
      timeout: timeout,
      out: opts[:out] || "flame_on_out",
      formats: formats!(opts[:format]),
      alloc: opts[:alloc] == true,
      top: opts |> positive!(:top) |> Keyword.get(:top, 10),
      diff_base: opts[:diff_base],
      diff_normalize: diff_normalize!(opts),
      source: source
    }
  end

  @doc "The code to run: `{code, file | nil, argv}`."
  @spec source!(keyword(), [String.t()]) :: {String.t(), String.t() | nil, [String.t()]}
  def source!(opts, rest) do
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

  @doc "The configuration of a profile (or `--summary`) run."
  @spec config!(keyword(), String.t() | nil) :: map()
  def config!(opts, file) do
    profile_opts =
      [
        name: opts[:name] || default_name(file),
        mode: choice!(opts, :mode, modes(:profile), :nif),
        sleep: choice!(opts, :sleep, %{"default" => :default, "raw" => :raw}, :default),
        follow: choice!(opts, :follow, %{"messages" => :messages, "calls" => :calls}, :messages)
      ] ++
        if(opts[:cross_process], do: [cross_process: true], else: []) ++
        if(opts[:split_status], do: [split_status: true], else: []) ++
        if(opts[:collapse_recursion] == false, do: [collapse_recursion: false], else: []) ++
        if(opts[:alloc], do: [alloc: true], else: []) ++
        positive!(opts, :interval_us) ++
        positive!(opts, :frequency) ++
        positive!(opts, :max_nodes) ++ positive!(opts, :max_depth)

    %{
      summary: summary_type!(opts),
      profile_opts: profile_opts,
      out: opts[:out] || "flame_on_out",
      formats: formats!(opts[:format]),
      alloc: opts[:alloc] == true,
      top: opts |> positive!(:top) |> Keyword.get(:top, 10),
      diff_base: opts[:diff_base],
      diff_normalize: diff_normalize!(opts),
      warmup: Keyword.get(opts, :warmup, true)
    }
  end

  # The capture options that only go with a flame graph.
  @profile_only [
    :mode,
    :cross_process,
    :format,
    :split_status,
    :alloc,
    :interval_us,
    :frequency,
    :sleep,
    :max_nodes,
    :max_depth,
    :collapse_recursion,
    :diff_base,
    :diff_normalize
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

  defp diff_normalize!(opts) do
    if opts[:diff_normalize] && !opts[:diff_base],
      do: usage!("--diff-normalize goes with --diff-base")

    choices = %{"median" => :median, "total" => :total, "none" => false}
    choice!(opts, :diff_normalize, choices, :median)
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

  # the modes `entry` takes, by their names on the command line
  defp modes(entry) do
    Map.new(FlameOn.Client.Options.modes(entry), fn {name, _} -> {Atom.to_string(name), name} end)
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

  @doc "A key as its switch reads: `max_nodes` is `max-nodes`."
  @spec dashed(atom()) :: String.t()
  def dashed(key), do: key |> Atom.to_string() |> String.replace("_", "-")

  @doc "Raises a Mix error: `message`, then the usage."
  @spec usage!(String.t()) :: no_return()
  def usage!(message), do: Mix.raise("#{message}\n\n#{@usage}")
end
