defmodule FlameOn.Client.Graph do
  @moduledoc """
  The span graph of a cross-process trace (`cross_process: true`): one
  `FlameOn.Client.Graph.Span` per part a process played, linked to the span that
  brought it in, and one `FlameOn.Client.Graph.Edge` per attributed wait (waiter
  span -> the span whose work ended the wait).

      {_, profile} = FlameOn.Client.profile(fn -> MyApp.handle(req) end, cross_process: true)
      [root | _] = profile.graph.spans
      root.attributed_wait_us   # time the root waited on work of the trace
      for e <- profile.graph.edges, e.waiter_span_id == root.span_id, do: e.waker_span_id

  `stats` counts what the correlation saw and could not use
  (`orphan_requests`, `unmatched_replies`, `late_replies`, `dropped_spans`,
  `wakes`, `joins`, `leaves`, ...). `followers` are the processes that still
  followed the trace when it ended (their trace flags are off by the time
  `profile/2` returns).
  """

  alias FlameOn.Client.Graph.Edge
  alias FlameOn.Client.Graph.Span

  defstruct trace_id: nil, spans: [], edges: [], followers: [], stats: %{}

  @type t :: %__MODULE__{
          trace_id: integer(),
          spans: [Span.t()],
          edges: [Edge.t()],
          followers: [pid()],
          stats: map()
        }

  @doc false
  # From the NIF's graph map: times on the tracer clock plus the offset to
  # Erlang monotonic nanoseconds.
  @spec build(map(), integer()) :: t()
  def build(%{spans: spans, stats: stats, clock_offset_ns: offset} = raw, trace_id) do
    %__MODULE__{
      trace_id: trace_id,
      stats: stats,
      spans: Enum.map(spans, &span(&1, offset, trace_id)),
      edges: Enum.map(Map.get(raw, :edges, []), &edge(&1, offset)),
      followers: Map.get(raw, :followers, [])
    }
  end

  defp span(raw, offset, trace_id) do
    started_at = us(raw.started_ns + offset)
    ended_at = us(raw.ended_ns + offset)
    duration = max(ended_at - started_at, 0)
    # Derived from the rounded parts so that, in microseconds too,
    # self + gc + runnable + wait = duration and wait = attributed +
    # unattributed (= the sum of its causes) hold exactly: each class is
    # cut to what the ones before it leave, self is the rest.
    wait_us = min(us(raw.wait_ns), duration)
    runnable_us = min(us(Map.get(raw, :runnable_ns, 0)), duration - wait_us)
    gc_us = min(us(Map.get(raw, :gc_ns, 0)), duration - wait_us - runnable_us)
    attributed_us = min(us(raw.attributed_wait_ns), wait_us)
    unattributed_us = wait_us - attributed_us

    %Span{
      trace_id: trace_id,
      span_id: raw.span_id,
      parent_span_id: raw.parent_span_id,
      pid: raw.pid,
      started_at: started_at,
      ended_at: ended_at,
      kind: Map.get(raw, :kind, :root),
      opener_pid: Map.get(raw, :opener_pid),
      self_us: duration - wait_us - runnable_us - gc_us,
      gc_us: gc_us,
      runnable_us: runnable_us,
      wait_us: wait_us,
      attributed_wait_us: attributed_us,
      unattributed_wait_us: unattributed_us,
      unattributed_by: causes(Map.get(raw, :unattributed_by, %{}), unattributed_us),
      waiting_on_pid: raw.waiting_on_pid,
      children: raw.children,
      status: raw.status,
      node: node_of(raw.pid),
      wire: if(Map.get(raw, :wire, 0) == 0, do: nil, else: raw.wire)
    }
  end

  @causes [:process, :port, :timer, :other]

  # The causes in microseconds, adding up to total exactly: cumulative sums
  # scaled to total (non-decreasing, so no cause goes below zero).
  defp causes(raw, total) do
    ns = Enum.map(@causes, &Map.get(raw, &1, 0))
    all = Enum.sum(ns)

    {bounds, _} =
      Enum.map_reduce(ns, 0, fn n, acc ->
        acc = acc + n
        {if(all == 0, do: 0, else: div(acc * total * 2 + all, all * 2)), acc}
      end)

    {diffs, _} = Enum.map_reduce(bounds, 0, fn b, prev -> {b - prev, b} end)
    diffs = if all == 0, do: [0, 0, 0, total], else: diffs
    Map.new(Enum.zip(@causes, diffs))
  end

  defp edge(raw, offset) do
    %Edge{
      waiter_span_id: raw.waiter_span_id,
      waker_span_id: raw.waker_span_id,
      started_at: us(raw.started_ns + offset),
      ended_at: us(raw.ended_ns + offset),
      attributed_us: us(raw.attributed_ns),
      wakes: raw.wakes
    }
  end

  defp us(ns), do: div(ns + 500, 1000)

  defp node_of({_name, node}), do: node
  defp node_of(pid), do: node(pid)
end
