defmodule FlameOn.Client.Capture.Process do
  @moduledoc false
  # mode: :process – exact stacks from call tracing, with a tracer process
  # (FlameOn.Client.Owners.Tracer) that takes the trace messages and
  # ingests them into the core session in batches: the portable baseline
  # (a burst of events queues in its mailbox). Needs the call patterns on
  # every function while it runs; the tracer process takes them.
  use FlameOn.Client.Capture.Mode

  @impl true
  def description,
    do: "exact calls, events as messages to a tracer process (the portable baseline)"

  @impl true
  def flags, do: FlameOn.Client.Owners.Tracer.trace_flags()

  @impl true
  def call_patterns?, do: true

  @impl true
  def tracer, do: :process
end
