defmodule FlameOn.Client.Capture.Sample do
  @moduledoc false
  # mode: :sample – no call breakpoints at all. The calling process gets the
  # :running flag (per process, no breakpoint) with the NIF as tracer, so
  # its on- and off-CPU intervals are exact, and a FlameOn.Client.Sampling.Sampler
  # folds its stack into the same session at :interval_us. Nothing is set
  # on the code, so other processes pay nothing.
  @behaviour FlameOn.Client.Capture

  alias FlameOn.Client.Capture
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Capture.Nif

  @flags [:running]

  @impl Capture
  def start(opts) do
    Capture.ensure_untraced!()
    native = Capture.new_native!(opts, FlameOn.Client.limit_keys())
    sampler_opts = sampler_opts(opts)
    :ok = Patterns.acquire_depth(sampler_opts[:depth])

    handle = TraceBackend.open(:trace, {Native, Native.tracer_state(native)})

    %{
      module: __MODULE__,
      native: native,
      handle: handle,
      flags: [{handle, @flags}],
      sampler_opts: sampler_opts
    }
  end

  @doc "The `FlameOn.Client.Sampling.Sampler` options of a trace with these `profile/2` options."
  @spec sampler_opts(map()) :: keyword()
  def sampler_opts(opts) do
    [
      interval_us: opts.interval_us,
      split_status: opts.split_status,
      max_samples: opts.max_samples,
      depth: backtrace_depth(opts),
      root: {FlameOn.Client, :profile, 2}
    ]
  end

  @doc "The `backtrace_depth` a sample trace with these options needs."
  @spec backtrace_depth(map()) :: pos_integer()
  def backtrace_depth(opts), do: Sampler.backtrace_depth(opts.max_depth)

  @impl Capture
  def begin(capture) do
    Map.put(capture, :sampler, Sampler.start(capture.native, self(), capture.sampler_opts))
  end

  @impl Capture
  def stop(%{native: native}), do: Native.stop(native)

  @impl Capture
  def finish(%{native: native, sampler: sampler, handle: handle}, started_ts, end_ts, opts) do
    TraceBackend.close(handle)
    sampled = Sampler.summarize([{self(), Sampler.stop(sampler)}])
    Patterns.release_depth()
    {raw, stats} = Native.finish(native, :stop)
    stats = stats |> Map.merge(sampled.stats) |> Map.put(:unprocessed_events, 0)
    profile = Profile.build(raw, stats, Nif.fields(:sample, started_ts, end_ts, opts))
    {:ok, %{profile | metrics: sampled.metrics}}
  end
end
