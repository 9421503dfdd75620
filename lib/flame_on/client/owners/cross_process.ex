defmodule FlameOn.Client.Owners.CrossProcess do
  @moduledoc """
  A process that owns **one logical request trace across processes**
  (`cross_process: true`).

  It holds the trace's root metadata (its label, the root process, the
  name), its per-process timelines (in mode `:nif` every process's events,
  the root's included, are folded by the NIF tracer into one native graph
  session; in mode `:process` it also starts the `FlameOn.Client.Owners.Tracer`
  that ingests the root's own trace messages into that session), the span
  graph of caller/callee relationships and wait edges (built in the NIF from
  `:seq_trace` events, see `FlameOn.Client.Graph`), the trace's lifetime, and
  its finalization and shipping.

  `FlameOn.Client.profile/2` runs one for each `cross_process: true` profile;
  most code never calls this module directly.

  ## Life cycle

    * `start/1` creates the native graph session, registers it with the NIF's
      router, takes graph tracing from `FlameOn.Client.Node.Patterns` (the seq_trace
      system tracer and the send pattern that turns tracing on in callees),
      starts the root's `Tracer` in mode `:process`, and arms the
      lifetime timer (`max_duration_ms`). `info/1` tells the caller what to
      trace with.
    * Past its lifetime the trace stops following anything
      (`stats.lifetime_exceeded`); the traced function goes on.
    * A follower that leaves the trace (a process outside the trace woke it
      with nothing of the trace left to do; the NIF says
      `{:flame_on_left, pid}`) has its trace flags turned off, unless
      another running graph trace follows it; so do the followers still
      there when the trace finishes.
    * `finish/2` closes the graph, builds the `FlameOn.Client.Profile` with
      its `FlameOn.Client.Graph`, ships it to the `:shipper`s given at start,
      gives graph tracing back and stops.
    * If the root process dies first, the trace is stopped and the session
      stops; if the session dies, `Patterns` (which monitors it) stops the
      trace and, with the last graph trace, turns tracing off everywhere.
  """

  use GenServer, restart: :temporary

  @leave_grace_ms 5

  alias FlameOn.Client.Cluster
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Owners.Tracer

  @typedoc "Options of `start/1`."
  @type option ::
          {:root, pid()}
          | {:mode, :nif | :process | :sample}
          | {:sampler, keyword()}
          | {:name, String.t()}
          | {:sleep, :default | :raw}
          | {:follow, :messages | :calls}
          | {:max_duration_ms, pos_integer()}
          | {:limits, map()}
          | {:shipper, term()}
          | {:legacy, boolean()}
          | {:cluster, false | keyword()}

  @doc """
  Starts the owner of a graph trace of `opts[:root]`. Returns
  `{:error, {:system_tracer_taken, tracer}}` when another tool owns the
  seq_trace system tracer and `{:error, {:invalid_limits, limits}}` when the
  NIF rejects the limits.
  """
  @spec start([option()]) :: {:ok, pid()} | {:error, term()}
  def start(opts) do
    DynamicSupervisor.start_child(FlameOn.Client.OwnerSupervisor, {__MODULE__, opts})
  end

  @doc false
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, opts)

  @doc """
  What the root is traced with: `%{native: session, label: label, handle:
  graph tracing handle, timeline: Tracer pid | nil}` (the handle is a
  `FlameOn.Client.Node.TraceBackend` handle).
  """
  @spec info(pid()) ::
          {:ok,
           %{
             native: Native.session(),
             label: pos_integer(),
             handle: TraceBackend.t(),
             timeline: pid() | nil
           }}
          | {:error, term()}
  def info(session) do
    {:ok, GenServer.call(session, :info)}
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  @doc """
  Finishes the trace and returns its profile. Options: `:started_ts` and
  `:end_ts` (native monotonic time of the traced function's start and end),
  `:timeout` (mode `:process`: time for queued trace messages) and `:root`
  (the root process, for a trace started with `root: nil`).
  """
  @spec finish(pid(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def finish(session, opts) do
    GenServer.call(session, {:finish, opts}, :infinity)
  catch
    :exit, {reason, _} -> {:error, reason}
  end

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    # nil: the root is not known yet (FlameOn.Client.NextCall: the NIF
    # makes the process that makes the captured call the root when it
    # makes it)
    root = Keyword.fetch!(opts, :root)
    mode = Keyword.get(opts, :mode, :nif)
    label = System.unique_integer([:positive])
    names = wait_view(Keyword.get(opts, :sleep, :default))
    limits = Keyword.get(opts, :limits, %{})
    follow = Keyword.get(opts, :follow, :messages)

    with {:ok, native} <- new_native(limits, label),
         :ok <- register(native, root),
         :ok <- Native.graph_owner(native, self(), follow == :messages),
         :ok <- watch_callees(native, mode),
         {:ok, handle} <- take_graph_tracing(native, root, label, mode, follow, opts[:legacy]) do
      max_duration_ms = Keyword.get(opts, :max_duration_ms, 60_000)
      timer = Process.send_after(self(), :lifetime, max_duration_ms)

      # Before the root gets its token: no message of the trace can reach
      # another node before that node is ready.
      cluster =
        Cluster.arm(
          label: label,
          origin: self(),
          follow: follow,
          names: names,
          limits: limits,
          max_duration_ms: max_duration_ms,
          mode: mode,
          sampler: Keyword.get(opts, :sampler) || [],
          cluster: Keyword.get(opts, :cluster, [])
        )

      state = %{
        native: native,
        handle: handle,
        follow: follow,
        label: label,
        root: root,
        root_ref: root && Process.monitor(root),
        mode: mode,
        timeline: nil,
        names: names,
        name: Keyword.get(opts, :name, "flame_on"),
        limits: limits,
        shippers: Shipper.normalize!(Keyword.get(opts, :shipper)),
        timer: timer,
        cluster: cluster,
        lifetime_exceeded: false,
        # mode :sample: a FlameOn.Client.Sampling.Sampler per callee, by pid
        samplers: %{},
        sampler_opts: Keyword.get(opts, :sampler, []),
        # followers that left, their flags to turn off after @leave_grace_ms
        leaving: []
      }

      # The root's Tracer (mode :process) starts under the same
      # supervisor, which is busy starting us until init returns.
      {:ok, state, {:continue, :timeline}}
    end
  end

  @impl GenServer
  def handle_continue(:timeline, state) do
    case timeline(state) do
      {:ok, timeline} -> {:noreply, %{state | timeline: timeline}}
      {:stop, reason} -> {:stop, reason, %{state | native: nil}}
    end
  end

  @impl GenServer
  def handle_call(:info, _from, state) do
    info = %{
      native: state.native,
      label: state.label,
      handle: state.handle,
      timeline: state.timeline
    }

    {:reply, info, state}
  end

  def handle_call({:finish, opts}, _from, state) do
    Process.cancel_timer(state.timer)

    finished =
      with {:ok, profile} <- finish_trace(state, opts),
           do: {:ok, Cluster.finish(state.cluster, profile)}

    # The trace is over for its followers too (the last graph trace also
    # clears every flag and token of ours, in Patterns).
    with {:ok, %Profile{graph: %Graph{followers: followers}}} <- finished,
         do: unfollow(Enum.uniq(followers ++ state.leaving), state)

    Patterns.release_graph()

    with {:ok, profile} when state.shippers != [] <- finished do
      Shipper.ship_all(profile, state.shippers)
    end

    {:stop, :normal, finished, %{state | native: nil}}
  end

  @impl GenServer
  def handle_info(:lifetime, state) do
    Native.stop(state.native)
    {:noreply, %{state | lifetime_exceeded: true}}
  end

  def handle_info({:DOWN, ref, :process, _root, _reason}, %{root_ref: ref} = state) do
    {:stop, :normal, state}
  end

  # mode :sample: a callee took a request of the trace (the NIF router says
  # so); it is sampled while it serves the trace, not call traced.
  def handle_info({:flame_on_callee, pid}, %{native: native} = state) when native != nil do
    samplers = Sampler.sample_callee(state.samplers, native, pid, state.sampler_opts)
    {:noreply, %{state | samplers: samplers}}
  end

  # A follower left the trace (a process outside it woke it): it keeps no
  # trace flag of ours unless another graph trace follows it. After a short
  # grace, in one batch: a shared server often comes back with the trace's
  # next message, and then keeps its flags.
  def handle_info({:flame_on_left, pid}, %{leaving: leaving} = state) do
    if leaving == [], do: Process.send_after(self(), :unfollow_left, @leave_grace_ms)
    {:noreply, %{state | leaving: [pid | leaving]}}
  end

  def handle_info(:unfollow_left, state) do
    unfollow(Enum.uniq(state.leaving), state)
    {:noreply, %{state | leaving: []}}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, %{native: nil}), do: :ok

  def terminate(_reason, state) do
    # Stopped before finishing (root gone, shutdown): nothing more is
    # followed; Patterns gives graph tracing back when it sees us go.
    Native.stop(state.native)
    :ok
  end

  # --- internals --------------------------------------------------------------

  defp new_native(limits, label) do
    native_per_second = System.convert_time_unit(1, :second, :native)
    {:ok, Native.new(Map.merge(limits, %{label: label, native_per_second: native_per_second}))}
  rescue
    ArgumentError -> {:stop, {:invalid_limits, limits}}
  end

  # Registered first: the VM asks the tracer (enabled/3, trace_status)
  # whether it is live when it becomes the system tracer.
  # Root not known yet: the session is registered with this process
  # standing in for it (the VM asks whether the tracer is live when it
  # becomes the system tracer); the NIF's capture_next gate puts the
  # real root in its place when the captured call starts.
  defp register(native, nil), do: register(native, self())

  defp register(native, root) do
    Native.graph_start(native, root)
  rescue
    ArgumentError -> {:stop, :noproc}
  end

  defp watch_callees(native, :sample), do: Native.graph_watch_callees(native, self())
  defp watch_callees(_native, _mode), do: :ok

  # A sample trace sets no call patterns: its callees are sampled.
  # legacy: true (capture_next/2): in the legacy session on every release.
  defp take_graph_tracing(native, root, label, mode, follow, legacy?) do
    opts = [call_patterns: mode != :sample, follow: follow, legacy: legacy? == true]

    case Patterns.acquire_graph(native, root, label, opts) do
      {:ok, handle} ->
        {:ok, handle}

      {:error, reason} ->
        Native.stop(native)
        {:stop, reason}
    end
  end

  # Mode :process: the root's own events come as trace messages to a
  # Tracer that ingests them into the same graph session.
  defp timeline(%{mode: mode}) when mode in [:nif, :sample], do: {:ok, nil}

  defp timeline(%{mode: :process} = state) do
    session_opts = [
      pid: state.root,
      owner: state.root,
      attach: :tracee,
      name: state.name,
      limits: state.limits,
      native: state.native,
      trace_id: state.label,
      graph: %{label: state.label, names: state.names}
    ]

    case Tracer.start(session_opts) do
      {:ok, session} ->
        {:ok, session}

      {:error, reason} ->
        Native.stop(state.native)
        Patterns.release_graph()
        {:stop, reason}
    end
  end

  defp finish_trace(%{mode: :process} = state, opts) do
    with {:ok, profile} <- Tracer.finish(state.timeline, opts) do
      {:ok, lifetime(profile, state)}
    end
  end

  defp finish_trace(%{mode: mode} = state, opts) when mode in [:nif, :sample] do
    state = %{state | root: Keyword.get(opts, :root, state.root)}
    started_ts = Keyword.fetch!(opts, :started_ts)
    end_ts = Keyword.fetch!(opts, :end_ts)
    sampled = stop_samplers(state, Keyword.get(opts, :root_sampled))
    # The tracer stamps events on its own clock; stop/1 noted when it ended.
    {raw, stats, graph} = Native.finish(state.native, :stop)
    stats = Map.merge(stats, sampled.stats)

    profile =
      Profile.build(
        raw,
        Map.put(stats, :unprocessed_events, 0),
        [
          trace_id: state.label,
          name: state.name,
          mode: mode,
          pid: state.root,
          graph: Graph.build(graph, state.label),
          started_at: System.convert_time_unit(started_ts, :native, :microsecond),
          duration_us: System.convert_time_unit(end_ts - started_ts, :native, :microsecond)
        ],
        state.names
      )

    {:ok, lifetime(%{profile | metrics: sampled.metrics}, state)}
  end

  # The callees' samplers, and what the root's own sampler handed in.
  defp stop_samplers(state, root_sampled) do
    Sampler.stop_all(
      state.samplers,
      if(root_sampled, do: [{state.root, root_sampled}], else: [])
    )
  end

  # Off in a process of its own: turning another process's flags off waits
  # until that process is scheduled out, tens of milliseconds for a busy
  # one, and this owner must stay free for the trace's other messages.
  # A trace that brought the process back meanwhile (its message turned the
  # flags on again, and the process took it) gets them back at once; a
  # message not yet taken by then finds the process untraced (its spans
  # stay right, its stacks for that message are missing).
  @doc false
  @spec unfollow([pid()], %{handle: TraceBackend.t(), follow: :messages | :calls}) :: pid()
  def unfollow(pids, %{handle: handle, follow: follow}) do
    spawn(fn ->
      Enum.each(pids, fn pid ->
        with nil <- Native.graph_role(pid),
             {:ok, {Native, :graph}} <- TraceBackend.tracer(handle, pid),
             :ok <- TraceBackend.untrace(handle, pid),
             role when role != nil <- Native.graph_role(pid) do
          retrace(handle, pid, follow)
        end
      end)
    end)
  end

  defp retrace(handle, pid, follow) do
    TraceBackend.trace(handle, pid, true, Patterns.follower_flags(follow))
  rescue
    # it exited in between
    ArgumentError -> :gone
  end

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
