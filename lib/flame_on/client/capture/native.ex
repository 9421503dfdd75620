defmodule FlameOn.Client.Capture.Native do
  @moduledoc false
  # mode: :native – CPU samples of the scheduler threads from Linux perf
  # events, opened from inside the VM (FlameOn.Client.Node.PerfSampler);
  # the kernel unwinds each sample through the frame pointers the JIT keeps
  # when the VM runs with +JPperf true, and the perf map it writes names
  # the frames. A traced process gets only the :running flag (no call
  # breakpoints): its `in` events say which thread runs it from when, so
  # each sample goes to the traced process that was on that thread at that
  # instant, and its in/out events keep its on- and off-CPU time exact.
  # Sampling costs the sampled thread a kernel interrupt per sample and
  # nothing else; the samples are read by the NIF's drainer thread.
  use FlameOn.Client.Capture.Mode

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{BacktraceDepth, PerfSampler}

  @impl true
  def description, do: "CPU samples from Linux perf events (+JPperf true); no call breakpoints"

  # :receive: a wait no message ended was runnable time, when the slice
  # after it shows the process ran its code (a CPU sample of it there)
  @impl true
  def flags, do: [:running, :garbage_collection, :receive]

  @impl true
  def call_patterns?, do: false

  # A phase of three sampling periods or more between two waits gets its
  # own on-CPU time (c_src/core/fo_session.h, fo_session_set_cpu_strata):
  # about three samples, one of which may be lost to kernel time
  @stratum_periods 3

  @impl true
  def core_options(opts, root),
    do: %{
      cpu_sampled: true,
      cpu_root: root,
      cpu_cut: FlameOn.Client.Sampling.Tick.cut_frame(),
      cpu_stratum_ns: div(@stratum_periods * 1_000_000_000, Map.get(opts, :frequency, 499)),
      receives: :cpu
    }

  @impl true
  def acquire(opts) do
    case PerfSampler.acquire(opts.frequency) do
      :ok -> BacktraceDepth.acquire(BacktraceDepth.cpu_sampled())
      {:error, why} -> raise ArgumentError, "mode: :native is not available: " <> why
    end
  end

  @impl true
  def release(_opts) do
    BacktraceDepth.release()
    PerfSampler.release()
  end

  # A process that traces itself is running as its flags go on: it says
  # which thread it runs on (others say so at their next `in`). The
  # sampler's counters as the trace starts: what it lost meanwhile goes
  # into the profile's stats.
  @impl true
  def watch(watchers, core, pid, _opts, _root) do
    if pid == self(), do: Native.cpu_here(core)
    Map.put_new_lazy(watchers, :sampler, &Native.perf_stats/0)
  end

  @impl true
  def unwatch(%{sampler: before}) do
    now = Native.perf_stats()

    %{
      metrics: %{},
      stats: %{
        sampler_samples: max(now.samples - before.samples, 0),
        sampler_lost: max(now.lost - before.lost, 0),
        sampler_overwritten: max(now.overwritten - before.overwritten, 0)
      }
    }
  end

  def unwatch(_watchers), do: %{metrics: %{}, stats: %{}}
end
