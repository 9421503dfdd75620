defmodule FlameOn.Client.Owners.Followers do
  @moduledoc false
  # The trace flags of the processes that follow a cross-process trace
  # (FlameOn.Client.Owners.CrossProcess): turned on in a process that
  # joined a node's part from another node (the send pattern cannot reach
  # across nodes), and off in the ones that left or stay when the trace
  # ends, unless another running trace follows them.

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{MessagePatterns, Patterns, TraceBackend}

  @doc false
  # A part: a process of this node took a request of the trace from
  # another node (or joined otherwise); it follows the trace with the
  # flags the send pattern would have given it.
  @spec flag(pid(), map()) :: map()
  def flag(pid, state) do
    case TraceBackend.tracer(state.handle, pid) do
      {:ok, []} ->
        MessagePatterns.retrace(state.handle, pid, state.follow)
        at = System.monotonic_time(:microsecond)

        %{
          state
          | flagged: MapSet.put(state.flagged, pid),
            flagged_at: Map.put_new(state.flagged_at, pid, at)
        }

      _ours_or_gone ->
        state
    end
  end

  # Off in a process of its own: turning another process's flags off waits
  # until that process is scheduled out, tens of milliseconds for a busy
  # one, and this owner must stay free for the trace's other messages.
  # Another trace may have sent the process its message just before the
  # flags went (the send pattern found them on, and the process takes the
  # message untraced, its stacks lost): Patterns turns them on again when
  # another trace still needs them (FlameOn.Client.Node.Patterns.follow_again/4).
  # `again: false` (the trace follows nothing any more: its lifetime is
  # over): no Patterns.follow_again/4 for this trace's own sake (a message
  # merely queued at the process, a call's reply, traced the root again
  # for good: graph_test's max_duration_ms test looped its 500 calls).
  @spec unfollow([pid()], %{handle: TraceBackend.t(), follow: :messages | :calls}, keyword()) ::
          pid()
  def unfollow(pids, %{handle: handle, follow: follow} = state, opts \\ []) do
    label = Map.get(state, :label)
    again? = Keyword.get(opts, :again, true)

    spawn(fn ->
      Enum.each(pids, fn pid ->
        with nil <- Native.graph_role(pid),
             {:ok, {Native, :graph}} <- TraceBackend.tracer(handle, pid),
             :ok <- TraceBackend.untrace(handle, pid),
             true <- again? do
          follow_again(handle, pid, follow, label)
        end
      end)
    end)
  end

  # Patterns gone (the application stopping): it clears every flag of ours.
  defp follow_again(handle, pid, follow, label) do
    Patterns.follow_again(handle, pid, follow, label)
  catch
    :exit, _ -> :ok
  end
end
