defmodule FlameOn.Client.Capture.Nif do
  @moduledoc false
  # mode: :nif – the NIF is the tracer module: the VM folds each event into
  # the session inside the traced process, with no message. If the process
  # is killed mid-trace, its flags die with it, Patterns (which monitors it)
  # clears the patterns and the session resource is garbage collected.
  @behaviour FlameOn.Client.Capture

  alias FlameOn.Client.Capture
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Node.TraceBackend

  # Mode :nif stamps events itself, so no :monotonic_timestamp flag.
  @flags [:call, :return_to, :running, :arity]

  @impl Capture
  def start(opts) do
    Capture.ensure_untraced!()
    native = Capture.new_native!(opts, FlameOn.Client.limit_keys())
    handle = TraceBackend.open(:trace, {Native, Native.tracer_state(native)})

    with {:error, reason} <- Patterns.acquire(self(), handle) do
      TraceBackend.close(handle)
      Capture.raise_start_error!(reason, "a trace")
    end

    %{module: __MODULE__, native: native, handle: handle, flags: [{handle, @flags}]}
  end

  @impl Capture
  def begin(capture), do: capture

  # stop/1 makes the tracer discard every later event (the tracer never
  # folds calls into FlameOn.Client.Core.Native, so stop's own call leaves no
  # frame).
  @impl Capture
  def stop(%{native: native}), do: Native.stop(native)

  @impl Capture
  def finish(%{native: native, handle: handle}, started_ts, end_ts, opts) do
    Patterns.release()
    TraceBackend.close(handle)
    # The tracer stamps events on its own clock; stop/1 noted when it ended.
    {raw, stats} = Native.finish(native, :stop)

    {:ok,
     Profile.build(
       raw,
       Map.put(stats, :unprocessed_events, 0),
       fields(:nif, started_ts, end_ts, opts)
     )}
  end

  @doc "The profile fields of a trace of the calling process."
  @spec fields(atom(), integer(), integer(), map()) :: keyword()
  def fields(mode, started_ts, end_ts, opts) do
    [
      trace_id: System.unique_integer([:positive, :monotonic]),
      name: opts.name,
      mode: mode,
      pid: self(),
      started_at: System.convert_time_unit(started_ts, :native, :microsecond),
      duration_us: System.convert_time_unit(end_ts - started_ts, :native, :microsecond)
    ]
  end
end
