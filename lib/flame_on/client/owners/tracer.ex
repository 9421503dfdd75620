defmodule FlameOn.Client.Owners.Tracer do
  @moduledoc false
  # A process that owns **one process's timeline** (mode `:process`): it is the
  # tracer of that process, feeds its trace messages to a
  # `FlameOn.Client.Core.Native` session and turns the result into a
  # `FlameOn.Client.Profile`.
  #
  # Most code should call `FlameOn.Client.profile/2`, which runs a session for
  # the calling process. Use this module directly to trace another process:
  #
  #     {:ok, session} = FlameOn.Client.Owners.Tracer.start(pid: worker)
  #     # ... let the worker run ...
  #     {:ok, profile} = FlameOn.Client.Owners.Tracer.finish(session)
  #
  # ## Life cycle
  #
  #   * `start/1` starts the tracer process under `FlameOn.Client.OwnerSupervisor`.
  #     It creates the core session, opens its trace handle (an OTP trace
  #     session of the VM with this process as the tracer, OTP 27+; see
  #     `FlameOn.Client.Node.TraceBackend`), takes the call patterns from
  #     `FlameOn.Client.Node.Patterns` and, with `attach: :session` (the default),
  #     sets the trace flags `trace_flags/0` on the traced process. With
  #     `attach: :tracee` the traced process sets them on itself through
  #     `handle/1` (this is what `FlameOn.Client.profile/2` does, so that
  #     nothing of the wrapper ends up in the profile).
  #   * While tracing, the tracer process takes trace messages out of its mailbox in
  #     batches of up to 2000 and hands each batch to one
  #     `FlameOn.Client.Core.Native.ingest/2` call.
  #   * With `attach: :tracee` the traced process calls `end_mark/0` as soon
  #     as the traced work is done, before it turns its flags off. The
  #     session applies events up to that call and throws away the ones after
  #     it, so the calls that clear the flags (`erlang:trace/3` and what it
  #     calls) never show in the profile.
  #   * `finish/2` turns the flags off on the traced process (if it is still
  #     alive and still ours), waits until every trace message is delivered
  #     (`:erlang.trace_delivered/1`), drains them, finishes the native
  #     session, releases the patterns and closes the trace handle, replies
  #     with the profile and stops.
  #   * If the traced process dies, the tracer process finishes on its own and keeps
  #     the profile for its owner (the process that called `start/1`), which
  #     can still call `finish/2`. If the owner is the traced process itself,
  #     or dies, the tracer process just stops.
  #   * If the tracer process itself crashes, `FlameOn.Client.Node.Patterns` (which
  #     monitors it) removes the traced process's flags and, with the last
  #     user, the patterns.

  use GenServer, restart: :temporary

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Node.TraceBackend

  # :receive: a wait no message ended was runnable (the core session
  # tracks receives, FlameOn.Client.Core.Native.new/1's :receives)
  @flags [
    :call,
    :return_to,
    :running,
    :arity,
    :garbage_collection,
    :receive,
    :monotonic_timestamp
  ]
  @batch_size 2000
  @default_timeout 30_000
  # Extra time the caller of finish/2 waits beyond the drain budget, for
  # Native.finish/2 and building the profile.
  @reply_grace 30_000

  defguardp is_trace_message(msg)
            when is_tuple(msg) and tuple_size(msg) > 0 and elem(msg, 0) == :trace_ts

  @typedoc "Options of `start/1`."
  @type option ::
          {:pid, pid()}
          | {:owner, pid()}
          | {:attach, :session | :tracee}
          | {:name, String.t()}
          | {:trace_id, integer()}
          | {:limits, map()}
          | {:native, Native.session()}
          | {:graph, %{label: pos_integer(), names: map()}}

  @doc """
  The trace flags a session uses (without the `{:tracer, pid}` entry).

      iex> FlameOn.Client.Owners.Tracer.trace_flags()
      [:call, :return_to, :running, :arity, :garbage_collection, :receive, :monotonic_timestamp]
  """
  @spec trace_flags() :: [atom()]
  def trace_flags, do: @flags

  @doc """
  Starts a session tracing `opts[:pid]`.

  Options: `:pid` (required, a local process), `:owner` (default `self()`),
  `:attach` (`:session`, the default, or `:tracee`), `:name` (default
  `"flame_on"`), `:trace_id` (default a unique positive integer) and
  `:limits`, a map given to `FlameOn.Client.Core.Native.new/1`.

  Returns `{:error, :noproc}` if the process is not alive,
  `{:error, {:already_traced, tracer}}` if it cannot be traced beside its
  current tracing (`FlameOn.Client.Node.TraceBackend.check_tracee/1`),
  `{:error, {:call_tracing_in_use, what}}` if another tool call-traces in
  the legacy session (`FlameOn.Client.Node.Patterns`) and
  `{:error, {:invalid_limits, limits}}` if the NIF rejects the limits.
  """
  @spec start([option()]) :: {:ok, pid()} | {:error, term()}
  def start(opts) when is_list(opts) do
    opts = Keyword.put_new(opts, :owner, self())
    DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, {__MODULE__, opts})
  end

  @doc false
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc """
  Stops tracing and returns the profile; the tracer process then stops.

  Options:

    * `:end_ts` – native monotonic time at which the trace ended; live
      processes are charged up to it (`nil`: up to their last event).
      Default: when the flags were turned off.
    * `:started_ts` – native monotonic time at which the trace started, for
      `started_at` and `duration_us`. Default: when the tracer process set the
      flags (or was started, with `attach: :tracee`).
    * `:timeout` – milliseconds the tracer process may spend on outstanding trace
      messages (default #{@default_timeout}); messages left after it are
      dropped and counted in the `:dropped_events` and
      `:unprocessed_events` stats.

  Returns `{:error, reason}` if the tracer process is gone or does not answer.
  """
  @spec finish(pid(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def finish(session, opts \\ []) when is_pid(session) and is_list(opts) do
    timeout = Keyword.get(opts, :timeout, @default_timeout)
    call_timeout = if timeout == :infinity, do: :infinity, else: timeout + @reply_grace

    try do
      GenServer.call(session, {:finish, opts}, call_timeout)
    catch
      :exit, {:timeout, _} ->
        # Killing it is enough: Patterns cleans up after it.
        Process.exit(session, :kill)
        {:error, :timeout}

      :exit, {reason, _} ->
        {:error, reason}
    end
  end

  @doc """
  Marks the end of the traced work for a session started with
  `attach: :tracee`: call it in the traced process right before turning the
  trace flags off. Returns the current native monotonic time, the value to
  pass as `:end_ts` to `finish/2`. Its own call event and everything after
  it are left out of the profile.
  """
  @spec end_mark() :: integer()
  def end_mark, do: :erlang.monotonic_time()

  @doc """
  The `FlameOn.Client.Node.TraceBackend` handle the traced process is traced
  through (with `attach: :tracee` it sets `trace_flags/0` on itself with
  `FlameOn.Client.Node.TraceBackend.trace/4`).
  """
  @spec handle(pid()) :: TraceBackend.t()
  def handle(session), do: GenServer.call(session, :handle)

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    Process.flag(:message_queue_data, :off_heap)

    tracee = Keyword.fetch!(opts, :pid)
    owner = Keyword.fetch!(opts, :owner)
    attach = Keyword.get(opts, :attach, :session)
    limits = Map.put(Keyword.get(opts, :limits, %{}), :native_per_second, native_per_second())

    # A cross-process trace hands its cross-process core session in (`native:`): the
    # session ingests the traced process's own events into it, next to the
    # callees' and the correlation events the NIF tracer folds there.
    handle = TraceBackend.open(:trace, self())

    with {:ok, native} <- given_or_new_native(opts[:native], limits),
         :ok <- TraceBackend.check_tracee(tracee),
         :ok <- Patterns.acquire(tracee, handle),
         {:ok, started_ts} <- attach(attach, handle, tracee) do
      tracee_ref = Process.monitor(tracee)
      if owner != tracee, do: Process.monitor(owner)

      {:ok,
       %{
         native: native,
         handle: handle,
         tracee: tracee,
         tracee_ref: tracee_ref,
         owner: owner,
         name: Keyword.get(opts, :name, "flame_on"),
         trace_id: Keyword.get_lazy(opts, :trace_id, &new_trace_id/0),
         started_ts: started_ts,
         # The call event of end_mark/0 ends the trace (attach: :tracee).
         mark: if(attach == :tracee, do: {__MODULE__, :end_mark, 0}),
         cut: false,
         graph: Keyword.get(opts, :graph),
         profile: nil
       }}
    else
      {:error, reason} ->
        TraceBackend.close(handle)
        {:stop, reason}
    end
  end

  @impl GenServer
  def handle_call(:handle, _from, state), do: {:reply, state.handle, state}

  def handle_call({:finish, _opts}, _from, %{profile: %Profile{} = profile} = state) do
    {:stop, :normal, {:ok, profile}, state}
  end

  def handle_call({:finish, opts}, _from, state) do
    profile = finish_trace(state, opts)
    {:stop, :normal, {:ok, profile}, %{state | native: nil, profile: profile}}
  end

  @impl GenServer
  def handle_info(msg, state) when is_trace_message(msg) do
    {:noreply, ingest(state, collect([msg], 1))}
  end

  def handle_info({:DOWN, ref, :process, _pid, _reason}, %{tracee_ref: ref} = state) do
    profile = if state.native, do: finish_trace(state, end_ts: nil), else: state.profile
    state = %{state | native: nil, profile: profile}

    if state.owner == state.tracee or not Process.alive?(state.owner) do
      {:stop, :normal, state}
    else
      {:noreply, state}
    end
  end

  def handle_info({:DOWN, _ref, :process, owner, _reason}, %{owner: owner} = state) do
    {:stop, :normal, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{native: nil}), do: :ok

  def terminate(_reason, %{tracee: tracee, handle: handle}) do
    # Stopped before finishing (owner gone, shutdown): leave nothing behind.
    TraceBackend.untrace(handle, tracee, @flags)

    try do
      Patterns.release()
    catch
      :exit, _ -> :ok
    end

    TraceBackend.close(handle)
  end

  # --- internals --------------------------------------------------------------

  defp new_native(limits) do
    {:ok, Native.new(Map.put(limits, :receives, true))}
  rescue
    ArgumentError -> {:error, {:invalid_limits, Map.delete(limits, :native_per_second)}}
  end

  defp attach(:tracee, _handle, _tracee), do: {:ok, :erlang.monotonic_time()}

  defp attach(:session, handle, tracee) do
    started_ts = :erlang.monotonic_time()
    TraceBackend.trace(handle, tracee, true, @flags)
    {:ok, started_ts}
  rescue
    ArgumentError ->
      Patterns.release()
      {:error, :noproc}
  end

  defp finish_trace(state, opts) do
    %{native: native, tracee: tracee, handle: handle} = state
    TraceBackend.untrace(handle, tracee, @flags)
    now = :erlang.monotonic_time()
    # `end_ts: nil` (the traced process died) charges nothing past each
    # process's last event.
    end_ts = Keyword.get(opts, :end_ts, now)
    started_ts = Keyword.get(opts, :started_ts, state.started_ts)
    deadline = deadline(Keyword.get(opts, :timeout, @default_timeout))

    ref = TraceBackend.delivered(handle, tracee)

    receive do
      {:trace_delivered, ^tracee, ^ref} -> :ok
    after
      remaining(deadline) -> :ok
    end

    {state, unprocessed} = drain(state, deadline)
    {raw, stats, graph} = finish_native(native, end_ts, state.graph)
    Patterns.release()
    TraceBackend.close(handle)

    stats =
      stats
      |> Map.update(:dropped_events, unprocessed, &(&1 + unprocessed))
      |> Map.put(:unprocessed_events, unprocessed)

    Profile.build(
      raw,
      stats,
      [
        trace_id: state.trace_id,
        name: state.name,
        mode: :process,
        pid: tracee,
        graph: graph,
        started_at: System.convert_time_unit(started_ts, :native, :microsecond),
        duration_us:
          System.convert_time_unit(max((end_ts || now) - started_ts, 0), :native, :microsecond)
      ],
      if(state.graph, do: state.graph.names, else: %{})
    )
  end

  defp finish_native(native, end_ts, nil) do
    {raw, stats} = Native.finish(native, end_ts)
    {raw, stats, nil}
  end

  defp finish_native(native, end_ts, %{label: label}) do
    {raw, stats, graph} = Native.finish(native, end_ts)
    {raw, stats, FlameOn.Client.Graph.build(graph, label)}
  end

  defp given_or_new_native(nil, limits), do: new_native(limits)
  defp given_or_new_native(native, _limits), do: {:ok, native}

  # Ingests every queued trace message, batch by batch, until none is left
  # or the deadline passed; then throws the rest away. Returns the state and
  # how many messages were thrown away (not counting those after the end
  # mark, which are never applied).
  defp drain(state, deadline) do
    case collect([], 0) do
      [] ->
        {state, 0}

      batch ->
        cond do
          state.cut -> drain(state, deadline)
          remaining(deadline) == 0 -> {state, length(batch) + discard(0)}
          true -> drain(ingest(state, batch), deadline)
        end
    end
  end

  # Applies a batch, up to (not including) the end mark's call event.
  defp ingest(%{native: nil} = state, _batch), do: state
  defp ingest(%{cut: true} = state, _batch), do: state

  defp ingest(%{native: native, mark: mark} = state, batch) do
    # keyfind runs in C; the mark is the MFA in element 4 of its call event.
    case mark && :lists.keyfind(mark, 4, batch) do
      found when found in [nil, false] ->
        Native.ingest(native, batch)
        state

      mark_event ->
        Native.ingest(native, Enum.take_while(batch, &(&1 !== mark_event)))
        %{state | cut: true}
    end
  end

  defp collect(acc, n) when n >= @batch_size, do: :lists.reverse(acc)

  defp collect(acc, n) do
    receive do
      msg when is_trace_message(msg) -> collect([msg | acc], n + 1)
    after
      0 -> :lists.reverse(acc)
    end
  end

  defp discard(n) do
    receive do
      msg when is_trace_message(msg) -> discard(n + 1)
    after
      0 -> n
    end
  end

  defp deadline(:infinity), do: :infinity
  defp deadline(ms), do: :erlang.monotonic_time(:millisecond) + ms

  defp remaining(:infinity), do: :infinity
  defp remaining(deadline), do: max(deadline - :erlang.monotonic_time(:millisecond), 0)

  defp native_per_second, do: System.convert_time_unit(1, :second, :native)

  defp new_trace_id, do: System.unique_integer([:positive, :monotonic])
end
