defmodule FlameOn.Client.Graph.Edge do
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
