defmodule FlameOn.Client.Node.Sweep do
  @moduledoc false
  # Undoes everything of ours that is set on the node, recognising it by
  # what only we set, not by what some process remembers: whoever held that
  # memory may have been killed.
  #
  # What is ours:
  #   * a trace session named as ours (OTP 27+, see
  #     FlameOn.Client.Node.TraceBackend): destroying it removes every flag and
  #     pattern it set, and nothing of another tool's;
  #   * in the legacy session: a process whose tracer is the tracer module `FlameOn.Client.Core.Native`
  #     (any state), or a `FlameOn.Client.Owners.Tracer` process, or a dead
  #     process (a trace nobody receives);
  #   * the seq_trace system tracer `{FlameOn.Client.Core.Native, _}`;
  #   * a send pattern whose clauses turn on tracing with our tracer module;
  #   * the receive pattern of cross-process traces (its exact match spec);
  #   * the local call patterns, when the `:on_load` pattern is ours: it is
  #     set first and cleared last (`FlameOn.Client.Node.Patterns`), so it marks
  #     that ours may be set on any function;
  #   * capture_next's meta patterns on the functions the application
  #     environment lists, when their meta tracer is ours
  #     (`FlameOn.Client.Node.Gates.sweep/0`).
  #
  # It runs where a previous owner's leftovers can first be seen: when
  # `Patterns` starts (a restart after a crash), when it terminates, and in
  # the application's `stop/1` (the whole tree is gone). `run/0` is cheap
  # when nothing is set except for the process scan (about 3 µs a process).

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.TraceBackend

  # The match spec of our local call patterns (FlameOn.Client.Node.Patterns).
  @call_match_spec [{:_, [], [{:message, {:caller}}]}]
  # The receive pattern of cross-process traces: the sender as the match-spec result
  # (`undefined` for timers and ports), or, for a message from another node
  # (whose sender the VM does not give), that node. (A timer's message
  # comes from the node `clock_service`.)
  @receive_match_spec [
    {[:"$1", :undefined, :_], [{:"=/=", :"$1", {:node}}, {:"=/=", :"$1", :clock_service}],
     [{:message, :"$1"}]},
    {[:_, :"$1", :_], [], [{:message, :"$1"}]}
  ]
  # The counter patterns (call_time, call_memory) a summary set in the
  # legacy session, where nothing tells them from another profiler's.
  @counters_key {__MODULE__, :legacy_counters}

  @doc "The match spec of our local call patterns."
  @spec call_match_spec() :: [tuple()]
  def call_match_spec, do: @call_match_spec

  @doc "The match spec of our receive pattern (cross-process traces)."
  @spec receive_match_spec() :: [tuple()]
  def receive_match_spec, do: @receive_match_spec

  @doc """
  Clears every trace flag, pattern and system tracer of ours on the node.
  Returns what it undid: `%{sessions: n, processes: n, system_tracer: bool,
  send_pattern: bool, receive_pattern: bool, call_patterns: bool,
  next_call_patterns: n, backtrace_depth: bool, counters: bool}`.
  """
  @spec run() :: %{atom() => non_neg_integer() | boolean()}
  def run do
    # The send pattern and the system tracer first: they are what turns
    # tracing on in more processes.
    sessions = TraceBackend.destroy_our_sessions()
    send_pattern = clear_send_pattern()
    receive_pattern = clear_receive_pattern()
    system_tracer = clear_system_tracer()
    call_patterns = clear_call_patterns()
    next_call_patterns = FlameOn.Client.Node.Gates.sweep()
    processes = untrace_processes()
    backtrace_depth = FlameOn.Client.Node.BacktraceDepth.restore_saved()
    counters = clear_counters()

    %{
      sessions: sessions,
      processes: processes,
      backtrace_depth: backtrace_depth,
      counters: counters,
      system_tracer: system_tracer,
      send_pattern: send_pattern,
      receive_pattern: receive_pattern,
      call_patterns: call_patterns,
      next_call_patterns: next_call_patterns
    }
  end

  @doc """
  Notes that the `kind` counter patterns (`:call_time` or `:call_memory`)
  of the legacy session are ours (`true`, before they are set) or not any
  more (`false`, after they are cleared), in a persistent term:
  nothing else tells them from another profiler's, and a sweep after a
  crash clears them.
  """
  @spec note_legacy_counters(:call_time | :call_memory, boolean()) :: :ok
  def note_legacy_counters(kind, ours?) do
    before = :persistent_term.get(@counters_key, [])
    kinds = if ours?, do: Enum.uniq([kind | before]), else: List.delete(before, kind)
    # (an update costs the node a scan of every process: only a change)
    if kinds != before, do: :persistent_term.put(@counters_key, kinds)
    :ok
  end

  defp clear_counters do
    kinds = :persistent_term.get(@counters_key, [])

    for kind <- kinds, target <- [{:_, :_, :_}, :on_load] do
      TraceBackend.pattern(TraceBackend.legacy(), target, false, [kind])
    end

    if kinds != [], do: :persistent_term.erase(@counters_key)
    kinds != []
  end

  @doc "Whether `tracer` (as `:erlang.trace_info(pid, :tracer)` gives it) is ours."
  @spec our_tracer?(term()) :: boolean()
  def our_tracer?({Native, _state}), do: true

  def our_tracer?(pid) when is_pid(pid) and node(pid) == node() do
    # A dead tracer receives nothing: its flags are nobody's.
    case Process.info(pid, :dictionary) do
      nil -> true
      {:dictionary, dict} -> our_initial_call?(dict[:"$initial_call"])
    end
  end

  def our_tracer?(_other), do: false

  defp our_initial_call?({module, _fun, _arity}) when is_atom(module),
    do: String.starts_with?(Atom.to_string(module), "Elixir.FlameOn.Client.")

  defp our_initial_call?(_other), do: false

  @doc "Whether the node's `:on_load` call pattern is ours (so ours may be set)."
  @spec call_patterns_ours?() :: boolean()
  def call_patterns_ours? do
    :erlang.trace_info(:on_load, :traced) == {:traced, :local} and
      :erlang.trace_info(:on_load, :match_spec) == {:match_spec, @call_match_spec}
  end

  @doc "Whether `send_match_spec` (from `trace_info(:send, :match_spec)`) is ours."
  @spec our_send_pattern?(term()) :: boolean()
  def our_send_pattern?({:match_spec, clauses}) when is_list(clauses) and clauses != [] do
    Enum.any?(clauses, fn
      {_head, _guards, body} when is_list(body) -> Enum.any?(body, &enables_our_tracer?/1)
      _ -> false
    end)
  end

  def our_send_pattern?(_other), do: false

  defp enables_our_tracer?({:trace, _pid, _off, {:const, flags}}) when is_list(flags),
    do: Enum.any?(flags, &match?({:tracer, Native, _}, &1))

  defp enables_our_tracer?(_other), do: false

  defp clear_send_pattern do
    if our_send_pattern?(:erlang.trace_info(:send, :match_spec)) do
      TraceBackend.pattern(TraceBackend.legacy(), :send, true, [])
      true
    else
      false
    end
  end

  defp clear_receive_pattern do
    if TraceBackend.info(TraceBackend.legacy(), :receive, :match_spec) ==
         {:match_spec, @receive_match_spec} do
      TraceBackend.pattern(TraceBackend.legacy(), :receive, true, [])
      true
    else
      false
    end
  end

  defp clear_system_tracer do
    case :seq_trace.get_system_tracer() do
      {Native, _state} ->
        # The tokens our traces left in processes stay (see
        # Patterns.release_system_tracer: reset_trace can abort the VM).
        :seq_trace.set_system_tracer(false)
        true

      _other ->
        false
    end
  end

  # The wildcard clears every local call pattern, another tool's too:
  # Patterns refuses to set ours while another tool call-traces, so none
  # should be there.
  defp clear_call_patterns do
    if call_patterns_ours?() do
      TraceBackend.pattern(TraceBackend.legacy(), {:_, :_, :_}, false, [:local])
      TraceBackend.pattern(TraceBackend.legacy(), :on_load, false, [:local])
      true
    else
      false
    end
  end

  defp untrace_processes do
    Enum.count(Process.list(), fn pid ->
      with {:flags, [_ | _]} <- :erlang.trace_info(pid, :flags),
           {:tracer, tracer} <- :erlang.trace_info(pid, :tracer),
           # No live tracer: flags that send nothing to anyone.
           true <- tracer == [] or our_tracer?(tracer) do
        untrace(pid)
      else
        _ -> false
      end
    end)
  end

  defp untrace(pid) do
    TraceBackend.trace(TraceBackend.legacy(), pid, false, [:all])
    true
  rescue
    # It died in between.
    ArgumentError -> false
  end
end
