defmodule FlameOn.Client.Span do
  @moduledoc """
  One process's part of a cross-process trace.

  The root process has a span for the whole trace; each `GenServer.call` the
  trace makes into another process gives the callee a span for the time it
  handled that request, whose `parent_span_id` is the caller's span. Spans
  link processes: a stack never continues from one process into another.

    * `started_at`, `ended_at` – `System.monotonic_time(:microsecond)`.
    * `self_us` – the span's duration minus the time it waited in calls.
    * `wait_us` – time blocked in `GenServer.call`s made from this span,
      split into `attributed_wait_us` (explained by the callee's span: the
      overlap of the wait with the callee's work) and `unattributed_wait_us`
      (queueing, transit, a callee that never replied or was not followed).
    * `waiting_on_pid` – the callee of the longest wait, or `nil`.
    * `children` – the span ids of the callees' spans.
    * `status` – `:ok`, `{:exit, reason}` when the process exited inside the
      span, or `:open_at_close` when the trace ended before it replied.
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
    self_us: 0,
    wait_us: 0,
    attributed_wait_us: 0,
    unattributed_wait_us: 0,
    waiting_on_pid: nil,
    children: [],
    status: :ok
  ]

  @type t :: %__MODULE__{
          trace_id: integer(),
          span_id: non_neg_integer(),
          parent_span_id: non_neg_integer() | nil,
          pid: pid(),
          name: String.t() | nil,
          started_at: integer(),
          ended_at: integer(),
          self_us: non_neg_integer(),
          wait_us: non_neg_integer(),
          attributed_wait_us: non_neg_integer(),
          unattributed_wait_us: non_neg_integer(),
          waiting_on_pid: pid() | nil,
          children: [non_neg_integer()],
          status: :ok | :open_at_close | :open | {:exit, term()}
        }
end

defmodule FlameOn.Client.Graph do
  @moduledoc """
  The span graph of a cross-process trace (`cross_process: true`): one
  `FlameOn.Client.Span` per process part, linked caller to callee.

      {_, profile} = FlameOn.Client.profile(fn -> MyApp.handle(req) end, cross_process: true)
      [root | callees] = profile.graph.spans
      root.attributed_wait_us   # time the root waited on callees that were traced

  `stats` counts what the correlation could not use (`orphan_requests`,
  `unmatched_replies`, `late_replies`, `dropped_spans`, ...).
  """

  alias FlameOn.Client.Span

  defstruct trace_id: nil, spans: [], stats: %{}

  @type t :: %__MODULE__{trace_id: integer(), spans: [Span.t()], stats: map()}

  @doc false
  # From the NIF's graph map: times on the tracer clock plus the offset to
  # Erlang monotonic nanoseconds.
  @spec build(map(), integer()) :: t()
  def build(%{spans: spans, stats: stats, clock_offset_ns: offset}, trace_id) do
    %__MODULE__{
      trace_id: trace_id,
      stats: stats,
      spans: Enum.map(spans, &span(&1, offset, trace_id))
    }
  end

  defp span(raw, offset, trace_id) do
    wait_us = us(raw.wait_ns)
    # Derived from the rounded parts, so wait = attributed + unattributed
    # holds exactly in microseconds too.
    attributed_us = min(us(raw.attributed_wait_ns), wait_us)

    %Span{
      trace_id: trace_id,
      span_id: raw.span_id,
      parent_span_id: raw.parent_span_id,
      pid: raw.pid,
      name: name(raw.pid),
      started_at: us(raw.started_ns + offset),
      ended_at: us(raw.ended_ns + offset),
      self_us: us(raw.self_ns),
      wait_us: wait_us,
      attributed_wait_us: attributed_us,
      unattributed_wait_us: wait_us - attributed_us,
      waiting_on_pid: raw.waiting_on_pid,
      children: raw.children,
      status: raw.status
    }
  end

  defp us(ns), do: div(ns + 500, 1000)

  defp name(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) and name != [] -> inspect(name)
      _ -> inspect(pid)
    end
  end
end
