defmodule FlameOn.Client.Sampling.Sampler do
  @moduledoc false
  # Samples one process's stack into a native session at a fixed interval
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
  alias FlameOn.Client.Sampling.Budget

  @status_module :"$status"
  # The VM keeps at most 64 frames of a stack trace (MAX_BACKTRACE_SIZE).
  @max_backtrace_depth 64
  # A sleeping sampler looks again after this many intervals even if no
  # `in` came (someone may have taken the target's trace flags away).
  @max_sleep_intervals 100
  # The root of a stack the VM cut at backtrace_depth.
  @cut_frame {:"$cut", :"…", 0}
  # The counters of a sampler that took no sample.
  @no_samples %{
    metrics: [],
    samples: 0,
    same_samples: 0,
    late_ticks: 0,
    throttled_ticks: 0,
    dropped_metrics: 0,
    slept_samples: 0
  }

  @typedoc "One sample's metrics."
  @type metric :: %{
          t_us: integer(),
          status: atom(),
          message_queue_len: non_neg_integer(),
          memory: non_neg_integer(),
          reductions: non_neg_integer()
        }

  @typedoc "What a stopped sampler hands back."
  @type result :: %{
          metrics: [metric()],
          samples: non_neg_integer(),
          same_samples: non_neg_integer(),
          late_ticks: non_neg_integer(),
          throttled_ticks: non_neg_integer(),
          dropped_metrics: non_neg_integer(),
          slept_samples: non_neg_integer()
        }

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
      |> Map.merge(@no_samples)

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
    # starts there and not before the sampler's spawn.
    {state, {deadline, _late}} =
      if target == self(),
        do: {tick(%{state | own: true}), next_deadline(now_us(), interval_us)},
        else: {state, {now_us(), 0}}

    send(sampler, {:begin, spawner, %{state | own: false}, deadline})
    sampler
  end

  # On the caller's scheduler (where a process sampling itself runs) the
  # sampler could only run when its target yields: every sample would land
  # in a wait and every CPU burst go unseen (measured: all of them did). So
  # it is bound to another scheduler, with the VM's `{:scheduler, n}` spawn
  # option (not documented; a plain spawn where it is refused).
  defp spawn_beside(fun) do
    online = :erlang.system_info(:schedulers_online)
    current = :erlang.system_info(:scheduler_id)

    # comparisons, not `in` a range: no protocol dispatch, which can mean
    # loading a module (tens of ms on a node in interactive mode)
    if online > 1 and current >= 1 and current <= online do
      :erlang.spawn_opt(fun, [{:scheduler, rem(current, online) + 1}])
    else
      spawn(fun)
    end
  rescue
    ArgumentError -> spawn(fun)
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
  @spec stop(pid()) :: result()
  def stop(sampler) do
    ref = Process.monitor(sampler)
    send(sampler, {:stop, self(), ref})

    receive do
      {^ref, result} ->
        Process.demonitor(ref, [:flush])
        result

      {:DOWN, ^ref, :process, _, _} ->
        @no_samples
    end
  end

  @doc """
  `pid` serves a cross-process trace again: its sampler in `samplers` (by
  pid) is woken, or a new one started (`start/3` with `opts`). Returns the
  samplers by pid.
  """
  @spec sample_callee(%{pid() => pid()}, Native.session(), pid(), keyword()) :: %{pid() => pid()}
  def sample_callee(samplers, native, pid, opts) do
    case samplers do
      %{^pid => sampler} ->
        wake(sampler)
        samplers

      _ ->
        Map.put(samplers, pid, start(native, pid, opts))
    end
  end

  @doc """
  Stops the samplers by pid and summarizes them (`summarize/1`) with the
  results already in `more` (`[{pid, result}]`); no sampler at all gives
  no metrics and no counters (an exact trace has none).
  """
  @spec stop_all(%{pid() => pid()}, [{pid(), result()}]) :: %{metrics: map(), stats: map()}
  def stop_all(samplers, more \\ []) do
    case Enum.map(samplers, fn {pid, sampler} -> {pid, stop(sampler)} end) ++ more do
      [] -> %{metrics: %{}, stats: %{}}
      by_pid -> summarize(by_pid)
    end
  end

  @doc """
  What the stopped samplers of one trace (`[{pid, result}]`) add to its
  profile: `metrics` by pid (processes with none left out) and the `stats`
  counters `late_ticks`, `throttled_ticks`, `same_samples` (samples of a
  waiting process that repeated its stack without asking it),
  `slept_samples` (those of them its sampler slept through),
  `dropped_metrics` and `sampled_processes`.
  """
  @spec summarize([{pid(), result()}]) :: %{metrics: map(), stats: map()}
  def summarize(results) do
    sum = fn key -> Enum.sum(for {_, r} <- results, do: Map.fetch!(r, key)) end

    %{
      metrics: for({pid, %{metrics: [_ | _] = m}} <- results, into: %{}, do: {pid, m}),
      stats: %{
        late_ticks: sum.(:late_ticks),
        throttled_ticks: sum.(:throttled_ticks),
        same_samples: sum.(:same_samples),
        slept_samples: sum.(:slept_samples),
        dropped_metrics: sum.(:dropped_metrics),
        sampled_processes: length(results)
      }
    }
  end

  @doc "The status frame that `split_status: true` puts at the root of each stack."
  @spec status_frame(atom()) :: {atom(), atom(), 0}
  def status_frame(status), do: {@status_module, status, 0}

  @doc """
  The `backtrace_depth` samples of stacks folded at `max_depth` need:
  `max_depth + 1` (the one past it shows the fold), at most the VM's 64.
  """
  @spec backtrace_depth(pos_integer()) :: pos_integer()
  def backtrace_depth(max_depth), do: min(max_depth + 1, @max_backtrace_depth)

  defp loop(state, deadline) do
    case tick(state) do
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
          keep(state, %{last | t_us: from + div(k * (now - from), slept + 1)})
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

  defp tick(%{target: target} = state) do
    case Process.info(target, [:status, :message_queue_len, :reductions]) do
      [status: status, message_queue_len: mql, reductions: reds] ->
        if unchanged?(state, status, reds),
          do: %{fold(state, :same, status, mql, state.last_memory, reds) | sleepy: not state.own},
          else: ask(state, status, mql, reds)

      # the target exited
      nil ->
        state
    end
  end

  # Waiting where the last answered request found it, and it has run no
  # code since: answering cost it one reduction, anything else more. With
  # split_status the repeated stack also repeats its status frame.
  defp unchanged?(state, status, reds) do
    status == :waiting and reds == state.idle_reductions and
      (not state.split_status or state.last_status == :waiting)
  end

  defp ask(%{target: target} = state, status, mql, reds) do
    case Process.info(target, [:current_stacktrace, :memory, :reductions]) do
      [current_stacktrace: stack, memory: memory, reductions: answered] ->
        stack =
          stack
          |> drop_own(state)
          |> trim(state.root, state.depth)
          |> with_status(status, state.split_status)

        # A process sampling itself answers without a signal.
        idle = if state.own, do: nil, else: answered + 1
        # Seen waiting, and it answered before running anything: the stack
        # is where the whole wait it is in was spent. A process sampling
        # itself does so as its trace begins: its work comes after.
        how =
          cond do
            state.own -> :leading
            status == :waiting and answered == reds -> :waited
            true -> :plain
          end

        state = %{state | idle_reductions: idle, last_memory: memory}
        fold(state, {stack, how}, status, mql, memory, reds)

      nil ->
        state
    end
  end

  # sampled: :same, or {stack, how}
  defp fold(%{target: target} = state, sampled, status, mql, memory, reds) do
    weight = reductions_since(state.last_reductions, reds)
    state = %{state | last_reductions: reds, last_status: status}
    {stack, how} = with :same <- sampled, do: {:same, :plain}

    case Native.sample(state.native, target, stack, weight, how) do
      :ok ->
        metric = %{
          t_us: now_us(),
          status: status,
          message_queue_len: mql,
          memory: memory,
          reductions: reds
        }

        same = if stack == :same, do: 1, else: 0

        keep(
          %{
            state
            | samples: state.samples + 1,
              same_samples: state.same_samples + same,
              last_metric: metric
          },
          metric
        )

      :stopped ->
        state

      # A callee between requests of the trace: nothing to sample until
      # the trace's owner wakes us for its next one. Its work meanwhile
      # is no part of the trace: the first sample after waking weighs 0,
      # and its stack is asked for again.
      :idle ->
        %{state | idle: true, last_reductions: nil, idle_reductions: nil}
    end
  end

  # A process's reduction count only grows; the first sample weighs 0.
  defp reductions_since(nil, _reds), do: 0
  defp reductions_since(last, reds), do: max(reds - last, 0)

  defp keep(%{kept: kept, max_samples: max} = state, _metric) when kept >= max,
    do: %{state | dropped_metrics: state.dropped_metrics + 1}

  defp keep(state, metric), do: %{state | metrics: [metric | state.metrics], kept: state.kept + 1}

  # A process sampling itself: the frames from the root frame out.
  defp drop_own(stack, %{own: true, root: {m, f, a}}),
    do: Enum.drop_while(stack, &(not match?({^m, ^f, ^a, _}, &1)))

  defp drop_own(stack, _state), do: stack

  # Innermost first: drop what lies outside the innermost frame of `root`.
  # A stack cut by backtrace_depth (the VM keeps at most 64 frames) has no
  # root frame: it gets a "…" root instead, so it is not taken for a
  # stack that starts there.
  defp trim(stack, nil, _depth), do: stack

  defp trim(stack, {m, f, a}, depth) do
    case Enum.find_index(stack, &match?({^m, ^f, ^a, _}, &1)) do
      nil -> if length(stack) >= depth, do: stack ++ [@cut_frame], else: stack
      index -> Enum.take(stack, index + 1)
    end
  end

  defp with_status(stack, _status, false), do: stack
  defp with_status(stack, status, true), do: stack ++ [status_frame(status)]

  defp result(state) do
    Budget.leave()

    state
    |> Map.take(Map.keys(@no_samples))
    |> Map.put(:metrics, Enum.reverse(state.metrics))
  end

  defp now_us, do: System.monotonic_time(:microsecond)
end
