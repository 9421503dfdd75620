defmodule FlameOn.Client.Capture.CrossProcess do
  @moduledoc false
  # cross_process: a CrossProcess owns the trace (graph session, graph
  # tracing, lifetime, the root's timeline in mode :process, finishing and
  # shipping); the root gets a seq_trace token (label = the trace id) after
  # it started, so nothing of the setup carries the token. The send pattern
  # set by Patterns turns tracing on in each callee, and the router sends
  # every event to this trace's session.
  @behaviour FlameOn.Client.Capture

  alias FlameOn.Client.Capture
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Owners.CrossProcess
  alias FlameOn.Client.Owners.Tracer
  alias FlameOn.Client.Capture.Sample

  # :send runs the send pattern; :procs sees exits.
  @nif_flags [:call, :return_to, :running, :arity, :send, :procs]
  # mode :sample: no call events; the root and each callee are sampled.
  @sample_flags [:running, :send, :procs]
  # follow: :messages: receive events say who woke the root, and processes
  # it spawns start traced (mode :process: its tracer, a Tracer,
  # would be theirs too, so spawns are not followed there).
  @follow_flags [:receive, :set_on_spawn]

  @impl Capture
  def start(opts) do
    Capture.ensure_untraced!()

    sampler = if opts.mode == :sample, do: Sample.sampler_opts(opts)

    graph_opts = [
      root: self(),
      mode: opts.mode,
      name: opts.name,
      sleep: opts.sleep,
      follow: opts.follow,
      max_duration_ms: opts.max_duration_ms,
      cluster: opts.cluster,
      limits: Map.take(opts, FlameOn.Client.limit_keys()),
      sampler: sampler && Keyword.delete(sampler, :root)
    ]

    owner =
      case CrossProcess.start(graph_opts) do
        {:ok, owner} -> owner
        {:error, reason} -> Capture.raise_start_error!(reason, "a cross-process trace")
      end

    %{native: native, label: label, handle: handle, timeline: timeline} =
      case CrossProcess.info(owner) do
        {:ok, info} -> info
        # the root's timeline could not start (mode :process)
        {:error, {reason, _}} -> Capture.raise_start_error!(reason, "a cross-process trace")
        {:error, reason} -> Capture.raise_start_error!(reason, "a cross-process trace")
      end

    # Only once the trace started: a refused start keeps nothing raised.
    if sampler, do: :ok = Patterns.acquire_depth(sampler[:depth])

    follow = if opts.follow == :messages, do: @follow_flags, else: []

    # mode :process: the root's own events go to its timeline (its receive
    # events too), and its :send flag runs the graph handle's send pattern.
    flags =
      case opts.mode do
        :nif ->
          [{handle, @nif_flags ++ follow}]

        :sample ->
          [{handle, @sample_flags ++ follow}]

        :process ->
          timeline_handle = Tracer.handle(timeline)
          if follow != [], do: receive_pattern(timeline_handle)

          [
            {timeline_handle, Tracer.trace_flags() ++ (follow -- [:set_on_spawn])},
            {handle, [:send]}
          ]
      end

    # Last: nothing of the setup carries the token.
    :seq_trace.set_token(:label, label)
    :seq_trace.set_token(:send, true)
    :seq_trace.set_token(:receive, true)

    %{
      module: __MODULE__,
      mode: opts.mode,
      owner: owner,
      native: native,
      flags: flags,
      sampler_opts: sampler
    }
  end

  # A trace session of the timeline's own needs the receive pattern too, for
  # the root's receive events to name their sender (in the legacy session
  # Patterns set it for every graph trace).
  defp receive_pattern(handle) do
    unless TraceBackend.shared?(handle),
      do: TraceBackend.pattern(handle, :receive, Patterns.receive_match_spec(), [])
  end

  @impl Capture
  def begin(%{native: native} = capture) do
    Native.graph_begin(native)

    case capture do
      %{mode: :sample, sampler_opts: opts} ->
        # the sampler is ours, not the trace's: it must not inherit the token
        token = :seq_trace.set_token([])
        sampler = Sampler.start(native, self(), opts)
        :seq_trace.set_token(token)
        Map.put(capture, :sampler, sampler)

      _ ->
        capture
    end
  end

  # :nif: stop/1 makes the tracer discard every later event. :process: the
  # session drops end_mark's call event and everything after it.
  @impl Capture
  def stop(capture) do
    end_ts =
      case capture do
        %{mode: mode, native: native} when mode in [:nif, :sample] -> Native.stop(native)
        %{mode: :process} -> Tracer.end_mark()
      end

    :seq_trace.set_token([])
    end_ts
  end

  @impl Capture
  def finish(%{owner: owner} = capture, started_ts, end_ts, opts) do
    root_sampled =
      case capture do
        %{sampler: sampler} ->
          sampled = Sampler.stop(sampler)
          Patterns.release_depth()
          sampled

        _ ->
          nil
      end

    CrossProcess.finish(owner,
      started_ts: started_ts,
      end_ts: end_ts,
      timeout: opts.timeout,
      root_sampled: root_sampled
    )
  end
end
