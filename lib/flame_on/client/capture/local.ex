defmodule FlameOn.Client.Capture.Local do
  @moduledoc false
  # One process, or a few, traced into one core session (every trace
  # without cross_process: true). The process that opens the capture holds
  # what it takes of the node (the call patterns' registration, a raised
  # backtrace_depth), so it is the one that finishes or aborts it: the
  # calling process for profile/2 and capture_next/2, the trace's owner
  # (FlameOn.Client.Owners.Trace) for start_trace/2 and telemetry.
  #
  # The mode decides who takes the events (`tracer/0`): the NIF tracer
  # module folds them into the core session inside the traced process
  # (`:core`), or a FlameOn.Client.Owners.Tracer process takes them as
  # messages (`:process`).

  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{Patterns, TraceBackend}
  alias FlameOn.Client.Owners.Tracer
  alias FlameOn.Client.Profile

  @doc false
  @spec open(tuple(), map(), module()) :: {:ok, map()} | {:error, term()}
  def open(target, opts, mode) do
    with {:ok, skipped} <- check(target) do
      capture = %{
        scope: __MODULE__,
        mode: mode,
        opts: opts,
        target: target,
        core: nil,
        handle: nil,
        tracer: nil,
        flags: [],
        pids: [],
        watchers: %{},
        skipped: skipped,
        patterns: false
      }

      case mode.tracer() do
        :core -> open_core(capture)
        :process -> open_process(capture)
      end
    end
  end

  # What of the target can be traced: :ok, or why not. A list of processes
  # skips those it cannot trace (counted), unless it is all of them.
  defp check({:self, _root}), do: with(:ok <- Common.check_self(), do: {:ok, 0})
  defp check({:gate, _mfa}), do: {:ok, 0}
  defp check({:pid, pid}), do: with(:ok <- TraceBackend.check_tracee(pid), do: {:ok, 0})

  defp check({:pids, pids}) do
    checked = Enum.map(pids, &TraceBackend.check_tracee/1)

    case Enum.count(checked, &(&1 == :ok)) do
      0 -> Enum.find(checked, &(&1 != :ok))
      ok -> {:ok, length(pids) - ok}
    end
  end

  defp open_core(%{mode: mode, opts: opts, target: target} = capture) do
    extra = Map.merge(mode.core_options(opts, root(capture)), heap_levels(capture))

    with {:ok, core} <- Common.new_core(opts, extra) do
      tracer = {Native, Native.tracer_state(core)}
      # A gate's match spec turns tracing on in the legacy session, with
      # the tracer in its flag list (FlameOn.Client.NextCall.Gate).
      handle =
        if match?({:gate, _}, target) or legacy_first?(mode, target),
          do: TraceBackend.legacy(tracer),
          else: TraceBackend.open(:trace, tracer)

      capture = %{capture | core: core, handle: handle, flags: [{handle, mode.flags()}]}

      with :ok <- patterns(capture) do
        :ok = mode.acquire(opts)
        {:ok, %{capture | patterns: mode.call_patterns?()}}
      end
    end
  end

  # On OTP 27+ a trace session of our own costs the node about 0.8 ms of
  # CPU when it is destroyed (the VM goes over all code and processes
  # with the schedulers stopped; bench/RESULTS.md), more than the rest of
  # a trace in mode :sample or :native. A trace that sets flags only
  # (no call patterns), on processes nobody traces in the legacy session,
  # goes there instead, as on OTP 25-26 (its flags come off when it ends);
  # a process traced there by another tool keeps it beside our session.
  defp legacy_first?(mode, target) do
    TraceBackend.sessions?() and not mode.call_patterns?() and legacy_free?(target)
  end

  defp legacy_free?({:self, _root}), do: legacy_free?(self())
  defp legacy_free?({:pid, pid}), do: legacy_free?(pid)
  defp legacy_free?({:pids, pids}), do: Enum.all?(pids, &legacy_free?/1)
  defp legacy_free?(pid) when is_pid(pid), do: :erlang.trace_info(pid, :tracer) == {:tracer, []}
  defp legacy_free?(_target), do: false

  defp patterns(%{mode: mode, handle: handle, core: core} = capture) do
    with true <- mode.call_patterns?(),
         {:error, _} = error <- Patterns.acquire(tracee(capture), handle) do
      TraceBackend.close(handle)
      Native.stop(core)
      error
    else
      _ -> :ok
    end
  end

  # alloc: true: the heaps of the processes about to be traced, so that
  # their first collection counts from here (Common.heap_levels/1).
  defp heap_levels(%{opts: %{alloc: true}, target: target}) do
    case target do
      {:self, _root} -> Common.heap_levels([self()])
      {:pid, pid} -> Common.heap_levels([pid])
      {:pids, pids} -> Common.heap_levels(pids)
      {:gate, _mfa} -> %{}
    end
  end

  defp heap_levels(_capture), do: %{}

  # Whose flags Patterns clears should the holder die mid-trace.
  defp tracee(%{target: {:self, _root}}), do: self()
  defp tracee(%{target: {:pid, pid}}), do: pid
  defp tracee(_capture), do: nil

  defp open_process(%{opts: opts} = capture) do
    case tracee(capture) do
      nil ->
        {:error, {:unsupported, "mode :process traces one process of this node"}}

      pid ->
        tracer_opts = [
          pid: pid,
          owner: self(),
          attach: :tracee,
          name: opts.name,
          limits:
            opts
            |> Map.take(FlameOn.Client.Options.limit_keys())
            |> Map.merge(Common.alloc_option(opts))
            |> Map.merge(heap_levels(capture))
        ]

        with {:ok, tracer} <- Tracer.start(tracer_opts) do
          flags = [{Tracer.handle(tracer), Tracer.trace_flags()}]
          {:ok, %{capture | tracer: tracer, flags: flags}}
        end
    end
  end

  @doc false
  @spec begin(map(), pid()) :: map()
  def begin(%{mode: mode, core: core, opts: opts} = capture, pid) do
    watchers = mode.watch(capture.watchers, core, pid, opts, root(capture))
    pids = if pid in capture.pids, do: capture.pids, else: capture.pids ++ [pid]
    %{capture | watchers: watchers, pids: pids}
  end

  # Where the stacks of a traced process start.
  defp root(%{target: {:self, root}}), do: root
  defp root(%{target: {:gate, mfa}}), do: mfa
  defp root(_capture), do: nil

  @doc false
  # :core: the tracer discards every later event (it never folds calls
  # into FlameOn.Client.Core.Native, so stop's own call leaves no frame).
  # :process: the tracer process drops end_mark/0's call event and
  # everything after it.
  @spec stop(map()) :: integer()
  def stop(%{core: nil}), do: Tracer.end_mark()
  def stop(%{core: core}), do: Native.stop(core)

  @doc false
  @spec finish(map(), integer(), integer() | nil) :: {:ok, Profile.t()} | {:error, term()}
  def finish(%{tracer: tracer, opts: opts}, started_ts, end_ts) when is_pid(tracer) do
    Tracer.finish(tracer, started_ts: started_ts, end_ts: end_ts, timeout: opts.timeout)
  end

  def finish(%{core: core, opts: opts} = capture, started_ts, end_ts) do
    if capture.patterns, do: Patterns.release()
    TraceBackend.close(capture.handle)
    watched = capture.mode.unwatch(capture.watchers)

    # The tracer stamps events on its own clock; stop/1 noted when it ended.
    # Finished before the mode lets go: mode :native's last slices take
    # their CPU samples as the session closes, from the sampler's buffers,
    # which the last user's release frees.
    {raw, stats} =
      try do
        Native.finish(core, :stop)
      after
        :ok = capture.mode.release(opts)
      end

    stats =
      stats
      |> Map.merge(watched.stats)
      |> Map.put(:unprocessed_events, 0)
      |> skipped(capture)

    profile = Profile.build(raw, stats, Common.fields(opts, pid(capture), started_ts, end_ts))
    {:ok, %{profile | metrics: watched.metrics}}
  end

  defp skipped(stats, %{target: {kind, _}, skipped: n}) when kind in [:pid, :pids],
    do: Map.put(stats, :skipped_processes, n)

  defp skipped(stats, _capture), do: stats

  # The profile's process: the traced one, none for several.
  defp pid(%{target: {:self, _root}}), do: self()
  defp pid(%{target: {:pid, pid}}), do: pid
  defp pid(%{target: {:pids, _}}), do: nil
  defp pid(%{pids: pids}), do: List.first(pids)

  @doc false
  # finish/3 without the profile: what the capture holds is given back and
  # the core session's tables freed now (finish/2 frees them; abort/1
  # leaves them to the handle's garbage collection), nothing is built.
  @spec discard(map()) :: :ok
  def discard(%{tracer: tracer} = capture) when is_pid(tracer), do: abort(capture)

  def discard(%{core: core, opts: opts} = capture) do
    if capture.patterns, do: Patterns.release()
    TraceBackend.close(capture.handle)
    capture.mode.unwatch(capture.watchers)
    _ = Native.finish(core, :stop)
    :ok = capture.mode.release(opts)
    :ok
  end

  @doc false
  @spec abort(map()) :: :ok
  def abort(%{tracer: tracer}) when is_pid(tracer) do
    GenServer.stop(tracer, :shutdown, 5_000)
  catch
    :exit, _ -> :ok
  end

  def abort(%{core: core} = capture) do
    Native.stop(core)
    capture.mode.unwatch(capture.watchers)
    if capture.patterns, do: Patterns.release()
    capture.mode.release(capture.opts)
    TraceBackend.close(capture.handle)
    :ok
  end
end
