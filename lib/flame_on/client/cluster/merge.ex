defmodule FlameOn.Client.Cluster.Merge do
  @moduledoc false
  # Merges the parts of a cross-node trace into the origin's profile.
  #
  # A part (`FlameOn.Client.Cluster.Part`) is that node's span graph (times
  # on its own monotonic clock, µs) and its stacks, plus the clock offset
  # the origin measured. Merging:
  #
  #   * moves the part's times to the origin's clock (minus the offset);
  #   * joins each call, message or spawn across nodes: the sender's node
  #     has a :remote span for it (the send to the reply or answer), the
  #     receiver's node a request or work span without a parent, both with
  #     the same `wire` key. The receiver's span takes the :remote span's
  #     place (its parent, its edges); the wait the :remote span explained
  #     stays explained only where the receiver's span ran (an edge keeps
  #     its overlap with it; the rest becomes the waiter's unattributed
  #     :process wait);
  #   * numbers the spans again, parents before children (the origin's root
  #     is 0), and rebuilds every children list;
  #   * keys the part's stacks by their (remote) pids beside the origin's
  #     (the profile's `tree` then goes: exporters rebuild it from `stacks`),
  #     and its process names (read there) beside the origin's.
  #
  # A :remote span no part answered stays: the time the sender waited for
  # a node whose part is missing.
  #
  # Stats: the parts' counters add to the origin's; `joined_remote_calls`
  # and `joined_remote_work` count the joins (requests; messages and
  # spawns); `flag_lag_us` (per process), `late_flags` and `late_flag_us`
  # say how late the parts flagged the processes that joined there.

  alias FlameOn.Client.Graph.Edge
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Graph.Span

  # A process that got its flags this long after its span began was flagged
  # late: its stacks miss the start of its work (a loaded node).
  @late_flag_us 1_000

  @spec merge(Profile.t(), [{node(), {:ok, map()} | {:error, term()}}], [{node(), term()}]) ::
          Profile.t()
  def merge(%Profile{graph: %Graph{} = graph} = profile, collected, unreachable) do
    parts = for {node, {:ok, part}} <- collected, do: {node, part}
    lost = for {node, {:error, reason}} <- collected, do: {node, reason}

    # every span and edge under a key unique across parts: {source, id}
    {spans, edges} =
      Enum.reduce(
        parts,
        {keyed_spans(:origin, graph.spans, 0), keyed_edges(:origin, graph.edges, 0)},
        fn
          {node, part}, {spans, edges} ->
            shift = part.clock_offset_us

            {spans ++ keyed_spans(node, part.graph.spans, shift),
             edges ++ keyed_edges(node, part.graph.edges, shift)}
        end
      )

    {spans, edges, joined} = join(spans, edges)
    {spans, edges} = renumber(spans, edges)

    stacks =
      Enum.reduce(parts, profile.stacks, fn {_node, part}, acc -> Map.merge(acc, part.stacks) end)

    lags = Enum.reduce(parts, %{}, fn {_node, part}, acc -> Map.merge(acc, flag_lags(part)) end)

    stats =
      graph.stats
      |> add_counters(Enum.map(parts, fn {_node, part} -> part.graph.stats end))
      |> Map.merge(%{
        unreachable_nodes: unreachable,
        lost_parts: length(lost),
        lost_nodes: lost,
        joined_remote_calls: Enum.count(joined, &(&1.kind == :request)),
        joined_remote_work: Enum.count(joined, &(&1.kind == :work)),
        truncated_stack_entries: Enum.sum(Enum.map(parts, fn {_, p} -> p.truncated_stacks end)),
        flag_lag_us: lags,
        late_flags: Enum.count(lags, fn {_pid, us} -> us >= @late_flag_us end),
        late_flag_us: lags |> Map.values() |> Enum.filter(&(&1 >= @late_flag_us)) |> Enum.sum(),
        nodes: Map.new(parts, fn {node, part} -> {node, node_stats(part)} end)
      })

    # mode :sample: the series of the processes sampled there
    metrics =
      Enum.reduce(parts, profile.metrics, fn {_node, part}, acc ->
        Map.merge(acc, Map.get(part, :metrics, %{}))
      end)

    # parts from a node running an older version name none
    process_names =
      Enum.reduce(parts, profile.process_names, fn {_node, part}, acc ->
        Map.merge(acc, Map.get(part, :names, %{}))
      end)

    %{
      profile
      | stacks: stacks,
        metrics: metrics,
        process_names: process_names,
        tree: tree(profile, parts),
        graph: %{graph | spans: spans, edges: edges, stats: stats}
    }
    |> merge_alloc(parts)
  end

  def merge(profile, _collected, _unreachable), do: profile

  # The exporters walk the profile's tree: with the parts' stacks in
  # `stacks`, it is rebuilt from them (`Profile.Tree.of/1`), at the cost of
  # the origin's stacks without text (`stats.stacks_without_text`).
  defp tree(profile, parts) do
    if Enum.any?(parts, fn {_node, part} -> part.stacks != %{} end),
      do: nil,
      else: profile.tree
  end

  # alloc: true: the parts' processes' words beside the origin's, and
  # their totals added to the origin's (parts from a node running an older
  # version have none); the allocation tree is rebuilt from `alloc`
  # (`Profile.alloc_view/1`), as the time tree is from `stacks`.
  defp merge_alloc(%Profile{stats: %{alloc_words: _}} = profile, parts) do
    remote = for {_node, part} <- parts, Map.get(part, :alloc, %{}) != %{}, do: part

    if remote == [] do
      profile
    else
      alloc = Enum.reduce(remote, profile.alloc, &Map.merge(&2, &1.alloc))

      stats =
        Enum.reduce(remote, profile.stats, fn part, acc ->
          Map.merge(acc, Map.get(part, :alloc_stats, %{}), fn _key, a, b -> a + b end)
        end)

      %{profile | alloc: alloc, alloc_tree: nil, stats: stats}
    end
  end

  defp merge_alloc(profile, _parts), do: profile

  # parts from a node running an older version have no lags
  defp flag_lags(part), do: Map.get(part, :flag_lag_us, %{})

  defp node_stats(part) do
    lags = Map.values(flag_lags(part))

    %{
      flagged: length(lags),
      late_flags: Enum.count(lags, &(&1 >= @late_flag_us)),
      clock_offset_us: part.clock_offset_us,
      clock_uncertainty_us: part.clock_uncertainty_us,
      spans: length(part.graph.spans),
      processes: map_size(part.stacks),
      bytes: part.bytes,
      truncated_stack_entries: part.truncated_stacks,
      # mode :sample: its samplers' counters (FlameOn.Client.Sampling.Results.summarize/1)
      # and the metric entries left out to fit
      sampling: Map.get(part, :sampled, %{}),
      truncated_metric_entries: Map.get(part, :truncated_metrics, 0)
    }
  end

  # The parts' counters add to the origin's (a part's stats are those of
  # the same NIF graph); other values stay the origin's.
  defp add_counters(stats, others) do
    Enum.reduce(others, stats, fn other, acc ->
      Enum.reduce(other, acc, fn
        {key, n}, acc when is_integer(n) ->
          Map.update(acc, key, n, &if(is_integer(&1), do: &1 + n, else: &1))

        _, acc ->
          acc
      end)
    end)
  end

  defp keyed_spans(source, spans, shift) do
    Enum.map(spans, fn %Span{} = s ->
      %{
        s
        | span_id: {source, s.span_id},
          parent_span_id: s.parent_span_id && {source, s.parent_span_id},
          started_at: s.started_at - shift,
          ended_at: s.ended_at - shift
      }
    end)
  end

  defp keyed_edges(source, edges, shift) do
    Enum.map(edges, fn %Edge{} = e ->
      %{
        e
        | waiter_span_id: {source, e.waiter_span_id},
          waker_span_id: {source, e.waker_span_id},
          started_at: e.started_at - shift,
          ended_at: e.ended_at - shift
      }
    end)
  end

  # Each span opened by another node (a request, or work a message or a
  # spawn brought in) takes the place of the sender's :remote span with the
  # same wire key.
  defp join(spans, edges) do
    proxies = for %Span{kind: :remote, wire: w} = s <- spans, w != nil, into: %{}, do: {w, s}

    replaced =
      for %Span{kind: kind, parent_span_id: nil, wire: w} = s <- spans,
          kind in [:request, :work],
          w != nil,
          proxy = proxies[w],
          into: %{},
          do: {proxy.span_id, s}

    by_id = Map.new(spans, &{&1.span_id, &1})

    # the callee's span hangs where the :remote span did; the caller that
    # waited on the callee as it named it ({name, node}) waited on its pid
    by_id =
      Enum.reduce(replaced, by_id, fn {proxy_id, callee}, acc ->
        proxy = by_id[proxy_id]

        acc
        |> Map.delete(proxy_id)
        |> Map.put(callee.span_id, %{callee | parent_span_id: proxy.parent_span_id})
        |> rename_wait(proxy.parent_span_id, proxy.pid, callee.pid)
      end)

    {edges, by_id} =
      Enum.map_reduce(edges, by_id, fn %Edge{waker_span_id: waker} = e, acc ->
        case replaced do
          %{^waker => callee} ->
            kept =
              min(
                e.attributed_us,
                overlap(e.started_at, e.ended_at, callee.started_at, callee.ended_at)
              )

            {%{e | waker_span_id: callee.span_id, attributed_us: kept},
             unexplain(acc, e.waiter_span_id, e.attributed_us - kept)}

          _ ->
            {e, acc}
        end
      end)

    kept = Enum.filter(spans, &Map.has_key?(by_id, &1.span_id)) |> Enum.map(&by_id[&1.span_id])
    {kept, Enum.filter(edges, &Map.has_key?(by_id, &1.waiter_span_id)), Map.values(replaced)}
  end

  defp rename_wait(by_id, caller_id, named, pid) do
    case by_id do
      %{^caller_id => %Span{waiting_on_pid: ^named} = caller} ->
        %{by_id | caller_id => %{caller | waiting_on_pid: pid}}

      _ ->
        by_id
    end
  end

  defp overlap(a0, a1, b0, b1), do: max(min(a1, b1) - max(a0, b0), 0)

  # us of the waiter's wait were explained by the :remote span but not by
  # the callee's span: the caller waited for the network, or a clock's
  # uncertainty put them outside.
  defp unexplain(by_id, _waiter, 0), do: by_id

  defp unexplain(by_id, waiter, us) do
    Map.update!(by_id, waiter, fn s ->
      %{
        s
        | attributed_wait_us: s.attributed_wait_us - us,
          unattributed_wait_us: s.unattributed_wait_us + us,
          unattributed_by: Map.update!(s.unattributed_by, :process, &(&1 + us))
      }
    end)
  end

  # Parents before children: the origin's spans from its root down, then
  # what has no parent (requests from nodes whose caller is not in the
  # trace), each subtree in start order.
  defp renumber(spans, edges) do
    children = Enum.group_by(spans, & &1.parent_span_id)

    children =
      Map.new(children, fn {k, v} -> {k, Enum.sort_by(v, &{&1.started_at, order(&1)})} end)

    tops = Map.get(children, nil, []) |> Enum.sort_by(&{&1.kind != :root, order(&1)})

    {ordered, _} = Enum.flat_map_reduce(tops, 0, fn top, n -> walk(top, children, n) end)

    ids = ordered |> Enum.with_index() |> Map.new(fn {s, i} -> {s.span_id, i} end)

    spans =
      Enum.map(ordered, fn s ->
        %{
          s
          | span_id: ids[s.span_id],
            parent_span_id: s.parent_span_id && ids[s.parent_span_id],
            children: Enum.map(Map.get(children, s.span_id, []), &ids[&1.span_id])
        }
      end)

    edges =
      for e <- edges,
          Map.has_key?(ids, e.waiter_span_id) and Map.has_key?(ids, e.waker_span_id),
          do: %{e | waiter_span_id: ids[e.waiter_span_id], waker_span_id: ids[e.waker_span_id]}

    {spans, edges}
  end

  # the origin's own order first, then each part's
  defp order(%Span{span_id: {:origin, id}}), do: {0, id}
  defp order(%Span{span_id: {node, id}}), do: {1, node, id}

  defp walk(span, children, n) do
    Enum.flat_map_reduce(Map.get(children, span.span_id, []), n + 1, fn child, n ->
      walk(child, children, n)
    end)
    |> then(fn {below, n} -> {[span | below], n} end)
  end
end
