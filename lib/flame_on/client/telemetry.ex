defmodule FlameOn.Client.Telemetry do
  @moduledoc """
  Trace what happens between a `:telemetry` span's `:start` and `:stop`
  events (Phoenix endpoints, Plug pipelines, Oban jobs, your own
  `:telemetry.span/3` calls), and ship the profiles.

      FlameOn.Client.Telemetry.attach("flame-on-phoenix", [[:phoenix, :endpoint]],
        sample_rate: 0.01,
        threshold_ms: 200,
        shipper: {FlameOn.Client.Shipper.Directory, dir: "/var/tmp/flame_on"}
      )

  On an event `prefix ++ [:start]`, a sampled handler starts tracing the
  process that emitted it (by default a `FlameOn.Client.Owners.Sampled`,
  mode `:sample`: stack samples and exact on/off-CPU time, no call
  breakpoints; with `mode: :process` a `FlameOn.Client.Owners.Tracer`) and
  keeps the session in that process's dictionary under
  `{FlameOn.Client.Telemetry, prefix}`. On `prefix ++ [:stop]` or
  `prefix ++ [:exception]` in the same process it finishes the trace and
  ships the profile if it lasted at least `:threshold_ms`. A `:stop` with no
  traced `:start` is ignored.

  `flame_on_client` does not depend on `:telemetry`: `attach/3` calls it only
  if the application that uses both has it. `handle_event/4` is an ordinary
  `:telemetry` handler and can also be attached by hand:

      :telemetry.attach_many("flame-on", [[:my_app, :job, :start], [:my_app, :job, :stop]],
        &FlameOn.Client.Telemetry.handle_event/4, sample_rate: 0.1)

  ## Configuration

  The handler config is a keyword list (or map) with:

    * `:sample_rate`, `:threshold_ms`, `:shipper` – as for
      `FlameOn.Client.Tracing.trace/3`, with the application environment as
      fallback.
    * `:name` (the prefix joined with `"."`, like `"phoenix.endpoint"`) –
      the traces' name.
    * `:max_duration_ms` (`60_000`) – a trace still running this long after
      its `:start` (its `:stop` never came) is finished and shipped anyway,
      so a lost `:stop` cannot leave the node's call patterns on.
    * `:max_nodes`, `:max_depth`, `:max_processes`, `:max_frames`,
      `:max_stack_frames` – limits, as for `FlameOn.Client.profile/2`.
    * `:mode` (`:sample`, or the application environment's `:mode`) –
      `:sample` or `:process` (`:nif` reads as `:process`);
      `:interval_us`, `:split_status`, `:max_samples` as for
      `FlameOn.Client.profile/2` in mode `:sample`.

  ## Behaviour

    * Only one tracer per process: a `:start` in a process that is already
      traced (an outer telemetry trace, `FlameOn.Client.profile/2`, another
      tool) is not traced. A nested `:start` of the same prefix is counted,
      and the trace ends at the outermost `:stop`.
    * The profile starts inside the `:start` handler and ends inside the
      `:stop` handler: its stacks read from the code that emitted the
      events, and only a few calls of the `:stop` handler itself show at
      the end (nothing of finishing and shipping the trace).
    * Shipping runs in the emitting process, right after its `:stop`.
    * The handler never raises (`:telemetry` would detach it): errors are
      logged.
  """

  require Logger

  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Owners.Sampled
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Owners.Tracer

  @default_max_duration_ms 60_000

  @typedoc "A handler config; see the module documentation."
  @type config :: keyword() | map()

  @doc """
  Attaches `handle_event/4` to the `:start`, `:stop` and `:exception`
  events of each prefix in `event_prefixes`, with `:telemetry.attach_many/4`.

  Returns what `:telemetry.attach_many/4` returns (`:ok` or `{:error,
  :already_exists}`), or `{:error, :telemetry_not_available}` when the
  `:telemetry` application is not loaded.

      iex> FlameOn.Client.Telemetry.attach("flame-on", [[:my_app, :request]], sample_rate: 0.1)
      {:error, :telemetry_not_available}
  """
  @spec attach(term(), [[atom()]], config()) :: :ok | {:error, term()}
  def attach(handler_id, event_prefixes, config \\ []) when is_list(event_prefixes) do
    events =
      for prefix <- event_prefixes,
          kind <- [:start, :stop, :exception],
          do: prefix ++ [kind]

    if telemetry?() do
      apply(:telemetry, :attach_many, [handler_id, events, &__MODULE__.handle_event/4, config])
    else
      {:error, :telemetry_not_available}
    end
  end

  @doc """
  Detaches a handler attached with `attach/3`. Returns `{:error,
  :telemetry_not_available}` without `:telemetry`.
  """
  @spec detach(term()) :: :ok | {:error, term()}
  def detach(handler_id) do
    if telemetry?() do
      apply(:telemetry, :detach, [handler_id])
    else
      {:error, :telemetry_not_available}
    end
  end

  defp telemetry?, do: Code.ensure_loaded?(:telemetry)

  @doc """
  The `:telemetry` handler: starts a trace of the calling process on an
  event ending in `:start`, finishes and ships it on the matching `:stop`
  or `:exception`. Other events are ignored. Always returns `:ok`.

      iex> FlameOn.Client.Telemetry.handle_event([:my_app, :job, :stop], %{}, %{}, [])
      :ok
  """
  @spec handle_event([atom()], map(), map(), config()) :: :ok
  def handle_event(event, _measurements, _metadata, config) when is_list(event) do
    case :lists.reverse(event) do
      [:start | prefix] -> start(:lists.reverse(prefix), config)
      [:stop | prefix] -> stop(:lists.reverse(prefix))
      [:exception | prefix] -> stop(:lists.reverse(prefix))
      _ -> :ok
    end
  catch
    kind, reason ->
      Logger.error(
        "FlameOn: the telemetry handler failed on #{inspect(event)}:\n" <>
          Exception.format(kind, reason, __STACKTRACE__)
      )

      :ok
  end

  def handle_event(_event, _measurements, _metadata, _config), do: :ok

  defp start(prefix, config) do
    key = {__MODULE__, prefix}

    case Process.get(key) do
      %{depth: depth} = entry ->
        Process.put(key, %{entry | depth: depth + 1})

      nil ->
        {settings, opts} = config |> config_list() |> Tracing.settings!()
        entry = %{depth: 1, session: nil, watchdog: nil, settings: settings, module: nil}

        entry =
          cond do
            not Tracing.sampled?(settings.sample_rate) ->
              entry

            Tracing.traced?() ->
              Logger.debug(fn ->
                "FlameOn: #{inspect(prefix)} not traced: #{inspect(self())} is already traced"
              end)

              entry

            true ->
              start_session(entry, prefix, opts)
          end

        # Before the flags go on: nothing of this handler after them but
        # its return.
        Process.put(key, entry)
        if entry.session, do: attach_self(entry)
    end

    :ok
  end

  defp config_list(nil), do: []
  defp config_list(config) when is_list(config) or is_map(config), do: Enum.to_list(config)

  defp config_list(other) do
    raise ArgumentError,
          "expected the handler config to be a keyword list or map, got: #{inspect(other)}"
  end

  defp start_session(entry, prefix, opts) do
    opts =
      Keyword.validate!(
        opts,
        [
          name: nil,
          max_duration_ms: nil,
          mode: nil
        ] ++ Enum.map(Tracing.limit_keys(), &{&1, nil}) ++ Sampler.option_defaults()
      )

    name = opts[:name] || Enum.map_join(prefix, ".", &to_string/1)
    max_ms = opts[:max_duration_ms] || @default_max_duration_ms

    unless is_binary(name) do
      raise ArgumentError, "expected :name to be a string, got: #{inspect(name)}"
    end

    unless is_integer(max_ms) and max_ms > 0 do
      raise ArgumentError,
            "expected :max_duration_ms to be a positive integer, got: #{inspect(max_ms)}"
    end

    mode = opts[:mode] || Tracing.default_mode()

    session_opts =
      [pid: self(), attach: :tracee, name: name, limits: Tracing.limits(opts)] ++
        Sampler.check_options!(Keyword.take(opts, Keyword.keys(Sampler.option_defaults())))

    case session_module(mode).start(session_opts) do
      {:ok, session} ->
        watchdog = watchdog(session, session_module(mode), self(), max_ms, entry.settings)
        %{entry | session: session, watchdog: watchdog, module: session_module(mode)}

      {:error, reason} ->
        Logger.error("FlameOn: could not trace #{inspect(prefix)}: #{inspect(reason)}")
        entry
    end
  end

  # mode :sample: a Sampled samples this process (the NIF tracer
  # takes its :running events; no call breakpoints). Otherwise a
  # Tracer is the tracer, as in FlameOn.Client.profile/2's mode
  # :process. Both take start/1 and finish/2 alike.
  defp session_module(:sample), do: Sampled
  defp session_module(mode) when mode in [:nif, :process], do: Tracer

  defp session_module(other) do
    raise ArgumentError, "expected :mode to be :sample, :process or :nif, got: #{inspect(other)}"
  end

  # The flags go on here, in the traced process itself (attach: :tracee),
  # as FlameOn.Client.profile/2 does in mode :process. A Sampled set
  # its own.
  defp attach_self(%{module: Sampled}), do: :ok

  defp attach_self(%{session: session}) do
    FlameOn.Client.Node.TraceBackend.trace(
      Tracer.handle(session),
      self(),
      true,
      Tracer.trace_flags()
    )
  end

  defp stop(prefix) do
    key = {__MODULE__, prefix}

    case Process.get(key) do
      nil ->
        :ok

      %{depth: depth} = entry when depth > 1 ->
        Process.put(key, %{entry | depth: depth - 1})

      %{session: nil} ->
        Process.delete(key)

      %{session: session, watchdog: watchdog, settings: settings, module: module} ->
        # Events from end_mark/0's call on are left out of the profile.
        end_ts = Tracer.end_mark()
        Process.delete(key)
        send(watchdog, {:cancel, session})

        case module.finish(session, end_ts: end_ts) do
          {:ok, profile} ->
            Tracing.maybe_ship(profile, settings)

          {:error, reason} ->
            # The watchdog finished it (and shipped it) first.
            Logger.debug(fn ->
              "FlameOn: the trace of #{inspect(prefix)} had already ended: #{inspect(reason)}"
            end)
        end
    end

    :ok
  end

  # Finishes and ships a trace whose :stop did not come in time. Spawned
  # before the flags are set, so it is not traced; it exits with the traced
  # process.
  defp watchdog(session, module, tracee, max_ms, settings) do
    spawn(fn ->
      ref = Process.monitor(tracee)

      receive do
        {:cancel, ^session} ->
          :ok

        {:DOWN, ^ref, :process, _, _} ->
          :ok
      after
        max_ms ->
          Logger.warning(
            "FlameOn: the trace of #{inspect(tracee)} ran #{max_ms} ms without its :stop " <>
              "event; finishing it"
          )

          case module.finish(session, []) do
            {:ok, profile} -> Tracing.maybe_ship(profile, settings)
            {:error, _} -> :ok
          end
      end
    end)
  end
end
