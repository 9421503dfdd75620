defmodule FlameOn.Client.NextGateTest do
  # The NIF gate of capture_next, driven directly through its tracer
  # callbacks (as the VM calls them): one atomic winner among concurrent
  # callers, the winner asked again still wins, nobody after it fires,
  # excluded processes and a dead owner let nobody in, cancel races a
  # claim cleanly, the return stops the session; and bad arguments raise
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
end
