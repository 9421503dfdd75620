defmodule FlameOn.Client.Node.Status do
  @moduledoc false
  # FlameOn.Client.status/0: what the profiler holds on this node, read
  # from each owner of node-wide state.

  alias FlameOn.Client.Core.Native

  alias FlameOn.Client.Node.{
    BacktraceDepth,
    Breaker,
    Gates,
    Patterns,
    PerfSampler,
    TailHold,
    TraceBackend
  }

  alias FlameOn.Client.Sampling.Budget

  @spec status() :: map()
  def status do
    FlameOn.Client.Runtime.ensure_started!()
    Breaker.check()
    # Live traces only: a finished trace's session resource lives on until
    # the process holding its handle collects garbage (awaiting_gc).
    open = Native.open_sessions()
    continuous = FlameOn.Client.Continuous.status()

    %{
      breaker: if(reason = Breaker.state(), do: {:open, reason}, else: :closed),
      sessions: open,
      sessions_awaiting_gc: max(Native.live_sessions() - open, 0),
      sessions_memory_bytes: Native.session_bytes(),
      node_memory_bytes: :erlang.memory(:total),
      pattern_users: Patterns.users(),
      trace_sessions: length(TraceBackend.our_sessions()),
      # continuous profiling and the tail hold hold it too, shown apart
      sample_traces: max(BacktraceDepth.users() - continuous_depth(continuous) - tail_depth(), 0),
      active_samplers: Budget.active(),
      sample_budget: Budget.budget(),
      owners: DynamicSupervisor.count_children(FlameOn.Client.OwnerSupervisor).active,
      captures_waiting: Gates.waiting(),
      trace_store: FlameOn.Client.TraceStore.stats(),
      native: native(),
      continuous: continuous
    }
  end

  defp continuous_depth(%{depth: depth}) when depth > 7, do: 1
  defp continuous_depth(_not_running_or_default_depth), do: 0

  defp tail_depth, do: if(TailHold.stats().on, do: 1, else: 0)

  # Whether mode :native can run here (checked now, not cached: a sysctl
  # may have changed), its sampler's counters while it runs, and tail
  # tracing's hold and table (FlameOn.Client.Node.TailHold).
  defp native do
    case PerfSampler.availability() do
      :ok -> %{available: true, sampler: PerfSampler.stats(), tail: TailHold.stats()}
      {:error, why} -> %{available: false, reason: why}
    end
  end
end
