defmodule FlameOn.Client.Continuous do
  @moduledoc """
  Continuous profiling: the whole node, sampled all the time at a low
  frequency, kept as a bounded ring of time windows that any range of can
  be turned into an ordinary `FlameOn.Client.Profile` (and so into every
  format of `FlameOn.Client.Export`), and optionally shipped window by
  window (to Pyroscope with `FlameOn.Client.Shipper.Pyroscope`).

  Off by default. Start it from the application environment:

      config :flame_on_client, continuous: [hz: 19, window_ms: 10_000]

  or at runtime, or under your own supervisor:

      {:ok, _pid} = FlameOn.Client.Continuous.start(window_ms: 10_000)
      children = [{FlameOn.Client.Continuous, window_ms: 10_000}]

      # ... later: the last five minutes as a flame graph
      now = System.os_time(:millisecond)
      profile = FlameOn.Client.Continuous.profile(from: now - 300_000, to: now)
      FlameOn.Client.Export.write(profile, "out", [:svg])

      FlameOn.Client.Continuous.stop()

  ## Two ways to sample: `:mode`

  `mode: :auto` (the default) samples natively where it can
  (`FlameOn.Client.Node.PerfSampler.availability/0` is `:ok`: the VM was
  started with `+JPperf true` and may open perf events on its own
  threads), and samples the busiest processes otherwise. `mode: :native`
  and `mode: :sample` force one: `start/1` answers
  `{:error, {:native_unavailable, why}}` where `:native` cannot run
  (started from the application environment or as a child of your
  supervisor, it logs why and samples the busiest processes). A
  profile made here says which in its `mode`, and so do the maps of
  `windows/0` and `stats/0`.

  ## How it samples natively (mode `:native`)

  It keeps the node's CPU sampler acquired for as long as it runs (the one
  native traces use, `FlameOn.Client.Node.PerfSampler`): one Linux perf
  event per scheduler thread (normal and dirty CPU schedulers), sampling
  each thread's own CPU time at `:hz`, with the thread's call chain. Once
  a second (and when a window closes) it takes every thread's samples
  since the last time from the sampler's per-thread buffers
  (`c_src/nif/sampling/fo_nodewide.c`) and names their frames from the
  JIT's perf map as native traces do: Erlang frames as
  `FlameOn.Client.Profile.frame_name/1` gives them, the runtime's C code
  as a `[native:symbol]` leaf (under the Erlang function that called it,
  when that is found on the C stack; alone at the root when not), a chain
  the kernel cut at 127 frames under a `"…"` root. Stacks are capped at
  `:depth` frames as in mode `:sample` (the innermost kept, under `"…"`).

  No trace flag is set on any process and no process is asked anything:
  a sample is a scheduler thread's stack at an instant, whatever process
  ran there, short-lived ones included. **No per-process detail is
  kept**: the samples of every thread go to one pseudo-process,
  `"node (all scheduler threads)"` (shown with this server's pid), so a
  window's stacks are node-wide. Which process ran a stack is not known
  (that takes the `running` trace flag, as native traces use); its
  functions usually say.

  A sample is worth `1/hz` s of one thread's CPU time. Native traces
  started meanwhile raise the sampler's frequency (it runs at the highest
  its users ask for, and comes back when they end); continuous profiling
  then keeps each sample with probability `hz / frequency`, `frequency`
  the one it was taken at (the others are counted in `stats/0`'s
  `thinned`), so its windows mean the same whatever else runs. Memory: nothing is kept between drains but the
  sampler's buffers (1 MiB a thread, shared with native traces); a drain
  gives at most `hz` × 1 024 samples a second (the rest counted in
  `dropped_samples`); windows and the ring are bounded as below.
  `:top` and `backtrace_depth` play no part.

  ## How it samples the busiest processes (mode `:sample`)

  Each window (`:window_ms`, 10 s by default) it picks the `:top` (20)
  processes that did the most reductions in the previous window (one
  `Process.info(pid, :reductions)` per process of the node, once a
  window), and at `:hz` (19 a second by default) it reads each one's
  status without a signal. A process that is running or runnable (on CPU,
  or wanting it) gets its stack asked with
  `Process.info(pid, :current_stacktrace)`: one sample, worth one sampling
  interval of CPU time and weighted by the reductions it did since the
  previous tick. A waiting process costs one `process_info/2` and is not
  sampled: this is a CPU profile, not a wall-clock one. A process that
  became busy during a window is first sampled in the next one, so
  processes that live shorter than a window (one process per request,
  say) are not seen: their work shows where long-lived processes (a
  connection's, a pool's, a GenServer) do it.

  Ticks run at high priority (a few status reads and stack requests, tens
  of µs) so that they come on time on a busy node; the scan and the
  closing of a window (milliseconds on a node of 100 000 processes) run at
  normal priority. Between windows the scan keeps one integer per process
  of the node.

  Frames are named as in every profile (`FlameOn.Client.Profile.frame_name/1`).
  Stacks are capped at `:depth` frames (32); a deeper one is cut there and
  gets a `"…"` root. Stacks need the node's `backtrace_depth` (default 8)
  raised: while continuous profiling runs it is held at `depth + 1` (by
  the node's `backtrace_depth` owner, which mode `:sample` traces share),
  and put back when it stops or dies. Raising it makes every exception on
  the node record that many frames of its stacktrace (a few ns a frame);
  `depth: 7` leaves the flag at the VM's default.

  The cost, measured with `bench/continuous.exs` (two busy untraced
  workers beside 10 000 idle processes, 2 cores, on/off rounds
  interleaved): the VM's CPU time per unit of work was 1.003-1.008x at the
  defaults (1.008-1.016x at 99 Hz); the profiler's own work (ticks, and the
  scan of every process once a window) was 0.15% of the node. The default
  19 Hz was chosen by it (`bench/RESULTS.md`). Mode `:native`
  (`CONTINUOUS_MODE=native`): 0.99-1.02x at 19, 49 and 99 Hz, with no trend
  (below what the bench resolves); its own work, one drain a second, was
  0.005-0.02% of the node, whatever its number of processes.

  ## Windows and the ring

  `profile/1` and `windows/0` see closed windows only: a range's last
  seconds are there once the window they fall in closes.

  A closed window keeps, per process **name** (`FlameOn.Client.ProcessName`:
  registered name, label or initial call; processes that share a name,
  say the tasks of one function, are merged) or, for a process without a
  name, per pid: each distinct stack's sample count and reductions. The
  pid shown for a name in a profile is the first process seen with it.

  Bounds, each counted in `stats/0` when reached:

    * `:max_stacks` (5 000) distinct stacks a window; samples of new
      stacks past it go to their process's `"[truncated]"` stack
      (`dropped_stacks`);
    * `:max_windows` (360: an hour of 10 s windows) and `:max_bytes`
      (16 MiB): the ring drops its oldest windows first
      (`dropped_windows`); a single window larger than `:max_bytes` keeps
      its largest stacks and folds the rest into `"[truncated]"`
      (`truncated_stacks`), so the ring holds whatever the node does.

  ## Shipping

  `shipper: spec` (a `FlameOn.Client.Shipper` spec, or a list) ships each
  closed window as its own profile (`profile/1` of that window). Shipping
  runs in its own process: a slow or dead destination never delays
  sampling. Windows wait in a queue of `:max_queue` (6); when it is full
  the oldest waiting window is dropped (`ship_dropped`).

      FlameOn.Client.Continuous.start(
        shipper: {FlameOn.Client.Shipper.Pyroscope,
                  url: "http://pyroscope:4040", app: "my_app", labels: %{env: "prod"}}
      )

  ## Options

    * `:mode` – `:auto`, `:native` or `:sample` (`:auto`), above.
    * `:hz` – samples a second per sampled process (mode `:sample`), or
      per CPU-second of each scheduler thread (mode `:native`) (19).
    * `:top` – the processes sampled each window (20; mode `:sample`).
    * `:window_ms` – window length (10 000).
    * `:depth` – stack depth cap (32).
    * `:max_stacks`, `:max_windows`, `:max_bytes`, `:max_queue` – bounds, above.
    * `:shipper` – see Shipping (none).
    * `:name` – the name of the profiles (`"continuous"`).
  """

  use GenServer

  import Bitwise

  require Logger

  alias FlameOn.Client.Continuous.Window
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.BacktraceDepth
  alias FlameOn.Client.Node.PerfSampler
  alias FlameOn.Client.ProcessName
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper

  @table :flame_on_continuous_windows
  # mode :native: how often the sampler's buffers are read (they hold
  # seconds of samples), and the pseudo-process the samples go to
  @drain_ms 1_000
  @node_key "node (all scheduler threads)"
  # a take from here takes nothing: it only reads the clock
  @far_future_ns 1 <<< 62

  @defaults [
    mode: :auto,
    hz: 19,
    top: 20,
    window_ms: 10_000,
    depth: 32,
    max_stacks: 5_000,
    max_windows: 360,
    max_bytes: 16 * 1024 * 1024,
    max_queue: 6,
    shipper: nil,
    name: "continuous"
  ]

  @typedoc "An option of `start/1` (see the module documentation)."
  @type option ::
          {:mode, :auto | :native | :sample}
          | {:hz, 1..1000}
          | {:top, pos_integer()}
          | {:window_ms, pos_integer()}
          | {:depth, 1..63}
          | {:max_stacks, pos_integer()}
          | {:max_windows, pos_integer()}
          | {:max_bytes, pos_integer()}
          | {:max_queue, non_neg_integer()}
          | {:shipper, Shipper.spec() | [Shipper.spec()] | nil}
          | {:name, String.t()}

  @typedoc "A window as `windows/0` lists it (times in Unix ms)."
  @type window :: %{
          from: integer(),
          to: integer(),
          mode: :native | :sample,
          samples: non_neg_integer(),
          processes: non_neg_integer(),
          stacks: non_neg_integer(),
          bytes: non_neg_integer(),
          dropped_stacks: non_neg_integer(),
          truncated_stacks: non_neg_integer()
        }

  @doc "The default options."
  @spec defaults() :: [option()]
  def defaults, do: @defaults

  @doc """
  Starts continuous profiling under flame_on_client's supervisor.
  `{:error, {:already_started, pid}}` when it runs already (one per node);
  `{:error, {:native_unavailable, why}}` for `mode: :native` where native
  sampling cannot run (`why` says what is missing).
  """
  @spec start([option()]) ::
          Supervisor.on_start_child() | {:error, {:native_unavailable, String.t()}}
  def start(opts \\ []) do
    opts = validate!(opts)
    {:ok, _} = Application.ensure_all_started(:flame_on_client)

    with :ok <- native_available(opts[:mode]) do
      supervisor = FlameOn.Client.ContinuousSupervisor
      # one stopped earlier (or configured and stopped) is still a child
      _ = Supervisor.delete_child(supervisor, __MODULE__)

      Supervisor.start_child(supervisor, child_spec(opts))
    end
  end

  defp native_available(:native) do
    case PerfSampler.availability() do
      :ok -> :ok
      {:error, why} -> {:error, {:native_unavailable, why}}
    end
  end

  defp native_available(_mode), do: :ok

  @doc "Stops continuous profiling (its windows go with it); `:ok` when it was not running."
  @spec stop() :: :ok
  def stop do
    case Process.whereis(__MODULE__) do
      nil ->
        :ok

      pid ->
        try do
          GenServer.stop(pid, :normal, 30_000)
        catch
          :exit, _gone -> :ok
        end
    end
  end

  @doc "Whether continuous profiling runs."
  @spec running?() :: boolean()
  def running?, do: Process.whereis(__MODULE__) != nil

  @doc false
  # FlameOn.Client.status/0's `:continuous`: `false`, or its counters.
  @spec status() :: false | map()
  def status do
    if running?() do
      stats = stats()
      options = Map.new(Keyword.take(stats.options, [:hz, :top, :window_ms, :depth]))
      stats |> Map.delete(:options) |> Map.merge(options)
    else
      false
    end
  rescue
    ArgumentError -> false
  catch
    :exit, _ -> false
  end

  @doc """
  A child spec for your own supervisor (`restart: :transient`: `stop/0`
  ends it for good).
  """
  @spec child_spec([option()]) :: Supervisor.child_spec()
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, restart: :transient}
  end

  @doc false
  @spec start_link([option()]) :: GenServer.on_start()
  def start_link(opts), do: GenServer.start_link(__MODULE__, validate!(opts), name: __MODULE__)

  @doc """
  The closed windows, oldest first.

      FlameOn.Client.Continuous.windows()
      #=> [%{from: 1764135600000, to: 1764135610000, samples: 812, processes: 9, ...}, ...]
  """
  @spec windows() :: [window()]
  def windows do
    select([{{:_, :_, :_, :"$1", :_}, [], [:"$1"]}])
  end

  @doc """
  The closed windows that overlap `from..to` (Unix ms, as
  `System.os_time(:millisecond)` gives; the defaults take every window)
  merged into one `FlameOn.Client.Profile`: mode `:native` or `:sample`
  (as they were taken), one process per name (see the module
  documentation; mode `:native`: one pseudo-process for the node), `stacks` in µs (samples × the
  sampling interval), `samples`, `tree`, `started_at` and `duration_us`
  spanning the windows, and `stats` (`windows`, `samples`, `processes`,
  `interval_us`, `sample_hz`, `dropped_stacks`, `truncated_stacks`).
  Options: `:from`, `:to`, `:name`. Raises `ArgumentError` if continuous
  profiling does not run.
  """
  @spec profile(keyword()) :: Profile.t()
  def profile(opts \\ []) do
    opts = Keyword.validate!(opts, from: 0, to: nil, name: nil)
    from = opts[:from]
    to = opts[:to] || System.os_time(:millisecond) + 1

    unless is_integer(from) and is_integer(to) do
      raise ArgumentError, "expected :from and :to as Unix milliseconds, got: #{inspect(opts)}"
    end

    windows =
      select([{{:_, :"$1", :"$2", :_, :"$3"}, [{:>, :"$2", from}, {:<, :"$1", to}], [:"$3"]}])

    name = opts[:name] || name()
    Window.to_profile(windows, name: name, from: from, to: to)
  end

  @doc """
  Counters: `windows` and `bytes` (in the ring), `dropped_windows`,
  `dropped_stacks`, `truncated_stacks`, `samples`, `ticks` (mode `:native`: drains),
  `late_ticks` (ticks skipped because sampling fell behind), `mode`,
  `thinned` and `dropped_samples` (mode `:native`, above), `targets`
  (processes sampled in the open window), `shipped`, `ship_failed`,
  `ship_dropped`, `ship_queued`, and the options in effect.
  """
  @spec stats() :: map()
  def stats do
    GenServer.call(__MODULE__, :stats)
  catch
    :exit, {:noproc, _} -> raise ArgumentError, "continuous profiling is not running"
  end

  # oldest first: the table is ordered by window number
  defp select(match_spec) do
    :ets.select(@table, match_spec)
  rescue
    ArgumentError -> raise ArgumentError, "continuous profiling is not running"
  end

  defp name do
    case :ets.lookup(@table, :name) do
      [{:name, name}] -> name
      _ -> "continuous"
    end
  rescue
    ArgumentError -> "continuous"
  end

  ## Options

  @doc false
  @spec validate!(keyword()) :: keyword()
  def validate!(opts) do
    opts = Keyword.validate!(opts, @defaults)

    check = fn key, ok? ->
      unless ok?.(opts[key]) do
        raise ArgumentError,
              "invalid continuous profiling option #{inspect(key)}: #{inspect(opts[key])}"
      end
    end

    check.(:mode, &(&1 in [:auto, :native, :sample]))
    check.(:hz, &(is_integer(&1) and &1 >= 1 and &1 <= 1000))
    check.(:depth, &(is_integer(&1) and &1 >= 1 and &1 <= 63))
    check.(:max_queue, &(is_integer(&1) and &1 >= 0))
    check.(:name, &is_binary/1)

    for key <- [:top, :window_ms, :max_stacks, :max_windows, :max_bytes],
        do: check.(key, &(is_integer(&1) and &1 > 0))

    Keyword.put(opts, :shipper, Shipper.normalize!(opts[:shipper]))
  end

  ## Server

  @impl GenServer
  def init(opts) do
    Process.flag(:trap_exit, true)
    Process.flag(:priority, :high)
    # what a tick and a window's close run, loaded now and not on a busy node
    Enum.each([Window, ProcessName, Profile, Profile.Tree, :rand], &Code.ensure_loaded/1)

    case sampling_mode(opts) do
      {:ok, mode} ->
        init(opts, mode)

      {:error, why} ->
        # start/1 refused this up front; from the application environment
        # or a child spec of its own supervisor it samples all the same
        Logger.warning(
          "FlameOn continuous: mode :native cannot run here, sampling the busiest processes instead: #{why}"
        )

        init(opts, :sample)
    end
  end

  # :native holds the node's CPU sampler (FlameOn.Client.Node.PerfSampler)
  # at `hz` for as long as this runs; :auto takes it where it can.
  defp sampling_mode(opts) do
    case opts[:mode] do
      :sample ->
        {:ok, :sample}

      wanted ->
        available = wanted == :native or PerfSampler.available?()

        case available && PerfSampler.acquire(opts[:hz]) do
          :ok -> {:ok, :native}
          _ when wanted == :auto -> {:ok, :sample}
          {:error, why} -> {:error, why}
        end
    end
  end

  defp init(opts, mode) do
    if mode == :sample and opts[:depth] > 7, do: BacktraceDepth.acquire(opts[:depth] + 1)

    table = :ets.new(@table, [:ordered_set, :protected, :named_table, read_concurrency: true])
    :ets.insert(table, {:name, opts[:name]})

    interval_us = div(1_000_000, opts[:hz])
    now = System.os_time(:millisecond)

    state = %{
      opts: opts,
      mode: mode,
      interval_us: interval_us,
      window: Window.open(now, interval_us, mode),
      # mode :native: where the next take of node-wide samples starts
      # (CLOCK_MONOTONIC ns; the samples before it are not ours)
      native_from: if(mode == :native, do: native_start()),
      reductions: if(mode == :sample, do: snapshot(%{}), else: %{}),
      targets: %{},
      seq: 0,
      ring: :queue.new(),
      ring_bytes: 0,
      ring_count: 0,
      outbox: nil,
      outbox_idle: false,
      queue: :queue.new(),
      counters: %{
        dropped_windows: 0,
        dropped_stacks: 0,
        truncated_stacks: 0,
        samples: 0,
        ticks: 0,
        late_ticks: 0,
        shipped: 0,
        ship_failed: 0,
        ship_dropped: 0,
        thinned: 0,
        dropped_samples: 0
      },
      tick_at: System.monotonic_time(:microsecond)
    }

    state = start_outbox(state)
    Process.send_after(self(), :close, opts[:window_ms])

    case mode do
      :sample ->
        # The first window's processes: the busiest over a tenth of it.
        Process.send_after(self(), :choose, max(div(opts[:window_ms], 10), 1))
        {:ok, schedule_tick(state)}

      :native ->
        Process.send_after(self(), :drain, @drain_ms)
        {:ok, state}
    end
  end

  @impl GenServer
  def handle_info(:tick, state), do: {:noreply, state |> tick() |> schedule_tick()}

  def handle_info(:drain, state) do
    Process.send_after(self(), :drain, @drain_ms)
    {:noreply, drain(state)}
  end

  def handle_info(:choose, state), do: {:noreply, at_normal_priority(state, &choose/1)}

  def handle_info(:close, %{mode: :native} = state) do
    Process.send_after(self(), :close, state.opts[:window_ms])
    {:noreply, at_normal_priority(state, &(&1 |> drain() |> close()))}
  end

  def handle_info(:close, state) do
    Process.send_after(self(), :close, state.opts[:window_ms])
    {:noreply, at_normal_priority(state, &(&1 |> close() |> choose()))}
  end

  def handle_info({:outbox_ready, pid, result}, %{outbox: pid} = state) do
    state = count_shipped(state, result)

    case :queue.out(state.queue) do
      {{:value, window}, queue} ->
        send(pid, {:ship, window})
        {:noreply, %{state | queue: queue, outbox_idle: false}}

      {:empty, _} ->
        {:noreply, %{state | outbox_idle: true}}
    end
  end

  def handle_info({:EXIT, pid, _reason}, %{outbox: pid} = state) do
    # a shipper that brought its process down: count it, start another
    state = %{state | outbox: nil, outbox_idle: false}
    {:noreply, state |> count_shipped(:error) |> start_outbox()}
  end

  def handle_info(_other, state), do: {:noreply, state}

  @impl GenServer
  def handle_call(:stats, _from, state) do
    stats =
      Map.merge(state.counters, %{
        windows: state.ring_count,
        bytes: state.ring_bytes,
        targets: map_size(state.targets),
        ship_queued: :queue.len(state.queue),
        open_window_samples: state.window.samples,
        interval_us: state.interval_us,
        mode: state.mode,
        options: Keyword.delete(state.opts, :shipper)
      })

    {:reply, stats, state}
  end

  @impl GenServer
  def terminate(_reason, state) do
    if pid = state.outbox do
      Process.exit(pid, :kill)

      receive do
        {:EXIT, ^pid, _} -> :ok
      after
        5_000 -> :ok
      end
    end

    if state.mode == :native, do: PerfSampler.release()
    if state.mode == :sample and state.opts[:depth] > 7, do: BacktraceDepth.release()
    :ok
  catch
    # the backtrace_depth owner is gone: it restored the flag as it went
    :exit, _ -> :ok
  end

  # Ticks run at high priority: a few status reads and stack requests
  # (tens of µs), on time even when every scheduler is busy (at normal
  # priority a tick waited behind the busy processes it samples, and most
  # came late). The scan of every process and the closing of a window
  # (milliseconds on a large node) run at normal priority, so they never
  # keep a scheduler from the node's own work.
  defp at_normal_priority(state, fun) do
    Process.flag(:priority, :normal)
    state = fun.(state)
    Process.flag(:priority, :high)
    state
  end

  ## Sampling

  # The next tick about an interval away (uniform in [interval/2,
  # 3*interval/2), so ticks cannot lock onto a periodic workload's phase);
  # ticks that fell behind are skipped and counted.
  defp schedule_tick(state) do
    interval = state.interval_us
    now = System.monotonic_time(:microsecond)
    next = state.tick_at + div(interval, 2) + :rand.uniform(interval) - 1

    {next, late} =
      if next >= now,
        do: {next, 0},
        else: {next + (div(now - next, interval) + 1) * interval, div(now - next, interval) + 1}

    Process.send_after(self(), :tick, max(div(next - now + 500, 1000), 0))
    counters = %{state.counters | late_ticks: state.counters.late_ticks + late}
    %{state | tick_at: next, counters: counters}
  end

  defp tick(state) do
    limits = [depth: state.opts[:depth], max_stacks: state.opts[:max_stacks]]

    {window, targets} =
      Enum.reduce(state.targets, {state.window, state.targets}, fn {pid, target}, acc ->
        sample(pid, target, limits, acc)
      end)

    counters = %{state.counters | ticks: state.counters.ticks + 1}
    %{state | window: window, targets: targets, counters: counters}
  end

  # Status and reductions without a signal; the stack (one signal the
  # process answers at its next safe point) only when it runs or wants to.
  defp sample(pid, target, limits, {window, targets}) do
    case :erlang.process_info(pid, [:status, :reductions]) do
      [status: status, reductions: reds]
      when status in [:running, :runnable, :garbage_collecting] ->
        case :erlang.process_info(pid, :current_stacktrace) do
          {:current_stacktrace, stack} ->
            weight = max(reds - target.reductions, 0)
            window = Window.add(window, target.key, pid, target.name, stack, weight, limits)
            {window, %{targets | pid => %{target | reductions: reds}}}

          :undefined ->
            {window, Map.delete(targets, pid)}
        end

      [status: _waiting, reductions: reds] ->
        {window, %{targets | pid => %{target | reductions: reds}}}

      :undefined ->
        {window, Map.delete(targets, pid)}
    end
  end

  # Every process's reductions now; the `:top` whose count grew most since
  # the last snapshot are sampled next.
  defp choose(state) do
    reductions = snapshot(state.reductions)
    skip = [self(), state.outbox]

    targets =
      reductions
      |> Enum.flat_map(fn {pid, reds} ->
        delta = reds - Map.get(state.reductions, pid, 0)
        if delta > 0 and pid not in skip, do: [{delta, pid, reds}], else: []
      end)
      |> Enum.sort(:desc)
      |> Enum.take(state.opts[:top])
      |> Enum.flat_map(fn {_delta, pid, reds} ->
        case ProcessName.lookup(pid) do
          :gone -> []
          {_, name} -> [{pid, %{key: name || pid, name: name, reductions: reds}}]
        end
      end)
      |> Map.new()

    %{state | reductions: reductions, targets: targets}
  end

  defp snapshot(_previous) do
    for pid <- Process.list(),
        {:reductions, reds} <- [:erlang.process_info(pid, :reductions)],
        into: %{},
        do: {pid, reds}
  end

  ## Native sampling (mode :native)

  # Where the node-wide samples start: now (what the sampler's buffers
  # hold from before, another user's, is not taken).
  defp native_start do
    {to_ns, _frequency, _samples, _thinned, _dropped} = Native.nodewide_take(@far_future_ns, 1, 1)
    to_ns
  end

  # The samples every scheduler thread took since the last drain, whatever
  # process ran, thinned to `hz` (the sampler runs faster while a native
  # trace wants it), folded into the open window under one pseudo-process.
  defp drain(state) do
    hz = state.opts[:hz]
    # a drain's worth at hz on 256 threads, four times over: a bound, not a rate
    max = min(hz * 256 * 4 * div(@drain_ms + 999, 1000), 1_000_000)

    {to_ns, _frequency, samples, thinned, dropped} =
      Native.nodewide_take(state.native_from, hz, max)

    limits = [depth: state.opts[:depth], max_stacks: state.opts[:max_stacks]]

    window =
      Enum.reduce(samples, state.window, fn {cut, frames}, window ->
        stack = if cut, do: frames ++ [:cut], else: frames
        Window.add(window, @node_key, self(), @node_key, stack, 0, limits)
      end)

    c = state.counters

    counters = %{
      c
      | ticks: c.ticks + 1,
        thinned: c.thinned + thinned,
        dropped_samples: c.dropped_samples + dropped
    }

    %{state | window: window, native_from: to_ns, counters: counters}
  end

  ## Windows

  defp close(state) do
    now = System.os_time(:millisecond)
    opts = state.opts
    window = Window.close(state.window, now, opts[:max_bytes])
    seq = state.seq + 1
    :ets.insert(@table, {seq, window.from, window.to, Window.summary(window), window})

    counters = %{
      state.counters
      | samples: state.counters.samples + window.samples,
        dropped_stacks: state.counters.dropped_stacks + window.dropped_stacks,
        truncated_stacks: state.counters.truncated_stacks + window.truncated_stacks
    }

    state = %{
      state
      | window: Window.open(now, state.interval_us, state.mode),
        seq: seq,
        ring: :queue.in({seq, window.bytes}, state.ring),
        ring_bytes: state.ring_bytes + window.bytes,
        ring_count: state.ring_count + 1,
        counters: counters
    }

    state |> trim() |> ship(window)
  end

  # Oldest first, until the ring is within both bounds.
  defp trim(%{ring_count: count, ring_bytes: bytes, opts: opts} = state) do
    if count > opts[:max_windows] or bytes > opts[:max_bytes] do
      {{:value, {seq, window_bytes}}, ring} = :queue.out(state.ring)
      :ets.delete(@table, seq)
      counters = %{state.counters | dropped_windows: state.counters.dropped_windows + 1}

      trim(%{
        state
        | ring: ring,
          ring_count: count - 1,
          ring_bytes: bytes - window_bytes,
          counters: counters
      })
    else
      state
    end
  end

  ## Shipping

  defp start_outbox(%{opts: opts} = state) do
    case opts[:shipper] do
      [] ->
        state

      shippers ->
        server = self()
        name = opts[:name]
        pid = spawn_link(fn -> outbox(server, shippers, name, nil) end)
        %{state | outbox: pid, outbox_idle: false}
    end
  end

  defp ship(%{outbox: nil} = state, _window), do: state

  defp ship(%{outbox_idle: true, outbox: pid} = state, window) do
    send(pid, {:ship, window})
    %{state | outbox_idle: false}
  end

  defp ship(state, window) do
    queue = :queue.in(window, state.queue)

    if :queue.len(queue) > state.opts[:max_queue] do
      {_oldest, queue} = :queue.out(queue)
      counters = %{state.counters | ship_dropped: state.counters.ship_dropped + 1}
      %{state | queue: queue, counters: counters}
    else
      %{state | queue: queue}
    end
  end

  defp count_shipped(state, nil), do: state

  defp count_shipped(%{counters: c} = state, :ok),
    do: %{state | counters: %{c | shipped: c.shipped + 1}}

  defp count_shipped(%{counters: c} = state, _error),
    do: %{state | counters: %{c | ship_failed: c.ship_failed + 1}}

  # The shipping process: asks for a window, ships it to every shipper,
  # reports, asks again. A failing destination is logged when it starts
  # failing and when it recovers, not once a window.
  defp outbox(server, shippers, name, result) do
    send(server, {:outbox_ready, self(), result})

    receive do
      {:ship, window} ->
        profile = Window.to_profile([window], name: name)

        results =
          Enum.map(shippers, fn {module, opts} ->
            failing? = Process.get({:failing, module}, false)

            case ship_one(module, opts, profile) do
              :ok ->
                if failing?,
                  do: Logger.info("FlameOn continuous: shipper #{inspect(module)} recovered")

                Process.put({:failing, module}, false)
                :ok

              {:error, why} ->
                unless failing? do
                  Logger.warning(
                    "FlameOn continuous: shipper #{inspect(module)} failed: #{why} " <>
                      "(failures are counted in FlameOn.Client.Continuous.stats/0, logged again after a success)"
                  )
                end

                Process.put({:failing, module}, true)
                :error
            end
          end)

        result = if Enum.all?(results, &(&1 == :ok)), do: :ok, else: :error
        outbox(server, shippers, name, result)
    end
  end

  defp ship_one(module, opts, profile) do
    case module.ship(profile, opts) do
      :ok -> :ok
      other -> {:error, inspect(other)}
    end
  catch
    kind, reason -> {:error, Exception.format_banner(kind, reason, __STACKTRACE__)}
  end
end
