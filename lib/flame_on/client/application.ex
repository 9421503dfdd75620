defmodule FlameOn.Client.Application do
  @moduledoc false
  # Starts the node-wide state's owners (call patterns and cross-process
  # tracing, backtrace_depth), the supervisor of the traces' owners, the
  # sample budget's table owner, capture_next's gates, and (apart) the
  # trace store and the web UIs' supervisor. `:rest_for_one` with
  # `Patterns` first: if the pattern owner dies, every trace's owner (whose
  # patterns it counted) is stopped with it, and on shutdown the owners
  # stop before the patterns are released.
  use Application

  @impl Application
  def start(_type, _args) do
    # trace/3's checked options, kept by the options given
    FlameOn.Client.Options.Cache.init()

    children = [
      # first, and apart: the recent traces and the web UIs outlive a
      # restart of the tracing processes below
      ui_supervisor(),
      FlameOn.Client.Node.Patterns,
      # the node's backtrace_depth while samplers run
      FlameOn.Client.Node.BacktraceDepth,
      # the CPU sampler of native traces (perf events), while any runs
      FlameOn.Client.Node.PerfSampler,
      # holds the CPU sampler while tail-based native traces run
      FlameOn.Client.Node.TailHold,
      {DynamicSupervisor, name: FlameOn.Client.OwnerSupervisor, strategy: :one_for_one},
      # if it restarts, nothing else has to (samplers outlive it)
      FlameOn.Client.Sampling.Budget,
      # capture_next's one-function patterns; restarted (and swept) with
      # the pattern owner
      FlameOn.Client.Node.Gates,
      # continuous profiling: started here when configured, by
      # FlameOn.Client.Continuous.start/1 otherwise; last, as it needs
      # the backtrace_depth owner
      %{
        id: FlameOn.Client.ContinuousSupervisor,
        type: :supervisor,
        start:
          {Supervisor, :start_link,
           [continuous(), [strategy: :one_for_one, name: FlameOn.Client.ContinuousSupervisor]]}
      }
    ]

    Supervisor.start_link(children, strategy: :rest_for_one, name: FlameOn.Client.Supervisor)
  end

  # `config :flame_on_client, continuous: [...]` (or `true`: the defaults)
  # starts continuous profiling.
  defp continuous do
    case Application.get_env(:flame_on_client, :continuous) do
      nil -> []
      false -> []
      true -> [{FlameOn.Client.Continuous, []}]
      opts when is_list(opts) -> [{FlameOn.Client.Continuous, opts}]
    end
  end

  defp ui_supervisor do
    children = [
      FlameOn.Client.TraceStore,
      {DynamicSupervisor, name: FlameOn.Client.Web.Supervisor, strategy: :one_for_one}
    ]

    %{
      id: FlameOn.Client.UISupervisor,
      type: :supervisor,
      start:
        {Supervisor, :start_link,
         [children, [strategy: :one_for_one, name: FlameOn.Client.UISupervisor]]}
    }
  end

  # Called by the application master once the tree is gone, however it
  # went: stopped, or killed along with Patterns (whose terminate/2 then
  # never ran). Nothing of ours may stay set on a node without us.
  @impl Application
  def stop(_state) do
    FlameOn.Client.Node.Sweep.run()
    :ok
  end
end
