defmodule FlameOn.Client.Owners.Sampled do
  @moduledoc """
  A process that samples **another** process (mode `:sample`): the
  counterpart of `FlameOn.Client.Owners.Tracer` for
  `FlameOn.Client.Tracing.start_trace/2` and `FlameOn.Client.Telemetry`.

  It owns a native session, puts the `:running` flag (with the NIF as
  tracer: exact on- and off-CPU time, no call breakpoints) on the traced
  process and runs a `FlameOn.Client.Sampling.Sampler` for it. `finish/2` stops both
  and returns the `FlameOn.Client.Profile` (`mode: :sample`). If the traced
  process exits first, the profile is kept until `finish/2` asks for it.
  `pid: [pid, ...]` samples several processes into one profile (the
  whole-node mode of `FlameOn.Client.Tracing.start_trace/2`); those that
  already have a tracer are skipped (`stats.skipped_processes`).
  If the session dies, `FlameOn.Client.Node.Patterns` (which it registered with)
  restores `backtrace_depth`, and the traced process's flags are swept (our
  tracer module, see `FlameOn.Client.Node.Sweep`).
  """

  use GenServer, restart: :temporary

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Node.TraceBackend

  @flags [:running]

  @typedoc "Options of `start/1`."
  @type option ::
          {:pid, pid() | [pid()]}
          | {:owner, pid()}
          | {:name, String.t()}
          | {:limits, map()}
          | {:interval_us, pos_integer()}
          | {:split_status, boolean()}
          | {:max_samples, pos_integer()}

  @doc """
  Starts sampling `opts[:pid]` under `FlameOn.Client.OwnerSupervisor`.
  Returns `{:error, {:already_traced, tracer}}` when the process has a
  tracer, `{:error, :noproc}` when it is not alive.
  """
  @spec start([option()]) :: {:ok, pid()} | {:error, term()}
  def start(opts) when is_list(opts) do
    DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, {__MODULE__, opts})
  end

  @doc false
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc """
  Stops sampling and returns the profile. Options are accepted for
  compatibility with `FlameOn.Client.Owners.Tracer.finish/2` and ignored:
  samples need no draining.
  """
  @spec finish(pid(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def finish(session, _opts \\ []) do
    GenServer.call(session, :finish, :infinity)
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    pids = List.wrap(Keyword.fetch!(opts, :pid))
    limits = Keyword.get(opts, :limits, %{})
    depth = Sampler.backtrace_depth(Map.get(limits, :max_depth, 512))
    checked = Enum.map(pids, &{&1, TraceBackend.check_tracee(&1)})

    with {:ok, native} <- new_native(limits),
         [_ | _] = ok <- for({pid, :ok} <- checked, do: pid) do
      :ok = Patterns.acquire_depth(depth)
      # the callbacks find the session by a small integer, its tracer state
      handle = TraceBackend.open(:trace, {Native, Native.tracer_state(native)})
      started_ts = :erlang.monotonic_time()

      sampler_opts =
        Sampler.option_defaults()
        |> Keyword.merge(Keyword.take(opts, Keyword.keys(Sampler.option_defaults())))
        |> Keyword.put(:depth, depth)

      samplers =
        for pid <- ok, trace(handle, pid), into: %{} do
          {pid, Sampler.start(native, pid, sampler_opts)}
        end

      {:ok,
       %{
         pid: if(is_list(Keyword.fetch!(opts, :pid)), do: nil, else: hd(pids)),
         pid_ref: if(length(pids) == 1, do: Process.monitor(hd(pids))),
         native: native,
         handle: handle,
         samplers: samplers,
         skipped: length(pids) - map_size(samplers),
         name: Keyword.get(opts, :name, "flame_on"),
         started_ts: started_ts,
         profile: nil
       }}
    else
      {:error, reason} -> {:stop, reason}
      # none could be sampled: the first one's reason
      [] -> {:stop, checked |> Enum.map(&elem(&1, 1)) |> Enum.find(&(&1 != :ok)) |> elem(1)}
    end
  end

  defp trace(handle, pid) do
    TraceBackend.trace(handle, pid, true, @flags)
    true
  rescue
    # it exited in between
    ArgumentError -> false
  end

  @impl GenServer
  def handle_call(:finish, _from, state) do
    state = finish_trace(state)
    {:stop, :normal, {:ok, state.profile}, state}
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, _, _}, %{pid_ref: ref} = state),
    do: {:noreply, finish_trace(state)}

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{profile: nil} = state) do
    Enum.each(Map.keys(state.samplers), &TraceBackend.untrace(state.handle, &1, @flags))
    Native.stop(state.native)
    TraceBackend.close(state.handle)
  end

  def terminate(_reason, _state), do: :ok

  defp finish_trace(%{profile: %Profile{}} = state), do: state

  defp finish_trace(state) do
    end_ts = :erlang.monotonic_time()
    Native.stop(state.native)

    sampled =
      Sampler.summarize(Enum.map(state.samplers, fn {pid, s} -> {pid, Sampler.stop(s)} end))

    Enum.each(Map.keys(state.samplers), &TraceBackend.untrace(state.handle, &1, @flags))
    TraceBackend.close(state.handle)
    Patterns.release_depth()
    {raw, stats} = Native.finish(state.native, :stop)

    stats =
      stats
      |> Map.merge(sampled.stats)
      |> Map.merge(%{unprocessed_events: 0, skipped_processes: state.skipped})

    profile =
      Profile.build(raw, stats,
        trace_id: System.unique_integer([:positive, :monotonic]),
        name: state.name,
        mode: :sample,
        pid: state.pid,
        started_at: System.convert_time_unit(state.started_ts, :native, :microsecond),
        duration_us: System.convert_time_unit(end_ts - state.started_ts, :native, :microsecond)
      )

    %{state | profile: %{profile | metrics: sampled.metrics}}
  end

  defp new_native(limits) do
    {:ok,
     Native.new(
       Map.put(limits, :native_per_second, System.convert_time_unit(1, :second, :native))
     )}
  rescue
    ArgumentError -> {:error, {:invalid_limits, limits}}
  end
end
