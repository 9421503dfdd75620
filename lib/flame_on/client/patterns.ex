defmodule FlameOn.Client.Patterns do
  @moduledoc """
  Owner of the node-global local call trace patterns.

  Call tracing needs a trace pattern on every function, and trace patterns
  are **global to the node**: `:erlang.trace_pattern/3` has no notion of a
  session. This server counts the sessions that need the patterns:

    * the first `acquire/1` sets the local call pattern on every loaded
      function (`{:_, :_, :_}`) and on modules loaded later (`:on_load`),
      with the match spec `[{:_, [], [{:message, {:caller}}]}]` so that call
      events carry their caller;
    * the last `release/0`, or the death of the last user (each user is
      monitored), clears them again with
      `:erlang.trace_pattern({:_, :_, :_}, false, [:local])`.

  When a user dies without releasing (a crashed or killed trace session),
  this server also turns the trace flags off on the process that session
  was tracing, if that process is still alive and still has the dead session
  (or no live tracer) as its tracer, so nothing of the trace is left behind.

  ## Cost for the whole node

  While at least one trace runs, **every process on the node pays the
  breakpoint cost** of the call patterns, traced or not: each local call
  checks the breakpoint before it finds that the process has no call trace
  flag. Measured on OTP 25 (`mix run bench/overhead.exs`) this made an
  untraced GenServer/`Enum`/`Map` workload 1.6x–1.8x slower and a tight
  recursive one 2.5x–5.7x slower. The patterns are
  therefore kept only while some trace is active. Setting and clearing them
  costs milliseconds on a small node and grows with the amount of loaded
  code.

  Clearing uses the `{:_, :_, :_}` wildcard, so it also removes local call
  patterns that another tool (`:dbg`, `:recon_trace`, ...) set on this node
  while a FlameOn trace was running.

  This process is started by `FlameOn.Client.Application`; trace sessions
  call it, user code normally does not.
  """

  use GenServer

  alias FlameOn.Client.TraceSession

  @match_spec [{:_, [], [{:message, {:caller}}]}]
  @call_timeout 60_000

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Registers the calling process as a user of the patterns, setting them if
  it is the first one. `tracee` is the process the caller traces (or `nil`):
  if the caller dies without `release/0`, that process's trace flags are
  cleared. Acquiring twice from one process counts once.
  """
  @spec acquire(pid() | nil) :: :ok
  def acquire(tracee \\ nil) when is_pid(tracee) or is_nil(tracee) do
    GenServer.call(__MODULE__, {:acquire, tracee}, @call_timeout)
  end

  @doc """
  Unregisters the calling process; the last user clears the patterns.
  Releasing without having acquired is a no-op.
  """
  @spec release() :: :ok
  def release, do: GenServer.call(__MODULE__, :release, @call_timeout)

  @doc "The number of processes currently holding the patterns."
  @spec users() :: non_neg_integer()
  def users, do: GenServer.call(__MODULE__, :users, @call_timeout)

  @impl GenServer
  def init(:ok) do
    Process.flag(:trap_exit, true)
    {:ok, %{users: %{}}}
  end

  @impl GenServer
  def handle_call({:acquire, tracee}, {pid, _tag}, %{users: users} = state) do
    if Map.has_key?(users, pid) do
      {:reply, :ok, state}
    else
      if users == %{}, do: set_patterns()
      ref = Process.monitor(pid)
      {:reply, :ok, %{state | users: Map.put(users, pid, {ref, tracee})}}
    end
  end

  def handle_call(:release, {pid, _tag}, %{users: users} = state) do
    case Map.pop(users, pid) do
      {nil, _} ->
        {:reply, :ok, state}

      {{ref, _tracee}, rest} ->
        Process.demonitor(ref, [:flush])
        {:reply, :ok, drop_user(state, rest)}
    end
  end

  def handle_call(:users, _from, state), do: {:reply, map_size(state.users), state}

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, %{users: users} = state) do
    case Map.pop(users, pid) do
      {{^ref, tracee}, rest} ->
        if tracee, do: TraceSession.untrace(tracee, pid)
        {:noreply, drop_user(state, rest)}

      _ ->
        {:noreply, state}
    end
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{users: users}) do
    if users != %{} do
      Enum.each(users, fn {pid, {_ref, tracee}} ->
        if tracee, do: TraceSession.untrace(tracee, pid)
      end)

      clear_patterns()
    end

    :ok
  end

  defp drop_user(state, rest) do
    if rest == %{}, do: clear_patterns()
    %{state | users: rest}
  end

  defp set_patterns do
    :erlang.trace_pattern(:on_load, @match_spec, [:local])
    :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
  end

  defp clear_patterns do
    :erlang.trace_pattern({:_, :_, :_}, false, [:local])
    :erlang.trace_pattern(:on_load, false, [:local])
  end
end
