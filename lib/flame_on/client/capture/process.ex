defmodule FlameOn.Client.Capture.Process do
  @moduledoc false
  # mode: :process – a TraceSession process is the tracer and ingests the
  # trace messages in batches; the call event of TraceSession.end_mark/0
  # ends the trace.
  @behaviour FlameOn.Client.Capture

  alias FlameOn.Client.{Capture, TraceSession}

  @impl Capture
  def start(opts) do
    session_opts = [
      pid: self(),
      owner: self(),
      attach: :tracee,
      name: opts.name,
      limits: Map.take(opts, FlameOn.Client.limit_keys())
    ]

    case TraceSession.start(session_opts) do
      {:ok, session} ->
        %{
          module: __MODULE__,
          session: session,
          flags: [{TraceSession.handle(session), TraceSession.trace_flags()}]
        }

      {:error, reason} ->
        Capture.raise_start_error!(reason, "a trace session")
    end
  end

  @impl Capture
  def begin(capture), do: capture

  @impl Capture
  def stop(_capture), do: TraceSession.end_mark()

  @impl Capture
  def finish(%{session: session}, started_ts, end_ts, opts) do
    TraceSession.finish(session, started_ts: started_ts, end_ts: end_ts, timeout: opts.timeout)
  end
end
