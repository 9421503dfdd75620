defmodule FlameOn.Client.Options do
  alias FlameOn.Client.Options.{Cache, Check, Config}
  alias FlameOn.Client.Shipper

  # The capture modes, by the `:mode` option's value: each a module of the
  # FlameOn.Client.Capture.Mode behaviour.
  @modes %{
    nif: FlameOn.Client.Capture.Nif,
    process: FlameOn.Client.Capture.Process,
    sample: FlameOn.Client.Capture.Sample,
    native: FlameOn.Client.Capture.Native
  }
  # `mode: :auto`: native where this VM can sample natively, else sample
  @mode_names Map.keys(@modes) ++ [:auto]
  @auto_description ":native where this VM can sample natively, else :sample"

  @limits [
    max_nodes: 200_000,
    max_depth: 512,
    max_processes: 10_000,
    max_frames: 100_000,
    max_stack_frames: 100_000,
    max_stack_bytes: 64 * 1024 * 1024
  ]
  @graph_limits [max_spans: 10_000, max_pending_calls: 4_096, max_fanout: 1_000]
  # How the core builds stacks (the core session takes these with the limits).
  @stacks [collapse_recursion: true]
  @sampling [interval_us: 1_000, split_status: false, max_samples: 100_000, frequency: 499]
  @cross_process [
                   cross_process: nil,
                   follow: :messages,
                   sleep: :default,
                   cluster: [],
                   max_duration_ms: 60_000
                 ] ++ @graph_limits
  @capture [name: "flame_on", mode: nil, timeout: 30_000, alloc: false] ++
             @sampling ++ @limits ++ @stacks ++ @cross_process
  @shipping [sample_rate: nil, threshold_ms: nil, shipper: nil]

  @limit_keys Keyword.keys(@limits) ++ Keyword.keys(@graph_limits) ++ Keyword.keys(@stacks)
  @sampling_keys Keyword.keys(@sampling)
  @capture_keys Keyword.keys(@capture)

  # The keys each entry point takes, in the order the docs list them.
  @entries [
    profile: {"FlameOn.Client.profile/2", @capture_keys},
    trace: {"FlameOn.Client.trace/3", @capture_keys ++ Keyword.keys(@shipping)},
    start_trace:
      {"FlameOn.Client.start_trace/2",
       [:name, :mode, :alloc, :duration_ms, :timeout, :sample_rate, :threshold_ms, :shipper] ++
         @sampling_keys ++ Keyword.keys(@limits) ++ Keyword.keys(@stacks)},
    top:
      {"FlameOn.Client.start_trace/2 ({:top, n})",
       [
         :name,
         :mode,
         :alloc,
         :duration_ms,
         :timeout,
         :sample_rate,
         :threshold_ms,
         :shipper,
         :window_ms
       ] ++
         @sampling_keys ++ Keyword.keys(@limits) ++ Keyword.keys(@stacks)},
    telemetry:
      {"the FlameOn.Client.Telemetry handler config",
       [:name, :mode, :alloc, :max_duration_ms, :sample_rate, :threshold_ms, :shipper] ++
         @sampling_keys ++ Keyword.keys(@limits) ++ Keyword.keys(@stacks)},
    capture_next: {"FlameOn.Client.capture_next/2", @capture_keys ++ [:shipper, :store]},
    summary: {"FlameOn.Client.summary/2", [:type, :set_on_spawn, :name]},
    ex_unit:
      {"FlameOn.Client.ExUnit.start/1",
       [:dir, :formats, :summary, :regression] ++ (@capture_keys -- [:name])},
    ex_unit_tag: {"a flame: tag", [:dir, :formats, :regression] ++ (@capture_keys -- [:name])},
    web:
      {"FlameOn.Client.Web.start/1",
       [:port, :ip, :token, :max_timeout_ms, :max_captures, :max_connections]},
    cluster: {"the :cluster option", [:nodes, :arm_timeout_ms, :max_part_bytes]}
  ]

  # How a default that is not a value reads in the docs.
  @default_notes %{
    mode:
      "`:nif` for `profile/2` and `mix profile.flame`; for the entry points meant " <>
        "for application code (`trace/3`, `start_trace/2`, telemetry, `capture_next/2`, " <>
        "the web form): the application environment's `:mode`, else `:auto` " <>
        "(`:native` where this VM can sample natively, else `:sample`)",
    cross_process: "the application environment's `:cross_process`, else `false`",
    max_stack_bytes: "`67_108_864` (64 MiB)",
    sample_rate: "the application environment's, else `1.0`",
    threshold_ms: "the application environment's, else `0`",
    shipper: "the application environment's, else none"
  }

  # The docs' tables, from the lists above: they cannot drift.
  @defaults_doc (for {key, default} <- @capture ++ @shipping, into: "" do
                   text =
                     case default do
                       n when is_integer(n) ->
                         n
                         |> Integer.to_string()
                         |> String.reverse()
                         |> String.replace(~r/(\d{3})(?=\d)/, "\\1_")
                         |> String.reverse()

                       other ->
                         inspect(other)
                     end

                   "| `#{inspect(key)}` | #{Map.get(@default_notes, key, "`#{text}`")} |\n"
                 end)
  @entries_doc (for {_entry, {what, keys}} <- @entries, into: "" do
                  "  * #{what}: #{keys |> Enum.sort() |> Enum.map_join(", ", &"`#{inspect(&1)}`")}\n"
                end)

  @moduledoc """
  Every option of every entry point, with its default, checked in one
  place.

  Each entry point takes the options listed for it below and nothing else:
  an unknown or misspelt key raises `ArgumentError` naming it and listing
  the keys that entry point takes (`trace/3` too: a misspelt option is a
  programming error, so it surfaces in development and tests instead of
  running untraced in production). A value of the wrong kind raises
  `ArgumentError` saying what was expected.

      FlameOn.Client.trace("checkout", fn -> :ok end, threshold: 250)
      ** (ArgumentError) unknown keys [:threshold] for FlameOn.Client.trace/3
         (did you mean :threshold_ms?); it takes: :cluster, :cross_process, ...

  ## The options

  What each one means is documented at the entry point that takes it
  (`FlameOn.Client.profile/2` for the capture options). The defaults:

  | option | default |
  |---|---|
  #{@defaults_doc}
  ## Which entry point takes which

  #{@entries_doc}
  `start_trace/2` and telemetry take `:mode` `:native`, `:sample`,
  `:process` or `:auto` (`:nif` reads as `:process`); a whole-node
  `start_trace({:top, n})` only samples. `start_trace/2` accepts
  `:sample_rate` and does not use it. `capture_next/2` reads `:mode`
  `:process` as `:nif`, and its `:timeout` is how long to wait for the
  call. `mode: :auto` is `:native` where this VM can sample natively
  (`FlameOn.Client.status/0` says whether, and why not), else `:sample`;
  the profile's `:mode` says which ran.

  `trace/3` and the telemetry handler, called per request, check an
  option list once and keep the result by the list (up to 128 lists
  node-wide, in `:persistent_term`): a later call with the same list reads
  the application environment's values the result depends on (`:mode`,
  and those of the keys it leaves out) and checks again only when one
  changed. Options that raise are never kept, so they raise every time.
  A process also keeps its last result for 100 ms and takes it again for
  the same list without those reads: a change of the application
  environment reaches a process that makes requests within 100 ms.

  ## Application environment

  `config :flame_on_client, ...`: `:mode`, `:cross_process`,
  `:sample_rate`, `:threshold_ms`, `:shipper` (defaults of the options
  above), `:sample_budget` (`2_000` samples a second, or `:infinity`; see
  `FlameOn.Client.status/0`), `:trace_store` (`max_traces: 50,
  max_memory_mb: 64`), `:breaker` (`max_sessions_memory_mb: 512,
  max_node_memory_mb: nil, resume_ratio: 0.8`: new traces do not start
  while the live core sessions, or the node if a limit is set, hold more
  memory; they start again below `resume_ratio` of it).
  """

  @typedoc "An entry point (see the module documentation)."
  @type entry ::
          :profile
          | :trace
          | :start_trace
          | :top
          | :telemetry
          | :capture_next
          | :summary
          | :ex_unit
          | :ex_unit_tag
          | :web
          | :cluster

  @typedoc "The validated options of a capture, every key with its value."
  @type capture :: %{atom() => term()}

  @typedoc "What `trace/3`, `start_trace/2` and telemetry do with a profile."
  @type settings :: %{
          sample_rate: number(),
          threshold_ms: number(),
          shippers: [{module(), keyword()}]
        }

  # --- entry points -------------------------------------------------------

  @doc """
  `profile/2`'s options, checked, every capture option filled in (a map).

      iex> FlameOn.Client.Options.profile!(mode: :sample).interval_us
      1000
  """
  @spec profile!(term()) :: capture()
  def profile!(opts), do: opts |> given!(:profile) |> capture(:nif)

  @doc """
  `trace/3`'s options: `{settings, capture}`, checked. The capture's mode
  defaults to the application code default (`default_mode/0`).
  """
  @spec trace!(term()) :: {settings(), capture()}
  def trace!(opts), do: cached!({:trace, opts}, opts)

  @doc """
  `trace!/1` as `trace/3` calls it, per request: the calling process
  keeps the result it got for an option list and takes it again for
  the same list during the next 100 ms (no cache or application
  environment read per request); after that, or for another list,
  `trace!/1` again.
  """
  @spec trace_request!(term()) :: {settings(), capture()}
  def trace_request!(opts), do: kept_in_process!(:trace, opts, &trace!/1)

  @doc "`telemetry!/2` as the telemetry handler calls it, per event (see `trace_request!/1`)."
  @spec telemetry_request!(term(), [atom()]) :: {settings(), capture()}
  def telemetry_request!(config, prefix),
    do: kept_in_process!(:telemetry, {config, prefix}, fn _ -> telemetry!(config, prefix) end)

  @doc """
  `start_trace/2`'s options (`:top` for a whole-node trace): a map with
  `:capture` (mode `:sample` or `:process`), `:duration_ms`, `:window_ms`
  and `:settings`.
  """
  @spec start_trace!(term(), :start_trace | :top) :: map()
  def start_trace!(opts, entry \\ :start_trace) when entry in [:start_trace, :top] do
    given = given!(opts, entry)
    mode = Map.get(given, :mode) || default_mode()

    mode =
      case {entry, mode} do
        {:top, mode} when mode in [:sample, :auto] -> :sample
        {:top, other} -> invalid!(:mode, ":sample (whole-node traces only sample)", other)
        {_, :nif} -> :process
        {_, mode} when mode in [:native, :sample, :process] -> mode
        {_, :auto} -> auto_mode()
        {_, other} -> invalid!(:mode, ":native, :process, :sample or :auto", other)
      end

    %{
      capture: given |> Map.merge(%{mode: mode, cross_process: false}) |> capture(mode),
      duration_ms: Map.get(given, :duration_ms),
      window_ms: Map.get(given, :window_ms, 1_000),
      settings: settings(given)
    }
  end

  @doc """
  A telemetry handler's config (a keyword list or map) for the events of
  `prefix`: `{settings, capture}` (`:max_duration_ms` in the capture is the
  longest a trace waits for its `:stop`; mode `:nif` reads as `:process`).
  """
  @spec telemetry!(term(), [atom()]) :: {settings(), capture()}
  def telemetry!(config, prefix), do: cached!({:telemetry, config, prefix}, config)

  defp config_list!(nil), do: []
  defp config_list!(config) when is_map(config), do: Enum.to_list(config)
  defp config_list!(config) when is_list(config), do: config

  defp config_list!(other) do
    raise ArgumentError,
          "expected the handler config to be a keyword list or map, got: #{inspect(other)}"
  end

  @doc """
  `capture_next/2`'s options: a map with `:capture` (mode `:nif` or
  `:sample`; named after the function unless `:name` is given), `:wait_ms`
  (its `:timeout`), `:store` and `:shippers`.
  """
  @spec capture_next!(term(), String.t()) :: map()
  def capture_next!(opts, default_name) do
    given = given!(opts, :capture_next)
    {wait, given} = Map.pop(given, :timeout, 30_000)
    {store, given} = Map.pop(given, :store, true)
    {shipper, given} = Map.pop(given, :shipper)
    given = Map.put_new(given, :name, default_name)
    capture = capture(given, default_mode())
    capture = %{capture | mode: if(capture.mode == :process, do: :nif, else: capture.mode)}
    %{capture: capture, wait_ms: wait, store: store, shippers: Shipper.normalize!(shipper)}
  end

  @doc "`summary/2`'s options, with their defaults."
  @spec summary!(term()) :: %{type: atom(), set_on_spawn: boolean(), name: String.t()}
  def summary!(opts) do
    given = given!(opts, :summary)
    Map.merge(%{type: :call_time, set_on_spawn: true, name: "flame_on"}, given)
  end

  @doc """
  `FlameOn.Client.ExUnit.start/1`'s options (`:ex_unit`) or a `flame:`
  tag's (`:ex_unit_tag`): `{files, capture}`, the file options (`:dir`,
  `:formats`, `:summary`, `:regression`) and the capture options as given (each checked;
  the defaults are filled in when a test is profiled).
  """
  @spec ex_unit!(term(), :ex_unit | :ex_unit_tag) :: {keyword(), keyword()}
  def ex_unit!(opts, entry) when entry in [:ex_unit, :ex_unit_tag] do
    given!(opts, entry)
    Keyword.split(opts, [:dir, :formats, :summary, :regression])
  end

  @doc "`FlameOn.Client.Web.start/1`'s options, with their defaults."
  @spec web!(term()) :: map()
  def web!(opts) do
    given = given!(opts, :web)

    Map.merge(
      %{
        port: 4040,
        ip: {127, 0, 0, 1},
        token: nil,
        max_timeout_ms: 600_000,
        max_captures: 8,
        max_connections: 32
      },
      given
    )
  end

  @doc "Checks a `:cluster` option list (raises `ArgumentError`)."
  @spec cluster!(term()) :: :ok
  def cluster!(config) do
    given!(config, :cluster)
    :ok
  end

  # --- the per-request checks' cache ----------------------------------------

  # How long a process takes its last checked options again without a
  # look at the cache and the application environment (their reads, an
  # ETS lookup each, were half of what a request traced and thrown away
  # cost on the shared tail path): a change of the environment reaches a
  # process making requests within this time.
  @kept_in_process_ms 100

  defp kept_in_process!(kind, raw, check) do
    key = {__MODULE__, kind}
    now = :erlang.monotonic_time()

    case Process.get(key) do
      {^raw, until, checked} when now < until ->
        checked

      _ ->
        checked = check.(raw)
        until = now + System.convert_time_unit(@kept_in_process_ms, :millisecond, :native)
        Process.put(key, {raw, until, checked})
        checked
    end
  end

  # The application environment's keys the checks of trace/3 and
  # telemetry may read (`:auto_mode`: what mode :auto runs).
  @env_keys [:mode, :cross_process, :sample_rate, :threshold_ms, :shipper, :auto_mode]

  # `check_entry!(what)`'s result, kept (Options.Cache) by the raw options while
  # the application environment's values it read are the same: a call
  # with options already checked reads those values (each an ETS lookup)
  # instead of checking again. Options that raise are never kept, so the
  # errors are the checks' own, every time.
  defp cached!(what, opts) do
    case Cache.get(what) do
      {keys, env, checked} ->
        if same_env?(keys, env), do: checked, else: check_entry!(what)

      nil ->
        before = env_values(@env_keys)
        checked = check_entry!(what)

        # kept only if the environment did not change while it was checked
        if env_values(@env_keys) == before do
          env = Map.new(Enum.zip(@env_keys, before))
          keys = env_keys(Map.new(config_list!(opts)), env)
          Cache.put(what, {keys, Enum.map(keys, &Map.fetch!(env, &1)), checked})
        end

        checked
    end
  end

  # The keys whose values the checks of `given` read: `:mode` always (an
  # invalid one raises, mode given or not), the others where `given` leaves
  # them out (or nil).
  defp env_keys(given, env) do
    mode =
      case {Map.get(given, :mode), env.mode} do
        {nil, {:ok, mode}} -> mode
        {nil, :undefined} -> :auto
        {mode, _} -> mode
      end

    left_out =
      for key <- [:cross_process, :sample_rate, :threshold_ms, :shipper],
          Map.get(given, key) == nil,
          do: key

    [:mode | left_out] ++ if(mode == :auto, do: [:auto_mode], else: [])
  end

  # The checks themselves.
  defp check_entry!({:trace, opts}) do
    given = given!(opts, :trace)
    {settings(given), capture(given, default_mode())}
  end

  defp check_entry!({:telemetry, config, prefix}) do
    given = config |> config_list!() |> given!(:telemetry)
    name = Map.get(given, :name) || Enum.map_join(prefix, ".", &to_string/1)

    mode =
      case Map.get(given, :mode) || default_mode() do
        :nif -> :process
        :auto -> auto_mode()
        mode when mode in [:native, :sample, :process] -> mode
        other -> invalid!(:mode, ":native, :sample, :process, :nif or :auto", other)
      end

    {settings(given),
     given |> Map.merge(%{name: name, mode: mode, cross_process: false}) |> capture(mode)}
  end

  defp env_values(keys), do: Enum.map(keys, &env_value/1)

  defp same_env?([key | keys], [value | values]),
    do: env_value(key) == value and same_env?(keys, values)

  defp same_env?([], []), do: true

  defp env_value(:auto_mode), do: auto_mode()
  defp env_value(key), do: :application.get_env(:flame_on_client, key)

  # --- shared ---------------------------------------------------------------

  @doc "`config :flame_on_client, :breaker`, with its defaults."
  @spec breaker() :: keyword()
  defdelegate breaker(), to: Config

  @doc "`config :flame_on_client, :trace_store`, with its defaults."
  @spec trace_store() :: keyword()
  defdelegate trace_store(), to: Config

  @doc "`config :flame_on_client, :sample_budget` (samples a second, or `:infinity`)."
  @spec sample_budget() :: pos_integer() | :infinity
  defdelegate sample_budget(), to: Config

  @doc """
  The keys the core session takes (`FlameOn.Client.Core.Native.new/1`):
  the limits, and `:collapse_recursion`.
  """
  @spec limit_keys() :: [atom()]
  def limit_keys, do: @limit_keys

  @doc "The sampling options and their defaults."
  @spec sampling_defaults() :: keyword()
  def sampling_defaults, do: @sampling

  @doc """
  The capture mode of the entry points meant for application code when
  none is given: the application environment's `:mode`, else `:auto`
  (no call breakpoints either way, so a traced request does not slow the
  rest of the node).
  """
  @spec default_mode() :: :nif | :process | :sample | :native | :auto
  def default_mode do
    case Application.get_env(:flame_on_client, :mode, :auto) do
      mode when mode in @mode_names ->
        mode

      other ->
        raise ArgumentError,
              "config :flame_on_client, :mode must be #{Check.alternatives(@mode_names)}, " <>
                "got: #{inspect(other)}"
    end
  end

  @doc """
  What `mode: :auto` runs: `:native` where this VM can sample natively
  (`FlameOn.Client.Node.PerfSampler.availability/0`, checked once per VM),
  else `:sample`.
  """
  @spec auto_mode() :: :native | :sample
  def auto_mode do
    if FlameOn.Client.Node.PerfSampler.available?(), do: :native, else: :sample
  end

  @doc """
  The capture modes `entry` takes, by name, with what each is: `[{name,
  description}]`, in the order the docs list them.
  """
  @spec modes(entry()) :: [{atom(), String.t()}]
  def modes(entry) do
    names =
      case entry do
        :top -> [:sample]
        entry when entry in [:start_trace, :telemetry] -> Map.keys(@modes) -- [:nif]
        _ -> Map.keys(@modes)
      end

    described = for name <- Enum.sort(names), do: {name, mode_module(name).description()}
    if :native in names, do: described ++ [{:auto, @auto_description}], else: described
  end

  @doc "The module of a capture mode (a `FlameOn.Client.Capture.Mode`)."
  @spec mode_module(atom()) :: module()
  def mode_module(mode), do: Map.fetch!(@modes, mode)

  @doc "The keys `entry` takes."
  @spec keys(entry()) :: [atom()]
  def keys(entry), do: elem(Keyword.fetch!(@entries, entry), 1)

  # The options as given, a map, each key known to `entry` and each value
  # checked.
  defp given!(opts, entry) do
    {what, keys} = Keyword.fetch!(@entries, entry)
    Check.given!(opts, what, keys, @mode_names)
  end

  # Every capture option, the given ones over the defaults.
  defp capture(given, default_mode) do
    opts = Map.merge(Map.new(@capture), given)

    mode = opts.mode || default_mode

    %{
      opts
      | mode: if(mode == :auto, do: auto_mode(), else: mode),
        cross_process:
          if(opts.cross_process == nil,
            do: Application.get_env(:flame_on_client, :cross_process, false) == true,
            else: opts.cross_process
          )
    }
  end

  defp settings(given) do
    %{
      sample_rate: from_env!(given, :sample_rate, 1.0),
      threshold_ms: from_env!(given, :threshold_ms, 0),
      shippers: Shipper.normalize!(from_env!(given, :shipper, nil))
    }
  end

  # An option left out (or nil) is read from the application environment.
  defp from_env!(given, key, default) do
    case Map.get(given, key) do
      nil ->
        value = Application.get_env(:flame_on_client, key, default)
        check!(key, value)
        value

      value ->
        value
    end
  end

  @doc false
  # Raises ArgumentError unless `value` is a valid `key`.
  @spec check!(atom(), term()) :: :ok
  def check!(key, value), do: Check.check!(key, value, @mode_names)

  @doc false
  @spec invalid!(atom(), String.t(), term()) :: no_return()
  defdelegate invalid!(key, expected, got), to: Check
end
