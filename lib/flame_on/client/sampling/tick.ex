defmodule FlameOn.Client.Sampling.Tick do
  @moduledoc false
  # One tick of a FlameOn.Client.Sampling.Sampler: read the target's
  # status without a signal; if it waits where the last answered stack
  # request found it, repeat that stack (`:same`) without waking it;
  # otherwise ask for its stack (one signal it answers at its next safe
  # point), trim it to the trace's root, and fold it into the core session
  # weighted by the reductions since the previous sample.

  alias FlameOn.Client.Core.Native

  @status_module :"$status"
  # The root of a stack the VM cut at backtrace_depth.
  @cut_frame {:"$cut", :"…", 0}

  @doc "Samples the sampler's target once; the sampler's state after it."
  @spec tick(map()) :: map()
  def tick(%{target: target} = state) do
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
    # A waiting target is scheduled in just to answer: that slice runs
    # none of its code, and must not make its wait runnable time.
    if status == :waiting and not state.own, do: Native.sample_signal(state.native, target)

    case Process.info(target, [:current_stacktrace, :memory, :reductions, :status]) do
      [current_stacktrace: stack, memory: memory, reductions: answered, status: now] ->
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
        # As it answered (a running process answers at its next scheduling
        # point, often the wait that ends its burst): running or preempted,
        # the stack is where it works; waiting, where it waits.
        how =
          cond do
            state.own -> :leading
            status == :waiting and answered == reds -> :waited
            now == :waiting -> :waiting
            now in [:running, :runnable, :garbage_collecting] -> :busy
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

  @doc "Adds `metric` to the series, unless `:max_samples` are kept already (then counts it)."
  @spec keep(map(), map()) :: map()
  def keep(%{kept: kept, max_samples: max} = state, _metric) when kept >= max,
    do: %{state | dropped_metrics: state.dropped_metrics + 1}

  def keep(state, metric), do: %{state | metrics: [metric | state.metrics], kept: state.kept + 1}

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

  @doc "The root frame of a stack the VM or the kernel cut (its outer frames are not known)."
  @spec cut_frame() :: mfa()
  def cut_frame, do: @cut_frame

  @doc "The status frame that `split_status: true` puts at the root of each stack."
  @spec status_frame(atom()) :: {atom(), atom(), 0}
  def status_frame(status), do: {@status_module, status, 0}

  @doc "Now, on the samplers' clock (monotonic µs)."
  @spec now_us() :: integer()
  def now_us, do: System.monotonic_time(:microsecond)
end
