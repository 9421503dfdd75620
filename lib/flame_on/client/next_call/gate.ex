defmodule FlameOn.Client.NextCall.Gate do
  @moduledoc false
  # capture_next/2's trace (see FlameOn.Client.NextCall): a capture of
  # target {:gate, mfa} (FlameOn.Client.Capture), a gate in the NIF, and
  # the one meta pattern on mfa (FlameOn.Client.Node.Gates owns it), whose
  # match spec turns tracing on in the first caller the gate lets through,
  # at the call itself. The gate stops the capture at the call's return or
  # exception, in the caller's own context; then the pattern goes, the
  # caller's flags go, and the capture is finished as any other.

  alias FlameOn.Client.Capture
  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.NextCall.Stacks
  alias FlameOn.Client.Node.{Gates, Patterns}

  @max_timeout 4_294_967_295
  # How long a claimed gate's message may take (it is sent right after the
  # claim, in the same VM call): only a broken node takes longer.
  @fired_grace_ms 5_000

  @doc """
  Waits up to `wait_ms` for the next call of `mfa` and profiles it:
  `{:ok, profile}`, `{:error, :timeout}` or another `{:error, reason}`.
  """
  @spec run(mfa(), map(), timeout()) :: {:ok, FlameOn.Client.Profile.t()} | {:error, term()}
  def run(mfa, opts, wait_ms) do
    # Waiting costs nothing at any priority; once the call fires, what
    # this process does first (start the sampler) decides how soon the
    # call is sampled, on a node as busy as the call may be.
    priority = Process.flag(:priority, :high)

    try do
      case Capture.open({:gate, mfa}, gate_opts(opts, wait_ms)) do
        {:ok, capture} -> armed(mfa, capture, opts, wait_ms)
        {:error, {:breaker_open, _}} = error -> error
        {:error, reason} -> Common.raise_start_error!(reason, "a capture")
      end
    after
      Process.flag(:priority, priority)
    end
  end

  # Cross-process: the owner's lifetime runs from now; the call's from its
  # entry. (The trace follows every message, as profile/2's: a Task the
  # call starts is a span of it.)
  defp gate_opts(%{cross_process: true} = opts, wait_ms),
    do: %{opts | max_duration_ms: min(opts.max_duration_ms + bound(wait_ms), @max_timeout)}

  defp gate_opts(opts, _wait_ms), do: opts

  defp bound(:infinity), do: @max_timeout
  defp bound(wait_ms), do: wait_ms + @fired_grace_ms

  defp armed(mfa, capture, opts, wait_ms) do
    gate = Native.next_new(capture.core, self(), excluded(capture))
    # the captured process tells this one of its call with the trace's
    # token: no span of the trace
    if capture[:owner], do: :ok = Native.graph_outsider(capture.core, self())
    flags = gate_flags(capture)
    cleanup = %{native: capture.core, flags: flags, graph_owner: capture[:owner]}

    try do
      with :ok <- Gates.arm(mfa, gate, match_spec(capture[:label], flags), cleanup),
           {:fired, winner, caller, started_ts} <- fired(gate, wait_ms) do
        follow(mfa, capture, gate, opts, {winner, caller, started_ts})
      else
        {:error, _} = error ->
          Capture.abort(capture)
          error
      end
    catch
      kind, reason ->
        Capture.abort(capture)
        :erlang.raise(kind, reason, __STACKTRACE__)
    after
      Gates.done()
      Native.next_cancel(gate)
    end
  end

  # Our own processes never win: the waiting process, the pattern owners,
  # the cross-process trace's owner.
  defp excluded(capture) do
    Enum.filter(
      [self(), Process.whereis(Gates), Process.whereis(Patterns), capture[:owner]],
      &is_pid/1
    )
  end

  # The gate's match spec turns tracing on in the legacy session: the
  # tracer goes in the flag list.
  defp gate_flags(%{flags: [{%{tracer: {module, state}}, flags}]}),
    do: [{:tracer, module, state} | flags]

  # The match spec runs only for the process that claimed the gate: it
  # notes the caller, gives a cross-process capture's root its token, turns
  # tracing on and asks for the return (or exception) of this call.
  defp match_spec(label, flags) do
    tokens =
      if label,
        do: [
          {:set_seq_token, :label, label},
          {:set_seq_token, :send, true},
          {:set_seq_token, :receive, true}
        ],
        else: []

    [
      {:_, [],
       [{:message, {:caller}}] ++ tokens ++ [{:trace, [], {:const, flags}}, {:exception_trace}]}
    ]
  end

  defp fired(gate, wait_ms) do
    receive do
      {:flame_on_next, ^gate, :fired, winner, caller, started_ts} ->
        {:fired, winner, caller, started_ts}
    after
      wait_ms ->
        case Native.next_cancel(gate) do
          :cancelled ->
            {:error, :timeout}

          # claimed right at the deadline: the call is captured
          :fired ->
            receive do
              {:flame_on_next, ^gate, :fired, winner, caller, started_ts} ->
                {:fired, winner, caller, started_ts}
            after
              @fired_grace_ms -> {:error, :timeout}
            end
        end
    end
  end

  defp follow(mfa, capture, gate, opts, {winner, caller, started_ts}) do
    # The gate's messages are sent from the captured process, which holds
    # the trace's seq_trace token by then (cross_process): taking them
    # gave it to this process too. Nothing done here is the trace's.
    :seq_trace.set_token([])
    capture = Capture.begin(capture, winner)

    try do
      ref = Process.monitor(winner)
      # the gate lets nobody else in any more: the pattern can go now
      :ok = Gates.disarm(mfa)

      {end_ts, lifetime_exceeded} =
        receive do
          {:flame_on_next, ^gate, kind, end_ts, _outcome, _} when kind in [:returned, :raised] ->
            {end_ts, false}

          {:DOWN, ^ref, :process, ^winner, _reason} ->
            {Capture.stop(capture), false}
        after
          opts.max_duration_ms -> {Capture.stop(capture), true}
        end

      :seq_trace.set_token([])
      Process.demonitor(ref, [:flush])
      Capture.detach(capture)

      with {:ok, profile} <- Capture.finish(capture, started_ts, end_ts) do
        caller = if match?({_, _, _}, caller), do: caller
        profile = Stacks.rewrite(profile, winner, mfa, caller)
        {:ok, %{profile | stats: Map.put(profile.stats, :lifetime_exceeded, lifetime_exceeded)}}
      end
    catch
      kind, reason ->
        Capture.abort(capture)
        :erlang.raise(kind, reason, __STACKTRACE__)
    end
  end
end
