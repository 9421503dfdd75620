defmodule FlameOn.Client.Tracing.Start do
  @moduledoc false
  # start_trace/2, stop_trace/1 and the whole-node choice of processes
  # (see FlameOn.Client.Tracing for what they do): the options, the
  # target, and a FlameOn.Client.Owners.Trace that owns the trace.

  alias FlameOn.Client.{Options, Owners}
  alias FlameOn.Client.Tracing.Ref

  @spec start_trace(pid() | atom() | {:top, pos_integer()}, keyword()) ::
          {:ok, Ref.t()} | {:error, term()}
  def start_trace(target, opts \\ [])

  def start_trace({:top, n}, opts) do
    unless is_integer(n) and n > 0, do: Options.invalid!(:top, "a positive integer", n)
    config = Options.start_trace!(opts, :top)

    case top_processes(n, config.window_ms) do
      [] -> {:error, :no_processes}
      pids -> start(pids, {:pids, pids}, config)
    end
  end

  def start_trace(target, opts) do
    config = Options.start_trace!(opts)
    with {:ok, pid} <- resolve(target), do: start(pid, {:pid, pid}, config)
  end

  # ref_pid: the process, or the processes chosen, as the Ref shows them.
  defp start(ref_pid, target, config) do
    FlameOn.Client.Runtime.ensure_started!()

    owner_config = %{
      target: target,
      opts: config.capture,
      settings: config.settings,
      duration_ms: config.duration_ms,
      attach: :owner
    }

    with {:ok, owner, capture} <- Owners.Trace.start(owner_config) do
      {:ok, %Ref{controller: owner, pid: ref_pid, name: capture.opts.name}}
    end
  end

  @spec stop_trace(Ref.t()) :: {:ok, FlameOn.Client.Profile.t()} | {:error, term()}
  def stop_trace(%Ref{controller: owner}), do: Owners.Trace.finish(owner)

  @spec top_processes(pos_integer(), pos_integer()) :: [pid()]
  def top_processes(n, window_ms) do
    before = reductions()
    Process.sleep(window_ms)
    after_window = reductions()

    after_window
    |> Enum.flat_map(fn {pid, reds} ->
      case before do
        %{^pid => earlier} -> [{pid, reds - earlier}]
        _ -> [{pid, reds}]
      end
    end)
    |> Enum.reject(fn {pid, _} -> pid == self() or ours?(pid) end)
    |> Enum.sort_by(fn {_pid, delta} -> -delta end)
    |> Enum.take(n)
    |> Enum.map(&elem(&1, 0))
  end

  # No signal: reductions are read from the process structure.
  defp reductions do
    for pid <- Process.list(),
        {:reductions, reds} <- [Process.info(pid, :reductions)],
        into: %{},
        do: {pid, reds}
  end

  defp ours?(pid) do
    case Process.info(pid, :dictionary) do
      {:dictionary, dict} ->
        case dict[:"$initial_call"] do
          {module, _, _} -> String.starts_with?(Atom.to_string(module), "Elixir.FlameOn.Client.")
          _ -> false
        end

      nil ->
        true
    end
  end

  defp resolve(pid) when is_pid(pid), do: {:ok, pid}

  defp resolve(name) when is_atom(name) do
    case Process.whereis(name) do
      nil -> {:error, :noproc}
      pid -> {:ok, pid}
    end
  end

  defp resolve(other) do
    raise ArgumentError, "expected a pid or a registered name, got: #{inspect(other)}"
  end
end
