defmodule FlameOn.Client.Graph.Span do
  @moduledoc """
  One process's part of a cross-process trace.

  Every span belongs to one process and says what it did for the trace, and
  when; `parent_span_id` is the span that brought it in. Spans link
  processes: a stack never continues from one process into another.

    * `name` – the process's name (`FlameOn.Client.ProcessName`: its
      registered name, process label or initial call, read while the
      trace ran), or `nil` when it has none.
    * `kind` – `:root` (the traced function's process, the whole trace),
      `:request` (a `GenServer.call` request it served, until its reply),
      `:work` (other work for the trace: it took a message of the trace, or
      a process of the trace spawned it; until it answered the process that
      brought it in, or else until its last idle began) or `:continuation`
      (a server that went on working for the trace after its reply, on a
      port or timer message, and sent the trace a message later).
    * `started_at`, `ended_at` – `System.monotonic_time(:microsecond)`.
    * `self_us`, `gc_us`, `runnable_us`, `wait_us` – the span's time in four
      classes, in whole microseconds that add up exactly:
      `self_us + gc_us + runnable_us + wait_us == ended_at - started_at`.
      Each is what the process's stacks show for the same time (the
      `GC_MINOR`/`GC_MAJOR`, `RUNNABLE` and `WAITING` leaves, the last for
      the unattributed wait; `FlameOn.Client.Profile` `time_classes`): the
      sum over a process's spans matches its leaves of that class, rounding
      aside, when its spans do not nest.
    * `self_us` – running its code on a CPU.
    * `gc_us` – collecting its garbage (minor and major collections, from
      the VM's `garbage_collection` trace events; on a dirty scheduler
      too).
    * `runnable_us` – off a CPU with nothing to wait for: it was scheduled
      out and back in with no message taken between (preempted by another
      process, a BIF that yields, a move to a dirty scheduler). Told only
      where receive events come (`follow: :messages`, the default); with
      `follow: :calls` that time is wait of cause `:other`.
    * `wait_us` – off a CPU waiting for a message (in a receive). It splits
      into `attributed_wait_us`, the part a span of the trace
      explains (the process that ended the wait was working for the trace,
      in that span, meanwhile; `FlameOn.Client.Graph` has an edge for it),
      and `unattributed_wait_us`, what nothing of the trace explains.
    * `unattributed_by` – the unattributed wait by what ended it: `:process`
      (a message from a process outside the trace, or from one of the
      trace's outside its spans), `:port` (socket data, a port's reply),
      `:timer` (`receive ... after`, `Process.sleep/1`, `send_after`) and
      `:other` (no message, or not known which: `follow: :calls`).
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
    gc_us: 0,
    runnable_us: 0,
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
          gc_us: non_neg_integer(),
          runnable_us: non_neg_integer(),
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
