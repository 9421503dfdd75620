defmodule FlameOn.Client.NextGateTest do
  # The NIF gate of capture_next, driven directly through its tracer
  # callbacks (as the VM calls them): one atomic winner among concurrent
  # callers, the winner asked again still wins, nobody after it fires,
  # excluded processes and a dead owner let nobody in, cancel races a
  # claim cleanly, the return stops the session; a cross-process trace's
  # root moves to the caller only while the router holds the trace (a
  # stop racing the move, a trace the router refused), so no pid is left
  # routed to a session once it is freed; and bad arguments raise
  # ArgumentError or are ignored, never crash.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers, only: [raw_stacks: 1]

  alias FlameOn.Client.Core.Native

  defp session,
    do: Native.new(%{native_per_second: System.convert_time_unit(1, :second, :native)})

  defp mfa_term, do: {__MODULE__, :captured, [1, 2]}

  test "of many processes asking at once, exactly one wins, and it keeps winning" do
    for _round <- 1..20 do
      gate = Native.next_new(session(), self(), [])
      parent = self()

      pids =
        for _ <- 1..16 do
          spawn(fn ->
            receive do
              :go -> send(parent, {:answer, self(), Native.enabled(:call, {:next, gate}, self())})
            end
          end)
        end

      Enum.each(pids, &send(&1, :go))
      answers = for pid <- pids, do: receive(do: ({:answer, ^pid, answer} -> {pid, answer}))
      assert [{winner, :trace}] = Enum.filter(answers, &match?({_, :trace}, &1))
      assert Enum.count(answers, &match?({_, :discard}, &1)) == 15
      # the VM may ask again for the same event
      assert Native.enabled(:call, {:next, gate}, winner) == :trace
      assert Native.next_state(gate) == {:fired, winner}
      assert Native.next_cancel(gate) == :fired
    end
  end

  test "the call fires once: the owner hears of it, nobody is let in after, the return stops the session" do
    native = session()
    gate = Native.next_new(native, self(), [])
    caller = spawn(fn -> Process.sleep(:infinity) end)
    assert Native.enabled(:trace_status, {:next, gate}, caller) == :trace
    assert Native.enabled(:call, {:next, gate}, caller) == :trace
    opts = %{match_spec_result: {:some, :caller, 0}}
    assert Native.trace(:call, {:next, gate}, caller, mfa_term(), opts) == :ok
    assert_receive {:flame_on_next, ^gate, :fired, ^caller, {:some, :caller, 0}, started}
    assert is_integer(started)

    # a second event of the call changes nothing; nobody else, not even the
    # winner calling again, is let in
    assert Native.trace(:call, {:next, gate}, caller, mfa_term(), opts) == :ok
    refute_received {:flame_on_next, ^gate, :fired, _, _, _}
    assert Native.enabled(:trace_status, {:next, gate}, caller) == :discard
    assert Native.enabled(:call, {:next, gate}, caller) == :discard
    assert Native.enabled(:call, {:next, gate}, self()) == :discard

    # another process's return is not the call's
    assert Native.trace(:return_from, {:next, gate}, self(), {__MODULE__, :captured, 2}, %{}) ==
             :ok

    refute_received {:flame_on_next, ^gate, :returned, _, _, _}

    assert Native.trace(:exception_from, {:next, gate}, caller, {__MODULE__, :captured, 2}, %{
             extra: {:error, :badarg}
           }) == :ok

    assert_receive {:flame_on_next, ^gate, :raised, ended, {:error, :badarg}, nil}
    assert ended >= started
    assert Native.next_state(gate) == {:done, caller}
    # the session took no more: stopped, and its root is the captured call
    assert Native.sample(native, caller, [{:m, :f, 0}], 0) == :stopped
    {tree, _stats} = Native.finish(native, :stop)
    assert [{frames, _ns} | _] = Map.fetch!(raw_stacks(tree), caller)
    assert List.last(frames) == {:some, :caller, 0}
    assert {__MODULE__, :captured, 2} in frames
    Process.exit(caller, :kill)
  end

  test "excluded processes never win; a dead owner lets nobody in; cancel shuts the gate" do
    gate = Native.next_new(session(), self(), [self()])
    assert Native.enabled(:call, {:next, gate}, self()) == :discard
    assert Native.next_state(gate) == :armed

    owner = spawn(fn -> :ok end)
    ref = Process.monitor(owner)
    assert_receive {:DOWN, ^ref, :process, ^owner, _}
    orphan = Native.next_new(session(), owner, [])
    assert Native.enabled(:trace_status, {:next, orphan}, self()) == :discard

    gate = Native.next_new(session(), self(), [])
    assert Native.next_cancel(gate) == :cancelled
    assert Native.next_cancel(gate) == :cancelled
    assert Native.next_state(gate) == :cancelled
    assert Native.enabled(:call, {:next, gate}, self()) == :discard
    assert Native.enabled(:trace_status, {:next, gate}, self()) == :discard
  end

  test "bad arguments raise ArgumentError; odd tracer states and events are ignored" do
    native = session()
    gate = Native.next_new(native, self(), [])

    for args <- [
          [:not_a_session, self(), []],
          [native, :not_a_pid, []],
          [native, self(), :not_a_list],
          [native, self(), [:not_a_pid]],
          [native, self(), List.duplicate(self(), 9)],
          [native, self(), [self() | :improper]],
          [gate, self(), []]
        ] do
      assert_raise ArgumentError, fn -> apply(Native, :next_new, args) end
    end

    for arg <- [native, :gate, make_ref(), {:next, gate}] do
      assert_raise ArgumentError, fn -> Native.next_cancel(arg) end
      assert_raise ArgumentError, fn -> Native.next_state(arg) end
    end

    for state <- [{:next, :not_a_gate}, {:other, gate}, {:next, gate, :extra}, {}],
        tag <- [:call, :trace_status, :return_from] do
      assert Native.enabled(tag, state, self()) == :discard
      assert Native.trace(tag, state, self(), mfa_term(), %{}) == :ok
    end

    # a port or a label as the tracee, odd payloads and options
    assert Native.enabled(:call, {:next, gate}, :a_label) == :discard
    assert Native.trace(:call, {:next, gate}, :a_label, mfa_term(), %{}) == :ok
    assert Native.enabled(:call, {:next, gate}, self()) == :trace
    assert Native.trace(:call, {:next, gate}, self(), :not_an_mfa, :not_a_map) == :ok
    assert_receive {:flame_on_next, ^gate, :fired, _, :undefined, _}
    assert Native.trace(:return_from, {:next, gate}, self(), :whatever, :not_a_map) == :ok
    assert_receive {:flame_on_next, ^gate, :returned, _, :ok, nil}
    assert %{malformed_events: 1} = Native.stats(native)
  end

  # Labels of the graph sessions below, far from those real traces take.
  @refused_label 2_000_101
  @race_label 2_000_102

  defp graph_session(label),
    do:
      Native.new(%{label: label, native_per_second: System.convert_time_unit(1, :second, :native)})

  # Sessions are freed once nothing holds them: this process's references
  # go with a garbage collection (polled, for a destructor on another
  # thread; no time is asserted).
  defp assert_sessions_freed(live_before, tries \\ 500) do
    :erlang.garbage_collect()

    cond do
      Native.live_sessions() <= live_before ->
        :ok

      tries == 0 ->
        flunk("sessions left: #{Native.live_sessions() - live_before}")

      true ->
        Process.sleep(10)
        assert_sessions_freed(live_before, tries - 1)
    end
  end

  # A trace the router refused (its label taken) has no router reference:
  # when its gate fires, the caller must not be routed to it, or the entry
  # would outlive the session and the caller's next event would reach a
  # freed session.
  test "a cross-process gate firing for a trace the router refused routes nothing" do
    live_before = Native.live_sessions()
    holder = graph_session(@refused_label)
    :ok = Native.graph_start(holder, self())
    parent = self()

    {winner, ref} =
      spawn_monitor(fn ->
        native = graph_session(@refused_label)
        # the label is taken: the router refuses it
        assert_raise ArgumentError, fn -> Native.graph_start(native, parent) end
        gate = Native.next_new(native, parent, [])
        :trace = Native.enabled(:call, {:next, gate}, self())
        :ok = Native.trace(:call, {:next, gate}, self(), mfa_term(), %{})
        Native.stop(native)
        Native.finish(native, :stop)
      end)

    assert_receive {:DOWN, ^ref, :process, ^winner, :normal}
    assert_receive {:flame_on_next, _gate, :fired, ^winner, _, _}
    Native.stop(holder)
    Native.finish(holder, :stop)
    assert Native.graph_role(winner) == nil
    assert Native.graph_role(self()) == nil
    assert_sessions_freed(live_before)
    # the sessions are gone: an event of the caller goes nowhere
    assert Native.trace(:call, :graph, winner, {__MODULE__, :captured, 2}, %{}) == :ok
  end

  defp await_go(go), do: if(:atomics.get(go, 1) == 1, do: :ok, else: await_go(go))

  defp spin(0), do: :ok
  defp spin(n), do: spin(n - 1)

  # On its own scheduler when there are two, so the two sides really run
  # at once (left to the run queues they almost never do: the race was not
  # caught in 8 runs). The option is undocumented: without it, a plain spawn.
  defp spawn_on(scheduler, fun) do
    if System.schedulers_online() > 1,
      do: :erlang.spawn_opt(fun, [{:scheduler, scheduler}]),
      else: spawn(fun)
  rescue
    ArgumentError -> spawn(fun)
  end

  # One race: the gate of a cross-process trace (its stand-in root this
  # process) fires in one process while another stops the trace, both let
  # go at once, the stop a little later each round (the move of the root
  # must land in, not beside, stop's steps). The caller's pid.
  defp reroot_race(round) do
    parent = self()
    native = graph_session(@race_label)
    :ok = Native.graph_start(native, self())
    gate = Native.next_new(native, self(), [])
    go = :atomics.new(1, [])

    winner =
      spawn_on(1, fn ->
        :trace = Native.enabled(:call, {:next, gate}, self())
        send(parent, {:ready, self()})
        await_go(go)
        :ok = Native.trace(:call, {:next, gate}, self(), mfa_term(), %{})
        send(parent, {:done, self()})
      end)

    stopper =
      spawn_on(2, fn ->
        send(parent, {:ready, self()})
        await_go(go)
        spin(rem(round, 256))
        Native.stop(native)
        send(parent, {:done, self()})
      end)

    assert_receive {:ready, ^winner}, 5_000
    assert_receive {:ready, ^stopper}, 5_000
    :atomics.put(go, 1, 1)
    assert_receive {:done, ^winner}, 5_000
    assert_receive {:done, ^stopper}, 5_000
    assert_receive {:flame_on_next, ^gate, :fired, ^winner, _, _}
    Native.finish(native, :stop)
    winner
  end

  # stop/1 racing the move of the root (fo_root_move, then the router's
  # map): a move that lands after stop's unregister must be refused, or the
  # caller stays routed to a session the router no longer holds. Whatever
  # the order each round took, nothing of the trace is left. The race is
  # narrow: 10 000 rounds caught it in 3 of 8 runs before the fix
  # (the test above catches the same missing check every time). A loaded
  # machine makes each round slower, not the race likelier: at most 15 s
  # of rounds (a bound on the work, nothing is asserted about time).
  test "stop racing the move of a cross-process trace's root leaves no pid routed" do
    live_before = Native.live_sessions()
    until = System.monotonic_time(:millisecond) + 15_000

    winners =
      Enum.reduce_while(1..10_000, [], fn round, winners ->
        winners = [reroot_race(round) | winners]

        if System.monotonic_time(:millisecond) < until,
          do: {:cont, winners},
          else: {:halt, winners}
      end)

    assert Enum.reject(winners, &(Native.graph_role(&1) == nil)) == []
    assert Native.graph_role(self()) == nil
    assert_sessions_freed(live_before)

    # the sessions are gone: the callers' events go nowhere
    for winner <- Enum.take_every(winners, 8) do
      assert Native.trace(:call, :graph, winner, {__MODULE__, :captured, 2}, %{}) == :ok
    end
  end
end
