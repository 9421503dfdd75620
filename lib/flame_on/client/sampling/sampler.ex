defmodule FlameOn.Client.Sampling.Sampler do
  @moduledoc false
  # Samples one process's stack into a core session at a fixed interval
  # (mode `:sample`). One sampler per sampled process, so a busy target that
  # is slow to answer delays only its own samples.
  #
  # Each tick:
  #
  #   1. `Process.info(pid, [:status, :message_queue_len, :reductions])`: read
  #      without a signal, so the status is the truth (asked together with the
  #      stack, the target answers itself and always says `running`);
  #   2. if the process waits and has done nothing since its last answered
  #      stack request (its reductions moved by exactly the one that answering
  #      costs), its stack cannot have changed: the sample repeats it, with
  #      no signal and without waking the process;
  #   3. otherwise `Process.info(pid, [:current_stacktrace, :memory,
  #      :reductions])`: one signal the target answers at its next safe point
  #      (about 1.5 µs when it waits, 16-100 µs when it is busy on a loaded
  #      node);
  #   4. `FlameOn.Client.Core.Native.sample/4` folds the stack into the session's
  #      calling-context tree, weighted by the reductions the process did
  #      since the previous sample (0 for the first); the `:running` trace
  #      flag (no breakpoint) gives the exact on- and off-CPU intervals
  #      around it.
  #
  # A sampler whose target waits does not tick at all: when a tick finds
  # the target waiting where the last answered request found it, the
  # sampler arms a wake-up in the session (`FlameOn.Client.Core.Native.sample_sleep/3`)
  # and blocks until the tracer sees the target scheduled in again (or for
  # at most 100 intervals, in case the target's trace flags were taken
  # away). The ticks it slept through are counted as samples of the wait
  # (`{:slept, n}`, on the leaf the wait's time went to; `slept_samples`).
  # So a traced request that waits (for a call, I/O, a timer) costs the
  # node nothing while it waits: no timer, no scheduler woken every interval.
  #
  # Samplers share the node's sample budget (`FlameOn.Client.Sampling.Budget`):
  # when the active ones would take more samples a second than it allows,
  # each samples less often (`throttled_ticks`).
  #
  # The stack depth is capped by the node's `backtrace_depth`, which
  # `FlameOn.Client.Node.BacktraceDepth.acquire/1` raises while samplers run.
  # Ticks use the VM's millisecond timers, so intervals are whole
  # milliseconds; a tick that falls behind is skipped and counted
  # (`late_ticks`), never queued up.
  #
  # The metrics series (status, queue length, memory, reductions per sample)
  # is bounded by `:max_samples`; samples past it still fold stacks but their
  # metrics are dropped and counted (`dropped_metrics`).

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Sampling.{Budget, Results, Tick}

  # The VM keeps at most 64 frames of a stack trace (MAX_BACKTRACE_SIZE).
  @max_backtrace_depth 64
  # A sleeping sampler looks again after this many intervals even if no
  # `in` came (someone may have taken the target's trace flags away).
  @max_sleep_intervals 100
  @doc """
  Starts sampling `target` into `native`. Options: `:interval_us`
  (required, at least 1000), `:split_status` (prefix each stack with its
  status, `"[running]"`, `"[runnable]"`, `"[waiting]"`, ...), `:root`
  (`{m, f, a}`: frames outside the innermost call of it are dropped, so
  stacks start where exact traces start; a stack of `:depth` frames without
  it was cut by the VM and gets a `"…"` root), `:depth` (the node's
  `backtrace_depth` while sampling), `:max_samples` and `:owner` (the
  process that will stop it, default the caller: the sampler exits when
  the owner does).
  """
  @spec start(Native.session(), pid(), keyword()) :: pid()
  def start(native, target, opts) do
    interval_us = Keyword.fetch!(opts, :interval_us)

    state =
      %{
        native: native,
        target: target,
        interval_us: interval_us,
        split_status: Keyword.get(opts, :split_status, false),
        root: Keyword.get(opts, :root),
        depth: Keyword.get(opts, :depth, @max_backtrace_depth),
        own: false,
        idle: false,
        # the last tick found the target waiting, unchanged: sleep
        sleepy: false,
        max_samples: Keyword.get(opts, :max_samples, 100_000),
        metrics: [],
        # the target's reductions at the previous sample (nil before the first)
        last_reductions: nil,
        # what its reductions read while it waits where the last answered
        # stack request found it (nil: no such stack to repeat)
        idle_reductions: nil,
        last_status: nil,
        last_memory: 0,
        # the last sample's metric (what a sleep repeats)
        last_metric: nil,
        budget: Budget.budget(),
        kept: 0
      }
      |> Map.merge(Results.none())

    owner = Keyword.get(opts, :owner, self())
    spawner = self()

    sampler =
      spawn_beside(fn ->
        # Normal priority: on its own scheduler it ticks on time anyway, and
        # at :high it took that scheduler from other processes (measured:
        # no better fidelity, more cost to the traced process).
        Budget.join()
        ref = Process.monitor(target)
        # Nobody can stop a sampler whose owner is gone: it ends with it.
        owner_ref = Process.monitor(owner)
        spawner_ref = Process.monitor(spawner)

        receive do
          {:begin, ^spawner, state, deadline} ->
            Process.demonitor(spawner_ref, [:flush])
            wait(Map.merge(state, %{ref: ref, owner_ref: owner_ref}), deadline)

          # the caller died before it handed over
          {:DOWN, ^spawner_ref, :process, _, _} ->
            Budget.leave()
        end
      end)

    # A process sampling itself samples its first stack right here, signal
    # free, with its own frames (this function and below) left out: the
    # last thing before its first traced event, so the profile's time
    # starts there and not before the sampler's spawn. Its sampler asks
    # again at once: the answer comes at the process's first scheduling
    # point, the end of its first burst or its first wait, and shows where
    # that burst went (an interval later, a short first burst and the wait
    # after it were over unseen, on the trace's bare root).
    state = if target == self(), do: Tick.tick(%{state | own: true}), else: state
    deadline = now_us()

    send(sampler, {:begin, spawner, %{state | own: false}, deadline})
    sampler
  end

  # On the caller's scheduler (where a process sampling itself runs) the
  # sampler could only run when its target yields: every sample would land
  # in a wait and every CPU burst go unseen (measured: all of them did). So
  # it is bound to another scheduler, with the VM's `{:scheduler, n}` spawn
  # option (not documented; a plain spawn where it is refused). A proc_lib
  # process: a crash of one is reported as any OTP process's is.
  defp spawn_beside(fun) do
    online = :erlang.system_info(:schedulers_online)
    current = :erlang.system_info(:scheduler_id)

    # comparisons, not `in` a range: no protocol dispatch, which can mean
    # loading a module (tens of ms on a node in interactive mode)
    if online > 1 and current >= 1 and current <= online do
      :proc_lib.spawn_opt(fun, [{:scheduler, rem(current, online) + 1}])
    else
      :proc_lib.spawn(fun)
    end
  rescue
    ArgumentError -> :proc_lib.spawn(fun)
  end

  @doc """
  Wakes a sampler that went idle: its target (a callee of a cross-process
  trace) takes a request of the trace again. `FlameOn.Client.Core.Native.sample/4`
  answers `:idle` for a callee between requests.
  """
  @spec wake(pid()) :: :ok
  def wake(sampler) do
    send(sampler, :wake)
    :ok
  end

  @doc "Stops the sampler and returns its counters and metrics series."
  @spec stop(pid()) :: Results.t()
  def stop(sampler) do
    ref = Process.monitor(sampler)
    send(sampler, {:stop, self(), ref})

    receive do
      {^ref, result} ->
        Process.demonitor(ref, [:flush])
        result

      {:DOWN, ^ref, :process, _, _} ->
        Results.none()
    end
  end

  @doc """
  Stops the samplers by pid and summarizes them (`Results.summarize/1`) with the
  results already in `more` (`[{pid, result}]`); no sampler at all gives
  no metrics and no counters (an exact trace has none).
  """
  @spec stop_all(%{pid() => pid()}, [{pid(), Results.t()}]) :: %{metrics: map(), stats: map()}
  def stop_all(samplers, more \\ []) do
    case Enum.map(samplers, fn {pid, sampler} -> {pid, stop(sampler)} end) ++ more do
      [] -> %{metrics: %{}, stats: %{}}
      by_pid -> Results.summarize(by_pid)
    end
  end

  @doc "The status frame that `split_status: true` puts at the root of each stack."
  @spec status_frame(atom()) :: {atom(), atom(), 0}
  defdelegate status_frame(status), to: Tick

  @doc """
  The `backtrace_depth` samples of stacks folded at `max_depth` need:
  `max_depth + 1` (the one past it shows the fold), at most the VM's 64.
  """
  @spec backtrace_depth(pos_integer()) :: pos_integer()
  def backtrace_depth(max_depth), do: min(max_depth + 1, @max_backtrace_depth)

  defp loop(state, deadline) do
    case Tick.tick(state) do
      %{idle: true} = state ->
        Budget.leave()
        idle(%{state | idle: false})

      %{sleepy: true} = state ->
        sleep(%{state | sleepy: false}, deadline)

      state ->
        next_tick(state, deadline)
    end
  end

  defp next_tick(state, deadline) do
    interval = Budget.interval(state.interval_us, Budget.active(), state.budget)
    {deadline, late} = next_deadline(deadline, interval)

    state = %{
      state
      | late_ticks: state.late_ticks + late,
        throttled_ticks: state.throttled_ticks + if(interval > state.interval_us, do: 1, else: 0)
    }

    wait(state, deadline)
  end

  # The target waits where the last answered request found it. Arm its
  # wake-up, look once more (it may have been scheduled in before the
  # wake-up was armed: then its `in` is not coming), and block.
  defp sleep(%{native: native, target: target} = state, deadline) do
    with :ok <- Native.sample_sleep(native, target, self()),
         [status: :waiting, reductions: reds] <- Process.info(target, [:status, :reductions]),
         true <- reds == state.idle_reductions do
      Budget.leave()
      slumber(state, deadline)
    else
      _moved_full_or_stopped ->
        Native.sample_wake_cancel(native, target)
        next_tick(state, deadline)
    end
  end

  defp slumber(%{ref: ref, target: target} = state, deadline) do
    receive do
      {:flame_on_in, ^target} ->
        awake(state, deadline)

      {:stop, from, stop_ref} ->
        Native.sample_wake_cancel(state.native, target)
        send(from, {stop_ref, result(count_slept(state, deadline))})

      {:DOWN, ^ref, :process, _, _} ->
        Native.sample_wake_cancel(state.native, target)
        wait_for_stop(count_slept(state, deadline))

      {:DOWN, owner_ref, :process, _, _} when owner_ref == state.owner_ref ->
        :ok

      :wake ->
        slumber(state, deadline)
    after
      div(@max_sleep_intervals * state.interval_us, 1000) ->
        Native.sample_wake_cancel(state.native, target)
        awake(state, deadline)
    end
  end

  # Back on the interval grid: the ticks that passed asleep (after the one
  # at `deadline`, which found it waiting) are samples of the wait the
  # target was in, about an interval apart.
  defp awake(state, deadline) do
    Budget.join()
    {next, slept} = next_deadline(deadline, state.interval_us)
    wait(add_slept(state, slept), next)
  end

  # Stopped asleep: the ticks up to now (after the one at `deadline`, which
  # found it waiting) were samples of the wait too.
  defp count_slept(state, deadline) do
    now = now_us()

    add_slept(state, max(div(now - deadline, state.interval_us), 0))
  end

  defp add_slept(state, 0), do: state

  defp add_slept(state, slept) do
    case Native.sample(state.native, state.target, {:slept, slept}, 0, :plain) do
      :ok ->
        state = %{
          state
          | samples: state.samples + slept,
            same_samples: state.same_samples + slept,
            slept_samples: state.slept_samples + slept
        }

        # The series keeps one entry per sample: nothing moved meanwhile
        # (a message would have woken the target), so each repeats the last
        # one (a waiting target's). Spread evenly between it and now, so
        # that the series stays in time order however late that tick was.
        %{t_us: from} = last = state.last_metric
        now = now_us()

        Enum.reduce(1..slept, state, fn k, state ->
          Tick.keep(state, %{last | t_us: from + div(k * (now - from), slept + 1)})
        end)

      _stopped_or_idle ->
        state
    end
  end

  defp idle(state) do
    receive do
      :wake ->
        Budget.join()
        loop(state, now_us())

      {:stop, from, stop_ref} ->
        send(from, {stop_ref, result(state)})

      {:DOWN, ref, :process, _, _} when ref == state.ref ->
        wait_for_stop(state)

      {:DOWN, ref, :process, _, _} when ref == state.owner_ref ->
        :ok
    end
  end

  defp wait_for_stop(state) do
    receive do
      {:stop, from, stop_ref} -> send(from, {stop_ref, result(state)})
      {:DOWN, ref, :process, _, _} when ref == state.owner_ref -> :ok
    end
  end

  defp wait(%{ref: ref} = state, deadline) do
    # The VM's timers fire on whole milliseconds, late rather than early:
    # rounding to the nearest keeps the ticks on the interval grid on
    # average (rounding up lost every other tick at 1 ms).
    timeout = max(div(deadline - now_us() + 500, 1000), 0)

    receive do
      {:stop, from, stop_ref} ->
        send(from, {stop_ref, result(state)})

      # The target is gone: nothing more to sample.
      {:DOWN, ^ref, :process, _, _} ->
        Budget.leave()
        wait_for_stop(state)

      {:DOWN, owner_ref, :process, _, _} when owner_ref == state.owner_ref ->
        :ok

      # Only an idle sampler waits for these: one that is sampling ignores them.
      :wake ->
        wait(state, deadline)

      # a wake-up armed and disarmed again, after it fired
      {:flame_on_in, _} ->
        wait(state, deadline)
    after
      timeout -> loop(state, deadline)
    end
  end

  # The next tick on the interval grid; ticks already past are skipped.
  defp next_deadline(deadline, interval_us) do
    now = now_us()
    # Uniform in [interval/2, 3*interval/2): the mean rate stays, and the
    # ticks cannot lock onto the phase of a periodic workload.
    next = deadline + div(interval_us, 2) + :rand.uniform(interval_us) - 1

    if next >= now do
      {next, 0}
    else
      missed = div(now - next, interval_us) + 1
      {next + missed * interval_us, missed}
    end
  end

  defp result(state) do
    Budget.leave()
    Results.of(state)
  end

  defp now_us, do: Tick.now_us()
end
