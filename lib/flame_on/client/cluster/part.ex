defmodule FlameOn.Client.Cluster.Part do
  @moduledoc false
  # One node's part of a cross-node trace, on that node: the origin's
  # `FlameOn.Client.Cluster.arm/3` starts it over :erpc, `collect/2` takes
  # it back.
  #
  # It is a capture like the origin's, in the same mode (the mode module
  # does what it does there: watchers, node state): a
  # FlameOn.Client.Owners.CrossProcess in role :part holds a core session with the trace's seq_trace label and no root. A
  # request, plain message or spawn of the trace that arrives from another
  # node opens a span of its receiver (a REQUEST or WORK span without a
  # parent here, see GRAPH.md), and from there the trace is followed on
  # this node as on the origin (the send pattern, followers, work spans,
  # wake-ups), in the origin's mode (mode :sample: no call pattern here
  # either; each process that joins is sampled). The send pattern cannot
  # turn tracing on in a process of another node, so a process brought in
  # from another node gets its trace flags from the owner, when the core
  # says it joined: its first microseconds of work may be missed (more on
  # a loaded node; the part says how long after its span began each
  # process got its flags: `flag_lag_us`).
  #
  # It cleans up by itself: when the origin's trace owner goes (it
  # finished without collecting, crashed, or its node went away: a monitor
  # says so) and when the trace's lifetime is over, the owner stops;
  # Patterns (which monitors every cross-process trace) then gives tracing
  # back, and the last cross-process trace on this node turns every flag of
  # ours off.

  alias FlameOn.Client.{Options, Owners}
  alias FlameOn.Client.Capture.Mode

  @doc false
  # On the remote node: starts the part. `part` is `%{label:, origin:,
  # opts:, lifetime_ms:}`. `{:error, :not_running}` when the application
  # does not run here.
  @spec start(map()) :: {:ok, pid()} | {:error, term()}
  def start(%{opts: opts} = part) do
    if Process.whereis(FlameOn.Client.OwnerSupervisor) &&
         Process.whereis(FlameOn.Client.Node.Patterns) do
      Owners.CrossProcess.start(
        mode: Options.mode_module(opts.mode),
        opts: opts,
        part: Map.delete(part, :opts)
      )
    else
      {:error, :not_running}
    end
  end

  @doc false
  # On the remote node: stops the part's trace and returns its part of the
  # profile (see `FlameOn.Client.Cluster.Merge`), at most about `max_bytes`
  # in external format.
  @spec collect(pid(), pos_integer()) :: {:ok, map()} | {:error, term()}
  def collect(owner, max_bytes) do
    with {:ok, seen} <- Owners.CrossProcess.collect(owner) do
      {:ok, pack(seen, max_bytes)}
    end
  end

  # The part as it travels: the span graph, the stacks by pid, the
  # watchers' metrics and counters, how late each process got its flags,
  # the processes' names (FlameOn.Client.ProcessName, read here), and with
  # alloc: true the words its processes allocated.
  @spec pack(
          %{
            graph: FlameOn.Client.Graph.t(),
            stacks: map(),
            watched: Mode.watched(),
            flagged_at: map(),
            names: map(),
            alloc: map(),
            alloc_stats: map()
          },
          pos_integer()
        ) :: map()
  defp pack(%{graph: graph, watched: watched} = seen, max_bytes) do
    bound(
      %{
        node: node(),
        graph: %{graph | followers: []},
        stacks: seen.stacks,
        flag_lag_us: flag_lags(graph, seen.flagged_at),
        metrics: watched.metrics,
        sampled: watched.stats,
        names: seen.names,
        # alloc: true: the words of its processes by stack (a few entries
        # each: the stacks collections started in), kept whole
        alloc: seen.alloc,
        alloc_stats: seen.alloc_stats
      },
      max_bytes
    )
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
