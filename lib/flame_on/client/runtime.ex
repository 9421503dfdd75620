defmodule FlameOn.Client.Runtime do
  @moduledoc false
  # The node services every trace needs (the call patterns' owner, the
  # traces' owners' supervisor, capture_next's gates, the web UIs'
  # supervisor) are processes of the :flame_on_client application. Where
  # applications are not started (a release's `bin/app eval`, a script run
  # with `--no-start`) the entry points start it here, on demand, instead of
  # exiting with `no process` from a call deep inside.

  @app :flame_on_client

  @doc """
  `:ok` once the application runs: started here if it was not. Raises a
  `RuntimeError` saying what to do when it cannot be started.
  """
  @spec ensure_started!() :: :ok
  def ensure_started! do
    # The supervisor's name is a cheap check on every trace; the
    # application controller is asked only when it is missing.
    if Process.whereis(FlameOn.Client.Supervisor), do: :ok, else: start!()
  end

  defp start! do
    case Application.ensure_all_started(@app) do
      {:ok, _started} ->
        :ok

      {:error, reason} ->
        raise RuntimeError,
              "FlameOn: the :flame_on_client application is not running and could not be " <>
                "started (#{inspect(reason)}); its processes own every trace's node-wide " <>
                "state. Start it with Application.ensure_all_started(:flame_on_client) " <>
                "(in a release's `eval`, before the first trace), or list :flame_on_client " <>
                "among the release's applications"
    end
  end
end
