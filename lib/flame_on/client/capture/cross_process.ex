defmodule FlameOn.Client.Capture.CrossProcess do
  @moduledoc false
  # cross_process: true, in any mode. A FlameOn.Client.Owners.CrossProcess
  # owns the trace (its core session with the span graph, cross-process
  # tracing, lifetime, the processes that join); the connected nodes that
  # run the application are armed (FlameOn.Client.Cluster) before the root
  # gets its seq_trace token (label = the trace id), so nothing of the
  # setup carries the token and no message of the trace reaches a node
  # before it is ready. The send pattern set by FlameOn.Client.Node.Patterns
  # turns tracing on in each process the root's work reaches, and the
  # router sends every event to this trace's core session.
  #
  # Targets: {:self, root} (the root is the calling process) and {:gate,
  # mfa} (the root is the next caller of mfa; the gate's match spec gives
  # it its flags and token in the legacy session).

  alias FlameOn.Client.{Cluster, Owners}
  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{Patterns, TraceBackend}
  alias FlameOn.Client.Owners.Tracer

  # :send runs the send pattern; :procs sees exits.
  @graph_flags [:send, :procs]
  # follow: :messages: receive events say who woke the root, and processes
  # it spawns start traced (mode :process: its tracer, an Owners.Tracer,
  # would be theirs too, so spawns are not followed there).
  @follow_flags [:receive, :set_on_spawn]

  @doc false
  @spec open(tuple(), map(), module()) :: {:ok, map()} | {:error, term()}
  def open(target, opts, mode) do
    owner_opts = [
      mode: mode,
      opts: opts,
      root: if(match?({:self, _}, target), do: self()),
      root_mfa: elem(target, 1),
      # the gate turns the caller's flags on in the legacy session, where
      # its :send flag runs the send pattern
      legacy: match?({:gate, _}, target)
    ]

    with :ok <- check(target),
         {:ok, owner} <- Owners.CrossProcess.start(owner_opts) do
      case Owners.CrossProcess.info(owner) do
        {:ok, info} -> {:ok, opened(target, opts, mode, owner, info)}
        {:error, {reason, _}} -> {:error, reason}
        {:error, reason} -> {:error, reason}
      end
    end
  end

  defp check({:self, _root}), do: Common.check_self()
  defp check(_target), do: :ok

  defp opened(target, opts, mode, owner, info) do
    # Only once the trace started: a refused start keeps nothing raised.
    :ok = mode.acquire(opts)
    cluster = Cluster.arm(info.label, owner, opts)

    # Last: nothing of the setup carries the token. (A gate's match spec
    # gives the caller its token.)
    if match?({:self, _}, target) do
      :seq_trace.set_token(:label, info.label)
      :seq_trace.set_token(:send, true)
      :seq_trace.set_token(:receive, true)
    end

    %{
      scope: __MODULE__,
      mode: mode,
      opts: opts,
      target: target,
      owner: owner,
      core: info.native,
      label: info.label,
      cluster: cluster,
      flags: flags(target, opts, mode, info),
      pids: [],
      watchers: %{}
    }
  end

  # mode tracer :process: the root's own events go to its timeline (its
  # receive events too), and its :send flag runs the cross-process
  # handle's send pattern. Its collections are followed as the other
  # processes' are (their flags: FlameOn.Client.Node.MessagePatterns);
  # its receive events only when the trace follows messages (the span
  # graph then tells runnable time from waits by them). On OTP 27+ only
  # the timeline takes the root's collections: two trace sessions taking
  # one process's crash the VM there (erlang/otp#11624), so the send
  # pattern turns no :garbage_collection on and TraceBackend leaves it out
  # where another session has it.
  defp flags(target, opts, mode, %{handle: handle, timeline: timeline}) do
    follow = if opts.follow == :messages, do: @follow_flags, else: []
    own = mode.flags() -- [:receive]

    case mode.tracer() do
      :core ->
        [{handle, own ++ @graph_flags ++ follow}]

      :process when elem(target, 0) == :self ->
        timeline_handle = Tracer.handle(timeline)
        if follow != [], do: receive_pattern(timeline_handle)
        [{timeline_handle, own ++ (follow -- [:set_on_spawn])}, {handle, [:send]}]
    end
  end

  # A trace session of the timeline's own needs the receive pattern too,
  # for the root's receive events to name their sender (in the legacy
  # session Patterns set it for every cross-process trace).
  defp receive_pattern(handle) do
    unless TraceBackend.shared?(handle),
      do: TraceBackend.pattern(handle, :receive, Patterns.receive_match_spec(), [])
  end

  @doc false
  # The root's span starts (a gate's core starts it itself, at the call),
  # and its watchers: a sampler is ours, not the trace's, so it must not
  # inherit the token.
  @spec begin(map(), pid()) :: map()
  def begin(%{mode: mode, core: core, opts: opts} = capture, pid) do
    root =
      case capture.target do
        {:self, root} ->
          Native.graph_begin(core)
          root

        {:gate, mfa} ->
          mfa
      end

    token = :seq_trace.set_token([])
    watchers = mode.watch(capture.watchers, core, pid, opts, root)
    :seq_trace.set_token(token)
    %{capture | watchers: watchers, pids: Enum.uniq(capture.pids ++ [pid])}
  end

  @doc false
  # :core tracer: the tracer discards every later event. :process: the
  # root's timeline drops end_mark's call event and everything after it.
  @spec stop(map()) :: integer()
  def stop(%{mode: mode, core: core}) do
    end_ts =
      case mode.tracer() do
        :core -> Native.stop(core)
        :process -> Tracer.end_mark()
      end

    :seq_trace.set_token([])
    end_ts
  end

  @doc false
  # The owner builds the profile; the other nodes' parts are collected
  # while it still runs (each part stops when it goes) and merged in; then
  # the owner lets the trace's followers go and stops.
  @spec finish(map(), integer(), integer()) ::
          {:ok, FlameOn.Client.Profile.t()} | {:error, term()}
  def finish(%{owner: owner, mode: mode, opts: opts} = capture, started_ts, end_ts) do
    root_watched = mode.unwatch(capture.watchers)

    # The mode lets go once the owner finished: mode :native's last slices
    # take their CPU samples as the session closes, from the sampler's
    # buffers, which the last user's release frees.
    finished =
      try do
        Owners.CrossProcess.finish(owner,
          started_ts: started_ts,
          end_ts: end_ts,
          timeout: opts.timeout,
          root: List.first(capture.pids),
          root_watched: root_watched
        )
      after
        :ok = mode.release(opts)
      end

    with {:ok, profile} <- finished do
      profile = Cluster.finish(capture.cluster, profile)
      Owners.CrossProcess.stop(owner)
      # (what answered meanwhile may have had the token from the trace)
      :seq_trace.set_token([])
      {:ok, profile}
    end
  end

  @doc false
  # Stopped before finishing: nothing more is followed; Patterns gives
  # cross-process tracing back when it sees the owner go, and the parts
  # stop when they see it go.
  @spec abort(map()) :: :ok
  def abort(%{owner: owner, core: core} = capture) do
    Native.stop(core)
    :seq_trace.set_token([])
    capture.mode.unwatch(capture.watchers)
    capture.mode.release(capture.opts)
    Owners.CrossProcess.stop(owner)
  end
end
