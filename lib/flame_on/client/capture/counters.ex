defmodule FlameOn.Client.Capture.Counters do
  @moduledoc false
  # FlameOn.Client.summary/2: the VM's call_time / call_memory counters, as
  # tprof reads them. A counter pattern on every function (and on modules
  # loaded meanwhile) goes where the trace's handle says (its own trace
  # session on OTP 27+, see FlameOn.Client.Node.TraceBackend; the legacy session,
  # through FlameOn.Client.Node.Patterns, before), fun runs in a new process with
  # the :call flag and :silent (counters only, no events; with set_on_spawn
  # the processes it spawns too), the counters are paused and read per
  # function with info/3, and everything is cleared.

  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Summary
  alias FlameOn.Client.Node.TraceBackend

  # Ours, running traced around the function: not part of its summary.
  @own_modules [__MODULE__, TraceBackend, :trace]
  # (the trace BIFs that pause the counters, and what they call)
  @own_functions [
    {:erts_internal, :trace, 3},
    {:erts_internal, :trace, 4},
    {:erts_internal, :trace_pattern, 3},
    {:erts_internal, :trace_pattern, 4},
    {:erlang, :trace, 3},
    {:erlang, :trace_pattern, 3},
    {:erlang, :ensure_tracer_module_loaded, 2}
  ]

  @doc """
  Runs `fun` in a new process with counters on; `{result, summary}`, or the
  function's exception raised again in the caller.
  """
  @spec run((() -> result), map()) :: {result, Summary.t()} when result: term()
  def run(fun, %{type: type} = opts) do
    FlameOn.Client.Runtime.ensure_started!()
    check_release!(type)
    caller = self()
    # The caller is the tracer, but with :silent nothing is sent to it.
    handle = TraceBackend.open(:summary, caller)

    with {:error, reason} <- Patterns.acquire(nil, handle, type) do
      TraceBackend.close(handle)
      Common.raise_start_error!(reason, "a summary")
    end

    flags = [:call, :silent] ++ if(opts.set_on_spawn, do: [:set_on_spawn], else: [])
    started = :erlang.monotonic_time()
    {pid, outcome, ended} = run_counted(fun, handle, type, flags)

    counters =
      try do
        TraceBackend.untrace_all(handle)
        collect(handle, type)
      after
        Patterns.release()
        TraceBackend.close(handle)
      end

    summary =
      Summary.build(counters,
        type: type,
        name: opts.name,
        pid: pid,
        started_at: System.convert_time_unit(started, :native, :microsecond),
        duration_us: System.convert_time_unit(ended - started, :native, :microsecond)
      )

    case outcome do
      {:ok, result} -> {result, summary}
      {kind, reason, stacktrace} -> :erlang.raise(kind, reason, stacktrace)
    end
  end

  # As tprof: the function runs in a process of its own, so what it counts
  # does not depend on the caller's heap (time spent collecting garbage is
  # the running function's). Linked, like a Task: it dies with the caller.
  defp run_counted(fun, handle, type, flags) do
    caller = self()
    ref = make_ref()

    {pid, monitor} =
      :erlang.spawn_opt(
        fn ->
          Process.put(:"$callers", [caller | Process.get(:"$callers", [])])

          outcome =
            try do
              TraceBackend.trace(handle, self(), true, flags)
              {:ok, fun.()}
            catch
              kind, reason -> {kind, reason, __STACKTRACE__}
            end

          # Nothing after this is counted, here or in its children.
          TraceBackend.pattern(handle, {:_, :_, :_}, :pause, [type])
          send(caller, {ref, outcome, :erlang.monotonic_time()})
        end,
        [:link, :monitor]
      )

    receive do
      {^ref, outcome, ended} ->
        Process.demonitor(monitor, [:flush])
        {pid, outcome, ended}

      {:DOWN, ^monitor, :process, ^pid, reason} ->
        TraceBackend.pattern(handle, {:_, :_, :_}, :pause, [type])
        {pid, {:exit, reason, []}, :erlang.monotonic_time()}
    end
  end

  @doc "Raises `ArgumentError` when this VM cannot count `type`."
  @spec check_release!(:call_time | :call_memory) :: :ok
  def check_release!(:call_memory) do
    release = :erlang.system_info(:otp_release) |> List.to_integer()

    if release < 26 do
      raise ArgumentError,
            "type: :call_memory needs Erlang/OTP 26 or later (this node runs OTP #{release}); " <>
              "type: :call_time works here"
    end

    :ok
  end

  def check_release!(:call_time), do: :ok

  # %{pid => %{mfa => {calls, value}}}, from every function of every loaded
  # module (what tprof reads).
  defp collect(handle, type) do
    for {module, _} <- :code.all_loaded(),
        module not in @own_modules,
        {function, arity} <- functions(module),
        mfa = {module, function, arity},
        mfa not in @own_functions,
        {^type, [_ | _] = rows} <- [info(handle, mfa, type)],
        row <- rows,
        reduce: %{} do
      acc -> add(acc, mfa, row)
    end
  end

  defp functions(module) do
    :erlang.get_module_info(module, :functions)
  rescue
    # unloaded meanwhile
    ArgumentError -> []
  end

  defp info(handle, mfa, type) do
    TraceBackend.info(handle, mfa, type)
  rescue
    ArgumentError -> nil
  end

  defp add(acc, mfa, {pid, calls, seconds, micro}),
    do: put(acc, pid, mfa, calls, seconds * 1_000_000 + micro)

  # As tprof: a function that allocated nothing is left out.
  defp add(acc, _mfa, {_pid, _calls, 0}), do: acc
  defp add(acc, mfa, {pid, calls, words}), do: put(acc, pid, mfa, calls, words)

  defp put(acc, pid, mfa, calls, value) do
    Map.update(acc, pid, %{mfa => {calls, value}}, &Map.put(&1, mfa, {calls, value}))
  end
end
