defmodule FlameOn.Client.Owners.Namer do
  @moduledoc false
  # Names the processes that join a cross-process trace
  # (FlameOn.Client.ProcessName) for the trace's owner
  # (FlameOn.Client.Owners.CrossProcess), which must not wait on them: a
  # read is a signal the process answers at its next signal check, which a
  # process spawned into the trace reaches only once it first runs, and a
  # busy one only at the end of its time slice (or of its work). A part's
  # owner flags the processes that join its node: it cannot wait that long.
  #
  # The owner hands it pids (name/2); it sends back
  # {:flame_on_named, pid, name} as it learns each name (the owner takes
  # the last still queued when it finishes: take/1). A process read before
  # it said what it is (its first read is served before its first
  # instruction) is read again at once, then after 1, 2, 4, ... ms, a few
  # times; what is known meanwhile ("Task") is sent too. It stops with
  # stop/1, or when the owner goes.
  #
  # With alloc: true it also reads each process's young heap as it joins
  # (Core.Native.graph_heap_level/3), so that its first collection in the
  # trace counts from there: the same kind of wait as a name's. Where the
  # send pattern leaves :garbage_collection out (trace sessions, see
  # MessagePatterns), it turns it on, in the trace's handle: a process's
  # flags are turned on at its next scheduling point, another wait the
  # owner must not have. The name is read first: a short-lived process
  # (a task of 30 ms) was gone by the time the flag was on (OTP 27, every
  # run of process_names_test's task).

  import Bitwise, only: [<<<: 2]

  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.ProcessName

  @tries 8

  @doc """
  Starts the namer of the calling process (the owner); `alloc_core`, the
  trace's core session with `alloc: true` (nil: none), gets the heap
  level of each process named. What it runs is
  loaded first: loaded on demand (a node in interactive mode), by a code
  server as busy as the traced work may be, the first reads came too late
  for short-lived processes.
  """
  @spec start(Native.session() | nil, TraceBackend.t() | nil) :: pid()
  def start(alloc_core \\ nil, gc_handle \\ nil) do
    {:module, _} = Code.ensure_loaded(ProcessName)
    _ = ProcessName.read(self())
    :proc_lib.spawn(__MODULE__, :init, [self(), {alloc_core, gc_handle}])
  end

  @doc "Names `pid` (once: a pid handed again is skipped)."
  @spec name(pid(), pid()) :: :ok
  def name(namer, pid) do
    send(namer, {:name, pid, 1})
    :ok
  end

  @doc """
  `names` (`pid => name`) with the names the namer sent that are still in
  the calling process's mailbox.
  """
  @spec take(map()) :: map()
  def take(names) do
    receive do
      {:flame_on_named, pid, name} -> take(Map.put(names, pid, name))
    after
      0 -> names
    end
  end

  @doc "Stops the namer; what it sent is in the mailbox (`take/1`)."
  @spec stop(pid()) :: :ok
  def stop(namer) do
    Process.exit(namer, :kill)
    :ok
  end

  @doc false
  def init(owner, cores) do
    ref = Process.monitor(owner)
    loop(owner, ref, cores, MapSet.new())
  end

  defp loop(owner, ref, {alloc_core, gc_handle} = cores, seen) do
    receive do
      {:DOWN, ^ref, :process, _, _} ->
        :ok

      {:name, pid, 1} ->
        unless MapSet.member?(seen, pid) do
          read(owner, pid, 1)
          collections(gc_handle, pid)
          heap_level(alloc_core, pid)
        end

        loop(owner, ref, cores, MapSet.put(seen, pid))

      {:name, pid, try} ->
        read(owner, pid, try)
        loop(owner, ref, cores, seen)
    end
  end

  # Only while it still follows the trace (the trace's flags on it): the
  # flag alone on a process that left would stay until the last
  # cross-process trace ends. Looked at again after: the process may have
  # left meanwhile (a follower that starts a trace of its own turns its
  # flags off, FlameOn.Client.Capture.Common.check_self/0).
  defp collections(nil, _pid), do: :ok

  defp collections(handle, pid) do
    # the trace's root has its own collection flags (its mode's), set as
    # the trace began
    if Native.graph_role(pid) != :root and following?(handle, pid) do
      TraceBackend.trace(handle, pid, true, [:garbage_collection])

      unless following?(handle, pid),
        do: TraceBackend.trace(handle, pid, false, [:garbage_collection])
    end

    :ok
  rescue
    # gone meanwhile
    ArgumentError -> :ok
  end

  defp following?(handle, pid), do: :send in TraceBackend.flags(handle, pid)

  defp heap_level(nil, _pid), do: :ok

  defp heap_level(core, pid) do
    for {^pid, words} <- Common.heap_levels([pid]).heap_levels,
        do: Native.graph_heap_level(core, pid, words)

    :ok
  rescue
    # the trace finished meanwhile
    ArgumentError -> :ok
  end

  defp read(owner, pid, try) do
    case ProcessName.lookup(pid) do
      {:ok, name} ->
        send(owner, {:flame_on_named, pid, name})

      {:early, so_far} ->
        if so_far, do: send(owner, {:flame_on_named, pid, so_far})
        again(pid, try)

      :gone ->
        :ok
    end
  end

  defp again(_pid, try) when try >= @tries, do: :ok
  defp again(pid, 1), do: send(self(), {:name, pid, 2})

  defp again(pid, try),
    do: Process.send_after(self(), {:name, pid, try + 1}, 1 <<< (try - 2))
end
