defmodule FlameOn.Client.Owners.Trace do
  @moduledoc false
  # The process that owns one trace of **other** processes: a
  # start_trace/2 trace (a process, or the busiest ones of the node), or
  # the trace a telemetry :start begins in the process that emitted it. It
  # opens the capture (FlameOn.Client.Capture: it holds what the capture
  # takes of the node), traces the processes (start_trace/2) or hands the
  # flags to the process that traces itself (telemetry), stops it after
  # `:duration_ms`, when the traced process exits or when asked, ships the
  # profile, and keeps it until `finish/2` asks for it. Runs under
  # FlameOn.Client.OwnerSupervisor, trapping exits: killed or shut down
  # mid-trace, it gives everything back first (Capture.abort/1).
  #
  # It monitors the process that started the trace: once that one is gone
  # and the trace finished, nobody can ask for the profile, so it stops.

  use GenServer, restart: :temporary

  require Logger

  alias FlameOn.Client.{Capture, Profile, TraceStore}

  @typedoc """
  What to trace: `target` (`{:pid, pid}` or `{:pids, pids}`), `opts` (the
  validated capture options), `settings` (threshold and shippers),
  `duration_ms` (nil: until asked) and `attach` (`:owner`: this process
  traces the targets; `:tracee`: the one target sets its flags itself,
  with `attached/1`).
  """
  @type config :: %{
          target: {:pid, pid()} | {:pids, [pid()]},
          opts: map(),
          settings: map(),
          duration_ms: pos_integer() | nil,
          attach: :owner | :tracee
        }

  @doc """
  Starts the owner and the trace. `{:ok, owner, capture}` (for `attach:
  :tracee`, the caller sets `capture.flags` on itself and calls
  `Capture.stop/1` when its work is done), or `{:error, reason}`.
  """
  @spec start(config()) :: {:ok, pid(), Capture.t()} | {:error, term()}
  def start(config) do
    spec = {__MODULE__, {self(), config}}

    # The trace starts outside init/1: a mode :process trace starts its
    # tracer under the same supervisor, which is busy in init/1.
    with {:ok, owner} <- DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, spec) do
      case GenServer.call(owner, :open, :infinity) do
        {:ok, capture} -> {:ok, owner, capture}
        {:error, _} = error -> error
      end
    end
  end

  @doc """
  Stops the trace (unless it finished already) and returns its profile:
  `end_ts` is when the traced work ended (nil: now). `{:error,
  :not_found}` once the owner is gone.
  """
  @spec finish(pid(), integer() | nil) :: {:ok, Profile.t()} | {:error, term()}
  def finish(owner, end_ts \\ nil) do
    GenServer.call(owner, {:finish, end_ts}, :infinity)
  catch
    :exit, {:noproc, _} -> {:error, :not_found}
    :exit, {:normal, _} -> {:error, :not_found}
    :exit, {reason, _} -> {:error, reason}
  end

  @doc false
  def start_link(arg), do: GenServer.start_link(__MODULE__, arg)

  @impl GenServer
  def init({caller, config}) do
    Process.flag(:trap_exit, true)

    {:ok,
     %{
       caller: caller,
       caller_ref: Process.monitor(caller),
       config: config,
       capture: nil,
       started_ts: nil,
       tracee_ref: nil,
       timer: nil,
       result: nil
     }}
  end

  @impl GenServer
  def handle_call(:open, _from, %{config: config} = state) do
    with {:ok, capture} <- Capture.open(config.target, config.opts),
         {:ok, capture} <- attach(capture, config) do
      timer = config.duration_ms && Process.send_after(self(), :auto_stop, config.duration_ms)

      state = %{
        state
        | capture: capture,
          started_ts: :erlang.monotonic_time(),
          # a whole-node trace ends by time or when asked only
          tracee_ref: tracee_ref(config.target),
          timer: timer
      }

      {:reply, {:ok, capture}, state}
    else
      {:error, reason} -> {:stop, :normal, {:error, reason}, state}
    end
  end

  def handle_call({:finish, end_ts}, _from, state) do
    state = finish_trace(state, end_ts)
    {:stop, :normal, state.result, state}
  end

  # The flags go on the processes here (start_trace/2), or the process
  # sets them on itself (telemetry); either way its watchers start here.
  defp attach(capture, %{attach: :tracee, target: {:pid, pid}}),
    do: {:ok, Capture.begin(capture, pid)}

  defp attach(capture, %{target: target}) do
    pids =
      case target do
        {:pid, pid} -> [pid]
        {:pids, pids} -> pids
      end

    case Enum.reduce(pids, capture, &attach_one/2) do
      %{pids: []} = capture ->
        # all of them exited in between
        Capture.abort(capture)
        {:error, :noproc}

      capture ->
        {:ok, capture}
    end
  end

  # A process that exited in between is skipped, as one that could not be
  # traced.
  defp attach_one(pid, capture) do
    case Capture.attach(capture, pid) do
      {:ok, capture} -> capture
      :error -> %{capture | skipped: capture.skipped + 1}
    end
  end

  defp tracee_ref({:pid, pid}), do: Process.monitor(pid)
  defp tracee_ref(_target), do: nil

  @impl GenServer
  def handle_info(:auto_stop, state) do
    if state.config.attach == :tracee do
      Logger.warning(
        "FlameOn: the trace of #{inspect(state.capture && hd(state.capture.pids))} ran " <>
          "#{state.config.duration_ms} ms without its :stop event; finishing it"
      )
    end

    finished(finish_trace(%{state | timer: nil}, nil))
  end

  # The traced process exited: nothing more to trace.
  def handle_info({:DOWN, ref, :process, _, _}, %{tracee_ref: ref} = state),
    do: finished(finish_trace(state, nil))

  # Nobody will ask for the profile: finish now, unless an auto-stop is
  # due, and stop once finished.
  def handle_info({:DOWN, ref, :process, _, _}, %{caller_ref: ref} = state) do
    state = %{state | caller: nil}

    if state.timer && state.config.attach == :owner,
      do: {:noreply, state},
      else: finished(finish_trace(state, nil))
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{capture: capture}) when capture != nil, do: Capture.abort(capture)
  def terminate(_reason, _state), do: :ok

  # Finished: a trace of the process itself (telemetry) ends here, its
  # :stop finds it gone; one of other processes waits for stop_trace/1
  # while its caller lives.
  defp finished(%{caller: nil} = state), do: {:stop, :normal, state}
  defp finished(%{config: %{attach: :tracee}} = state), do: {:stop, :normal, state}
  defp finished(state), do: {:noreply, state}

  defp finish_trace(%{capture: nil} = state, _end_ts), do: state

  defp finish_trace(%{capture: capture, config: config} = state, end_ts) do
    if state.timer, do: Process.cancel_timer(state.timer)
    if state.tracee_ref, do: Process.demonitor(state.tracee_ref, [:flush])
    # A process that traces itself stopped its capture where its work
    # ended (end_ts); here it only stops when it did not.
    stopped_ts = if end_ts, do: end_ts, else: Capture.stop(capture)
    Capture.detach(capture)

    result =
      with {:ok, profile} <- Capture.finish(capture, state.started_ts, stopped_ts) do
        TraceStore.keep(profile, config.settings)
        {:ok, profile}
      end

    %{state | capture: nil, tracee_ref: nil, timer: nil, result: result}
  end
end
