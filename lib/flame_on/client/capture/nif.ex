defmodule FlameOn.Client.Capture.Nif do
  @moduledoc false
  # mode: :nif – exact stacks from call tracing, with the NIF as the tracer
  # module: the VM hands each call, return_to and scheduling event to the
  # NIF inside the traced process, which folds it into the core session
  # with no message. Needs the call patterns on every function while it
  # runs (every process of the node pays their breakpoint check).
  @behaviour FlameOn.Client.Capture.Mode

  # The NIF stamps events itself, so no :monotonic_timestamp flag.
  @flags [:call, :return_to, :running, :arity]

  @impl true
  def description, do: "exact calls; call patterns on every function while it runs"

  @impl true
  def flags, do: @flags

  @impl true
  def call_patterns?, do: true

  @impl true
  def follows_callees?, do: false

  @impl true
  def tracer, do: :core

  @impl true
  def acquire(_opts), do: :ok

  @impl true
  def release(_opts), do: :ok

  @impl true
  def watch(watchers, _core, _pid, _opts, _root), do: watchers

  @impl true
  def unwatch(_watchers), do: %{metrics: %{}, stats: %{}}
end
