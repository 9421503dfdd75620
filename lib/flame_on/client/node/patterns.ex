defmodule FlameOn.Client.Node.Patterns do
  @moduledoc false
  # Owner of the local call trace patterns that exact traces need.
  #
  # Call tracing needs a trace pattern on every function. Where a trace's
  # patterns go is its `FlameOn.Client.Node.TraceBackend` handle: with trace
  # sessions (OTP 27+) each trace has its own session and its own patterns;
  # in the legacy session (OTP 25–26) patterns are **global to the node**,
  # so this server shares them between our traces. It counts the users of
  # each place patterns go (the handle's scope):
  #
  #   * the first `acquire/2` of a scope sets the local call pattern on every
  #     loaded function (`{:_, :_, :_}`) and on modules loaded later
  #     (`:on_load`), with the match spec `[{:_, [], [{:message, {:caller}}]}]`
  #     so that call events carry their caller, except on the raising BIFs
  #     (`erlang:error/1,2,3`, `exit/1`, `throw/1`: traced, they change the
  #     stacktrace of an exception on OTP 27);
  #   * the last `release/0` of the scope, or the death of its last user (each
  #     user is monitored), clears them again.
  #
  # When a user dies without releasing (a crashed or killed owner), this
  # server also turns the trace flags off on the process it was tracing, if
  # that process is still alive and still has the dead one's tracer (or no
  # live tracer), and ends its OTP trace session, so nothing of the trace is
  # left behind. It also serializes cross-process tracing (acquire_cross_process/4:
  # the seq_trace system tracer and the send and receive patterns, built by
  # FlameOn.Client.Node.MessagePatterns).
  #
  # The cost for the whole node (every process pays the breakpoint check
  # while patterns are set) is why they are kept only while some trace
  # runs: see FlameOn.Client's "Cost". In the legacy session setting ours
  # would replace another tool's, so there the first acquire/2 refuses while
  # another tool call-traces (FlameOn.Client.Node.OtherTools).
  #
  # ## Leftovers of a dead owner
  #
  # What is set on the node is recognised as ours by our tracer module and our
  # match specs (`FlameOn.Client.Node.Sweep`), so the cleanup does not depend on any
  # process having survived: this server sweeps when it starts (after a crash
  # of the previous one, whose sessions the supervisor stopped with it) and
  # when it terminates, and the application's `stop/1` sweeps once the whole
  # tree is gone.
  #
  # Started by FlameOn.Client.Application; the traces' owners call it.

  use GenServer

  require Logger

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{MessagePatterns, OtherTools, Sweep, TraceBackend}

  @match_spec Sweep.call_match_spec()
  @call_timeout 60_000
  @kinds [:calls, :call_time, :call_memory]

  @typedoc "What a user's patterns do (see `acquire/3`)."
  @type kind :: :calls | :call_time | :call_memory

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Registers the calling process as a user of the call patterns of `handle`
  (a `FlameOn.Client.Node.TraceBackend` handle; default: the legacy session),
  setting them if it is the first user of where they go. `tracee` is the
  process the caller traces (or `nil`): if the caller dies without
  `release/0`, that process's trace flags are cleared and the handle is
  closed. Acquiring twice from one process counts once.

  `kind` is what the patterns do: `:calls` (call events, the default) or
  `:call_time` / `:call_memory` (counters, `FlameOn.Client.summary/2`, set
  with that flag on every function). Counters are restarted when set, so
  in the legacy session a summary has the patterns to itself: it refuses
  while anything else of ours or another tool's call-traces there.
  """
  @spec acquire(pid() | nil, TraceBackend.t(), kind()) :: :ok | {:error, term()}
  def acquire(tracee \\ nil, handle \\ TraceBackend.legacy(), kind \\ :calls)
      when (is_pid(tracee) or is_nil(tracee)) and kind in @kinds do
    GenServer.call(__MODULE__, {:acquire, tracee, handle, kind}, @call_timeout)
  end

  @doc """
  Unregisters the calling process; the last user of its patterns' scope
  clears them. Releasing without having acquired is a no-op.
  """
  @spec release() :: :ok
  def release, do: GenServer.call(__MODULE__, :release, @call_timeout)

  @doc """
  Registers the calling process as running a cross-process (graph) trace
  with the core session `native`, and returns the handle the trace's
  processes are traced through. The first cross-process user makes the NIF the
  seq_trace system tracer (`{FlameOn.Client.Core.Native, :graph}`), opens the
  cross-process tracing handle (a trace session of its own where the VM has them,
  with the tracer `{FlameOn.Client.Core.Native, :graph}`) and sets there the
  send pattern that turns tracing on in every process a tokened follower
  sends a message to (following GenServer calls only: a `$gen_call`
  request), and, following every message, the receive pattern whose result
  is each received message's sender. Returns `{:error,
  {:system_tracer_taken, tracer}}` when another tool owns the seq_trace
  system tracer (one per node, sessions or not). It also takes the graph
  handle's call patterns for the caller (as `acquire/2` with the caller as
  the traced process); `release_cross_process/0` gives both back.

  The last cross-process user of a handle (by `release_cross_process/0` or by dying) puts
  the send and receive patterns back, turns tracing off on every process
  that still has the graph tracer there and closes the handle; the last
  cross-process user of all gives the system tracer back (processes keep their
  seq_trace tokens until they take an untokened message:
  `:seq_trace.reset_trace/0` can abort an OTP 25 VM). A cross-process user that dies
  mid-trace has its session stopped. `call_patterns: false` (sample
  traces) takes cross-process tracing only: no call pattern is set for it.
  `follow: :messages` (the default) follows every message and spawn of the
  trace's processes (the receive pattern is set too); `follow: :calls` only
  GenServer calls. `legacy: true` puts the trace's cross-process tracing in the
  legacy session even where the VM has trace sessions
  (`FlameOn.Client.capture_next/2`, whose caller gets its flags there); the
  legacy cross-process tracing and the session's live side by side, each with its
  own users, and share the system tracer.
  """
  @spec acquire_cross_process(reference(), pid() | nil, pos_integer() | nil, keyword()) ::
          {:ok, TraceBackend.t()} | {:error, term()}
  def acquire_cross_process(native, root \\ nil, label \\ nil, opts \\ []) do
    patterns? = Keyword.get(opts, :call_patterns, true)
    follow = Keyword.get(opts, :follow, :messages)
    where = if Keyword.get(opts, :legacy, false), do: :legacy, else: :own

    GenServer.call(
      __MODULE__,
      {:acquire_cross_process, native, root, label, patterns?, follow, where},
      @call_timeout
    )
  end

  @doc """
  The trace flags a process gets when it joins a cross-process trace that follows
  `follow` (`:messages` or `:calls`): the flags the send pattern turns on
  (set them with `FlameOn.Client.Node.TraceBackend` and the trace's graph
  handle, which adds its tracer where needed).
  """
  @spec follower_flags(:messages | :calls) :: [atom()]
  defdelegate follower_flags(follow), to: MessagePatterns

  @doc "The receive pattern of cross-process traces that follow every message."
  @spec receive_match_spec() :: [tuple()]
  defdelegate receive_match_spec(), to: MessagePatterns

  @doc "Ends the calling process's cross-process trace registration (see `acquire_cross_process/4`)."
  @spec release_cross_process() :: :ok
  def release_cross_process, do: GenServer.call(__MODULE__, :release_cross_process, @call_timeout)

  @doc """
  Called after a trace (`label`) turned a follower's flags off on `handle`
  (it ended, or the follower left it): turns them on again (flags for
  `follow`) when a cross-process trace on that handle may still need them,
  and only then: the follower has a role in a trace, a message waiting
  (sent before its flags went: the send pattern found them on), or the
  seq_trace token of another trace than `label`. Here, in the server, so it never runs after
  the last user of the handle turned every follower's tracing off.
  """
  @spec follow_again(TraceBackend.t(), pid(), :messages | :calls, term()) :: :ok
  def follow_again(handle, pid, follow, label),
    do: GenServer.call(__MODULE__, {:follow_again, handle, pid, follow, label}, @call_timeout)

  @doc "The number of processes currently holding call patterns."
  @spec users() :: non_neg_integer()
  def users, do: GenServer.call(__MODULE__, :users, @call_timeout)

  @impl GenServer
  def init(:ok) do
    Process.flag(:trap_exit, true)
    # A previous owner killed before it could clean up left its patterns,
    # flags, sessions and system tracer behind; its users are gone (the
    # supervisor stops the sessions with it), so none of it is anyone's now.
    swept = Sweep.run()

    if Enum.any?(swept, fn {_what, n} -> n not in [0, false] end) do
      Logger.warning("FlameOn: cleared what a previous trace owner left set: #{inspect(swept)}")
    end

    {:ok, %{users: %{}, graph: %{}, graph_handles: %{}}}
  end

  @impl GenServer
  def handle_call({:acquire, tracee, handle, kind}, {pid, _tag}, state) do
    case add_user(state, pid, tracee, handle, kind) do
      {:ok, state} -> {:reply, :ok, state}
      {:error, _} = error -> {:reply, error, state}
    end
  end

  def handle_call(:release, {pid, _tag}, state) do
    {:reply, :ok, remove_user(state, pid)}
  end

  # One call takes both the call patterns and cross-process tracing (a trace makes
  # two calls to this server, not four: it is the one serialization point
  # of concurrent traces).
  def handle_call(
        {:acquire_cross_process, native, root, label, patterns?, follow, where},
        {pid, _tag},
        %{graph: graph} = state
      ) do
    taken = if graph == %{}, do: MessagePatterns.take_system_tracer(), else: :ok
    where = if TraceBackend.sessions?(), do: where, else: :legacy

    cond do
      Map.has_key?(graph, pid) ->
        {:reply, {:ok, graph[pid].handle}, state}

      taken != :ok ->
        {:reply, taken, state}

      true ->
        handle = state.graph_handles[where] || MessagePatterns.open_handle(where)

        added =
          cond do
            (in_use =
               OtherTools.tracing(
                 handle,
                 patterns? and not in_scope?(state.users, handle, :calls)
               )) != nil ->
              {:error, in_use}

            patterns? ->
              add_user(state, pid, pid, handle, :calls)

            true ->
              {:ok, state}
          end

        case added do
          {:ok, state} ->
            # A cross-process user without call patterns is watched on its own.
            ref = if patterns?, do: nil, else: Process.monitor(pid)

            trace = %{
              native: native,
              root: root,
              label: label,
              ref: ref,
              handle: handle,
              follow: follow
            }

            graph = Map.put(graph, pid, trace)
            MessagePatterns.set_patterns(handle, graph)
            handles = Map.put(state.graph_handles, where, handle)
            {:reply, {:ok, handle}, %{state | graph: graph, graph_handles: handles}}

          {:error, _} = error ->
            unless Map.has_key?(state.graph_handles, where),
              do: MessagePatterns.clear_patterns(handle)

            if graph == %{}, do: MessagePatterns.release_system_tracer()
            {:reply, error, state}
        end
    end
  end

  # The call patterns first: the last cross-process user of a cross-process handle closes
  # the handle they are set through.
  def handle_call(:release_cross_process, {pid, _tag}, state) do
    {:reply, :ok, state |> remove_user(pid) |> drop_graph_user(pid)}
  end

  def handle_call(:users, _from, state), do: {:reply, map_size(state.users), state}

  def handle_call({:follow_again, handle, pid, follow, label}, _from, %{graph: graph} = state) do
    users = for {_owner, %{handle: ^handle, label: l}} <- graph, do: l
    others = Enum.reject(users, &(&1 == label))

    if users != [] and still_followed?(pid, others),
      do: MessagePatterns.retrace(handle, pid, follow)

    {:reply, :ok, state}
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, %{graph: graph} = state)
      when is_map_key(graph, pid) and :erlang.map_get(pid, graph).ref == ref do
    Native.stop(graph[pid].native)
    {:noreply, drop_graph_user(state, pid)}
  end

  def handle_info({:DOWN, ref, :process, pid, _reason}, %{users: users} = state) do
    case Map.pop(users, pid) do
      {{^ref, tracee, handle, kind}, rest} ->
        if tracee, do: TraceBackend.untrace(handle, tracee)

        case state.graph do
          %{^pid => %{native: native}} -> Native.stop(native)
          _ -> :ok
        end

        state = drop_user(state, rest, handle, kind)
        # A cross-process handle is closed with its last cross-process user; any other is
        # the dead user's own.
        if handle not in Map.values(state.graph_handles), do: TraceBackend.close(handle)
        {:noreply, drop_graph_user(state, pid)}

      _ ->
        {:noreply, state}
    end
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{graph: graph}) do
    Enum.each(graph, fn {_owner, %{native: native}} -> Native.stop(native) end)
    Sweep.run()
    :ok
  end

  defp add_user(%{users: users} = state, pid, tracee, handle, kind) do
    first? = not in_scope?(users, handle, kind)

    in_use =
      if TraceBackend.shared?(handle), do: OtherTools.conflict(legacy_users?(users), kind, first?)

    cond do
      Map.has_key?(users, pid) ->
        {:ok, state}

      in_use != nil ->
        {:error, {:call_tracing_in_use, in_use}}

      true ->
        if first?, do: set_patterns(handle, kind)
        ref = Process.monitor(pid)
        {:ok, %{state | users: Map.put(users, pid, {ref, tracee, handle, kind})}}
    end
  end

  defp legacy_users?(users),
    do: Enum.any?(users, fn {_pid, {_ref, _tracee, h, _k}} -> TraceBackend.shared?(h) end)

  defp in_scope?(users, handle, kind) do
    scope = TraceBackend.scope(handle)

    Enum.any?(users, fn {_pid, {_ref, _tracee, h, k}} ->
      k == kind and TraceBackend.scope(h) == scope
    end)
  end

  defp remove_user(%{users: users} = state, pid) do
    case Map.pop(users, pid) do
      {nil, _} ->
        state

      {{ref, _tracee, handle, kind}, rest} ->
        Process.demonitor(ref, [:flush])
        drop_user(state, rest, handle, kind)
    end
  end

  defp drop_user(state, rest, handle, kind) do
    unless in_scope?(rest, handle, kind), do: clear_patterns(handle, kind)
    %{state | users: rest}
  end

  defp still_followed?(pid, labels) do
    Native.graph_role(pid) != nil or
      case Process.info(pid, [:message_queue_len, :sequential_trace_token]) do
        [message_queue_len: queued, sequential_trace_token: token] ->
          queued > 0 or (is_tuple(token) and elem(token, 1) in labels)

        nil ->
          false
      end
  end

  defp drop_graph_user(%{graph: graph} = state, pid) do
    case Map.pop(graph, pid) do
      {nil, _} ->
        state

      {trace, rest} ->
        if trace.ref, do: Process.demonitor(trace.ref, [:flush])
        handle = trace.handle

        handles =
          if Enum.any?(rest, fn {_owner, t} -> t.handle == handle end) do
            MessagePatterns.set_patterns(handle, rest)
            state.graph_handles
          else
            MessagePatterns.clear_patterns(handle)
            Map.reject(state.graph_handles, fn {_where, h} -> h == handle end)
          end

        if rest == %{}, do: MessagePatterns.release_system_tracer()
        %{state | graph: rest, graph_handles: handles}
    end
  end

  @raising_bifs [{:erlang, :error, :_}, {:erlang, :exit, 1}, {:erlang, :throw, 1}]

  defp set_patterns(handle, :calls) do
    TraceBackend.pattern(handle, :on_load, @match_spec, [:local])
    TraceBackend.pattern(handle, {:_, :_, :_}, @match_spec, [:local])
    # On OTP 27, an exception raised by a traced erlang:error/1,2,3, exit/1
    # or throw/1 called in tail position (Elixir's `raise` is one) can name
    # the wrong function as its raiser: its location is taken from the
    # return address past the call, which may lie in the next function of
    # the module. A profiled function would raise with another stacktrace
    # than unprofiled; leaving these out costs the leaf frame of a raise.
    for mfa <- @raising_bifs, do: TraceBackend.pattern(handle, mfa, false, [:local])
  end

  defp set_patterns(handle, counter) do
    if TraceBackend.shared?(handle), do: Sweep.note_legacy_counters(counter, true)
    TraceBackend.pattern(handle, :on_load, true, [counter])
    TraceBackend.pattern(handle, {:_, :_, :_}, true, [counter])
  end

  defp clear_patterns(handle, :calls) do
    TraceBackend.pattern(handle, {:_, :_, :_}, false, [:local])
    TraceBackend.pattern(handle, :on_load, false, [:local])
  end

  defp clear_patterns(handle, counter) do
    TraceBackend.pattern(handle, {:_, :_, :_}, false, [counter])
    TraceBackend.pattern(handle, :on_load, false, [counter])
    if TraceBackend.shared?(handle), do: Sweep.note_legacy_counters(counter, false)
  end
end
