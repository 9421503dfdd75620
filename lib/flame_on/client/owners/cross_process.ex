defmodule FlameOn.Client.Owners.CrossProcess do
  @moduledoc false
  # The process that owns **one cross-process trace** (`cross_process:
  # true`) on this node: the origin's (role :origin, started by
  # FlameOn.Client.Capture.CrossProcess for profile/2, trace/3, ExUnit and
  # capture_next/2), or one other node's part of a trace across nodes (role
  # :part, started there for FlameOn.Client.Cluster.Part).
  #
  # It holds the trace's core session (every traced process's events, the
  # root's included, are folded into it by the NIF tracer, routed by the
  # seq_trace label and by pid; in mode :process it also starts the
  # FlameOn.Client.Owners.Tracer that ingests the root's own trace messages
  # into it), the span graph the core builds from the seq_trace events (see
  # FlameOn.Client.Graph), cross-process tracing (taken from
  # FlameOn.Client.Node.Patterns: the seq_trace system tracer, the send
  # pattern that turns tracing on in the processes the work reaches), the
  # watchers the mode starts for each of them (mode :sample: a sampler),
  # the trace's lifetime, and finishing.
  #
  #   * Past its lifetime (max_duration_ms) the trace stops following
  #     anything (stats.lifetime_exceeded); the traced work goes on. A part
  #     stops.
  #   * A follower that leaves the trace (a process outside the trace woke
  #     it with nothing of the trace left to do; the core says
  #     {:flame_on_left, pid}) has its trace flags turned off, unless
  #     another running cross-process trace follows it; so do the followers
  #     still there when the trace finishes.
  #   * A part turns the flags on itself in each process of its node that
  #     joins from another node ({:flame_on_callee, pid}): the send pattern
  #     cannot reach across nodes.
  #   * Each process that joins is named then (FlameOn.Client.ProcessName),
  #     while it surely runs (a short-lived one, a Task, is gone by the
  #     end), by a FlameOn.Client.Owners.Namer: a read waits on the process,
  #     and this process must not.
  #   * If the root (the origin) or the origin's owner (a part) dies first,
  #     the trace is stopped and this process stops; if this process dies,
  #     Patterns (which monitors it) stops the trace and, with the last
  #     cross-process trace, turns tracing off everywhere.

  use GenServer, restart: :temporary

  @leave_grace_ms 5

  alias FlameOn.Client.{Graph, ProcessName, Profile}
  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{MessagePatterns, Patterns}
  alias FlameOn.Client.Owners.{Followers, Namer, Tracer}

  @doc """
  Starts the owner for the calling process (it stops when that one
  exits). Options: `:mode` (a mode module), `:opts` (the validated capture
  options), `:root` (a pid, or nil when the root is not known yet: a
  gate's caller, or none for a part), `:legacy` (in the legacy trace
  session even where the VM has trace sessions) and `:part` (nil, or
  `%{label:, origin:, lifetime_ms:}` for a node's part, which stops when
  the origin's owner exits). Returns
  `{:error, {:system_tracer_taken, tracer}}` when another tool owns the
  seq_trace system tracer and `{:error, {:invalid_limits, limits}}` when
  the NIF rejects the limits.
  """
  @spec start(keyword()) :: {:ok, pid()} | {:error, term()}
  def start(opts) do
    opts = Keyword.put(opts, :caller, self())
    DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, {__MODULE__, opts})
  end

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc """
  What the root is traced with: `%{native: core, label: label, handle:
  cross-process tracing handle, timeline: Tracer pid | nil}`.
  """
  @spec info(pid()) :: {:ok, map()} | {:error, term()}
  def info(owner) do
    {:ok, GenServer.call(owner, :info)}
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @doc """
  Finishes the trace and returns its profile. Options: `:started_ts` and
  `:end_ts` (native monotonic time of the traced work's start and end),
  `:timeout` (mode `:process`: time for queued trace messages), `:root`
  (the root process, for a trace started without one) and `:root_watched`
  (what the root's watchers, in the caller, add).
  """
  @spec finish(pid(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def finish(owner, opts) do
    GenServer.call(owner, {:finish, opts}, :infinity)
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @doc """
  A part: stops the trace and returns what the node saw, `%{graph:,
  stacks:, watched:, flagged_at:}` (`FlameOn.Client.Cluster.Part` packs it).
  """
  @spec collect(pid()) :: {:ok, map()} | {:error, term()}
  def collect(owner) do
    GenServer.call(owner, :collect, 30_000)
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @doc """
  Stops the owner: after `finish/2`, the trace's followers are let go and
  cross-process tracing is given back; before it, nothing of the trace is
  kept.
  """
  @spec stop(pid()) :: :ok
  def stop(owner) do
    GenServer.stop(owner, :normal, 30_000)
  catch
    :exit, _ -> :ok
  end

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    mode = Keyword.fetch!(opts, :mode)
    capture = Keyword.fetch!(opts, :opts)
    part = Keyword.get(opts, :part) || nil
    # nil: the root is not known yet (a gate: the core makes the process
    # that makes the captured call the root when it makes it), or there is
    # none (a part)
    root = Keyword.get(opts, :root)
    label = if part, do: part.label, else: System.unique_integer([:positive])

    # A process brought in from another node runs untraced until a part
    # turns its flags on: on a busy node that must not wait in the queue
    # (each message here is handled in microseconds), nor for the code
    # server to load what flags it (a node in interactive mode loads
    # modules on first use: tens of milliseconds on a busy one).
    if part do
      Process.flag(:priority, :high)
      {:module, _} = Code.ensure_loaded(Followers)
    end

    core_options =
      capture
      |> mode.core_options(Keyword.get(opts, :root_mfa))
      |> Map.merge(root_heap_level(capture, root))

    with {:ok, core} <- new_core(capture, Map.put(core_options, :label, label)),
         :ok <- register(core, root),
         :ok <- Native.graph_owner(core, self(), capture.follow == :messages),
         :ok <- Native.graph_watch_callees(core, self()),
         {:ok, handle} <- take_tracing(core, root, label, mode, capture, opts[:legacy]),
         :ok <- if(part, do: mode.acquire(capture), else: :ok) do
      lifetime_ms = if part, do: part.lifetime_ms, else: capture.max_duration_ms
      Process.send_after(self(), :lifetime, lifetime_ms)

      state = %{
        mode: mode,
        opts: capture,
        part: part,
        core: core,
        handle: handle,
        follow: capture.follow,
        label: label,
        root: root,
        ref: monitor(opts[:caller], part),
        timeline: nil,
        names: wait_view(capture.sleep),
        lifetime_exceeded: false,
        # finish/2 ran: the followers to let go when stopped
        finished: nil,
        watchers: %{},
        # followers that left, their flags to turn off after @leave_grace_ms
        leaving: [],
        # a part: the processes it flagged and still follow, and when it
        # flagged each (µs, this node's clock)
        flagged: MapSet.new(),
        flagged_at: %{},
        # the processes that joined, named as they did (by the namer):
        # pid => name, or nil when it has none (ProcessName.names())
        process_names: %{},
        namer: Namer.start(if(capture.alloc, do: core), MessagePatterns.late_gc_handle(handle))
      }

      # The root's Tracer (mode :process) starts under the same supervisor,
      # which is busy starting us until init returns.
      {:ok, state, {:continue, :timeline}}
    end
  end

  defp monitor(_caller, %{origin: origin}), do: Process.monitor(origin)
  defp monitor(caller, _part), do: Process.monitor(caller)

  @impl GenServer
  def handle_continue(:timeline, state) do
    case timeline(state) do
      {:ok, timeline} -> {:noreply, %{state | timeline: timeline}}
      {:stop, reason} -> {:stop, reason, %{state | core: nil}}
    end
  end

  @impl GenServer
  def handle_call(:info, _from, state) do
    info = %{
      native: state.core,
      label: state.label,
      handle: state.handle,
      timeline: state.timeline
    }

    {:reply, info, state}
  end

  # The trace is over: its profile. The owner runs on (the parts of a
  # trace across nodes stop when it goes) until stop/1.
  def handle_call({:finish, opts}, _from, state) do
    # A message of the trace's may have given this process the token (a
    # process keeps it until it takes an untokened message): the reply
    # must not hand it back to the caller, whose trace is over.
    :seq_trace.set_token([])

    case finish_trace(state, opts) do
      {:ok, profile} ->
        followers = Enum.uniq(profile.graph.followers ++ state.leaving)
        {:reply, {:ok, profile}, %{state | core: nil, finished: followers, leaving: []}}

      {:error, _} = error ->
        {:stop, :normal, error, state}
    end
  end

  def handle_call(:collect, _from, state) do
    Native.stop(state.core)
    alloc_tails(state)
    watched = state.mode.unwatch(state.watchers)
    {raw, stats, graph} = Native.finish(state.core, :stop)
    graph = Graph.build(graph, state.label)
    built = Profile.build(raw, stats, [], state.names)
    stacks = built.stacks
    # named here, on their own node
    pids = Enum.map(graph.spans, & &1.pid) ++ Map.keys(stacks)
    names = state |> named() |> ProcessName.complete(pids) |> ProcessName.strings()
    graph = ProcessName.name_graph(graph, names)
    Followers.unfollow(Enum.uniq(graph.followers ++ MapSet.to_list(state.flagged)), state)
    Patterns.release_cross_process()
    state.mode.release(state.opts)

    part = %{
      graph: graph,
      stacks: stacks,
      watched: watched,
      flagged_at: state.flagged_at,
      names: names,
      # alloc: true: this node's processes' allocation, and its totals
      alloc: built.alloc,
      alloc_stats: Map.take(stats, [:alloc_words, :alloc_samples, :alloc_unknown])
    }

    {:stop, :normal, {:ok, part}, %{state | core: nil}}
  end

  @impl GenServer
  def handle_info(:lifetime, %{part: part} = state) when part != nil, do: {:stop, :normal, state}
  def handle_info(:lifetime, %{core: nil} = state), do: {:noreply, state}

  # The root's flags go now, as a follower's that leaves (the graph
  # tracer has the VM remove them only once no cross-process trace runs,
  # and a session's tracer not on every VM: fo_tracer_gone in
  # c_src/nif/trace/fo_tracer.h).
  def handle_info(:lifetime, state) do
    Native.stop(state.core)
    if is_pid(state.root), do: Followers.unfollow([state.root], state, again: false)
    {:noreply, %{state | lifetime_exceeded: true}}
  end

  def handle_info({:DOWN, ref, :process, _, _reason}, %{ref: ref} = state) do
    {:stop, :normal, state}
  end

  # A process took a request of the trace (the core says so): the mode
  # watches it (a mode that follows callees, and every mode on a part), a
  # part turns its flags on if it came from another node, and it is named,
  # once. Watched first: turning a running process's flags on waits until
  # it is scheduled out (tens of milliseconds for a busy callee on a busy
  # node), and its sampler can sample it meanwhile.
  def handle_info({:flame_on_callee, pid}, %{core: core} = state) when core != nil do
    watchers =
      if state.part || state.mode.follows_callees?(),
        do: state.mode.watch(state.watchers, core, pid, state.opts, nil),
        else: state.watchers

    state = if state.part, do: Followers.flag(pid, state), else: state
    unless Map.has_key?(state.process_names, pid), do: Namer.name(state.namer, pid)
    {:noreply, %{state | watchers: watchers}}
  end

  def handle_info({:flame_on_named, pid, name}, state),
    do: {:noreply, %{state | process_names: Map.put(state.process_names, pid, name)}}

  def handle_info({:flame_on_left, pid}, %{part: part} = state) when part != nil do
    Followers.unfollow([pid], state)
    {:noreply, %{state | flagged: MapSet.delete(state.flagged, pid)}}
  end

  # After a short grace, in one batch: a shared server often comes back
  # with the trace's next message, and then keeps its flags.
  def handle_info({:flame_on_left, pid}, %{leaving: leaving} = state) do
    if leaving == [], do: Process.send_after(self(), :unfollow_left, @leave_grace_ms)
    {:noreply, %{state | leaving: [pid | leaving]}}
  end

  def handle_info(:unfollow_left, state) do
    Followers.unfollow(Enum.uniq(state.leaving), state)
    {:noreply, %{state | leaving: []}}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  # The trace is over for its followers too (the last cross-process
  # trace also clears every flag and token of ours, in Patterns).
  @impl GenServer
  def terminate(_reason, %{finished: followers} = state) when is_list(followers) do
    Followers.unfollow(followers, state)
    Patterns.release_cross_process()
  end

  def terminate(_reason, %{core: nil}), do: :ok

  def terminate(_reason, state) do
    # Stopped before finishing (root or origin gone, lifetime over,
    # shutdown): nothing more is followed; Patterns gives cross-process
    # tracing back when it sees us go.
    Native.stop(state.core)
    if state.part, do: Followers.unfollow(MapSet.to_list(state.flagged), state)
    :ok
  end

  # --- internals --------------------------------------------------------------

  defp new_core(capture, extra) do
    with {:error, reason} <- Common.new_core(capture, extra), do: {:stop, reason}
  end

  # alloc: true: the root's heap as the trace starts, so that its first
  # collection counts from here (Common.heap_levels/1). A callee's is
  # read as it joins (handle_info({:flame_on_callee, pid}, ...)).
  defp root_heap_level(%{alloc: true}, root) when is_pid(root), do: Common.heap_levels([root])
  defp root_heap_level(_capture, _root), do: %{}

  # Registered first: the VM asks the tracer (enabled/3, trace_status)
  # whether it is live when it becomes the system tracer. Without a root
  # yet, this process stands in for it (a gate's core puts the real root
  # in its place when the captured call starts).
  defp register(core, root) do
    Native.graph_start(core, root || self())
  rescue
    ArgumentError -> {:stop, :noproc}
  end

  # The names of the processes that joined: the namer stops, and what it
  # sent is taken.
  defp named(state) do
    Namer.stop(state.namer)
    Namer.take(state.process_names)
  end

  defp take_tracing(core, root, label, mode, capture, legacy?) do
    opts = [call_patterns: mode.call_patterns?(), follow: capture.follow, legacy: legacy? == true]

    case Patterns.acquire_cross_process(core, root, label, opts) do
      {:ok, handle} ->
        {:ok, handle}

      {:error, reason} ->
        Native.stop(core)
        {:stop, reason}
    end
  end

  # Mode :process: the root's own events come as trace messages to a
  # Tracer that ingests them into the same core session.
  defp timeline(%{root: root, mode: mode} = state) when is_pid(root) do
    if mode.tracer() == :process, do: start_timeline(state), else: {:ok, nil}
  end

  defp timeline(_state), do: {:ok, nil}

  defp start_timeline(state) do
    tracer_opts = [
      pid: state.root,
      owner: state.root,
      attach: :tracee,
      name: state.opts.name,
      limits: Map.take(state.opts, FlameOn.Client.Options.limit_keys()),
      native: state.core,
      trace_id: state.label,
      graph: %{label: state.label, names: state.names}
    ]

    case Tracer.start(tracer_opts) do
      {:ok, tracer} ->
        {:ok, tracer}

      {:error, reason} ->
        Native.stop(state.core)
        Patterns.release_cross_process()
        {:stop, reason}
    end
  end

  defp finish_trace(%{timeline: timeline} = state, opts) when is_pid(timeline) do
    alloc_tails(state)

    with {:ok, profile} <- Tracer.finish(timeline, opts),
         do: {:ok, profile |> ProcessName.name_profile(named(state)) |> lifetime(state)}
  end

  defp finish_trace(state, opts) do
    root = Keyword.get(opts, :root) || state.root
    started_ts = Keyword.fetch!(opts, :started_ts)
    end_ts = Keyword.fetch!(opts, :end_ts)

    watched =
      Common.merge_watched(
        state.mode.unwatch(state.watchers),
        Keyword.get(opts, :root_watched, %{metrics: %{}, stats: %{}})
      )

    alloc_tails(state)
    # The tracer stamps events on its own clock; stop/1 noted when it ended.
    {raw, stats, graph} = Native.finish(state.core, :stop)
    stats = stats |> Map.merge(watched.stats) |> Map.put(:unprocessed_events, 0)

    fields =
      Common.fields(state.opts, root, started_ts, end_ts) ++
        [trace_id: state.label, graph: Graph.build(graph, state.label)]

    profile =
      raw
      |> Profile.build(stats, fields, state.names)
      |> Map.put(:metrics, watched.metrics)
      |> ProcessName.name_profile(named(state))

    {:ok, lifetime(profile, state)}
  end

  # alloc: true: what each process still following the trace (not the
  # root) allocated since its last collection, from its heap now (a read
  # waits for each one: they are servers done with the trace's requests).
  defp alloc_tails(%{opts: %{alloc: true}, core: core}) do
    pids = Native.graph_alloc_followers(core)

    for {pid, words} <- Common.heap_levels(pids).heap_levels,
        do: Native.graph_heap_tail(core, pid, words)

    :ok
  end

  defp alloc_tails(_state), do: :ok

  defp lifetime(profile, state) do
    %{profile | stats: Map.put(profile.stats, :lifetime_exceeded, state.lifetime_exceeded)}
  end

  # How off-CPU time reads in a cross-process trace's stacks. Default: wait
  # a traced callee explains is not in the caller's stacks (the span graph
  # links it to the callee), and every unexplained wait is WAITING.
  # sleep: :raw: all of it is SLEEP, as in a single-process trace.
  defp wait_view(:raw), do: %{waiting: "SLEEP", attributed: "SLEEP"}
  defp wait_view(:default), do: %{sleep: "WAITING", attributed: nil}
end
