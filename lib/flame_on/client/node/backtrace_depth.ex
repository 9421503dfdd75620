defmodule FlameOn.Client.Node.BacktraceDepth do
  @moduledoc false
  # The node-wide `backtrace_depth` flag, which caps
  # `Process.info(pid, :current_stacktrace)` (default 8), raised while
  # stack samplers run: to the largest depth any holder asked for, and put
  # back by the last one to release it, or to die (each holder is
  # monitored). The value found first is kept in the application
  # environment (FlameOn.Client.Node.Sweep), so a sweep after a crash
  # restores it too.

  use GenServer

  @call_timeout 60_000

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Registers the calling process as needing stacks `depth` frames deep;
  acquiring twice from one process counts once (the larger depth).
  """
  @spec acquire(pos_integer()) :: :ok
  def acquire(depth) when is_integer(depth) and depth > 0,
    do: GenServer.call(__MODULE__, {:acquire, depth}, @call_timeout)

  @doc "Ends the calling process's `acquire/1` (nothing when it holds none)."
  @spec release() :: :ok
  def release, do: GenServer.call(__MODULE__, :release, @call_timeout)

  # Stacks the CPU-sampled modes' helper reads with process_info (mode
  # :native, the tail hold): as deep as the CPU samples' (the kernel's
  # 127 frames) would cost more than they tell.
  @cpu_sampled 64
  # Where the node's backtrace_depth is kept while samplers raised it
  # (FlameOn.Client.Node.Sweep puts it back after an owner died).
  @saved_depth_key {__MODULE__, :saved_backtrace_depth}

  @doc "The depth mode :native and the tail hold acquire (their helper's stacks)."
  @spec cpu_sampled() :: pos_integer()
  def cpu_sampled, do: @cpu_sampled

  @doc """
  Sets the node's `backtrace_depth` to `depth` for samplers, remembering the
  value found first where a sweep finds it even after its owner died (a
  persistent term: unlike the application environment, writing it does not
  wait on the application controller, which a process stopping with the
  application must not do).
  """
  @spec raise_to(pos_integer()) :: :ok
  def raise_to(depth) do
    old = :erlang.system_flag(:backtrace_depth, depth)

    if :persistent_term.get(@saved_depth_key, nil) == nil,
      do: :persistent_term.put(@saved_depth_key, old)

    :ok
  end

  @doc "Puts back the `backtrace_depth` saved by `raise_to/1`; whether it did."
  @spec restore_saved() :: boolean()
  def restore_saved do
    case :persistent_term.get(@saved_depth_key, nil) do
      nil ->
        false

      depth ->
        :erlang.system_flag(:backtrace_depth, depth)
        :persistent_term.erase(@saved_depth_key)
        true
    end
  end

  @doc "The number of processes holding a raised `backtrace_depth`."
  @spec users() :: non_neg_integer()
  def users, do: GenServer.call(__MODULE__, :users, @call_timeout)

  @impl GenServer
  def init(:ok) do
    Process.flag(:trap_exit, true)
    {:ok, %{}}
  end

  @impl GenServer
  def handle_call({:acquire, depth}, {pid, _tag}, users) do
    wanted = Enum.reduce(users, depth, fn {_pid, {_ref, d}}, acc -> max(d, acc) end)
    raise_to(wanted)

    users =
      case users do
        %{^pid => {ref, held}} -> Map.put(users, pid, {ref, max(depth, held)})
        _ -> Map.put(users, pid, {Process.monitor(pid), depth})
      end

    {:reply, :ok, users}
  end

  def handle_call(:release, {pid, _tag}, users), do: {:reply, :ok, drop(users, pid, true)}
  def handle_call(:users, _from, users), do: {:reply, map_size(users), users}

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, users)
      when is_map_key(users, pid) and elem(:erlang.map_get(pid, users), 0) == ref do
    {:noreply, drop(users, pid, false)}
  end

  def handle_info(_msg, users), do: {:noreply, users}

  @impl GenServer
  def terminate(_reason, users) do
    if users != %{}, do: restore_saved()
    :ok
  end

  defp drop(users, pid, demonitor?) do
    case Map.pop(users, pid) do
      {nil, _} ->
        users

      {{ref, _depth}, rest} ->
        if demonitor?, do: Process.demonitor(ref, [:flush])
        if rest == %{}, do: restore_saved()
        rest
    end
  end
end
