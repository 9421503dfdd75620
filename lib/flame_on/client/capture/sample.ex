defmodule FlameOn.Client.Capture.Sample do
  @moduledoc false
  # mode: :sample – no call breakpoints at all. A traced process gets the
  # :running flag (per process, no breakpoint) with the NIF as tracer, so
  # its on- and off-CPU intervals are exact, and a
  # FlameOn.Client.Sampling.Sampler folds its stack into the same core
  # session every :interval_us. Nothing is set on the code, so other
  # processes pay nothing. While it runs the node's backtrace_depth is
  # raised (FlameOn.Client.Node.BacktraceDepth), so stacks are deep enough.
  use FlameOn.Client.Capture.Mode

  alias FlameOn.Client.Node.BacktraceDepth
  alias FlameOn.Client.Options.Config
  alias FlameOn.Client.Sampling.{Budget, Results, Sampler, Tick}

  @impl true
  def description, do: "stack samples and exact on/off-CPU time; no call breakpoints"

  # :receive: a wait no message ended was runnable time (the sampler
  # says which slices its own stack requests woke a waiting process for:
  # Native.sample_signal/2)
  @impl true
  def flags, do: [:running, :garbage_collection, :receive]

  @impl true
  def core_options(_opts, _root), do: %{receives: :sampled}

  @impl true
  def call_patterns?, do: false

  @impl true
  def follows_callees?, do: true

  # Sampled stacks need the node's backtrace_depth raised before the first
  # sample. What a sampler runs is loaded now too: loaded on demand
  # (interactive mode) by the code server, on a node as busy as the traced
  # work may be, a first sample came late (measured: 80-260 ms with four
  # busy processes).
  @impl true
  def acquire(opts) do
    Enum.each([Sampler, Tick, Results, Budget, Config, :rand], &Code.ensure_loaded/1)
    BacktraceDepth.acquire(backtrace_depth(opts))
  end

  @impl true
  def release(_opts), do: BacktraceDepth.release()

  # A process that serves the trace again (a cross-process callee) wakes
  # its sampler; any other gets one.
  @impl true
  def watch(samplers, core, pid, opts, root) do
    case samplers do
      %{^pid => sampler} ->
        Sampler.wake(sampler)
        samplers

      _ ->
        Map.put(samplers, pid, Sampler.start(core, pid, sampler_opts(opts, root)))
    end
  end

  @impl true
  def unwatch(samplers), do: Sampler.stop_all(samplers)

  @doc "The `FlameOn.Client.Sampling.Sampler` options of a trace with these options."
  @spec sampler_opts(map(), mfa() | nil) :: keyword()
  def sampler_opts(opts, root) do
    [
      interval_us: opts.interval_us,
      split_status: opts.split_status,
      max_samples: opts.max_samples,
      depth: backtrace_depth(opts),
      root: root
    ]
  end

  @doc "The `backtrace_depth` a sample trace with these options needs."
  @spec backtrace_depth(map()) :: pos_integer()
  def backtrace_depth(opts), do: Sampler.backtrace_depth(opts.max_depth)
end
