defmodule FlameOn.Client.Web.Captures do
  @moduledoc false
  # The captures a web UI started from its form, as its router asks for
  # them: calls to the UI's FlameOn.Client.Web.Server, which holds them.

  @doc """
  Starts capturing the next call of `mfa` with capture_next `opts`.
  `{:ok, id}`, or `{:error, reason}`: `:too_many_captures`,
  `{:already_waiting, pid}`.
  """
  @spec start_capture(pid(), mfa(), keyword()) :: {:ok, String.t()} | {:error, term()}
  def start_capture(server, mfa, opts), do: GenServer.call(server, {:start_capture, mfa, opts})

  @doc "A capture's state: `{:ok, capture}` or `:error`."
  @spec capture(pid(), String.t()) :: {:ok, map()} | :error
  def capture(server, id), do: GenServer.call(server, {:capture, id})

  @doc "The captures still waiting, oldest first."
  @spec waiting(pid()) :: [map()]
  def waiting(server), do: GenServer.call(server, :waiting)

  @doc "Cancels a waiting capture (its runner is stopped; the pattern owner cleans up)."
  @spec cancel(pid(), String.t()) :: :ok | :error
  def cancel(server, id), do: GenServer.call(server, {:cancel, id})
end
