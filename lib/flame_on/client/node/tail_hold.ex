defmodule FlameOn.Client.Node.TailHold do
  @moduledoc false
  # Tail tracing's hold on the node (FlameOn.Client.Tracing.Tail): while
  # tail-based native traces come, the CPU sampler stays acquired
  # (FlameOn.Client.Node.PerfSampler) and the NIF's table of traced
  # requests' slices exists (Native.tail_enable/2), so a request pays for
  # neither. The first tail trace turns it on (a call to this process);
  # after `idle_ms` without one it turns off again: no new tail trace
  # starts on it, and once the running ones ended (or `idle_ms` more
  # passed) the sampler is released. The table's memory, bounded by
  # `max_processes` entries of about 64 bytes plus at most `max_slices_mb`
  # of slices (48 bytes each), stays allocated until the library is
  # unloaded (a request's slices beyond 64 are freed at its end).
  #
  # Configuration (application environment `:tail`, read when it turns on):
  #
  #   * `:max_processes` (1024) – requests tail-traced at once; past them a
  #     request is traced the ordinary way.
  #   * `:max_slices` (100_000) – time slices (scheduled in to out, a
  #     preempted CPU-bound process has one per ~0.1 ms) a request keeps; a
  #     longer one is truncated at the last (`stats.tail_truncated`).
  #   * `:max_slices_mb` (32) – the slices of all requests together, the
  #     same way.
  #   * `:idle_ms` (5000) – how long the hold outlives the last tail trace
  #     (at least; at most twice as long).
  #   * `:linger_ms` (1000) – how long a process keeps its tail flags after
  #     a tail trace ends (its entry lingering, its callbacks returning at
  #     once), so that its next one pays no `erlang:trace/3` call (two a
  #     request otherwise: each takes the node's code modification
  #     permission). The sweep (every `linger_ms` / 2, at most 100 ms
  #     apart) removes the flags of processes idle longer, and frees the
  #     entries of those that died; 0: the flags go when each trace ends.
  #     All go when the hold turns off, stops or restarts.
  #   * `:max_lingering` (256) – processes lingering at once (a process
  #     keeps its place while it traces its next request); a trace that
  #     ends past them removes its flags at once (`linger_full`).
  #   * `:shared` (true) – false: every tail trace takes its own session
  #     (for comparisons; read when the hold would turn on, and kept until
  #     `off/1`).
  #   * `:attribution` (:samples) – how a request's CPU samples are
  #     known to be its own: `:samples`, by the process each sample names
  #     (c_src/core/fo_identity.h: no trace flags, a table entry and two
  #     NIF calls a request) until it runs half its threshold, when this
  #     process sets its flags (promote/2: exact from then on); where
  #     samples cannot name processes (not x86-64, OTP outside 24-28) as
  #     `:flags`: the `running`, `garbage_collection` and `receive` flags
  #     from the start (exact collections and waits, about 1-2 µs of
  #     callbacks a request), lingering between requests. Read when the
  #     hold turns on.
  #
  # Per request, `on?/1` is a :persistent_term read and an atomics read;
  # whether tail traces started lately, the checks (every `idle_ms` / 2)
  # see in the table's count of them (`tail_stats/0`'s `begun`), so the
  # hold turns off `idle_ms` to twice that after the last one started. A
  # tail trace still running then (and `idle_ms` more) loses its flag and
  # the sampler: its profile, if kept, has no samples from then on.

  use GenServer

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{BacktraceDepth, PerfSampler, TailNote, TraceBackend}

  require Logger

  # the flags' slot of the hold's state (the second is not used)
  @state 1

  # its states (@not_shared: the configuration said no; until off/1;
  # @on_flagless: on, tail traces without trace flags)
  @off 0
  @on 1
  @not_shared 2
  @on_flagless 3

  @defaults [
    max_processes: 1024,
    max_slices: 100_000,
    max_slices_mb: 32,
    idle_ms: 5_000,
    linger_ms: 1_000,
    max_lingering: 256,
    attribution: :samples
  ]

  @flags TailNote.flags()

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Whether tail traces can run on the shared sampler now, turning the hold
  on (sampling at `frequency` Hz, if the sampler is not running already)
  when it is off. False where native sampling is unavailable, the table
  cannot be made, or the configuration says `shared: false`.
  """
  @spec on?(pos_integer()) :: boolean()
  def on?(frequency), do: route(frequency) != false

  @doc """
  `on?/1`, and how tail traces go when it is on: `:flags` (the `running`,
  `garbage_collection` and `receive` flags), `:flagless` (none: the
  `:attribution` configuration and the VM allow it; read when the hold
  turned on), else false. One `:persistent_term` read and one atomics
  read when it is on.
  """
  @spec route(pos_integer()) :: :flags | :flagless | false
  def route(frequency) do
    flags = :persistent_term.get({__MODULE__, :flags}, nil)

    case flags && :atomics.get(flags, @state) do
      @on_flagless ->
        :flagless

      @on ->
        :flags

      @off ->
        if GenServer.call(__MODULE__, {:on, frequency}, 60_000) == :ok,
          do: route(frequency),
          else: false

      _nil_or_not_shared ->
        false
    end
  catch
    :exit, _ -> false
  end

  @doc """
  Turns the hold off now (waits up to `wait_ms` for running tail traces);
  the next tail trace reads the configuration again.
  """
  @spec off(non_neg_integer()) :: :ok
  def off(wait_ms \\ 1_000), do: GenServer.call(__MODULE__, {:off, wait_ms}, 60_000)

  # A process's own note of its tail flags, and taking lingering flags
  # back: FlameOn.Client.Node.TailNote (TraceBackend calls it, and this
  # module calls TraceBackend).
  defdelegate note_self(state), to: TailNote
  defdelegate note_flagless_self(state), to: TailNote
  defdelegate forget_self(), to: TailNote
  defdelegate lingering_self(), to: TailNote
  defdelegate unlinger(pid, state), to: TailNote
  defdelegate await(state, wait_ms), to: TailNote

  # The lingering idle for `idle_ns` or more (0: all): their flags off,
  # their entries free.
  defp sweep(idle_ns) do
    for {pid, state} <- Native.tail_idle(idle_ns) do
      TailNote.remove_flags(pid, state)
      Native.tail_release(state)
    end

    :ok
  end

  @doc """
  Whether the hold is on, how requests begin now (`attribution`:
  `:samples`, `:flags`, nil when off), and the table's counters.
  """
  @spec stats() :: map()
  def stats do
    flags = :persistent_term.get({__MODULE__, :flags}, nil)

    attribution =
      case flags && :atomics.get(flags, @state) do
        @on_flagless -> :samples
        @on -> :flags
        _ -> nil
      end

    Map.merge(Native.tail_stats(), %{on: attribution != nil, attribution: attribution})
  end

  @impl GenServer
  def init(:ok) do
    # terminate/2 takes the lingering flags back when the application stops
    Process.flag(:trap_exit, true)
    # and a hold killed before (no terminate/2) left them: the new one
    # takes them back now
    stop_lingering()

    flags =
      case :persistent_term.get({__MODULE__, :flags}, nil) do
        nil ->
          flags = :atomics.new(2, signed: true)
          :persistent_term.put({__MODULE__, :flags}, flags)
          flags

        flags ->
          :atomics.put(flags, @state, @off)
          flags
      end

    # begun: the table's count of tail traces started, as the last check
    # saw it, at active_ms; adapt: the table's counts of requests begun
    # and kept at the last look (nil: requests go with flags, as the
    # configuration or the VM says)
    {:ok,
     %{
       flags: flags,
       held: false,
       timer: nil,
       sweep: nil,
       linger_ms: 0,
       begun: 0,
       active_ms: 0,
       adapt: nil,
       adapt_timer: nil,
       last_way: @on_flagless
     }}
  end

  @impl GenServer
  def handle_call({:on, frequency}, _from, state) do
    cond do
      :atomics.get(state.flags, @state) in [@on, @on_flagless] ->
        {:reply, :ok, state}

      config()[:shared] == false ->
        :atomics.put(state.flags, @state, @not_shared)
        {:reply, {:error, :not_shared}, state}

      true ->
        case turn_on(state, frequency) do
          {:ok, state} -> {:reply, :ok, state}
          {:error, _} = error -> {:reply, error, state}
        end
    end
  end

  def handle_call({:off, wait_ms}, _from, state) do
    # `shared: false` is read again when the next tail trace asks
    :atomics.compare_exchange(state.flags, @state, @not_shared, @off)
    # turned off on purpose (off/1, a configuration changed): on again,
    # requests start without flags, as at first
    {:reply, :ok, %{turn_off(state, wait_ms) | last_way: @on_flagless}}
  end

  @impl GenServer
  def handle_info(:check, state) do
    idle_ms = config()[:idle_ms]
    now = System.monotonic_time(:millisecond)
    begun = Native.tail_stats().begun
    # one started since the last check: it counts from now
    state = if begun != state.begun, do: %{state | begun: begun, active_ms: now}, else: state
    # the entries of processes that died in a request go (without flags
    # nothing else notices: their stacks would be asked about)
    Native.tail_owners()

    if state.held and now - state.active_ms >= idle_ms do
      {:noreply, turn_off(%{state | timer: nil}, idle_ms)}
    else
      {:noreply, %{state | timer: schedule(idle_ms)}}
    end
  end

  def handle_info(:sweep, state) do
    sweep(state.linger_ms * 1_000_000)

    # (a timer still running: this one was cancelled too late)
    if state.held and state.linger_ms > 0 and
         not (is_reference(state.sweep) and Process.read_timer(state.sweep) != false),
       do: {:noreply, %{state | sweep: schedule_sweep(state.linger_ms)}},
       else: {:noreply, state}
  end

  def handle_info(:adapt, state) do
    cond do
      # (a timer still running: this one was cancelled too late)
      is_reference(state.adapt_timer) and Process.read_timer(state.adapt_timer) != false ->
        {:noreply, state}

      state.held and is_map(state.adapt) ->
        {:noreply, %{adapt(state, false) | adapt_timer: schedule_adapt()}}

      true ->
        {:noreply, %{state | adapt_timer: nil}}
    end
  end

  def handle_info({:flame_on_promote, tail, pid}, state) do
    promote(tail, pid)

    # promotions as they come are the first sign of a load of kept
    # requests: no need to wait for the next look (see adapt/2)
    if is_map(state.adapt) and :atomics.get(state.flags, @state) == @on_flagless,
      do: {:noreply, adapt(state, true)},
      else: {:noreply, state}
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, state) do
    :atomics.put(state.flags, @state, @off)
    stop_lingering()
    if state.held, do: release_sampling()
    :ok
  end

  # A tail trace without flags (attribution: :samples) that ran half its
  # threshold may be slow: from now its flags' callbacks make its time
  # slices, exactly (its collections, where it stops), as a trace with
  # flags from the start. Unless it has another tracer, or ended before:
  # then nothing is set, or what was set goes again (its owner takes them
  # off too when it ends, Native.tail_end/2 answering :untrace).
  defp promote(tail, pid) do
    if :erlang.trace_info(pid, :tracer) == {:tracer, []} and
         Native.tail_promote(tail, :begin) == :ok do
      handle = TraceBackend.legacy({Native, tail})

      # (erlang:trace/3 waits for a running process to stop: where it
      # stopped, if it waits, the helpers read until its first callback)
      try do
        TraceBackend.trace(handle, pid, true, @flags)
        if Native.tail_promote(tail, :check) != :ok, do: TailNote.remove_flags(pid, tail)
      rescue
        # it exited meanwhile
        ArgumentError -> :ok
      end
    end

    :ok
  end

  # No trace lingers from now, and the flags of those that did go.
  defp stop_lingering do
    Native.tail_linger(0, 0)
    sweep(0)
  end

  defp turn_on(state, frequency) do
    config = config()

    with :ok <- acquire_sampling(frequency),
         {:ok, processes, _} <- enable(config),
         :ok <- linger(config, processes) do
      flagless = flagless?(config[:attribution])
      # it sets the flags of a request without them that may be slow
      Native.tail_promoter(if flagless, do: self())
      # without flags by default, or with them if they were the way the
      # hold last ran (turned off idle, on again: likely the same load)
      :atomics.put(state.flags, @state, if(flagless, do: state.last_way, else: @on))
      stats = Native.tail_stats()

      {:ok,
       %{
         state
         | held: true,
           timer: state.timer || schedule(config[:idle_ms]),
           linger_ms: config[:linger_ms],
           sweep: state.sweep || (config[:linger_ms] > 0 && schedule_sweep(config[:linger_ms])),
           begun: stats.begun,
           active_ms: System.monotonic_time(:millisecond),
           adapt: if(flagless, do: %{last: counts(stats), prev: counts(stats)}),
           adapt_timer: state.adapt_timer || (flagless && schedule_adapt())
       }}
    else
      {:error, _} = error ->
        release_sampling()
        error
    end
  end

  # The sampler, and stacks as deep as mode :native reads them where a
  # slow request's stops are asked about (the default 8 frames would miss
  # the trace's root in most real stacks)
  defp acquire_sampling(frequency) do
    with :ok <- PerfSampler.acquire(frequency) do
      BacktraceDepth.acquire(BacktraceDepth.cpu_sampled())
    end
  end

  defp release_sampling do
    BacktraceDepth.release()
    PerfSampler.release()
  end

  defp enable(config) do
    Native.tail_enable(
      config[:max_processes],
      config[:max_slices],
      config[:max_slices_mb] * 1_048_576
    )
  rescue
    ArgumentError -> {:error, :invalid_config}
  end

  # Entries lingering from an earlier hold (their flags may have been
  # swept meanwhile, by the application's stop) go first.
  defp linger(config, processes) do
    stop_lingering()
    Native.tail_linger(config[:linger_ms], min(config[:max_lingering], processes))
  rescue
    ArgumentError -> {:error, :invalid_config}
  end

  defp turn_off(%{held: false} = state, _wait_ms), do: state

  defp turn_off(state, wait_ms) do
    :atomics.put(state.flags, @state, @off)
    Native.tail_promoter(nil)
    stop_lingering()
    wait_idle(System.monotonic_time(:millisecond) + wait_ms)
    untrace_stragglers()
    # a trace that ended while lingering was turned off may still have
    # read it on
    sweep(0)
    release_sampling()
    if state.timer, do: Process.cancel_timer(state.timer)
    if state.sweep, do: Process.cancel_timer(state.sweep)
    if state.adapt_timer, do: Process.cancel_timer(state.adapt_timer)
    %{state | held: false, timer: nil, sweep: nil, adapt: nil, adapt_timer: nil}
  end

  # Until no tail trace holds an entry (or the deadline).
  defp wait_idle(deadline) do
    if Native.tail_stats().in_use > 0 and System.monotonic_time(:millisecond) < deadline do
      Process.sleep(5)
      wait_idle(deadline)
    end
  end

  # Tail traces still running after the wait (a telemetry :start whose
  # :stop never came): their flag goes off, so nothing of ours is left on
  # them; their entries stay theirs (bounded) until their :stop or exit.
  # (Native.tail_owners/0 frees the entries of processes that died.)
  defp untrace_stragglers do
    for {pid, state} <- Native.tail_owners(), do: TailNote.remove_flags(pid, state)
  end

  # Without flags, a request that may be slow gets them at half its
  # threshold (promote/2): two erlang:trace/3 calls and a message, about
  # 18 µs of node CPU more than a kept request with flags from the start
  # costs, where flags from the start cost every request 0.5-2 µs of
  # callbacks (bench/RESULTS.md). So where many requests are kept or
  # promoted, new ones take their flags from the start: over
  # @adapt_to_flags_pct of the requests begun since the last look (at
  # least @adapt_min_begun of them) were kept, or promoted. Back without
  # flags under @adapt_to_samples_pct kept or ended past half their
  # threshold (without flags those would be promoted: a load just under
  # its threshold stays with flags). Requests running keep the way they
  # began. A look comes every 50 ms (a message to this process) and at
  # each promotion while requests go without flags: a load of kept
  # requests turns to flags within its first @adapt_min_begun or so (the
  # periodic look alone let a burst of them go promoted: 50 workers make
  # 2 000 requests of 1 ms in 80 ms). Turned on again after
  # it turned itself off (idle_ms without tail traces), the hold starts
  # the way it last ran: a promotion costs far more than the flags'
  # callbacks, so flags are the cheaper guess where the load was kept,
  # until the first look. Turned off on purpose (off/1), it forgets.
  @adapt_ms 50
  @adapt_min_begun 50
  @adapt_to_flags_pct 10
  @adapt_to_samples_pct 4

  defp schedule_adapt, do: Process.send_after(self(), :adapt, @adapt_ms)

  defp adapt(%{adapt: %{last: last, prev: prev}} = state, at_promotion?) do
    now = counts(Native.tail_stats())
    # at a promotion, from the look before the last if too few began since
    # the last (a look may come just as a burst of requests began)
    last = if at_promotion? and now.begun - last.begun < @adapt_min_begun, do: prev, else: last

    began = now.begun - last.begun

    if began < @adapt_min_begun do
      state
    else
      pct = (now.kept - last.kept) * 100 / began
      # without flags a request is promoted at half its threshold, kept
      # or not: the share promoted says so half a request earlier than
      # the kept, and with flags those that ran past half their
      # threshold (near) would have been promoted too
      promoted_pct = (now.promotions - last.promotions) * 100 / began
      near_pct = (now.near - last.near) * 100 / began

      case :atomics.get(state.flags, @state) do
        @on_flagless when pct > @adapt_to_flags_pct or promoted_pct > @adapt_to_flags_pct ->
          :atomics.compare_exchange(state.flags, @state, @on_flagless, @on)

        @on when pct + near_pct < @adapt_to_samples_pct ->
          :atomics.compare_exchange(state.flags, @state, @on, @on_flagless)

        _ ->
          :ok
      end

      way = :atomics.get(state.flags, @state)
      last_way = if way in [@on, @on_flagless], do: way, else: state.last_way

      %{state | adapt: %{last: now, prev: last}, last_way: last_way}
    end
  end

  defp counts(stats), do: Map.take(stats, [:begun, :kept, :promotions, :near])

  defp schedule(idle_ms), do: Process.send_after(self(), :check, max(div(idle_ms, 2), 10))

  # Every linger_ms / 2, at most 100 ms apart: the entries of lingering
  # processes that died go at each (they count among max_lingering).
  defp schedule_sweep(linger_ms),
    do: Process.send_after(self(), :sweep, min(max(div(linger_ms, 2), 10), 100))

  # Whether tail traces go without flags (where samples name processes).
  defp flagless?(:flags), do: false
  defp flagless?(:samples), do: Native.tail_flagless()

  defp flagless?(other) do
    Logger.warning(
      "FlameOn: tail: [attribution: #{inspect(other)}] is neither :samples nor :flags; :samples is used"
    )

    flagless?(:samples)
  end

  defp config do
    Keyword.merge(@defaults, Application.get_env(:flame_on_client, :tail, []))
  end
end
