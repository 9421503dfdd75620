defmodule FlameOn.Client.Node.MessagePatterns do
  @moduledoc false
  # What cross-process tracing sets on the node, besides call patterns:
  # the seq_trace system tracer (one per node), and in each cross-process
  # handle's session the send pattern (a tokened follower's message turns
  # tracing on in its receiver before it is delivered) and the receive
  # pattern (a receive event names the message's sender). Built from the
  # running traces by FlameOn.Client.Node.Patterns, which serializes them.

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{Sweep, TraceBackend}

  @graph_tracer {Native, :graph}
  # The flags a process gets when a tokened follower sends it a message
  # (the send pattern turns them on before the message is delivered, in the
  # cross-process handle's session). `:send` makes its own messages do the
  # same (A -> B -> C); only processes with the :send flag run the send
  # pattern, so untraced senders pay nothing. `:garbage_collection`: its
  # collections are a class of time of their own, in its stacks and spans.
  @follower_flags_calls [:call, :arity, :return_to, :running, :garbage_collection, :send, :procs]
  # Following every message: receive events (with the receive pattern,
  # carrying the sender) say who woke a waiting follower, and processes a
  # follower spawns start with its flags.
  @follower_flags_messages [:receive, :set_on_spawn | @follower_flags_calls]
  # The receive pattern: a receive event's match-spec result is the sender
  # (a pid, or `undefined` for timers and ports).
  @receive_match_spec Sweep.receive_match_spec()

  @doc """
  The trace flags a process gets when it joins a cross-process trace that
  follows `follow` (`:messages` or `:calls`).
  """
  @spec follower_flags(:messages | :calls) :: [atom()]
  def follower_flags(:messages), do: @follower_flags_messages
  def follower_flags(:calls), do: @follower_flags_calls

  # The flags the send pattern turns on. Where the VM has trace sessions,
  # no :garbage_collection: OTP 27-29 go down when a process has it in two
  # sessions (erlang/otp#11624), and a match spec cannot look first (a
  # process another trace of ours or another tool traces for collections
  # may be sent a message of the trace). The namer turns it on as each
  # process joins, through TraceBackend, which looks (late_gc_handle/1).
  defp pattern_flags(follow) do
    if TraceBackend.sessions?(),
      do: follower_flags(follow) -- [:garbage_collection],
      else: follower_flags(follow)
  end

  @doc """
  The handle through which a trace's namer turns `:garbage_collection` on
  in each process that joins (`handle`, where the send pattern leaves it
  out), or nil (the send pattern turned it on).
  """
  @spec late_gc_handle(TraceBackend.t()) :: TraceBackend.t() | nil
  def late_gc_handle(handle), do: if(TraceBackend.sessions?(), do: handle)

  @doc """
  Turns on in `pid`, through `handle`, the flags a process gets when it
  joins a cross-process trace that follows `follow` (a follower a trace
  takes back, or one that joined on another node). `:gone` when it exited.
  """
  @spec retrace(TraceBackend.t(), pid(), :messages | :calls) :: non_neg_integer() | :gone
  def retrace(handle, pid, follow) do
    TraceBackend.trace(handle, pid, true, follower_flags(follow))
  rescue
    # it exited in between
    ArgumentError -> :gone
  end

  @doc "The receive pattern of cross-process traces that follow every message."
  @spec receive_match_spec() :: [tuple()]
  def receive_match_spec, do: @receive_match_spec

  @doc "The handle cross-process traces go through: an OTP trace session of their own, or legacy."
  @spec open_handle(:own | :legacy) :: TraceBackend.t()
  def open_handle(:own), do: TraceBackend.open(:graph, @graph_tracer)
  def open_handle(:legacy), do: TraceBackend.legacy(@graph_tracer)

  @doc """
  Takes the seq_trace system tracer: one per node (sessions or not), ours
  while cross-process traces run, refused when another tool has it.
  """
  @spec take_system_tracer() :: :ok | {:error, {:system_tracer_taken, term()}}
  def take_system_tracer do
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

  @doc false
  # The send pattern of the cross-process traces running through `handle`
  # (`traces`: the Patterns server's cross-process users), in its session. A tokened follower sending a message turns tracing on in the
  # receiver before the message is delivered (following GenServer calls
  # only: a `$gen_call` request). First, for each trace, clauses for its
  # root when its token was cleared (a reply came back without one) or
  # replaced (it received a message from a process of another trace): its
  # own label is set back before the message goes out, so what the root
  # sends later is still followed in its own trace (a guard cannot read the
  # label, so the clause sets it whether it changed or not). Following
  # every message also sets the receive pattern.
  @spec set_patterns(TraceBackend.t(), map()) :: non_neg_integer()
  def set_patterns(handle, graph) do
    traces = for {_owner, %{handle: ^handle} = t} <- graph, do: t
    follow = if Enum.any?(traces, &(&1.follow == :messages)), do: :messages, else: :calls
    flags = TraceBackend.enable_flags(handle, pattern_flags(follow))

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

  @doc "Puts the send and receive patterns of `handle` back, untraces its processes, closes it."
  @spec clear_patterns(TraceBackend.t()) :: :ok
  def clear_patterns(handle) do
    TraceBackend.pattern(handle, :send, true, [])
    TraceBackend.pattern(handle, :receive, true, [])
    # A send that began under the old pattern may still run its `trace`
    # action on the receiver, which releases the sender's main lock: an
    # untrace taking the sender then frees its trace session reference,
    # and the VM reads it again when the action returns (OTP 27 crashed
    # so, in trace_send). So every scheduler passes between two processes
    # first: no send is left in the old pattern. (OTP 25-26 read the
    # tracer again.)
    if TraceBackend.sessions?(), do: TraceBackend.schedulers_passed()
    # Followers got the graph tracer from the send pattern; with no graph
    # trace left here, none of them is ours to keep.
    TraceBackend.untrace_all(handle)
    TraceBackend.close(handle)
  end

  @doc "Gives the seq_trace system tracer back, when it is ours."
  @spec release_system_tracer() :: :ok | term()
  def release_system_tracer do
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
end
