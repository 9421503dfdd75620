defmodule FlameOn.Client.Node.TraceBackend do
  @moduledoc false
  # The one place FlameOn sets and clears trace flags and trace patterns, on
  # either of the VM's two tracing models. Internal: the rest of FlameOn
  # calls it, user code does not.
  #
  #   * **Trace sessions** (OTP 27+, `:trace.session_create/3`): a trace
  #     FlameOn starts gets its own session (but a flag-only trace of
  #     processes free in the legacy session, which goes there: a
  #     session's destruction costs ~0.8 ms, FlameOn.Client.Capture.Local),
  #     with our tracer (the NIF
  #     `{FlameOn.Client.Core.Native, state}` or a tracer process) as the
  #     session's tracer. Its flags and patterns live in that session only, so
  #     another tool's patterns and flags — in its own session or in the
  #     legacy one — are never read, replaced or cleared, and its events keep
  #     coming while ours run. Destroying the session (`close/1`, or the VM
  #     when the last handle is garbage collected) removes everything it set.
  #   * **The legacy session** (OTP 25–26, `:erlang.trace/3` and
  #     `:erlang.trace_pattern/3`): one per node, shared with every other
  #     tool. The tracer goes into the process's flags, and patterns are
  #     node-global, so `FlameOn.Client.Node.Patterns` shares them between our
  #     traces and refuses to start while another tool call-traces.
  #
  # A handle (`t:t/0`) names where a trace's flags and patterns go;
  # `open/2` picks the model the VM has, and every function here takes the
  # handle, so the tracing logic is written once and no caller asks which
  # release it runs on. `legacy/1` makes a legacy handle on any release
  # (tests and benchmarks that drive the legacy session on purpose).
  #
  # What is not per session: the seq_trace system tracer
  # (`:seq_trace.set_system_tracer/1`) is one per node on every release, and
  # the node-wide `backtrace_depth` flag.

  defstruct session: nil, tracer: nil

  @typedoc """
  Where trace flags and patterns go: a trace session of ours (`session` is
  its handle) or the legacy session (`session: nil`), with the tracer that
  receives the events.
  """
  @type t :: %__MODULE__{session: term() | nil, tracer: tracer()}

  @typedoc "A tracer: a process, or a tracer module with its state."
  @type tracer :: pid() | {module(), term()} | nil

  @typedoc "What a trace session of ours is for (it names the session)."
  @type kind :: :trace | :graph | :summary

  @session_names %{
    trace: :flame_on_client,
    graph: :flame_on_client_graph,
    summary: :flame_on_client_summary
  }
  @our_names Map.values(@session_names)
  @sessions_key {__MODULE__, :sessions?}

  @doc "Whether this VM has trace sessions (OTP 27+)."
  @spec sessions?() :: boolean()
  def sessions? do
    case :persistent_term.get(@sessions_key, nil) do
      nil ->
        found = Code.ensure_loaded?(:trace) and function_exported?(:trace, :session_create, 3)
        :persistent_term.put(@sessions_key, found)
        found

      found ->
        found
    end
  end

  @doc """
  A handle for a new trace with `tracer`: its own trace session where the
  VM has them, else the legacy session. A session is only made for a live
  tracer: a tracer module whose `enabled/3` answers `:remove` to
  `:trace_status` (`{FlameOn.Client.Core.Native, :graph}` while no cross-process trace is
  registered) raises `ArgumentError`.

      iex> handle = FlameOn.Client.Node.TraceBackend.open(:trace, self())
      iex> FlameOn.Client.Node.TraceBackend.trace(handle, self(), true, [:running]) == 1
      true
      iex> FlameOn.Client.Node.TraceBackend.flags(handle, self())
      [:running]
      iex> FlameOn.Client.Node.TraceBackend.untrace(handle, self())
      iex> FlameOn.Client.Node.TraceBackend.close(handle)
      :ok
  """
  @spec open(kind(), tracer()) :: t()
  def open(kind, tracer) when is_map_key(@session_names, kind) do
    if sessions?() do
      session = apply(:trace, :session_create, [Map.fetch!(@session_names, kind), tracer, []])
      %__MODULE__{session: session, tracer: tracer}
    else
      legacy(tracer)
    end
  end

  @doc "A handle on the legacy session (on any release), with `tracer`."
  @spec legacy(tracer()) :: t()
  def legacy(tracer \\ nil), do: %__MODULE__{tracer: tracer}

  @doc """
  Ends the handle's session: destroying a trace session removes every flag
  and pattern it set. A legacy handle has nothing of its own to end (the
  caller clears what it set).
  """
  @spec close(t()) :: :ok
  def close(%__MODULE__{session: nil}), do: :ok

  def close(%__MODULE__{session: session}) do
    apply(:trace, :session_destroy, [session])
    :ok
  rescue
    # destroyed already
    ArgumentError -> :ok
  end

  @doc """
  Whether other tools share where this handle's patterns go (the legacy
  session), so that setting ours could replace theirs.
  """
  @spec shared?(t()) :: boolean()
  def shared?(%__MODULE__{session: session}), do: session == nil

  @doc """
  What patterns set through this handle are shared with: `:legacy`, or the
  handle's own session.
  """
  @spec scope(t()) :: term()
  def scope(%__MODULE__{session: nil}), do: :legacy
  def scope(%__MODULE__{session: {_ref, weak}}), do: weak

  @doc """
  Turns `flags` on or off for `pid` (or `:new`, ...) in the handle's
  session, with its tracer. Returns how many processes matched; raises
  `ArgumentError` when `pid` is not alive.
  """
  @spec trace(t(), pid() | atom(), boolean(), [atom()]) :: non_neg_integer()
  # The legacy session as trace:session_info/1 names it (OTP 27+).
  @legacy {nil, {:legacy, :default}}
  def trace(%__MODULE__{session: nil, tracer: tracer}, pid, true, flags) when is_pid(pid),
    do: :erlang.trace(pid, true, [tracer_flag(tracer) | one_gc_tracer(@legacy, pid, flags)])

  def trace(%__MODULE__{session: nil, tracer: tracer}, pid, true, flags),
    do: :erlang.trace(pid, true, [tracer_flag(tracer) | flags])

  def trace(%__MODULE__{session: nil}, pid, false, flags), do: :erlang.trace(pid, false, flags)

  def trace(%__MODULE__{session: session}, pid, true, flags) when is_pid(pid),
    do: apply(:trace, :process, [session, pid, true, one_gc_tracer(session, pid, flags)])

  def trace(%__MODULE__{session: session}, pid, how, flags),
    do: apply(:trace, :process, [session, pid, how, flags])

  # OTP 27 (checked on 27.3.4.1) aborts or corrupts its memory when a
  # process has the garbage_collection flag in two trace sessions (the
  # legacy one counts: `dbg` with `garbage_collection`) and a process
  # tracer gets the events: "size_object: bad tag for 0x0", or a segfault in
  # size_object_x under trace_gc (a 20-line reproduction in the README).
  # Where another session has the flag on the process, ours is left out:
  # its collections stay in its frames (time classes, alloc) rather than
  # the node going down.
  defp one_gc_tracer({_ref, own}, pid, flags) do
    if :garbage_collection in flags and sessions?() and gc_traced_elsewhere?(own, pid),
      do: List.delete(flags, :garbage_collection),
      else: flags
  end

  @doc false
  # Whether `pid` has the garbage_collection flag in a trace session other
  # than `own` (a session's weak reference); false on releases without sessions.
  @spec gc_traced_elsewhere?(term(), pid()) :: boolean()
  def gc_traced_elsewhere?(own, pid) do
    sessions?() and
      case apply(:trace, :session_info, [pid]) do
        sessions when is_list(sessions) ->
          Enum.any?(sessions, &(&1 != own and gc_flag?(&1, pid)))

        _gone ->
          false
      end
  end

  defp gc_flag?({:legacy, _}, pid), do: gc_in?(:erlang.trace_info(pid, :flags))

  defp gc_flag?(weak, pid) do
    gc_in?(apply(:trace, :info, [weak, pid, :flags]))
  rescue
    # the session ended in between
    ArgumentError -> false
  end

  defp gc_in?({:flags, flags}) when is_list(flags), do: :garbage_collection in flags
  defp gc_in?(_), do: false

  @doc """
  Sets the flags of several handles on `pid` at once (`[{handle, flags}]`).
  In trace sessions each handle's flags go to its own session. The legacy
  session gives a process one tracer: the first handle's, and the others'
  flags go with it (there the send pattern is node-wide, so a `:send` flag
  works whatever the tracer).
  """
  @spec set_flags(pid(), [{t(), [atom()]}]) :: :ok
  def set_flags(pid, specs) do
    Enum.each(merge(specs), fn {handle, flags} -> trace(handle, pid, true, flags) end)
  end

  @doc """
  Turns off what `set_flags/2` set on `pid`, where it is still ours (see
  `untrace/3`).
  """
  @spec clear_flags(pid(), [{t(), [atom()]}]) :: :ok
  def clear_flags(pid, specs) do
    Enum.each(merge(specs), fn {handle, flags} -> untrace(handle, pid, flags) end)
  end

  defp merge([{%__MODULE__{session: nil} = first, _} | _] = specs),
    do: [{first, Enum.flat_map(specs, &elem(&1, 1))}]

  defp merge(specs), do: specs

  @doc """
  Turns `flags` (default: all) off for `pid` where they are this handle's:
  in its session, or in the legacy session while `pid`'s tracer is the
  handle's tracer or no live one (another tool's trace is left alone).
  Does nothing for a process that is gone.
  """
  @spec untrace(t(), pid(), [atom()]) :: :ok
  def untrace(handle, pid, flags \\ [:all]), do: untrace(handle, pid, flags, true)

  defp untrace(handle, pid, flags, leave_sends?) do
    case tracer(handle, pid) do
      {:ok, current} when handle.session != nil or current in [handle.tracer, []] ->
        if leave_sends?, do: leave_sends(handle, pid, flags)
        trace(handle, pid, false, flags)

      _ ->
        :ok
    end

    :ok
  rescue
    # it exited in between
    ArgumentError -> :ok
  end

  @doc """
  Turns off every flag `pid` has from our cross-process tracing, whoever holds the
  handle: in each cross-process core session of ours it is in, and in the legacy
  session while its tracer is the graph tracer (a follower of another
  cross-process trace that starts a trace of its own).
  """
  @spec untrace_graph(pid()) :: :ok
  def untrace_graph(pid) do
    if sessions?() do
      name = Map.fetch!(@session_names, :graph)

      for {^name, _id} = weak <- apply(:trace, :session_info, [pid]) || [],
          do: untrace(%__MODULE__{session: weak}, pid)
    end

    untrace(legacy({FlameOn.Client.Core.Native, :graph}), pid)
  end

  @doc """
  Turns off every flag of every process traced through this handle (a
  session: all of its processes; legacy: those whose tracer is the
  handle's, found by a scan of the processes).
  """
  @spec untrace_all(t()) :: :ok
  def untrace_all(%__MODULE__{session: nil, tracer: tracer} = handle) do
    # (the callers reset the send pattern first: MessagePatterns.clear_patterns/1)
    for pid <- Process.list(), tracer(handle, pid) == {:ok, tracer} do
      untrace(handle, pid, [:all], false)
    end

    :ok
  end

  def untrace_all(handle) do
    trace(handle, :all, false, [:all])
    :ok
  end

  @doc """
  Sets a trace pattern in the handle's session: `target` is an MFA pattern,
  `:on_load`, `:send` or `:receive` (whose flag lists must be `[]`).
  """
  @spec pattern(t(), tuple() | :on_load | :send | :receive, term(), list()) ::
          non_neg_integer()
  def pattern(%__MODULE__{session: nil}, target, match_spec, flags),
    do: :erlang.trace_pattern(target, match_spec, flags)

  def pattern(%__MODULE__{session: session}, :send, match_spec, []),
    do: apply(:trace, :send, [session, match_spec, []])

  def pattern(%__MODULE__{session: session}, :receive, match_spec, []),
    do: apply(:trace, :recv, [session, match_spec, []])

  def pattern(%__MODULE__{session: session}, target, match_spec, flags),
    do: apply(:trace, :function, [session, target, match_spec, flags])

  # OTP 27+ (a process's tracing is a reference per session): a send
  # whose pattern runs a `trace` action on its receiver (a cross-process
  # trace's send pattern) releases the sender's main lock meanwhile, and
  # reads the sender's session reference again when the action returns.
  # An untrace of the sender that takes its locks then frees that
  # reference: the VM crashed in trace_send. So another process's send
  # flag goes first (its reference stays, and no send of it enters the
  # pattern from then on), and the rest once every scheduler has passed
  # between two processes: no send of it is left in the pattern then.
  defp leave_sends(handle, pid, flags) do
    if pid != self() and sessions?() and (:all in flags or :send in flags) do
      case flags(handle, pid) do
        [_, _ | _] = now -> if :send in now, do: send_off(handle, pid)
        _one_or_none -> :ok
      end
    end

    :ok
  end

  defp send_off(handle, pid) do
    trace(handle, pid, false, [:send])
    schedulers_passed()
  end

  @doc """
  Returns once every normal scheduler has run its aux work (between two
  processes) since the call: what a process was running then is done.
  `erlang:trace_delivered(:all)` answers only then.
  """
  @spec schedulers_passed() :: :ok
  def schedulers_passed do
    ref = :erlang.trace_delivered(:all)

    receive do
      {:trace_delivered, :all, ^ref} -> :ok
    after
      5_000 -> :ok
    end
  end

  @doc "`:erlang.trace_info/2` in the handle's session."
  @spec info(t(), term(), atom()) :: term()
  def info(%__MODULE__{session: nil}, what, item), do: :erlang.trace_info(what, item)

  def info(%__MODULE__{session: session}, what, item),
    do: apply(:trace, :info, [session, what, item])

  @doc "The flags `pid` has in the handle's session (`[]` when none, or the process or session is gone)."
  @spec flags(t(), pid()) :: [atom()]
  def flags(handle, pid) do
    case info(handle, pid, :flags) do
      {:flags, flags} -> flags
      _ -> []
    end
  rescue
    # the session ended meanwhile (OTP 27: `invalid trace session`)
    ArgumentError -> []
  end

  @doc """
  `pid`'s tracer in the handle's session: `{:ok, tracer}` (`[]` when it has
  none) or `:error` when the process or the session is gone.
  """
  @spec tracer(t(), pid()) :: {:ok, term()} | :error
  def tracer(handle, pid) do
    case info(handle, pid, :tracer) do
      {:tracer, {module, state}} -> {:ok, {module, state}}
      {:tracer, tracer} -> {:ok, tracer}
      {:tracer, module, state} -> {:ok, {module, state}}
      _ -> :error
    end
  rescue
    # the session ended meanwhile (OTP 27: `invalid trace session`)
    ArgumentError -> :error
  end

  @doc """
  The flag list of a match spec's `{:trace, ...}` action that turns
  `flags` on through this handle: in a session the action enables them in
  the session the pattern belongs to (a tracer in the list is refused
  there); in the legacy session the tracer has to be in the list.
  """
  @spec enable_flags(t(), [atom()]) :: list()
  def enable_flags(%__MODULE__{session: nil, tracer: tracer}, flags),
    do: flags ++ [tracer_flag(tracer)]

  def enable_flags(_handle, flags), do: flags

  @doc """
  Asks the VM to tell the caller, with `{:trace_delivered, pid, ref}`, once
  every trace message of `pid` in this handle's session is delivered.
  """
  @spec delivered(t(), pid()) :: reference()
  def delivered(%__MODULE__{session: nil}, pid), do: :erlang.trace_delivered(pid)

  def delivered(%__MODULE__{session: session}, pid),
    do: apply(:trace, :delivered, [session, pid])

  @doc """
  Whether FlameOn may trace `pid`: `:ok`, `{:error, :noproc}`, or
  `{:error, {:already_traced, by}}`. In the legacy session a process has one
  tracer, so any tracer refuses; with trace sessions only a trace of ours
  does (another tool's trace goes on beside ours).
  """
  @spec check_tracee(term()) :: :ok | {:error, term()}
  def check_tracee(pid) when pid == self() do
    # The calling process, asked each request by trace/3: in the legacy
    # session the VM clears a process's tracer with its last trace flag,
    # so no flags (`:trace`, the process's own field: no lock, no copy)
    # is no tracer. Flags set: the tracer is asked, as of any process.
    if not sessions?() and Process.info(pid, :trace) == {:trace, 0},
      do: :ok,
      else: check_other(pid)
  end

  def check_tracee(pid) do
    case check_other(pid) do
      # a tail trace's flags, lingering on it between two of its requests
      # (FlameOn.Client.Node.TailHold): taken back
      {:error, {:already_traced, {FlameOn.Client.Core.Native, {:tail, _, _} = state}}} = error ->
        if FlameOn.Client.Node.TailNote.unlinger(pid, state) == :ok,
          do: check_other(pid),
          else: error

      other ->
        other
    end
  end

  defp check_other(pid) when is_pid(pid) and node(pid) == node() do
    cond do
      not Process.alive?(pid) ->
        {:error, :noproc}

      sessions?() ->
        case Enum.find(apply(:trace, :session_info, [pid]) || [], &our_session?/1) do
          nil -> lingering_tail(pid)
          {name, _id} -> {:error, {:already_traced, {:trace_session, name}}}
        end

      true ->
        case :erlang.trace_info(pid, :tracer) do
          :undefined -> {:error, :noproc}
          {:tracer, []} -> :ok
          {:tracer, other} -> {:error, {:already_traced, other}}
          {:tracer, module, state} -> {:error, {:already_traced, {module, state}}}
        end
    end
  end

  defp check_other(pid), do: {:error, {:not_a_local_pid, pid}}

  # Where the VM has sessions, a trace of ours may still be in the legacy
  # session: a flag-only trace (FlameOn.Client.Capture.Local: a session
  # costs ~0.8 ms to destroy), whose process is ours as in a session of
  # ours, and a tail trace's flags (FlameOn.Client.Node.TailHold), ours
  # to take back first (its collections would be traced twice: the
  # second session's flag is left out, see trace/4).
  defp lingering_tail(pid) do
    case :erlang.trace_info(pid, :tracer) do
      {:tracer, {FlameOn.Client.Core.Native, _state} = tracer} ->
        {:error, {:already_traced, tracer}}

      _ ->
        :ok
    end
  end

  @doc "Trace sessions of ours alive on the node (`[]` without sessions)."
  @spec our_sessions() :: [term()]
  def our_sessions do
    if sessions?(),
      do: Enum.filter(apply(:trace, :session_info, [:all]), &our_session?/1),
      else: []
  end

  @doc """
  Destroys every trace session of ours (whoever holds its handle: a sweep
  after a crash). Returns how many.
  """
  @spec destroy_our_sessions() :: non_neg_integer()
  def destroy_our_sessions do
    Enum.count(our_sessions(), fn weak ->
      try do
        apply(:trace, :session_destroy, [weak]) == true
      rescue
        ArgumentError -> false
      end
    end)
  end

  defp our_session?({name, _id}), do: name in @our_names
  defp our_session?(_other), do: false

  defp tracer_flag(pid) when is_pid(pid) or is_port(pid), do: {:tracer, pid}
  defp tracer_flag({module, state}), do: {:tracer, module, state}
end
