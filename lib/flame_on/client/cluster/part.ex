defmodule FlameOn.Client.Cluster.Part do
  @moduledoc false
  # One node's part of a cross-node graph trace, on that node (started by
  # the origin's `FlameOn.Client.Cluster.arm/2` over :erpc).
  #
  # It holds a graph session with the trace's seq_trace label and no root:
  # a request, plain message or spawn of the trace that arrives from another
  # node opens a span of its receiver (a REQUEST or WORK span without a
  # parent here, see GRAPH.md), and
  # from there the trace is followed on this node as on the origin (the send
  # pattern, followers, work spans, wake-ups). The send pattern cannot turn
  # tracing on in a process of another node, so a process brought in from
  # another node gets its trace flags here, when the NIF says it joined
  # ({:flame_on_callee, pid}): its first microseconds of work may be missed
  # (more on a loaded node; the part says how long after its span began
  # each process got its flags: `flag_lag_us`).
  #
  # In mode :sample it sets no call pattern on its node either: each
  # process that joins is sampled (a FlameOn.Client.Sampling.Sampler per process, as
  # the origin does for its callees) and the node's backtrace_depth is
  # raised while the part runs.
  #
  # It cleans up by itself: when the origin's trace owner goes (it finished
  # without collecting, crashed, or its node went away: a monitor says so)
  # and when the trace's lifetime is over, it stops; `Patterns` (which
  # monitors every graph user) then gives graph tracing back, and the last
  # graph trace on this node turns every flag of ours off.

  use GenServer, restart: :temporary

  alias FlameOn.Client.Graph
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Owners.CrossProcess

  @doc false
  # On the remote node: starts the part under the session supervisor.
  # `{:error, :not_running}` when the application does not run here.
  @spec start(map()) :: {:ok, pid()} | {:error, term()}
  def start(opts) do
    if Process.whereis(FlameOn.Client.OwnerSupervisor) &&
         Process.whereis(FlameOn.Client.Node.Patterns) do
      DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, {__MODULE__, opts})
    else
      {:error, :not_running}
    end
  end

  @doc false
  @spec start_link(map()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc false
  # On the remote node: stops the part's trace and returns its part of
  # the profile (see `FlameOn.Client.Cluster.Merge`), at most about
  # `max_bytes` in external format.
  @spec collect(pid(), pos_integer()) :: {:ok, map()} | {:error, term()}
  def collect(part, max_bytes) do
    GenServer.call(part, {:collect, max_bytes}, 30_000)
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    # A process brought in from another node runs untraced until this part
    # turns its flags on: on a busy node that must not wait in the queue
    # (each message here is handled in microseconds).
    Process.flag(:priority, :high)
    native_per_second = System.convert_time_unit(1, :second, :native)
    limits = Map.merge(opts.limits, %{label: opts.label, native_per_second: native_per_second})

    with {:ok, native} <- new_native(limits),
         :ok <- Native.graph_start(native, self()),
         :ok <- Native.graph_owner(native, self(), opts.follow == :messages),
         :ok <- Native.graph_watch_callees(native, self()),
         {:ok, handle} <- acquire(native, opts) do
      Process.send_after(self(), :lifetime, opts.lifetime_ms)
      mode = Map.get(opts, :mode, :nif)
      sampler_opts = Map.get(opts, :sampler) || []

      if mode == :sample do
        :ok = Patterns.acquire_depth(sampler_opts[:depth] || 64)
        # what a sampler runs, loaded now: a node in interactive mode loads
        # modules on first use, and the first process of the trace here
        # must not wait for the code server to be sampled
        Enum.each([Sampler, FlameOn.Client.Sampling.Budget, :rand], &Code.ensure_loaded/1)
      end

      {:ok,
       %{
         native: native,
         handle: handle,
         label: opts.label,
         follow: opts.follow,
         names: opts.names,
         origin_ref: Process.monitor(opts.origin),
         flagged: MapSet.new(),
         # when each process got its flags here (µs, this node's clock)
         flagged_at: %{},
         mode: mode,
         sampler_opts: Keyword.delete(sampler_opts, :root),
         # mode :sample: a sampler per process that joined, by pid
         samplers: %{}
       }}
    else
      {:error, reason} -> {:stop, reason}
    end
  end

  defp new_native(limits) do
    {:ok, Native.new(limits)}
  rescue
    ArgumentError -> {:error, {:invalid_limits, limits}}
  end

  defp acquire(native, opts) do
    patterns? = Map.get(opts, :mode, :nif) != :sample

    case Patterns.acquire_graph(native, nil, opts.label,
           follow: opts.follow,
           call_patterns: patterns?
         ) do
      {:ok, handle} ->
        {:ok, handle}

      {:error, _} = error ->
        Native.stop(native)
        error
    end
  end

  @impl GenServer
  def handle_call({:collect, max_bytes}, _from, state) do
    Native.stop(state.native)
    sampled = stop_samplers(state)
    {raw, stats, graph} = Native.finish(state.native, :stop)
    graph = Graph.build(graph, state.label)
    stacks = Profile.build(raw, stats, [], state.names).stacks
    CrossProcess.unfollow(Enum.uniq(graph.followers ++ MapSet.to_list(state.flagged)), state)
    Patterns.release_graph()
    lags = flag_lags(graph, state.flagged_at)

    part =
      bound(
        %{
          node: node(),
          graph: %{graph | followers: []},
          stacks: stacks,
          flag_lag_us: lags,
          metrics: sampled.metrics,
          sampled: sampled.stats
        },
        max_bytes
      )

    {:stop, :normal, {:ok, part}, %{state | native: nil}}
  end

  @impl GenServer
  # A process of this node took a request of the trace from another node
  # (or joined otherwise): it follows the trace with the flags the send
  # pattern would have given it.
  def handle_info({:flame_on_callee, pid}, %{native: native} = state) when native != nil do
    state =
      case TraceBackend.tracer(state.handle, pid) do
        {:ok, []} ->
          flag(pid, state)
          flagged_at = System.monotonic_time(:microsecond)

          %{
            state
            | flagged: MapSet.put(state.flagged, pid),
              flagged_at: Map.put_new(state.flagged_at, pid, flagged_at)
          }

        _ours_or_gone ->
          state
      end

    {:noreply, sample(pid, state)}
  end

  def handle_info({:flame_on_left, pid}, state) do
    CrossProcess.unfollow([pid], state)
    {:noreply, %{state | flagged: MapSet.delete(state.flagged, pid)}}
  end

  def handle_info({:DOWN, ref, :process, _origin, _reason}, %{origin_ref: ref} = state) do
    {:stop, :normal, state}
  end

  def handle_info(:lifetime, state), do: {:stop, :normal, state}
  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{native: nil}), do: :ok

  def terminate(_reason, state) do
    # The origin is gone or the lifetime is over: nothing of the trace is
    # kept. Patterns gives graph tracing back when it sees us go.
    Native.stop(state.native)
    CrossProcess.unfollow(MapSet.to_list(state.flagged), state)
    :ok
  end

  # mode :sample: the process is sampled while it works for the trace (its
  # sampler idles between the trace's requests and is woken here).
  defp sample(_pid, %{mode: mode} = state) when mode != :sample, do: state

  defp sample(pid, state) do
    samplers = Sampler.sample_callee(state.samplers, state.native, pid, state.sampler_opts)
    %{state | samplers: samplers}
  end

  defp stop_samplers(%{samplers: samplers, mode: mode}) do
    sampled = Sampler.stop_all(samplers)
    if mode == :sample, do: Patterns.release_depth()
    sampled
  end

  defp flag(pid, %{handle: handle, follow: follow}) do
    TraceBackend.trace(handle, pid, true, Patterns.follower_flags(follow))
  rescue
    ArgumentError -> 0
  end

  # How long after its first span here began each process got its flags
  # (µs, never negative): at most that much of the span's start is missing
  # from its stacks. Span times are this node's monotonic µs, as ours.
  defp flag_lags(graph, flagged_at) do
    starts =
      Enum.reduce(graph.spans, %{}, fn span, acc ->
        Map.update(acc, span.pid, span.started_at, &min(&1, span.started_at))
      end)

    for {pid, at} <- flagged_at, Map.has_key?(starts, pid), into: %{} do
      {pid, max(at - starts[pid], 0)}
    end
  end

  # The part, at most max_bytes in external format: past it, stack entries
  # go, the smallest first (spans and edges stay: they are what links the
  # nodes), and the part says how many went.
  defp bound(part, max_bytes) do
    size = :erlang.external_size(part)

    cond do
      size <= max_bytes ->
        part
        |> Map.merge(%{bytes: size, truncated_stacks: 0})
        |> Map.put_new(:truncated_metrics, 0)

      # mode :sample: the metrics series go first (one entry per sample)
      part.metrics != %{} ->
        dropped = part.metrics |> Map.values() |> Enum.map(&length/1) |> Enum.sum()
        bound(%{part | metrics: %{}} |> Map.put(:truncated_metrics, dropped), max_bytes)

      true ->
        truncate_stacks(part, size, max_bytes)
    end
  end

  defp truncate_stacks(part, size, max_bytes) do
    entries = for {pid, stacks} <- part.stacks, {stack, us} <- stacks, do: {us, pid, stack}

    # about what each entry costs, from the whole
    stacks_size = :erlang.external_size(part.stacks)
    room = max(max_bytes - (size - stacks_size), 0)
    per_entry = max(div(stacks_size, max(length(entries), 1)), 1)
    keep = div(room, per_entry)
    kept = entries |> Enum.sort(:desc) |> Enum.take(keep)

    stacks =
      Enum.reduce(kept, %{}, fn {us, pid, stack}, acc ->
        Map.update(acc, pid, [{stack, us}], &[{stack, us} | &1])
      end)
      |> Map.new(fn {pid, list} -> {pid, Enum.sort(list)} end)

    part = %{part | stacks: stacks}

    Map.merge(part, %{
      bytes: :erlang.external_size(part),
      truncated_stacks: length(entries) - length(kept)
    })
  end
end
