defmodule FlameOn.Client.Export.Perfetto.SpanGraph do
  @moduledoc false
  # The span graph in FlameOn.Client.Export.Perfetto's trace events: a
  # slice per span, the caller's wait under each request span, a wait slice
  # per edge of the graph, and the flows that tie each wait to the span that
  # ended it. The flow ids of the two kinds are allotted together here
  # (span_id + 1 for a request's, past those for the edges'), so they
  # cannot collide. The tracks (tids) and the file are Perfetto's.

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Graph.Span
  alias FlameOn.Client.Export.Util

  # Every event is written with the origin node's trace-event process, as
  # Perfetto's own are; Perfetto.encode/1 moves each to its node's.
  @pid 1

  # a track per process (a :remote span's callee may be `{name, node}`)
  @type tids :: %{(pid() | {atom(), node()}) => pos_integer()}

  # Each event is `{sort_key, event}`. Trace processors replay events in
  # timestamp order; at equal timestamps the key keeps an enclosing slice
  # before the slices it encloses, and a flow's source (the caller's wait at
  # depth d) before its target (the callee's span at depth d + 1).
  @spec span_slices(Profile.t(), [Span.t()], tids, %{pid() => String.t()}, integer()) ::
          [{tuple(), map()}]
  def span_slices(profile, spans, tids, names, t0) do
    by_id = Map.new(spans, &{&1.span_id, &1})
    depths = depths(spans, by_id)

    Enum.flat_map(spans, fn span ->
      depth = Map.fetch!(depths, span.span_id)
      tid = Map.fetch!(tids, span.pid)
      ts = span.started_at - t0
      dur = max(span.ended_at - span.started_at, 0)

      slice = %{
        ph: "X",
        cat: "span",
        name: span_name(profile, span, names),
        pid: @pid,
        tid: tid,
        ts: ts,
        dur: dur,
        args: span_args(span)
      }

      case Map.get(by_id, span.parent_span_id) do
        nil ->
          [{{ts, depth, 0, -dur}, slice}]

        # Work a message or a spawn brought in: who waited on it (if anyone)
        # is in the edges (wake_events/5).
        _parent when span.kind in [:work, :continuation] ->
          [{{ts, depth, 0, -dur}, slice}]

        parent ->
          flow = span.span_id + 1
          callee = Map.merge(slice, %{bind_id: flow, flow_in: true})
          wait = wait_slice(parent, span, Map.fetch!(tids, parent.pid), names, t0, flow)
          [{{wait.ts, depth - 1, 1, -wait.dur}, wait}, {{ts, depth, 0, -dur}, callee}]
      end
    end)
  end

  # The caller's wait, drawn over the callee span's interval and clipped to
  # the caller's span so that it nests inside it.
  defp wait_slice(parent, span, tid, names, t0, flow) do
    from = min(max(span.started_at, parent.started_at), parent.ended_at)
    to = max(min(span.ended_at, parent.ended_at), from)

    wait_x(tid, from, to, t0, %{
      callee: Util.process_label(span.pid, names),
      callee_span_id: span.span_id,
      callee_us: max(span.ended_at - span.started_at, 0)
    })
    |> Map.merge(%{bind_id: flow, flow_out: true})
  end

  # A wait slice on tid over from..to.
  defp wait_x(tid, from, to, t0, args) do
    %{
      ph: "X",
      cat: "wait",
      name: "wait",
      pid: @pid,
      tid: tid,
      ts: from - t0,
      dur: to - from,
      args: args
    }
  end

  # --- wait edges ------------------------------------------------------------
  #
  # Each edge of the graph (a waiter span's wait, ended by a waker span's
  # work) is a wait slice on the waiter's track over the explained interval,
  # with a flow to the waker's span (v1 flow events: a span can end more
  # than one wait, and a slice binds one `bind_id` only). A request span's
  # wait on its caller is drawn with the span (span_slices/5) and skipped
  # here. Work a message or a spawn brought in gets a flow from its parent
  # on another track (cat "join").
  @spec wake_events(Profile.t(), [Span.t()], tids, %{pid() => String.t()}, integer()) ::
          [{tuple(), map()}]
  def wake_events(_profile, [], _tids, _names, _t0), do: []

  def wake_events(%Profile{graph: graph}, spans, tids, names, t0) do
    by_id = Map.new(spans, &{&1.span_id, &1})
    depths = depths(spans, by_id)
    # flow ids past the bind_ids of span_slices/5 (span_id + 1)
    base = length(spans) + 1

    waits =
      graph.edges
      |> Enum.with_index()
      |> Enum.flat_map(fn {edge, i} ->
        with %Span{} = waiter <- by_id[edge.waiter_span_id],
             %Span{} = waker <- by_id[edge.waker_span_id],
             false <- waker.kind == :request and waker.parent_span_id == waiter.span_id do
          edge_wait(edge, waiter, waker, tids, names, depths, t0, base + 2 * i)
        else
          _ -> []
        end
      end)

    joins =
      for %Span{kind: kind} = span <- spans,
          kind in [:work, :continuation],
          parent = by_id[span.parent_span_id],
          # a continuation follows its own request span on the same track
          parent.pid != span.pid do
        from = clamp(span.started_at, parent.started_at, parent.ended_at)

        flow(
          "join",
          base + 2 * length(graph.edges) + span.span_id,
          {Map.fetch!(tids, parent.pid), from - t0, depths[parent.span_id]},
          {Map.fetch!(tids, span.pid), span.started_at - t0, depths[span.span_id]}
        )
      end

    waits ++ List.flatten(joins)
  end

  defp edge_wait(edge, waiter, waker, tids, names, depths, t0, id) do
    # inside the waiter's span, so that it nests there
    from = clamp(edge.started_at, waiter.started_at, waiter.ended_at)
    to = clamp(edge.ended_at, from, waiter.ended_at)
    depth = Map.fetch!(depths, waiter.span_id)
    tid = Map.fetch!(tids, waiter.pid)

    slice =
      wait_x(tid, from, to, t0, %{
        waker: Util.process_label(waker.pid, names),
        waker_span_id: waker.span_id,
        attributed_us: edge.attributed_us,
        wakes: edge.wakes
      })

    # the flow ends where the waker's explained work began
    at = clamp(edge.started_at, waker.started_at, waker.ended_at)

    [
      {{from - t0, depth, 1, -(to - from)}, slice}
      | flow(
          "wake",
          id,
          {tid, from - t0, depth},
          {Map.fetch!(tids, waker.pid), at - t0, Map.fetch!(depths, waker.span_id)}
        )
    ]
  end

  # A v1 flow: "s" binds to the slice enclosing it on the source track,
  # "f" (binding point "e") to the one enclosing it on the target track.
  defp flow(cat, id, {from_tid, from_ts, from_depth}, {to_tid, to_ts, to_depth}) do
    [
      {{from_ts, from_depth, 3, 0},
       %{ph: "s", cat: cat, name: cat, id: id, pid: @pid, tid: from_tid, ts: from_ts}},
      {{to_ts, to_depth, 3, 0},
       %{ph: "f", bp: "e", cat: cat, name: cat, id: id, pid: @pid, tid: to_tid, ts: to_ts}}
    ]
  end

  defp depths(spans, by_id) do
    Enum.reduce(spans, %{}, fn span, acc -> depth(span, by_id, acc, 0) |> elem(1) end)
  end

  # Iterative in spirit: walks up until a known depth, bounded by the span
  # count so that a malformed cycle cannot loop.
  defp depth(%Span{span_id: id} = span, by_id, acc, steps) do
    cond do
      is_map_key(acc, id) ->
        {acc[id], acc}

      steps > map_size(by_id) ->
        {0, Map.put(acc, id, 0)}

      true ->
        case Map.get(by_id, span.parent_span_id) do
          nil ->
            {0, Map.put(acc, id, 0)}

          parent ->
            {d, acc} = depth(parent, by_id, acc, steps + 1)
            {d + 1, Map.put(acc, id, d + 1)}
        end
    end
  end

  # `:infinity` sorts after every number, so it is no bound.
  defp clamp(ts, from, to), do: ts |> max(from) |> min(to)

  defp span_name(profile, %Span{parent_span_id: nil}, _names), do: profile.name
  defp span_name(_profile, %Span{pid: pid}, names), do: Util.process_label(pid, names)

  defp span_args(span) do
    %{
      pid: Util.pid_text(span.pid),
      span_id: span.span_id,
      parent_span_id: span.parent_span_id,
      self_us: span.self_us,
      gc_us: span.gc_us,
      runnable_us: span.runnable_us,
      wait_us: span.wait_us,
      attributed_wait_us: span.attributed_wait_us,
      unattributed_wait_us: span.unattributed_wait_us,
      waiting_on: span.waiting_on_pid && Util.pid_text(span.waiting_on_pid),
      status: status(span.status),
      kind: Atom.to_string(span.kind),
      unattributed_by:
        Map.new(span.unattributed_by, fn {cause, us} -> {Atom.to_string(cause), us} end)
    }
  end

  defp status(status) when is_atom(status), do: Atom.to_string(status)
  defp status({:exit, reason}), do: "exit: " <> inspect(reason)
  defp status(other), do: inspect(other)
end
