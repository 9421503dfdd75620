defmodule FlameOn.Client.Node.PerfSampler do
  @moduledoc false
  # The node's CPU sampler for native traces (mode :native): one Linux perf
  # event per scheduler thread, opened by the NIF while any native trace
  # runs and closed with the last one (FlameOn.Client.Core.Native's
  # perf_acquire/perf_release). Each holder is monitored, so a holder that
  # dies releases too; and this process holds the NIF's user, so if it
  # dies itself the NIF closes the events when the user is collected.
  #
  # `availability/0` says whether native sampling can run in this VM and,
  # when not, why and what to do, in words a user reads in the error
  # (FlameOn.Client.Capture.Native) and in `FlameOn.Client.status/0`.

  use GenServer

  alias FlameOn.Client.Core.Native

  @call_timeout 60_000

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Registers the calling process as a user of the sampler, which samples
  at the highest `frequency` (Hz) its users asked for (a user that leaves
  takes its frequency with it): `:ok`, or `{:error, reason}` (see
  `availability/0`). Acquiring twice from one process needs two releases
  (the process's frequency is the highest it asked for).
  """
  @spec acquire(pos_integer()) :: :ok | {:error, String.t()}
  def acquire(frequency) when is_integer(frequency) and frequency > 0,
    do: GenServer.call(__MODULE__, {:acquire, frequency}, @call_timeout)

  @doc "Ends one `acquire/1` of the calling process (nothing when it holds none)."
  @spec release() :: :ok
  def release, do: GenServer.call(__MODULE__, :release, @call_timeout)

  @doc "The sampler's counters (`FlameOn.Client.Core.Native.perf_stats/0`) and its users."
  @spec stats() :: map()
  def stats, do: GenServer.call(__MODULE__, :stats, @call_timeout)

  @doc """
  `availability/0 == :ok`, checked once per VM (what it depends on, the
  VM's flags and the kernel's settings, does not change while it runs).
  """
  @spec available?() :: boolean()
  def available? do
    case :persistent_term.get({__MODULE__, :available}, nil) do
      nil ->
        available = availability() == :ok
        :persistent_term.put({__MODULE__, :available}, available)
        available

      available ->
        available
    end
  end

  @doc """
  Whether native sampling can run in this VM: `:ok`, or `{:error, why}`
  where `why` says what is missing and how to get it.
  """
  @spec availability() :: :ok | {:error, String.t()}
  def availability do
    cond do
      :erlang.system_info(:emu_flavor) != :jit ->
        {:error,
         "this VM runs the BEAM interpreter, not the JIT (emu_flavor " <>
           "#{inspect(:erlang.system_info(:emu_flavor))}): native sampling names Erlang " <>
           "frames from the JIT's perf map; use an OTP 24+ build with the JIT (x86-64 or arm64)"}

      not Native.perf_map() ->
        {:error,
         "the VM was not started with +JPperf true, so its JIT keeps no frame pointers " <>
           "and writes no perf map (/tmp/perf-#{:os.getpid()}.map); start it with " <>
           "ERL_FLAGS=\"+JPperf true\" (a release: add +JPperf true to vm.args)"}

      true ->
        case Native.perf_probe() do
          :ok -> :ok
          {:error, reason, errno} -> {:error, probe_error(reason, errno)}
        end
    end
  end

  defp probe_error(:denied, errno) do
    "perf_event_open was refused (errno #{errno}): kernel.perf_event_paranoid is " <>
      "#{paranoid()}, or a container's seccomp profile blocks the call; allow a process to " <>
      "sample its own threads with sysctl kernel.perf_event_paranoid=2, or give the VM " <>
      "CAP_PERFMON (in a container also a seccomp profile that allows perf_event_open)"
  end

  defp probe_error(:no_support, errno),
    do: "this kernel has no software task-clock perf event (errno #{errno})"

  defp probe_error(reason, errno),
    do: "perf_event_open failed (#{reason}, errno #{errno})"

  defp paranoid do
    case File.read("/proc/sys/kernel/perf_event_paranoid") do
      {:ok, text} -> String.trim(text)
      {:error, _} -> "unknown"
    end
  end

  @impl GenServer
  def init(:ok) do
    Process.flag(:trap_exit, true)
    {:ok, %{users: %{}, handle: nil, helpers: [], frequency: nil}}
  end

  @impl GenServer
  def handle_call({:acquire, frequency}, {pid, _tag}, state) do
    case take(state, frequency) do
      {:ok, state} ->
        users =
          case state.users do
            %{^pid => {ref, n, hz}} -> Map.put(state.users, pid, {ref, n + 1, max(hz, frequency)})
            users -> Map.put(users, pid, {Process.monitor(pid), 1, frequency})
          end

        {:reply, :ok, retune(%{state | users: users})}

      {:error, _} = error ->
        {:reply, error, state}
    end
  end

  def handle_call(:release, {pid, _tag}, state), do: {:reply, :ok, drop(state, pid, 1)}

  def handle_call(:stats, _from, state) do
    {:reply, Map.put(Native.perf_stats(), :holders, map_size(state.users)), state}
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, state)
      when is_map_key(state.users, pid) and
             elem(:erlang.map_get(pid, state.users), 0) == ref do
    {:noreply, drop(state, pid, :all)}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{handle: handle, helpers: helpers}) do
    stop_helpers(helpers)
    if handle, do: Native.perf_release(handle)
    :ok
  end

  # The helpers, one per scheduler, bound to it, high priority: asked by
  # the tracer callback of the thread a traced process stopped on, the
  # helper of that thread runs before the process is scheduled again, and
  # reads the stack it stopped in (FlameOn.Client.Core.Native.cpu_context/5).
  defp start_helpers do
    for scheduler <- 1..:erlang.system_info(:schedulers_online) do
      spawn_link(fn -> help(scheduler) end)
    end
  end

  defp stop_helpers(helpers) do
    Enum.each(helpers, fn helper ->
      Native.cpu_helper_gone(helper)
      send(helper, :stop)
    end)
  end

  defp help(scheduler) do
    Process.flag(:priority, :high)
    :erlang.process_flag(:scheduler, scheduler)
    # moves to its scheduler at its next scheduling point
    :erlang.yield()
    :ok = Native.cpu_helper_here()
    help_loop(%{})
  end

  # `read`: how many stops of each traced process (by session) this
  # helper read while it was preempted there (read_stop?/3)
  defp help_loop(read) do
    receive do
      {:flame_on_context, session, pid, mfa} ->
        read =
          case read_stop?(pid, mfa, Map.get(read, {session, pid}, 0)) do
            false ->
              read

            how ->
              with [current_function: current, current_stacktrace: stack] <-
                     Process.info(pid, [:current_function, :current_stacktrace]),
                   do: context(session, pid, mfa, current, stack)

              if how == :preempted, do: count_read(read, {session, pid}), else: read
          end

        help_loop(read)

      :stop ->
        :ok
    end
  end

  # Where a process stops, the stack is read (:waited, :preempted) or not
  # (false). A wait is always read: its time hangs there. A stop it was
  # preempted at (runnable: it did not wait there) is read while the
  # process has had few such reads (@preempted_reads: before its first
  # samples its stack is known from nowhere else), and in the runtime's
  # own functions (a BIF that trapped: its C code before the stop goes
  # under the BIF's caller). Past that the samples around a preemption
  # place its slice: the read (a stack trace with its locations, made
  # while the process waits for its scheduler) made a 5 ms trace of code
  # not sampled before 1.10-1.15x slower, instead of 1.05-1.07x
  # (bench/RESULTS.md).
  @preempted_reads 4
  defp read_stop?(pid, {module, function, arity}, preempted_so_far) do
    case Process.info(pid, :status) do
      {:status, :runnable} ->
        if preempted_so_far < @preempted_reads or module in [:erlang, :erts_internal] or
             :erlang.is_builtin(module, function, arity),
           do: :preempted,
           else: false

      {:status, _} ->
        :waited

      nil ->
        false
    end
  end

  # a tail trace without flags (c_src/nif/sampling/fo_tail.h), asked every
  # few ms: read where it waits, not while it runs
  defp read_stop?(pid, :flagless, _so_far) do
    case Process.info(pid, :status) do
      {:status, :waiting} -> :waited
      _ -> false
    end
  end

  defp read_stop?(_pid, _mfa, _so_far), do: :waited

  # bounded: the counts start over past a few hundred traced processes
  defp count_read(read, key) when map_size(read) >= 512, do: %{key => 1}
  defp count_read(read, key), do: Map.update(read, key, 1, &(&1 + 1))

  defp context(session, pid, mfa, current, stack) do
    Native.cpu_context(session, pid, mfa, current, stack)
  rescue
    ArgumentError -> :ok
  end

  defp take(%{handle: nil} = state, frequency) do
    with :ok <- availability() do
      case Native.perf_acquire(frequency) do
        {:ok, handle} -> {:ok, %{state | handle: handle, helpers: start_helpers()}}
        {:error, reason, errno} -> {:error, probe_error(reason, errno)}
      end
    end
  end

  defp take(state, _frequency), do: {:ok, state}

  # The sampler runs at the highest frequency its users asked for: a
  # native trace at 499 Hz beside continuous profiling at 19 gets its 499,
  # and continuous profiling goes back to 19 when it ends (it thins what
  # it takes to its own rate, FlameOn.Client.Continuous).
  defp retune(%{handle: nil} = state), do: state
  defp retune(%{users: users} = state) when users == %{}, do: state

  defp retune(state) do
    wanted = state.users |> Map.values() |> Enum.map(&elem(&1, 2)) |> Enum.max()

    if wanted != state.frequency do
      :ok = Native.perf_frequency(wanted)
      %{state | frequency: wanted}
    else
      state
    end
  end

  defp drop(state, pid, how_many) do
    case Map.pop(state.users, pid) do
      {nil, _} ->
        state

      {{ref, n, hz}, rest} ->
        users =
          if how_many == :all or n <= how_many do
            Process.demonitor(ref, [:flush])
            rest
          else
            Map.put(rest, pid, {ref, n - how_many, hz})
          end

        if users == %{} and state.handle != nil do
          stop_helpers(state.helpers)
          Native.perf_release(state.handle)
          %{state | users: users, handle: nil, helpers: [], frequency: nil}
        else
          retune(%{state | users: users})
        end
    end
  end
end
