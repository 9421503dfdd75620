defmodule FlameOn.Client.Application do
  @moduledoc false
  # Starts the node-global pattern owner, the supervisor of trace sessions
  # and the sample budget's table owner. `:rest_for_one` with `Patterns` first: if the pattern owner
  # dies, every session (whose patterns it counted) is stopped with it, and
  # on shutdown sessions stop before the patterns are released.
  use Application

  @impl Application
  def start(_type, _args) do
    children = [
      FlameOn.Client.Patterns,
      {DynamicSupervisor, name: FlameOn.Client.SessionSupervisor, strategy: :one_for_one},
      # last: if it restarts, nothing else has to (samplers outlive it)
      FlameOn.Client.SampleBudget
    ]

    Supervisor.start_link(children, strategy: :rest_for_one, name: FlameOn.Client.Supervisor)
  end

  # Called by the application master once the tree is gone, however it
  # went: stopped, or killed along with Patterns (whose terminate/2 then
  # never ran). Nothing of ours may stay set on a node without us.
  @impl Application
  def stop(_state) do
    FlameOn.Client.Sweep.run()
    :ok
  end
end
