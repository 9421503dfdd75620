defmodule FlameOn.Client.Node.OtherTools do
  @moduledoc false
  # Another tool's tracing in the legacy session (OTP 25-26), which ours
  # would break there: call patterns (ours would replace them), a process
  # with another tracer (the send pattern would take it over). Read from the
  # VM each time it is asked (only when ours go from off to on): a scan of
  # the processes, about 3 µs each. With trace sessions (OTP 27+) nothing is
  # asked: ours live apart.

  alias FlameOn.Client.Node.{Sweep, TraceBackend}

  @doc """
  What setting `kind` patterns in the legacy session would break, described,
  or nil. `ours?`: a trace of ours already has patterns there; `first?`:
  ours of `kind` are not set there yet.
  """
  @spec conflict(boolean(), atom(), boolean()) :: String.t() | nil
  def conflict(_ours?, :calls, first?), do: if(first?, do: foreign_call_tracing())

  def conflict(ours?, kind, _first?) do
    cond do
      ours? ->
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

  @doc """
  Why cross-process tracing through `handle` cannot start, or nil. In the
  legacy session a process has one tracer, and the send pattern's
  `{trace, ...}` action gives a callee ours even when another tool traces
  it (then clearing ours leaves it untraced): cross-process tracing there
  refuses while another tool traces any process. With `call_check?` (call
  patterns to be set there first) another tool's call tracing is checked
  first, for its clearer message.
  """
  @spec tracing(FlameOn.Client.Node.TraceBackend.t(), boolean()) :: {atom(), String.t()} | nil
  def tracing(handle, call_check?) do
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
end
