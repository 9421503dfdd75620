defmodule FlameOn.Client.Owners.Trace do
  @moduledoc false
  # Owns one start_trace/2 trace: the owner of its Tracer (so the
  # session keeps the profile if the traced process dies), the auto-stop
  # timer, the shipping, and the profile until stop_trace/1 asks for it.
  # Runs under FlameOn.Client.OwnerSupervisor. It monitors the process
  # that started the trace: once that one is gone and the trace finished,
  # nobody can ask for the profile, so it stops.

  use GenServer, restart: :temporary

  alias FlameOn.Client.Owners.Sampled
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Owners.Tracer

  @spec start(pid(), pid(), map()) :: {:ok, pid()} | {:error, term()}
  def start(caller, pid, config) do
    spec = {__MODULE__, {caller, pid, config}}

    # The session is started by the controller but outside its init/1:
    # both are children of the same supervisor, which is busy in init/1.
    with {:ok, controller} <-
           DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, spec) do
      case GenServer.call(controller, :attach, :infinity) do
        :ok -> {:ok, controller}
        {:error, _} = error -> error
      end
    end
  end

  @spec stop(pid()) :: {:ok, FlameOn.Client.Profile.t()} | {:error, term()}
  def stop(controller) do
    GenServer.call(controller, :stop, :infinity)
  catch
    :exit, {:noproc, _} -> {:error, :not_found}
    :exit, {:normal, _} -> {:error, :not_found}
    :exit, {reason, _} -> {:error, reason}
  end

  @doc false
  def start_link(arg), do: GenServer.start_link(__MODULE__, arg)

  @impl GenServer
  def init({caller, pid, config}) do
    {:ok,
     %{
       caller: caller,
       caller_ref: Process.monitor(caller),
       pid: pid,
       config: config,
       session: nil,
       session_ref: nil,
       tracee_ref: nil,
       timer: nil,
       result: nil
     }}
  end

  @impl GenServer
  def handle_call(:attach, _from, %{pid: pid, config: config} = state) do
    session_opts =
      [pid: pid, owner: self(), name: config.name, limits: config.limits] ++ config.sampler

    case session_module(config).start(session_opts) do
      {:ok, session} ->
        timer = config.duration_ms && Process.send_after(self(), :auto_stop, config.duration_ms)

        state = %{
          state
          | session: session,
            session_ref: Process.monitor(session),
            # a whole-node trace ends by time or stop_trace/1 only
            tracee_ref: if(is_pid(pid), do: Process.monitor(pid)),
            timer: timer
        }

        {:reply, :ok, state}

      {:error, reason} ->
        {:stop, :normal, {:error, reason}, state}
    end
  end

  def handle_call(:stop, _from, state) do
    state = finish(state)
    {:stop, :normal, state.result, state}
  end

  @impl GenServer
  def handle_info(:auto_stop, state), do: finished(finish(%{state | timer: nil}))

  # The traced process exited: its session finished on its own and keeps
  # the profile for us.
  def handle_info({:DOWN, ref, :process, _, _}, %{tracee_ref: ref} = state),
    do: finished(finish(state))

  def handle_info({:DOWN, ref, :process, _, reason}, %{session_ref: ref} = state) do
    finished(%{state | session: nil, session_ref: nil, result: {:error, {:session_down, reason}}})
  end

  # Nobody will ask for the profile: finish now, unless an auto-stop is
  # due, and stop once finished.
  def handle_info({:DOWN, ref, :process, _, _}, %{caller_ref: ref} = state) do
    state = %{state | caller: nil}

    if state.timer do
      {:noreply, state}
    else
      finished(finish(state))
    end
  end

  def handle_info(_msg, state), do: {:noreply, state}

  # Both take start/1 and finish/2 alike.
  defp session_module(%{mode: :sample}), do: Sampled
  defp session_module(_config), do: Tracer

  defp finished(%{caller: nil} = state), do: {:stop, :normal, state}
  defp finished(state), do: {:noreply, state}

  defp finish(%{session: nil} = state), do: state

  defp finish(state) do
    %{session: session, config: config} = state
    if state.timer, do: Process.cancel_timer(state.timer)
    if state.tracee_ref, do: Process.demonitor(state.tracee_ref, [:flush])
    Process.demonitor(state.session_ref, [:flush])

    result =
      case session_module(config).finish(session, timeout: config.timeout) do
        {:ok, profile} ->
          Tracing.maybe_ship(profile, config.settings)
          {:ok, profile}

        {:error, reason} ->
          {:error, reason}
      end

    %{state | session: nil, session_ref: nil, tracee_ref: nil, timer: nil, result: result}
  end
end
