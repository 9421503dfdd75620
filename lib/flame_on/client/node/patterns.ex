defmodule FlameOn.Client.Node.Patterns do
  @moduledoc """
  Owner of the local call trace patterns that exact traces need.

  Call tracing needs a trace pattern on every function. Where a trace's
  patterns go is its `FlameOn.Client.Node.TraceBackend` handle: with trace
  sessions (OTP 27+) each trace has its own session and its own patterns;
  in the legacy session (OTP 25–26) patterns are **global to the node**,
  so this server shares them between our traces. It counts the users of
  each place patterns go (the handle's scope):

    * the first `acquire/2` of a scope sets the local call pattern on every
      loaded function (`{:_, :_, :_}`) and on modules loaded later
      (`:on_load`), with the match spec `[{:_, [], [{:message, {:caller}}]}]`
      so that call events carry their caller, except on the raising BIFs
      (`erlang:error/1,2,3`, `exit/1`, `throw/1`: traced, they change the
      stacktrace of an exception on OTP 27);
    * the last `release/0` of the scope, or the death of its last user (each
      user is monitored), clears them again.

  When a user dies without releasing (a crashed or killed trace session),
  this server also turns the trace flags off on the process that session
  was tracing, if that process is still alive and still has the dead
  session (or no live tracer) as its tracer, and ends the dead user's trace
  session, so nothing of the trace is left behind.

  ## Cost for the whole node

  While at least one trace runs, **every process on the node pays the
  breakpoint cost** of the call patterns, traced or not: each local call
  checks the breakpoint before it finds that the process has no call trace
  flag. Measured on OTP 25 (`mix run bench/overhead.exs`) this made an
  untraced GenServer/`Enum`/`Map` workload 1.6x–1.8x slower and a tight
  recursive one 2.5x–5.7x slower. The patterns are
  therefore kept only while some trace is active. Setting and clearing them
  costs milliseconds on a small node and grows with the amount of loaded
  code. Trace sessions (OTP 27+) isolate, they do not cheapen: the
  breakpoint is in the code, and each session with patterns adds its own
  check (`mix run bench/sessions.exs`).

  ## Other tracing tools

  With trace sessions nothing of ours touches another tool's patterns or
  flags, and another tool's tracing does not stop ours. In the legacy
  session, setting the patterns replaces every local or global call pattern
  on the node (`:erlang.trace_pattern/3` with `{:_, :_, :_}`), and clearing
  them removes every local one (meta and global patterns set later stay).
  So there the first `acquire/2` **refuses**
  (`{:error, {:call_tracing_in_use, what}}`) while another tool call-traces:
  when the `:on_load` pattern is not ours, when new processes get the `call`
  flag, or when some process has the `call` flag with a tracer that is not
  ours (a scan of the processes, about 3 µs each, only when the patterns go
  from off to on). A tool's patterns on functions that no process is call
  traced for are replaced without notice.

  ## Leftovers of a dead owner

  What is set on the node is recognised as ours by our tracer module and our
  match specs (`FlameOn.Client.Node.Sweep`), so the cleanup does not depend on any
  process having survived: this server sweeps when it starts (after a crash
  of the previous one, whose sessions the supervisor stopped with it) and
  when it terminates, and the application's `stop/1` sweeps once the whole
  tree is gone.

  This process is started by `FlameOn.Client.Application`; trace sessions
  call it, user code normally does not.
  """

  use GenServer

  require Logger

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Sweep
  alias FlameOn.Client.Node.TraceBackend

  @match_spec Sweep.call_match_spec()
  @graph_tracer {Native, :graph}
  # What graph tracing sets, in one place (see set_graph_patterns/2):
  #
  # The flags a process gets when a tokened follower sends it a message
  # (the send pattern turns them on before the message is delivered, in the
  # graph handle's session). `:send` makes its own messages do the same
  # (A -> B -> C); only processes with the :send flag run the send pattern,
  # so untraced senders pay nothing.
  @follower_flags_calls [:call, :arity, :return_to, :running, :send, :procs]
  # Following every message: receive events (with the receive pattern,
  # carrying the sender) say who woke a waiting follower, and processes a
  # follower spawns start with its flags.
  @follower_flags_messages [:receive, :set_on_spawn | @follower_flags_calls]
  # The receive pattern: a receive event's match-spec result is the sender
  # (a pid, or `undefined` for timers and ports).
  @receive_match_spec Sweep.receive_match_spec()
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
  with the native session `native`, and returns the handle the trace's
  processes are traced through. The first graph user makes the NIF the
  seq_trace system tracer (`{FlameOn.Client.Core.Native, :graph}`), opens the
  graph tracing handle (a trace session of its own where the VM has them,
  with the tracer `{FlameOn.Client.Core.Native, :graph}`) and sets there the
  send pattern that turns tracing on in every process a tokened follower
  sends a message to (following GenServer calls only: a `$gen_call`
  request), and, following every message, the receive pattern whose result
  is each received message's sender. Returns `{:error,
  {:system_tracer_taken, tracer}}` when another tool owns the seq_trace
  system tracer (one per node, sessions or not). It also takes the graph
  handle's call patterns for the caller (as `acquire/2` with the caller as
  the traced process); `release_graph/0` gives both back.

  The last graph user of a handle (by `release_graph/0` or by dying) puts
  the send and receive patterns back, turns tracing off on every process
  that still has the graph tracer there and closes the handle; the last
  graph user of all gives the system tracer back (processes keep their
  seq_trace tokens until they take an untokened message:
  `:seq_trace.reset_trace/0` can abort an OTP 25 VM). A graph user that dies
  mid-trace has its session stopped. `call_patterns: false` (sample
  traces) takes graph tracing only: no call pattern is set for it.
  `follow: :messages` (the default) follows every message and spawn of the
  trace's processes (the receive pattern is set too); `follow: :calls` only
  GenServer calls. `legacy: true` puts the trace's graph tracing in the
  legacy session even where the VM has trace sessions
  (`FlameOn.Client.capture_next/2`, whose caller gets its flags there); the
  legacy graph tracing and the session's live side by side, each with its
  own users, and share the system tracer.
  """
  @spec acquire_graph(reference(), pid() | nil, pos_integer() | nil, keyword()) ::
          {:ok, TraceBackend.t()} | {:error, term()}
  def acquire_graph(native, root \\ nil, label \\ nil, opts \\ []) do
    patterns? = Keyword.get(opts, :call_patterns, true)
    follow = Keyword.get(opts, :follow, :messages)
    where = if Keyword.get(opts, :legacy, false), do: :legacy, else: :own

    GenServer.call(
      __MODULE__,
      {:acquire_graph, native, root, label, patterns?, follow, where},
      @call_timeout
    )
  end

  @doc """
  The trace flags a process gets when it joins a graph trace that follows
  `follow` (`:messages` or `:calls`): the flags the send pattern turns on
  (set them with `FlameOn.Client.Node.TraceBackend` and the trace's graph
  handle, which adds its tracer where needed).
  """
  @spec follower_flags(:messages | :calls) :: [atom()]
  def follower_flags(:messages), do: @follower_flags_messages
  def follower_flags(:calls), do: @follower_flags_calls

  @doc "The receive pattern of graph traces that follow every message."
  @spec receive_match_spec() :: [tuple()]
  def receive_match_spec, do: @receive_match_spec

  @doc "Ends the calling process's graph trace registration (see `acquire_graph/4`)."
  @spec release_graph() :: :ok
  def release_graph, do: GenServer.call(__MODULE__, :release_graph, @call_timeout)

  @doc """
  Registers the calling process as a stack sampler needing stacks `depth`
  frames deep. The node-wide `backtrace_depth` (which caps
  `Process.info(pid, :current_stacktrace)`, default 8) is raised to the
  largest depth any sampler asked for; the last `release_depth/0`, or the
  death of the last sampler, restores the value found before. The original
  value is kept in the application environment, so a sweep after a crash
  can restore it too (`FlameOn.Client.Node.Sweep`).
  """
  @spec acquire_depth(pos_integer()) :: :ok
  def acquire_depth(depth) when is_integer(depth) and depth > 0,
    do: GenServer.call(__MODULE__, {:acquire_depth, depth}, @call_timeout)

  @doc "Ends the calling process's `acquire_depth/1`."
  @spec release_depth() :: :ok
  def release_depth, do: GenServer.call(__MODULE__, :release_depth, @call_timeout)

  @doc "The number of sample traces holding a raised `backtrace_depth`."
  @spec depth_users() :: non_neg_integer()
  def depth_users, do: GenServer.call(__MODULE__, :depth_users, @call_timeout)

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

    {:ok, %{users: %{}, graph: %{}, graph_handles: %{}, depth_users: %{}}}
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

  # One call takes both the call patterns and graph tracing (a trace makes
  # two calls to this server, not four: it is the one serialization point
  # of concurrent traces).
  def handle_call(
        {:acquire_graph, native, root, label, patterns?, follow, where},
        {pid, _tag},
        %{graph: graph} = state
      ) do
    taken = if graph == %{}, do: take_system_tracer(), else: :ok
    where = if TraceBackend.sessions?(), do: where, else: :legacy

    cond do
      Map.has_key?(graph, pid) ->
        {:reply, {:ok, graph[pid].handle}, state}

      taken != :ok ->
        {:reply, taken, state}

      true ->
        handle = state.graph_handles[where] || open_graph(where)

        added =
          cond do
            (in_use = foreign_tracing(state.users, handle, patterns?)) != nil -> {:error, in_use}
            patterns? -> add_user(state, pid, pid, handle, :calls)
            true -> {:ok, state}
          end

        case added do
          {:ok, state} ->
            # A graph user without call patterns is watched on its own.
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
            set_graph_patterns(handle, graph)
            handles = Map.put(state.graph_handles, where, handle)
            {:reply, {:ok, handle}, %{state | graph: graph, graph_handles: handles}}

          {:error, _} = error ->
            unless Map.has_key?(state.graph_handles, where), do: clear_graph_patterns(handle)
            if graph == %{}, do: release_system_tracer()
            {:reply, error, state}
        end
    end
  end

  # The call patterns first: the last graph user of a graph handle closes
  # the handle they are set through.
  def handle_call(:release_graph, {pid, _tag}, state) do
    {:reply, :ok, state |> remove_user(pid) |> drop_graph_user(pid)}
  end

  def handle_call(:users, _from, state), do: {:reply, map_size(state.users), state}
  def handle_call(:depth_users, _from, state), do: {:reply, map_size(state.depth_users), state}

  def handle_call({:acquire_depth, depth}, {pid, _tag}, %{depth_users: users} = state) do
    wanted = Enum.reduce(users, depth, fn {_pid, {_ref, d}}, acc -> max(d, acc) end)
    Sweep.raise_backtrace_depth(wanted)

    users =
      case users do
        %{^pid => {ref, held}} -> Map.put(users, pid, {ref, max(depth, held)})
        _ -> Map.put(users, pid, {Process.monitor(pid), depth})
      end

    {:reply, :ok, %{state | depth_users: users}}
  end

  def handle_call(:release_depth, {pid, _tag}, state) do
    {:reply, :ok, drop_depth_user(state, pid, true)}
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, %{depth_users: %{} = depth} = state)
      when is_map_key(depth, pid) and elem(:erlang.map_get(pid, depth), 0) == ref do
    {:noreply, drop_depth_user(state, pid, false)}
  end

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
        # A graph handle is closed with its last graph user; any other is
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

  defp drop_depth_user(%{depth_users: users} = state, pid, demonitor?) do
    case Map.pop(users, pid) do
      {nil, _} ->
        state

      {{ref, _depth}, rest} ->
        if demonitor?, do: Process.demonitor(ref, [:flush])
        if rest == %{}, do: Sweep.restore_backtrace_depth()
        %{state | depth_users: rest}
    end
  end

  defp add_user(%{users: users} = state, pid, tracee, handle, kind) do
    first? = not in_scope?(users, handle, kind)
    in_use = if TraceBackend.shared?(handle), do: legacy_conflict(users, kind, first?)

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

  defp in_scope?(users, handle, kind) do
    scope = TraceBackend.scope(handle)

    Enum.any?(users, fn {_pid, {_ref, _tracee, h, k}} ->
      k == kind and TraceBackend.scope(h) == scope
    end)
  end

  # What setting `kind` patterns in the legacy session would break, or nil.
  defp legacy_conflict(_users, :calls, first?), do: if(first?, do: foreign_call_tracing())

  defp legacy_conflict(users, kind, _first?) do
    cond do
      Enum.any?(users, fn {_pid, {_ref, _tracee, h, _k}} -> TraceBackend.shared?(h) end) ->
        "another trace of ours call-traces in the legacy session"

      (what = foreign_call_tracing()) != nil ->
        what

      :erlang.trace_info(:on_load, kind) not in [{kind, false}, {kind, :undefined}] ->
        "#{kind} is measured on this node (another profiler's :on_load pattern)"

      true ->
        nil
    end
  end

  # Another tool's call tracing that setting ours in the legacy session
  # would break, described, or nil. Only asked when ours are off there, so
  # whatever is set is not ours.
  defp foreign_call_tracing do
    cond do
      :erlang.trace_info(:on_load, :traced) not in [{:traced, false}, {:traced, :undefined}] ->
        "a call pattern for modules loaded later (:on_load) is set"

      (flags = new_process_call_flags()) != nil ->
        "new processes are call traced (#{flags})"

      (pid = foreign_traced_process(:call)) != nil ->
        {:tracer, tracer} = :erlang.trace_info(pid, :tracer)
        "#{inspect(pid)} is call traced by #{inspect(tracer)}"

      true ->
        nil
    end
  end

  # In the legacy session a process has one tracer, and the send pattern's
  # {trace, ...} action gives a callee ours even when another tool traces
  # it (then clearing ours leaves it untraced): graph tracing there refuses
  # while another tool traces any process. The call tracing check comes
  # first when call patterns are wanted too, for its clearer message.
  defp foreign_tracing(users, handle, patterns?) do
    call_check? = patterns? and not in_scope?(users, handle, :calls)

    with true <- TraceBackend.shared?(handle),
         nil <- if(call_check?, do: foreign_call_tracing()),
         pid when pid != nil <- foreign_traced_process(nil) do
      {:tracer, tracer} = :erlang.trace_info(pid, :tracer)
      {:tracing_in_use, "#{inspect(pid)} is traced by #{inspect(tracer)}"}
    else
      what when is_binary(what) -> {:call_tracing_in_use, what}
      _ -> nil
    end
  end

  defp new_process_call_flags do
    Enum.find_value([:new_processes, :new], fn which ->
      case :erlang.trace_info(which, :flags) do
        {:flags, flags} when is_list(flags) ->
          if :call in flags and not Sweep.our_tracer?(tracer_of(which)),
            do: inspect(which)

        _ ->
          nil
      end
    end)
  end

  defp tracer_of(which) do
    case :erlang.trace_info(which, :tracer) do
      {:tracer, tracer} -> tracer
      _ -> []
    end
  end

  # A process with trace flags (`flag` among them, unless nil) and a live
  # tracer in the legacy session that is not ours.
  defp foreign_traced_process(flag) do
    Enum.find(Process.list(), fn pid ->
      with {:flags, [_ | _] = flags} <- :erlang.trace_info(pid, :flags),
           true <- flag == nil or flag in flags,
           {:tracer, tracer} when tracer != [] <- :erlang.trace_info(pid, :tracer) do
        not Sweep.our_tracer?(tracer)
      else
        _ -> false
      end
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

  defp drop_graph_user(%{graph: graph} = state, pid) do
    case Map.pop(graph, pid) do
      {nil, _} ->
        state

      {trace, rest} ->
        if trace.ref, do: Process.demonitor(trace.ref, [:flush])
        handle = trace.handle

        handles =
          if Enum.any?(rest, fn {_owner, t} -> t.handle == handle end) do
            set_graph_patterns(handle, rest)
            state.graph_handles
          else
            clear_graph_patterns(handle)
            Map.reject(state.graph_handles, fn {_where, h} -> h == handle end)
          end

        if rest == %{}, do: release_system_tracer()
        %{state | graph: rest, graph_handles: handles}
    end
  end

  defp open_graph(:own), do: TraceBackend.open(:graph, @graph_tracer)
  defp open_graph(:legacy), do: TraceBackend.legacy(@graph_tracer)

  # One seq_trace system tracer per node (sessions or not): ours while
  # graph traces run, refused when another tool has it.
  defp take_system_tracer do
    case :seq_trace.get_system_tracer() do
      false ->
        :seq_trace.set_system_tracer(@graph_tracer)
        :ok

      @graph_tracer ->
        :ok

      other ->
        {:error, {:system_tracer_taken, other}}
    end
  end

  # The send pattern of the graph traces running through `handle`, in its
  # session. A tokened follower sending a message turns tracing on in the
  # receiver before the message is delivered (following GenServer calls
  # only: a `$gen_call` request). First, for each trace, clauses for its
  # root when its token was cleared (a reply came back without one) or
  # replaced (it received a message from a process of another trace): its
  # own label is set back before the message goes out, so what the root
  # sends later is still followed in its own trace (a guard cannot read the
  # label, so the clause sets it whether it changed or not). Following
  # every message also sets the receive pattern.
  defp set_graph_patterns(handle, graph) do
    traces = for {_owner, %{handle: ^handle} = t} <- graph, do: t
    follow = if Enum.any?(traces, &(&1.follow == :messages)), do: :messages, else: :calls
    flags = TraceBackend.enable_flags(handle, follower_flags(follow))

    restore =
      for %{root: root, label: label} <- traces,
          is_pid(root),
          clause <- restore_token_clauses(follow, root, label, flags),
          do: clause

    TraceBackend.pattern(handle, :send, restore ++ enable_clauses(follow, flags), [])
    receive_pattern = if follow == :messages, do: @receive_match_spec, else: true
    TraceBackend.pattern(handle, :receive, receive_pattern, [])
  end

  # Destinations a send can name, as {head, guards, process to trace}: a pid
  # (not the sender: a root traced by a trace session keeps that tracer), a
  # registered name, {name, node()}.
  defp destinations do
    [
      {:"$1", [{:is_pid, :"$1"}, {:"=/=", :"$1", {:self}}], :"$1"},
      {:"$1", [{:is_atom, :"$1"}], :"$1"},
      {{:"$1", :"$2"}, [{:is_atom, :"$1"}, {:"=:=", :"$2", {:node}}], :"$1"}
    ]
  end

  defp enable(target, flags), do: {:trace, target, [], {:const, flags}}

  defp enable_clauses(:calls, flags) do
    [
      {[:"$1", {:"$gen_call", :_, :_}],
       [{:is_pid, :"$1"}, {:"=/=", :"$1", {:self}}, {:is_seq_trace}], [enable(:"$1", flags)]}
    ]
  end

  defp enable_clauses(:messages, flags) do
    for {dest, guards, target} <- destinations(),
        do: {[dest, :_], [{:is_seq_trace} | guards], [enable(target, flags)]}
  end

  defp restore_token_clauses(:calls, root, label, flags) do
    [
      {[:"$1", {:"$gen_call", :_, :_}],
       [{:is_pid, :"$1"}, {:"=/=", :"$1", root}, {:"=:=", {:self}, root}],
       set_token(label) ++ [enable(:"$1", flags)]}
    ]
  end

  # Following every message, a request goes out in the root's own trace
  # whatever token it holds (as with :calls); any other message only when
  # the root's token was cleared: a reply to another trace's request keeps
  # that trace's token, which is what tells the router the root served it
  # and goes back to its own trace.
  defp restore_token_clauses(:messages, root, label, flags) do
    self_root = {:"=:=", {:self}, root}
    cleared = [self_root, {:not, {:is_seq_trace}}]
    restore = set_token(label)

    requests =
      for {dest, dest_guards, target} <- destinations(),
          do:
            {[dest, {:"$gen_call", :_, :_}], [self_root | dest_guards],
             restore ++ [enable(target, flags)]}

    others =
      for {dest, dest_guards, target} <- destinations(),
          do: {[dest, :_], cleared ++ dest_guards, restore ++ [enable(target, flags)]}

    requests ++ others ++ [{[:_, :_], cleared, restore}]
  end

  defp set_token(label) do
    [
      {:set_seq_token, :label, label},
      {:set_seq_token, :send, true},
      {:set_seq_token, :receive, true}
    ]
  end

  defp clear_graph_patterns(handle) do
    TraceBackend.pattern(handle, :send, true, [])
    TraceBackend.pattern(handle, :receive, true, [])
    # Followers got the graph tracer from the send pattern; with no graph
    # trace left here, none of them is ours to keep.
    TraceBackend.untrace_all(handle)
    TraceBackend.close(handle)
  end

  defp release_system_tracer do
    case :seq_trace.get_system_tracer() do
      tracer when tracer in [@graph_tracer, false] ->
        # (The VM drops our tracer by itself once it says no trace is live.)
        # Followers keep the token of the last message they took until they
        # take an untokened one. They are not cleared here:
        # `:seq_trace.reset_trace/0` walks every process's signal queue, and
        # OTP 25's walk aborts the VM on a signal type it does not know
        # ("clear_seq_trace_token(): Internal error: Unknown signal", seen
        # in the suite). A stale token costs nothing while no system tracer
        # is set, and a later trace ignores labels that are not its own.
        :seq_trace.set_system_tracer(false)

      _another_tools ->
        :ok
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
