defmodule FlameOn.Client.Export.Perfetto do
  @moduledoc false
  # Chrome trace-event JSON for ui.perfetto.dev and chrome://tracing. See
  # FlameOn.Client.Export.perfetto/1 for the layout. This module lays out
  # the tracks and writes the file; the span graph's events (span slices,
  # waits, flows) are Perfetto.SpanGraph's.

  alias FlameOn.Client.Graph
  alias FlameOn.Client.Export.JSON
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Export.Util
  alias FlameOn.Client.Profile.Tree
  alias FlameOn.Client.Export.Perfetto.SpanGraph

  # The trace-event process of the origin node's BEAM processes (a trace
  # across nodes gives each other node one of its own, 2, 3, ...). Events
  # are written with it (SpanGraph's too), then moved to their node's
  # (groups/2).
  @pid 1
  # Stacks listed in the args of a process slice (profiles without a graph).
  @top_stacks 10

  @spec encode(Profile.t()) :: iodata()
  def encode(%Profile{} = profile) do
    names = Util.names(profile)
    spans = spans(profile)
    tids = tids(profile, spans)
    # Processes with stacks but no span (all of them without a graph).
    spanned = MapSet.new(spans, & &1.pid)
    unspanned = Enum.reject(Util.pids(profile), &MapSet.member?(spanned, &1))
    t0 = origin(profile, spans, unspanned)

    groups = groups(profile, tids)
    metadata = metadata(profile, tids, names, groups)
    slices = SpanGraph.span_slices(profile, spans, tids, names, t0)

    process_slices =
      for pid <- unspanned, do: process_slice(profile, pid, Map.fetch!(tids, pid), names, t0)

    counters = counters(profile, tids, names, t0)
    wakes = SpanGraph.wake_events(profile, spans, tids, names, t0)

    # `{sort_key, event}`s: the key is explained at SpanGraph.span_slices/5
    events =
      (slices ++ process_slices ++ counters ++ wakes)
      |> Enum.sort_by(fn {key, _event} -> key end)
      |> Enum.map(fn {_key, event} -> in_group(event, groups) end)

    JSON.encode!(%{
      "traceEvents" => metadata ++ events,
      "displayTimeUnit" => "ms",
      "otherData" => %{
        "exporter" => Util.exporter(),
        "name" => profile.name,
        "trace_id" => profile.trace_id,
        "duration_us" => profile.duration_us
      }
    })
  end

  defp spans(%Profile{graph: %Graph{spans: spans}}), do: spans
  defp spans(%Profile{}), do: []

  # tid 1.. : the traced process, then the span processes by first start,
  # then the processes that only have stacks.
  defp tids(profile, spans) do
    by_start =
      spans
      |> Enum.sort_by(&{&1.started_at, &1.span_id})
      |> Enum.map(& &1.pid)

    drawn = by_start ++ Util.pids(profile) ++ Util.order(Map.keys(profile.metrics), profile.pid)
    root = if profile.pid in drawn, do: [profile.pid], else: []

    (root ++ drawn)
    |> Enum.uniq()
    |> Enum.with_index(1)
    |> Map.new()
  end

  # One trace-event process per node: the origin's (the traced process's
  # node) is @pid, the other nodes follow in name order. `%{tid => pid}`
  # (tids are unique across nodes) and `%{node => pid}`.
  defp groups(profile, tids) do
    origin = if profile.pid, do: node(profile.pid), else: node()
    others = tids |> Map.keys() |> Enum.map(&node_of/1) |> Enum.uniq() |> Enum.sort()

    by_node =
      ([origin] ++ List.delete(others, origin))
      |> Enum.with_index(@pid)
      |> Map.new()

    by_tid = Map.new(tids, fn {pid, tid} -> {tid, Map.fetch!(by_node, node_of(pid))} end)
    %{by_tid: by_tid, by_node: by_node}
  end

  # a :remote span's callee may be {name, node}
  defp node_of(pid) when is_pid(pid), do: node(pid)
  defp node_of({_name, node}) when is_atom(node), do: node
  defp node_of(_other), do: node()

  defp in_group(%{tid: tid} = event, %{by_tid: by_tid}), do: %{event | pid: by_tid[tid]}

  # Timestamps are relative to the earliest start drawn.
  defp origin(profile, spans, unspanned) do
    trace_start = if unspanned != [] and profile.started_at, do: [profile.started_at], else: []

    case Enum.map(spans, & &1.started_at) ++ trace_start do
      [] -> 0
      starts -> Enum.min(starts)
    end
  end

  # A trace on one node names its one process after the trace; across
  # nodes, each node's process says its node.
  defp metadata(profile, tids, names, %{by_node: by_node} = groups) do
    trace = "#{profile.name} (flame_on trace #{profile.trace_id})"

    process =
      by_node
      |> Enum.sort_by(fn {_node, pid} -> pid end)
      |> Enum.flat_map(fn {node, pid} ->
        if map_size(by_node) == 1 do
          [%{ph: "M", name: "process_name", pid: pid, tid: 0, args: %{name: trace}}]
        else
          [
            %{
              ph: "M",
              name: "process_name",
              pid: pid,
              tid: 0,
              args: %{name: "#{trace} on #{node}"}
            },
            %{ph: "M", name: "process_sort_index", pid: pid, tid: 0, args: %{sort_index: pid}}
          ]
        end
      end)

    threads =
      tids
      |> Enum.sort_by(fn {_pid, tid} -> tid end)
      |> Enum.flat_map(fn {pid, tid} ->
        [
          %{
            ph: "M",
            name: "thread_name",
            pid: @pid,
            tid: tid,
            args: %{name: Util.process_label(pid, names)}
          },
          %{ph: "M", name: "thread_sort_index", pid: @pid, tid: tid, args: %{sort_index: tid}}
        ]
      end)
      |> Enum.map(&in_group(&1, groups))

    process ++ threads
  end

  # Counter tracks from the sampled metrics: per sample, one `ph: "C"` event
  # per counter. Trace processors keep counters per trace-event process and
  # name a track `<name> <args key>`, so the key is the BEAM process's label:
  # one track per process and counter ("memory <0.96.0>"). Samples are
  # drawn inside the trace's interval: the first one is taken as tracing
  # starts, a few µs before `started_at`.
  defp counters(%Profile{metrics: metrics} = profile, tids, names, t0) do
    {from, to} = window(profile, t0)

    for {pid, series} <- Util.order_map(metrics, profile.pid),
        label = Util.process_label(pid, names),
        tid = Map.fetch!(tids, pid),
        {metric, previous} <- Enum.zip(series, [nil | series]),
        ts = clamp(metric.t_us - t0, from, to),
        {counter, value} <- counter_values(metric, previous) do
      event = %{ph: "C", name: counter, pid: @pid, tid: tid, ts: ts, args: %{label => value}}
      {{ts, 0, 2, 0}, event}
    end
  end

  defp counter_values(metric, previous) do
    [{"message_queue_len", metric.message_queue_len}, {"memory", metric.memory}] ++
      reduction_rate(metric, previous)
  end

  # Reductions per millisecond, averaged since the previous sample: a rate
  # rather than a delta, so a late tick or a callee's idle gap between
  # samples (cross-process traces) shows no spike. None at a first sample.
  defp reduction_rate(_metric, nil), do: []

  defp reduction_rate(metric, previous) do
    us = max(metric.t_us - previous.t_us, 1)
    reductions = max(metric.reductions - previous.reductions, 0)
    [{"reductions/ms", div(reductions * 1000 + div(us, 2), us)}]
  end

  # `:infinity` sorts after every number, so it is no bound.
  defp clamp(ts, from, to), do: ts |> max(from) |> min(to)

  # The trace's interval on the file's clock (no upper bound when unknown).
  defp window(%Profile{started_at: started} = profile, t0) when is_integer(started),
    do: {started - t0, started - t0 + profile.duration_us}

  defp window(%Profile{}, _t0), do: {0, :infinity}

  # A slice over the whole trace for a process the graph does not cover,
  # with its largest stacks (ties in tree order), from the profile's tree:
  # only those ten texts are written out.
  defp process_slice(profile, pid, tid, names, t0) do
    tree = Tree.of(profile)
    ts = (profile.started_at || t0) - t0

    {stacks, _path, total} =
      Tree.reduce(tree, pid, {[], [], 0}, fn {depth, name, us, node_total, _s, _w},
                                             {stacks, path, total} ->
        path = Enum.drop_while(path, fn {d, _names} -> d >= depth end)
        parent = with [{_d, names} | _] <- path, do: names
        names = if depth == 0, do: [], else: [name | parent]
        stacks = if us > 0, do: [{us, names} | stacks], else: stacks
        {stacks, [{depth, names} | path], if(depth == 0, do: node_total, else: total)}
      end)

    top =
      stacks
      |> Enum.reverse()
      |> Enum.sort_by(fn {us, _names} -> -us end)
      |> Enum.take(@top_stacks)
      |> Enum.map(fn {us, names} ->
        %{us: us, stack: names |> Enum.reverse() |> Enum.map_join(";", &Tree.name(tree, &1))}
      end)

    slice = %{
      ph: "X",
      cat: "process",
      name: Util.process_label(pid, names),
      pid: @pid,
      tid: tid,
      ts: ts,
      dur: profile.duration_us,
      args: %{pid: Util.pid_text(pid), total_us: total, top_stacks: top}
    }

    {{ts, 0, 0, -profile.duration_us}, slice}
  end
end
