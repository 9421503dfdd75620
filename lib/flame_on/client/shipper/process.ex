defmodule FlameOn.Client.Shipper.Process do
  @moduledoc """
  A `FlameOn.Client.Shipper` that sends each profile to a process as
  `{:flame_on_profile, profile}`.

      FlameOn.Client.Tracing.trace("work", &MyApp.work/0,
        shipper: {FlameOn.Client.Shipper.Process, pid: collector})

      receive do
        {:flame_on_profile, %FlameOn.Client.Profile{} = profile} -> profile
      end

  Options: `:pid` (required), a pid or a registered name. Returns
  `{:error, {:noproc, name}}` for a name that is not registered; sending to a
  dead pid succeeds, as `send/2` does.
  """

  @behaviour FlameOn.Client.Shipper

  @impl FlameOn.Client.Shipper
  @spec ship(FlameOn.Client.Profile.t(), keyword()) :: :ok | {:error, term()}
  def ship(profile, opts) do
    case Keyword.fetch(opts, :pid) do
      {:ok, pid} when is_pid(pid) ->
        send(pid, {:flame_on_profile, profile})
        :ok

      {:ok, name} when is_atom(name) ->
        case Process.whereis(name) do
          nil ->
            {:error, {:noproc, name}}

          pid ->
            send(pid, {:flame_on_profile, profile})
            :ok
        end

      {:ok, other} ->
        {:error, {:invalid_pid, other}}

      :error ->
        {:error, :pid_required}
    end
  end
end
