defmodule FlameOn.Client.Span do
  @moduledoc """
  One process's part of a cross-process trace.

  Every span belongs to one process and says what it did for the trace, and
  when; `parent_span_id` is the span that brought it in. Spans link
  processes: a stack never continues from one process into another.

    * `kind` – `:root` (the traced function's process, the whole trace),
      `:request` (a `GenServer.call` request it served, until its reply),
      `:work` (other work for the trace: it took a message of the trace, or
      a process of the trace spawned it; until it answered the process that
      brought it in, or else until its last idle began) or `:continuation`
      (a server that went on working for the trace after its reply, on a
      port or timer message, and sent the trace a message later).
    * `started_at`, `ended_at` – `System.monotonic_time(:microsecond)`.
    * `self_us` – time on a CPU inside the span.
    * `wait_us` – time off a CPU inside the span (waiting in a receive, or
      runnable but not running): `self_us + wait_us` is the span's duration.
      It splits into `attributed_wait_us`, the part a span of the trace
      explains (the process that ended the wait was working for the trace,
      in that span, meanwhile; `FlameOn.Client.Graph` has an edge for it),
      and `unattributed_wait_us`, what nothing of the trace explains.
    * `unattributed_by` – the unattributed wait by what ended it: `:process`
      (a message from a process outside the trace, or from one of the
      trace's outside its spans), `:port` (socket data, a port's reply),
      `:timer` (`receive ... after`, `Process.sleep/1`, `send_after`) and
      `:other` (no message: runnable, or woken by a signal).
    * `waiting_on_pid` – the process whose message ended the longest wait
      (traced or not), or `nil`.
    * `opener_pid` – the process that brought it in (the caller, the sender
      or the spawner), `nil` for the root and continuations.
    * `children` – the span ids of the spans it brought in.
    * `status` – `:ok`, `{:exit, reason}` when the process exited inside the
      span, or `:open_at_close` when the trace ended while it still worked.
    * `node` – the node the process runs on (see `FlameOn.Client.Cluster`).
      A `:remote` span is a call, message or spawn to a process of another
      node whose part of the trace is missing (the node was not armed, or
      its part was lost): its `pid` is the receiver as the sender named it
      (a pid or `{name, node}`; a spawn's child), and it lasts from the send
      to the reply or answer (or the end of the trace if none came).
    * `wire` – a call, message or spawn across nodes: the key that joins
      the sender's side and the receiver's (`nil` otherwise).
  """

  @enforce_keys [:trace_id, :span_id, :pid]
  defstruct [
    :trace_id,
    :span_id,
    :parent_span_id,
    :pid,
    :name,
    :started_at,
    :ended_at,
    kind: :root,
    opener_pid: nil,
    self_us: 0,
    wait_us: 0,
    attributed_wait_us: 0,
    unattributed_wait_us: 0,
    unattributed_by: %{process: 0, port: 0, timer: 0, other: 0},
    waiting_on_pid: nil,
    children: [],
    status: :ok,
    node: nil,
    wire: nil
  ]

  @type kind :: :root | :request | :work | :continuation | :remote

  @type t :: %__MODULE__{
          trace_id: integer(),
          span_id: non_neg_integer(),
          parent_span_id: non_neg_integer() | nil,
          pid: pid() | {atom(), node()},
          name: String.t() | nil,
          started_at: integer(),
          ended_at: integer(),
          kind: kind(),
          opener_pid: pid() | nil,
          self_us: non_neg_integer(),
          wait_us: non_neg_integer(),
          attributed_wait_us: non_neg_integer(),
          unattributed_wait_us: non_neg_integer(),
          unattributed_by: %{
            process: non_neg_integer(),
            port: non_neg_integer(),
            timer: non_neg_integer(),
            other: non_neg_integer()
          },
          waiting_on_pid: pid() | nil,
          children: [non_neg_integer()],
          status: :ok | :open_at_close | :open | {:exit, term()},
          node: node() | nil,
          wire: pos_integer() | nil
        }
end

defmodule FlameOn.Client.Edge do
  @moduledoc """
  An attributed wait: the span `waiter_span_id` was off a CPU, and the work
  of span `waker_span_id` (another process) ended the wait. `attributed_us`
  of the interval `started_at..ended_at` (`System.monotonic_time(:microsecond)`)
  is the waker's work; consecutive waits of one waiter on one waker are one
  edge (`wakes` counts them).
  """

  @enforce_keys [:waiter_span_id, :waker_span_id]
  defstruct [:waiter_span_id, :waker_span_id, :started_at, :ended_at, attributed_us: 0, wakes: 1]

  @type t :: %__MODULE__{
          waiter_span_id: non_neg_integer(),
          waker_span_id: non_neg_integer(),
          started_at: integer(),
          ended_at: integer(),
          attributed_us: non_neg_integer(),
          wakes: pos_integer()
        }
end

defmodule FlameOn.Client.Graph do
  @moduledoc """
  The span graph of a cross-process trace (`cross_process: true`): one
  `FlameOn.Client.Span` per part a process played, linked to the span that
  brought it in, and one `FlameOn.Client.Edge` per attributed wait (waiter
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

  alias FlameOn.Client.{Edge, Span}

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
    # self + wait = duration and wait = attributed + unattributed (= the
    # sum of its causes) hold exactly.
    wait_us = min(us(raw.wait_ns), duration)
    attributed_us = min(us(raw.attributed_wait_ns), wait_us)
    unattributed_us = wait_us - attributed_us

    %Span{
      trace_id: trace_id,
      span_id: raw.span_id,
      parent_span_id: raw.parent_span_id,
      pid: raw.pid,
      name: name(raw.pid),
      started_at: started_at,
      ended_at: ended_at,
      kind: Map.get(raw, :kind, :root),
      opener_pid: Map.get(raw, :opener_pid),
      self_us: duration - wait_us,
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

  # Names are read on the process's own node (a part names its own).
  defp name(pid) when not is_pid(pid) or node(pid) != node(), do: inspect(pid)

  defp name(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) and name != [] -> inspect(name)
      _ -> inspect(pid)
    end
  end
end
