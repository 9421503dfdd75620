defmodule FlameOn.Client.NifModeTest do
  # Tracing is node-global (patterns, flags): never async.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Test.Workloads

  @fib "FlameOn.Client.Test.Workloads.fib/1"
  @flags [:call, :return_to, :running, :arity, :monotonic_timestamp]

  setup do
    assert_node_clean()
    :ok
  end

  # Records the standard trace messages of a real run, to replay them.
  defp record(fun) do
    parent = self()

    collector =
      spawn(fn ->
        loop = fn loop, acc ->
          receive do
            {:dump, to} -> send(to, {:recorded, Enum.reverse(acc)})
            msg -> loop.(loop, [msg | acc])
          end
        end

        loop.(loop, [])
      end)

    :ok = Patterns.acquire(nil)

    worker =
      spawn(fn ->
        receive do: (:go -> :ok)
        fun.()
        send(parent, :done)
        receive do: (:stop -> :ok)
      end)

    :erlang.trace(worker, true, [{:tracer, collector} | @flags])
    send(worker, :go)
    assert_receive :done, 10_000
    :erlang.trace(worker, false, @flags)
    ref = :erlang.trace_delivered(worker)
    assert_receive {:trace_delivered, ^worker, ^ref}
    Patterns.release()
    send(worker, :stop)
    send(collector, {:dump, self()})
    assert_receive {:recorded, messages}
    Process.exit(collector, :kill)
    messages
  end

  # The same message as a tracer-module callback, with the recorded
  # timestamp passed as an integer (what trace/5 accepts for replays).
  defp replay_as_callback(session, {:trace_ts, pid, tag, payload, ts}) do
    Native.trace(tag, session, pid, payload, %{timestamp: ts})
  end

  defp replay_as_callback(session, {:trace_ts, pid, tag, payload, caller, ts}) do
    Native.trace(tag, session, pid, payload, %{timestamp: ts, match_spec_result: caller})
  end

  test "one recorded event stream gives identical stacks through ingest/2 and trace/5" do
    messages = record(fn -> Workloads.mixed(30) end)
    assert length(messages) > 1_000

    by_ingest = Native.new(%{})
    messages |> Enum.chunk_every(500) |> Enum.each(&Native.ingest(by_ingest, &1))

    by_callback = Native.new(%{replay: true})
    Enum.each(messages, &replay_as_callback(by_callback, &1))

    {tree_a, stats_a} = Native.finish(by_ingest, nil)
    {tree_b, stats_b} = Native.finish(by_callback, nil)
    # the same trees, so the same stacks
    assert tree_a == tree_b
    stacks_a = raw_stacks(tree_a)
    stacks_b = raw_stacks(tree_b)

    assert stacks_a == stacks_b
    assert stats_a.events == stats_b.events
    assert stats_a.events > 1_000
    # producer_folds, buffer_bytes: whether the drainer thread kept up with
    # the replay (trace/5 buffers, ingest/2 does not)
    volatile = [:memory_bytes, :producer_folds, :buffer_bytes]
    assert Map.drop(stats_a, volatile) == Map.drop(stats_b, volatile)

    # And the replay is a real profile: fib frames, deep.
    [{_pid, entries}] = Map.to_list(stacks_a)
    assert Enum.any?(entries, fn {frames, _ns} -> length(frames) > 5 end)
    assert_node_clean()
  end

  test "both modes give the same stack shapes for the same work" do
    shapes = fn mode ->
      # every level a frame: many shapes to compare; twenty times, so that
      # no shape's time rounds to 0 µs (a stack of 0 µs is not kept), in a
      # tail-recursive loop (Elixir 1.18's `for` over a range recurses in
      # Enum.map_range/4, a frame deeper each time: other shapes each run)
      {_, profile} =
        FlameOn.Client.profile(fn -> times(20, fn -> Workloads.fib(12) end) end,
          mode: mode,
          collapse_recursion: false
        )

      # (a collection lands wherever the heap fills up, a preemption
      # wherever the time slice ends: classes of time, not the shape)
      profile.stacks[self()]
      |> Enum.map(&elem(&1, 0))
      |> Enum.filter(&String.contains?(&1, @fib))
      |> Enum.reject(&(&1 =~ ~r/;(GC_MINOR|GC_MAJOR|RUNNABLE|SLEEP)$/))
      |> MapSet.new()
    end

    nif = shapes.(:nif)
    process = shapes.(:process)
    assert MapSet.size(nif) >= 10
    assert nif == process
    assert_node_clean()
  end

  test "the traced process killed mid-trace leaves the node clean" do
    parent = self()

    pid =
      spawn(fn ->
        FlameOn.Client.profile(
          fn ->
            send(parent, {:tracing, self()})
            Workloads.busy(10_000)
          end,
          mode: :nif
        )
      end)

    assert_receive {:tracing, ^pid}, 5_000
    Process.sleep(20)
    assert [{Native, _session}] = our_tracers(pid)
    Process.exit(pid, :kill)
    assert_node_clean()
  end

  test "the tracer callbacks: enabled/3 answers, a stopped session drops events and is removed" do
    # (kept, idle, where the VM cannot take a removal safely: tracer_gone/0)
    session = Native.new(%{replay: true})
    assert Native.enabled(:call, session, self()) == :trace
    assert Native.enabled(:trace_status, session, self()) == :trace
    assert Native.enabled(:send, session, self()) == :discard
    assert Native.enabled(:trace_status, :not_a_session, self()) == tracer_gone()

    assert :ok = Native.trace(:call, session, self(), {:m, :f, 0}, %{timestamp: 1_000})
    assert :ok = Native.trace(:return_to, session, self(), :undefined, %{timestamp: 3_000})
    assert :ok = Native.trace(:spawn, session, self(), :whatever, %{timestamp: 4_000})
    assert :ok = Native.trace(:call, session, self(), :not_an_mfa, %{timestamp: 5_000})
    assert %{events: 2, ignored_events: 1, malformed_events: 1} = Native.stats(session)

    assert is_integer(Native.stop(session))
    assert Native.enabled(:trace_status, session, self()) == tracer_gone()
    assert :ok = Native.trace(:call, session, self(), {:m, :g, 0}, %{timestamp: 6_000})
    assert %{events: 2} = Native.stats(session)

    {tree, _stats} = Native.finish(session, nil)
    assert raw_stacks(tree) == %{self() => [{[{:m, :f, 0}], 2_000}]}
  end

  test "without replay: true, trace/5 stamps events itself and ignores a timestamp in opts" do
    session = Native.new(%{})
    Native.trace(:call, session, self(), {:m, :f, 0}, %{timestamp: 1})
    Process.sleep(5)
    Native.stop(session)
    {tree, _} = Native.finish(session, :stop)
    [{[{:m, :f, 0}], ns}] = raw_stacks(tree)[self()]
    # charged from the call up to stop/1, on the tracer clock: about 5 ms
    assert ns in 4_000_000..500_000_000
  end

  test "the tracer callbacks reject what is not a session or an opts map" do
    session = Native.new(%{})

    for {state, opts} <- [{:nope, %{}}, {make_ref(), %{}}, {session, :not_a_map}] do
      assert_raise ArgumentError, fn -> Native.trace(:call, state, self(), {:m, :f, 0}, opts) end
    end

    assert_raise ArgumentError, fn -> Native.stop(:nope) end
  end

  describe "the tracer state is a slot key" do
    test "a session's key takes events until stop/1, then reaches nothing" do
      session = Native.new(%{replay: true})
      key = Native.tracer_state(session)
      assert is_integer(key) and key > 0
      assert Native.tracer_state(session) == key
      assert Native.enabled(:trace_status, key, self()) == :trace

      assert :ok = Native.trace(:call, key, self(), {:m, :f, 0}, %{timestamp: 1_000})
      assert %{events: 1} = Native.stats(session)

      Native.stop(session)
      assert Native.enabled(:trace_status, key, self()) == tracer_gone()
      assert :ok = Native.trace(:call, key, self(), {:m, :g, 0}, %{timestamp: 2_000})
      assert %{events: 1} = Native.stats(session)
      assert_raise ArgumentError, fn -> Native.tracer_state(session) end

      # a graph session has no key: its tracer state is :graph
      assert_raise ArgumentError, fn -> Native.tracer_state(Native.new(%{label: 77_001})) end
    end

    test "keys are never handed out twice, and a session dropped unfinished frees its slot" do
      keys =
        for _ <- 1..200 do
          session = Native.new(%{})
          key = Native.tracer_state(session)
          Native.finish(session, nil)
          key
        end

      assert length(Enum.uniq(keys)) == 200
      assert Enum.all?(keys, &(Native.enabled(:trace_status, &1, self()) == tracer_gone()))

      parent = self()

      holder =
        spawn(fn ->
          session = Native.new(%{})
          send(parent, {:key, Native.tracer_state(session)})
          receive do: (:stop -> :ok)
        end)

      assert_receive {:key, key}
      assert Native.enabled(:trace_status, key, self()) == :trace
      send(holder, :stop)
      # the holder's exit frees the session handle: its destructor frees the slot
      assert wait_until(fn -> Native.enabled(:trace_status, key, self()) == tracer_gone() end)
    end

    test "a buffer smaller than a burst is folded as it fills: the same stacks" do
      messages = record(fn -> Workloads.fib(14) end)

      trees =
        for buffer <- [64, 65_536] do
          session = Native.new(%{replay: true, buffer_events: buffer})
          key = Native.tracer_state(session)
          Enum.each(messages, &replay_as_callback(key, &1))
          {tree, stats} = Native.finish(session, nil)
          assert stats.buffer_bytes <= buffer * 56
          assert stats.events > 1_000
          tree
        end

      assert [same, same] = trees
      assert_raise ArgumentError, fn -> Native.new(%{buffer_events: 0}) end
      assert_raise ArgumentError, fn -> Native.new(%{buffer_events: 2 ** 23}) end
    end
  end

  defp wait_until(fun, tries \\ 100) do
    cond do
      fun.() ->
        true

      tries == 0 ->
        false

      true ->
        Process.sleep(10)
        wait_until(fun, tries - 1)
    end
  end

  def times(0, _fun), do: :ok

  def times(n, fun) do
    fun.()
    times(n - 1, fun)
  end
end
