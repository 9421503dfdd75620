defmodule FlameOn.Client.Capture.Process do
  @moduledoc false
  # mode: :process – a Tracer process is the tracer and ingests the
  # trace messages in batches; the call event of Tracer.end_mark/0
  # ends the trace.
  @behaviour FlameOn.Client.Capture

  alias FlameOn.Client.Capture
  alias FlameOn.Client.Owners.Tracer

  @impl Capture
  def start(opts) do
    session_opts = [
      pid: self(),
      owner: self(),
      attach: :tracee,
      name: opts.name,
      limits: Map.take(opts, FlameOn.Client.limit_keys())
    ]

    case Tracer.start(session_opts) do
      {:ok, session} ->
        %{
          module: __MODULE__,
          session: session,
          flags: [{Tracer.handle(session), Tracer.trace_flags()}]
        }

      {:error, reason} ->
        Capture.raise_start_error!(reason, "a trace session")
    end
  end

  @impl Capture
  def begin(capture), do: capture

  @impl Capture
  def stop(_capture), do: Tracer.end_mark()

  @impl Capture
  def finish(%{session: session}, started_ts, end_ts, opts) do
    Tracer.finish(session, started_ts: started_ts, end_ts: end_ts, timeout: opts.timeout)
  end
end
