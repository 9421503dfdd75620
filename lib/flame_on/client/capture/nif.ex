defmodule FlameOn.Client.Capture.Nif do
  @moduledoc false
  # mode: :nif – exact stacks from call tracing, with the NIF as the tracer
  # module: the VM hands each call, return_to and scheduling event to the
  # NIF inside the traced process, and each garbage collection of it
  # (a GC_MINOR or GC_MAJOR leaf), which folds it into the core session
  # with no message. Receive events (one per message it takes) tell a
  # preempted process (RUNNABLE) from a waiting one (SLEEP). Needs the call
  # patterns on every function while it runs (every process of the node
  # pays their breakpoint check).
  use FlameOn.Client.Capture.Mode

  @impl true
  def description, do: "exact calls; call patterns on every function while it runs"

  # The NIF stamps events itself, so no :monotonic_timestamp flag.
  @impl true
  def flags, do: [:call, :return_to, :running, :arity, :garbage_collection, :receive]

  @impl true
  def core_options(_opts, _root), do: %{receives: true}

  @impl true
  def call_patterns?, do: true
end
