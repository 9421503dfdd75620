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
  process that emitted it (by default in mode `:auto`: `:native` where this
  VM can sample natively, else `:sample`; no call breakpoints either way; or `mode: :process`, call
  tracing with a tracer process), owned by a process of FlameOn's, and
  keeps the trace in that process's dictionary under
  `{FlameOn.Client.Telemetry, prefix}`. On `prefix ++ [:stop]` or
  `prefix ++ [:exception]` in the same process it finishes the trace and
  ships the profile if it lasted at least `:threshold_ms`. A `:stop` with no
  traced `:start` is ignored.

  With `:threshold_ms` in mode `:native` (tail-based: trace every request,
  keep the slow ones) no owner process is started: the emitting process
  gets the `:running` flag on the node's shared sampler and a fast one
  builds nothing (`FlameOn.Client.Tracing.trace/3`'s shared path,
  `profile.mode` `:native_tail`). Such a trace whose `:stop` never comes
  is not finished by `:max_duration_ms`: its flag goes off when tail
  tracing stops on the node (`idle_ms` after the last tail trace).

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
      `:max_stack_frames`, `:max_stack_bytes` – limits, as for
      `FlameOn.Client.profile/2`.
    * `:collapse_recursion` (`true`) – direct recursion as one frame, as
      for `FlameOn.Client.profile/2`.

  `attach/3` checks the config: an unknown key or a bad value raises
  `ArgumentError` there (see `FlameOn.Client.Options`). Attached by hand
  with a bad config, the handler logs the error at each `:start` and traces
  nothing.
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
    * Shipping runs in the trace's owner process, before the `:stop`
      handler returns (or after `:max_duration_ms`, or when the emitting
      process exits first).
    * The handler never raises (`:telemetry` would detach it): errors are
      logged.
  """

  require Logger

  alias FlameOn.Client.{Capture, Options}
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Owners
  alias FlameOn.Client.Tracing.Tail

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
    # Checked now: a bad config is a programming error, and the handler
    # itself must never raise (:telemetry would detach it).
    Enum.each(event_prefixes, &Options.telemetry!(config, &1))

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
        {settings, opts} = Options.telemetry_request!(config, prefix)
        entry = %{depth: 1, owner: nil, capture: nil, tail: nil, settings: settings}

        self_state = if Capture.sampled?(settings.sample_rate), do: Capture.self_state()

        entry =
          case self_state do
            nil ->
              entry

            :traced ->
              Logger.debug(fn ->
                "FlameOn: #{inspect(prefix)} not traced: #{inspect(self())} is already traced"
              end)

              entry

            {:untraced, lingering} when settings.threshold_ms > 0 ->
              # tail-based: the shared path where it runs (its flag is on
              # from here), else a trace of its own
              case Tail.start(opts, nil, settings.threshold_ms, nil, lingering) do
                {:ok, tail} -> %{entry | tail: tail}
                :unavailable -> start_trace(entry, prefix, settings, opts)
              end

            {:untraced, _} ->
              start_trace(entry, prefix, settings, opts)
          end

        # Before the flags go on: nothing of this handler after them but
        # its return.
        Process.put(key, entry)
        if entry.capture, do: TraceBackend.set_flags(self(), entry.capture.flags)
    end

    :ok
  end

  # The trace's owner (FlameOn.Client.Owners.Trace) opens the capture and
  # finishes it: at the :stop, when this process exits, or when the :stop
  # never came within :max_duration_ms (it then ships what it has). This
  # process sets the flags on itself, so the trace starts inside the
  # :start handler.
  defp start_trace(entry, prefix, settings, opts) do
    config = %{
      target: {:pid, self()},
      opts: opts,
      settings: settings,
      duration_ms: opts.max_duration_ms,
      attach: :tracee
    }

    case Owners.Trace.start(config) do
      {:ok, owner, capture} ->
        %{entry | owner: owner, capture: capture}

      {:error, reason} ->
        Logger.error("FlameOn: could not trace #{inspect(prefix)}: #{inspect(reason)}")
        entry
    end
  end

  defp stop(prefix) do
    key = {__MODULE__, prefix}

    case Process.get(key) do
      nil ->
        :ok

      %{depth: depth} = entry when depth > 1 ->
        Process.put(key, %{entry | depth: depth - 1})

      %{tail: tail, settings: settings} when tail != nil ->
        pending = Tail.stop(tail, settings.threshold_ms)
        Process.delete(key)
        if pending, do: FlameOn.Client.TraceStore.keep(pending, settings)

      %{owner: nil} ->
        Process.delete(key)

      %{owner: owner, capture: capture} ->
        # Nothing from here on is profiled.
        end_ts = Capture.stop(capture)
        Process.delete(key)

        with {:error, reason} <- Owners.Trace.finish(owner, end_ts) do
          # The owner finished it (and shipped it) first.
          Logger.debug(fn ->
            "FlameOn: the trace of #{inspect(prefix)} had already ended: #{inspect(reason)}"
          end)
        end
    end

    :ok
  end
end
