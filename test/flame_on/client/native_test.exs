defmodule FlameOn.Client.NativeTest do
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers, only: [raw_stacks: 1]

  alias FlameOn.Client.Core.Native

  @limits [:max_nodes, :max_depth, :max_processes, :max_frames, :max_stack_frames]

  defp call(pid, mfa, caller, ts), do: {:trace_ts, pid, :call, mfa, caller, ts}

  describe "bad arguments raise ArgumentError" do
    test "new/1" do
      for bad <- [[], :x, "map", nil, {:max_nodes, 1}] do
        assert_raise ArgumentError, fn -> Native.new(bad) end
      end

      for key <- @limits, bad <- [0, -1, 2 ** 31, 2 ** 64, 1.5, :x, "1"] do
        assert_raise ArgumentError, fn -> Native.new(%{key => bad}) end
      end

      for bad <- [0, -1, 2 ** 64, 1.5, :x] do
        assert_raise ArgumentError, fn -> Native.new(%{native_per_second: bad}) end
      end

      assert is_reference(Native.new(%{}))
      assert is_reference(Native.new(%{max_nodes: 1, max_depth: 1}))
    end

    test "ingest/2, stats/1, finish/2 with something that is not a session" do
      for bad <- [make_ref(), :atomics.new(1, []), :x, 1, self(), %{}] do
        assert_raise ArgumentError, fn -> Native.ingest(bad, []) end
        assert_raise ArgumentError, fn -> Native.stats(bad) end
        assert_raise ArgumentError, fn -> Native.finish(bad, nil) end
      end
    end

    test "ingest/2 with something that is not a list" do
      session = Native.new(%{})

      for bad <- [:x, %{}, {:trace_ts, self(), :in, 0, 1}, "list", [:a | :b]] do
        assert_raise ArgumentError, fn -> Native.ingest(session, bad) end
      end

      assert Native.ingest(session, []) == :ok
    end

    test "finish/2 with a bad end timestamp" do
      session = Native.new(%{})

      for bad <- [:x, 1.5, "1", 2 ** 64] do
        assert_raise ArgumentError, fn -> Native.finish(session, bad) end
      end

      assert {{_, _, _, _}, %{}} = Native.finish(session, nil)
    end

    test "a finished session" do
      session = Native.new(%{})
      assert {tree, stats} = Native.finish(session, 0)
      assert raw_stacks(tree) == %{}
      assert stats.events == 0

      assert_raise ArgumentError, fn -> Native.ingest(session, []) end
      assert_raise ArgumentError, fn -> Native.finish(session, nil) end
      assert %{events: 0} = Native.stats(session)
    end

    test "sample/4 with a bad weight, pid or stack" do
      session = Native.new(%{})
      stack = [{M, :f, 0, []}]

      for bad <- [-1, 1.5, :x, "1", 2 ** 64, nil] do
        assert_raise ArgumentError, fn -> Native.sample(session, self(), stack, bad) end
      end

      assert_raise ArgumentError, fn -> Native.sample(session, :not_a_pid, stack, 0) end
      assert_raise ArgumentError, fn -> Native.sample(session, self(), [:x], 0) end
      assert_raise ArgumentError, fn -> Native.sample(session, self(), [{M, :f, 0} | :t], 0) end
      assert_raise ArgumentError, fn -> Native.sample(make_ref(), self(), stack, 0) end
      assert Native.stats(session).samples == 0
      assert Native.sample(session, self(), stack, 2 ** 64 - 1) == :ok
    end

    # The bad arguments above, thrown at one live session a hundred times
    # each: every call raises, and the VM and the session are still whole
    # afterwards (a bad argument that wrote through a wrong pointer or
    # freed the session would show here): the events given after them fold
    # into the exact stacks, and a new session works beside it.
    test "the VM stays up: a session that got every bad argument still profiles exactly" do
      session = Native.new(%{native_per_second: 1_000_000_000})
      pid = self()
      f = {M, :f, 0}
      g = {M, :g, 0}

      bad_calls = [
        fn -> Native.new(%{max_nodes: 2 ** 64}) end,
        fn -> Native.new(%{native_per_second: 0}) end,
        fn -> Native.ingest(session, :x) end,
        fn -> Native.ingest(session, {:trace_ts, pid, :in, 0, 1}) end,
        fn -> Native.ingest(make_ref(), []) end,
        fn -> Native.stats(:atomics.new(1, [])) end,
        fn -> Native.finish(session, :x) end,
        fn -> Native.finish(session, 2 ** 64) end,
        fn -> Native.finish(self(), nil) end,
        fn -> Native.sample(session, pid, [{M, :f, 0, []}], -1) end,
        fn -> Native.sample(session, pid, [{M, :f, 0, []}], 2 ** 64) end,
        fn -> Native.sample(session, :not_a_pid, [f], 0) end,
        fn -> Native.sample(session, pid, [:x], 0) end,
        fn -> Native.sample(session, pid, [f | :t], 0) end,
        fn -> Native.sample(make_ref(), pid, [f], 0) end
      ]

      for bad <- bad_calls, _ <- 1..100 do
        assert_raise ArgumentError, bad
      end

      # none of them added anything to the session
      assert %{events: 0, samples: 0, malformed_events: 0} = Native.stats(session)

      :ok =
        Native.ingest(session, [
          call(pid, f, :undefined, 1_000),
          call(pid, g, f, 3_000),
          {:trace_ts, pid, :return_to, f, 5_000}
        ])

      {tree, stats} = Native.finish(session, 10_000)
      assert stats.events == 3 and stats.malformed_events == 0
      # f: 1_000..3_000 and 5_000..10_000; g: 3_000..5_000 (ns)
      entries = for {frames, ns} <- Map.fetch!(raw_stacks(tree), pid), ns > 0, do: {frames, ns}
      assert Enum.sort(entries) == [{[f], 7_000}, {[g, f], 2_000}]

      fresh = Native.new(%{})
      assert Native.sample(fresh, pid, [{M, :h, 0, []}], 3) == :ok
      {fresh_tree, fresh_stats} = Native.finish(fresh, nil)
      assert fresh_stats.samples == 1
      assert [{[{M, :h, 0}], _ns, 1, 3}] = Map.fetch!(raw_stacks(fresh_tree), pid)
    end
  end

  describe "receives: :sampled and sample_signal/2" do
    test "bad arguments" do
      session = Native.new(%{receives: :sampled})

      for bad <- [make_ref(), :x, 1, self()],
          do: assert_raise(ArgumentError, fn -> Native.sample_signal(bad, self()) end)

      for bad <- [:x, 1, make_ref()],
          do: assert_raise(ArgumentError, fn -> Native.sample_signal(session, bad) end)

      assert Native.sample_signal(session, self()) == :ok
      Native.finish(session, nil)
      assert Native.sample_signal(session, self()) == :stopped
    end

    # a wait (10 µs), an in/out with no message, a wait ended by one: the
    # slice between is the process's code unless the sampler said its
    # signal caused it
    defp sliced(signal?) do
      pid = self()
      session = Native.new(%{receives: :sampled})

      :ok =
        Native.ingest(session, [
          call(pid, {:m, :f, 0}, :undefined, 0),
          {:trace_ts, pid, :out, {:m, :f, 0}, 10_000}
        ])

      if signal?, do: assert(Native.sample_signal(session, pid) == :ok)

      :ok =
        Native.ingest(session, [
          {:trace_ts, pid, :in, {:m, :f, 0}, 20_000},
          {:trace_ts, pid, :out, {:m, :f, 0}, 21_000},
          {:trace_ts, pid, :in, {:m, :f, 0}, 30_000},
          {:trace_ts, pid, :receive, :hello, 30_000},
          {:trace_ts, pid, :out, {:m, :f, 0}, 35_000}
        ])

      {tree, _stats} = Native.finish(session, 40_000)
      Map.new(raw_stacks(tree)[pid], fn {leaf_first, ns} -> {hd(leaf_first), ns} end)
    end

    test "a wait a sampler's signal interrupted stays a wait; else it was runnable" do
      assert sliced(true) == %{{:m, :f, 0} => 16_000, :sleep => 24_000}

      assert sliced(false) == %{{:m, :f, 0} => 16_000, :sleep => 14_000, :runnable => 10_000}
    end
  end

  test "a malformed message inside a batch is counted and the rest applied" do
    session = Native.new(%{native_per_second: 1_000_000_000})
    pid = self()
    f = {M, :f, 0}
    g = {M, :g, 0}

    :ok =
      Native.ingest(session, [
        call(pid, f, :undefined, 1_000),
        call(:not_a_pid, g, f, 2_000),
        call(pid, g, f, 3_000),
        {:trace_ts, pid, :call, :not_an_mfa, 4_000},
        {:trace_ts, pid, :return_to, f, 5_000},
        {:trace_ts, pid, :send, :msg, self(), 5_500},
        {:trace_ts, pid, :out, g, :not_a_timestamp}
      ])

    stats = Native.stats(session)
    assert stats.events == 3
    assert stats.malformed_events == 3
    assert stats.ignored_events == 1

    {tree, final} = Native.finish(session, 10_000)
    stacks = raw_stacks(tree)
    assert final.events == 3
    assert final.malformed_events == 3

    # f: 1_000..3_000 and 5_000..10_000; g: 3_000..5_000 (ns).
    entries = for {frames, ns} <- Map.fetch!(stacks, pid), ns > 0, do: {frames, ns}
    assert Enum.sort(entries) == [{[f], 7_000}, {[g, f], 2_000}]
  end

  test "sampled stacks carry their sample count and weight; others stay {frames, ns}" do
    session = Native.new(%{})
    pid = self()
    f = {M, :f, 0}
    g = {M, :g, 1}

    # innermost first, as Process.info(pid, :current_stacktrace) gives it
    assert Native.sample(session, pid, [{M, :g, [:arg], [line: 3]}, {M, :f, 0, []}], 5) == :ok
    assert Native.sample(session, pid, [{M, :g, 1}, {M, :f, 0}], 7) == :ok
    assert Native.sample(session, pid, [{M, :f, 0, []}], 0) == :ok
    assert Native.stats(session).samples == 3
    # another process, known only from trace events: no counts on its stacks
    other = spawn(fn -> :ok end)
    :ok = Native.ingest(session, [{:trace_ts, other, :in, f, 0}])

    Native.stop(session)
    assert Native.sample(session, pid, [{M, :h, 0}], 100) == :stopped
    {tree, stats} = Native.finish(session, :stop)
    stacks = raw_stacks(tree)
    assert stats.samples == 3

    entries = Map.new(Map.fetch!(stacks, pid), &{elem(&1, 0), Tuple.delete_at(&1, 0)})
    assert {ns_gf, 2, 12} = entries[[g, f]]
    assert ns_gf > 0
    # the last sample's stack held until the stop
    assert {_ns, 1, 0} = entries[[f]]
    assert Enum.all?(Map.fetch!(stacks, pid), &(tuple_size(&1) == 4))
    assert [{[], _ns}] = Map.fetch!(stacks, other)
  end

  # The seam between the tracer callbacks' ring and samples: in/out events
  # wait in the session's ring (the drainer folds them later), while a
  # sample is applied at once. A sample must fold the ring first, and be
  # stamped on the session's clock, or the time since the previous sample
  # goes on-CPU and the waits land under the wrong stack.
  test "samples and the callbacks' in/out events stay in order: waits sit under the stack that waited" do
    session = Native.new(%{})
    key = Native.tracer_state(session)
    pid = spawn(fn -> Process.sleep(:infinity) end)
    f = {M, :f, 0}
    g = {M, :g, 0}
    switch = fn tag -> assert Native.trace(tag, key, pid, g, %{}) == :ok end
    spin = fn ms -> spin_until(System.monotonic_time(:microsecond) + ms * 1_000) end

    t0 = System.monotonic_time(:nanosecond)

    for _round <- 1..3 do
      assert Native.sample(session, pid, [g, f], 0) == :ok
      spin.(2)
      switch.(:out)
      Process.sleep(10)
      switch.(:in)
      spin.(2)
      # the in/out above are still in the ring when this lands
      assert Native.sample(session, pid, [f], 0) == :ok
      spin.(2)
      switch.(:out)
      Process.sleep(5)
      switch.(:in)
    end

    Native.stop(session)
    wall = System.monotonic_time(:nanosecond) - t0
    {tree, stats} = Native.finish(session, :stop)
    assert stats.samples == 6
    entries = Map.new(Map.fetch!(raw_stacks(tree), pid), &{elem(&1, 0), elem(&1, 1)})
    waited_gf = Map.get(entries, [:sleep, g, f], 0)
    waited_f = Map.get(entries, [:sleep, f], 0)
    ran_gf = Map.get(entries, [g, f], 0)
    ran_f = Map.get(entries, [f], 0)
    # three waits of 10 ms under g, three of 5 ms under f
    assert waited_gf >= 30_000_000, inspect(entries)
    assert waited_f >= 15_000_000, inspect(entries)
    # g ran 2 ms after each of its samples; f as long after its own, and
    # the burst after g's wait (run since an `in`, no call in it) is f's
    # too: the next sample shows where it ran. None of the waiting is here.
    assert ran_gf >= 6_000_000, inspect(entries)
    assert ran_f >= 12_000_000, inspect(entries)
    # every nanosecond from the first sample to stop/1 is somewhere, once
    total = entries |> Map.values() |> Enum.sum()
    assert total <= wall and total >= ran_gf + ran_f + waited_gf + waited_f
    assert Map.keys(entries) -- [[g, f], [f], [:sleep, g, f], [:sleep, f]] == []
    Process.exit(pid, :kill)
  end

  defp spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline)
  end

  test "a batch longer than one slice is applied in full, across rescheduled calls" do
    session = Native.new(%{})
    pid = self()
    f = {M, :f, 0}
    g = {M, :g, 0}

    # 10_001 messages: five full slices of 2000 and one more.
    calls =
      for i <- 0..5_000,
          msg <- [
            call(pid, g, f, i * 2_000 + 1_000),
            {:trace_ts, pid, :return_to, f, i * 2_000 + 2_000}
          ],
          do: msg

    messages = [call(pid, f, :undefined, 0) | calls]
    assert length(messages) == 10_003
    :ok = Native.ingest(session, messages)
    assert Native.stats(session).events == 10_003

    {tree, _} = Native.finish(session, nil)
    entries = Map.new(Map.fetch!(raw_stacks(tree), pid))
    # g runs 1000 ns per call, f the rest.
    assert entries[[g, f]] == 5_001 * 1_000
    assert entries[[f]] == 1_000 + 5_000 * 1_000
  end

  test "an improper list raises after applying its proper part" do
    session = Native.new(%{})
    pid = self()
    improper = [call(pid, {M, :f, 0}, :undefined, 0) | :tail]
    assert_raise ArgumentError, fn -> Native.ingest(session, improper) end
    assert Native.stats(session).events == 1
  end

  # Times whose nanoseconds do not fit in int64 are rejected (signed
  # overflow there was undefined behaviour): a message is counted malformed,
  # finish/2 raises.
  describe "times past int64 nanoseconds" do
    test "an {Mega, Sec, Micro} timestamp is malformed" do
      session = Native.new(%{})
      pid = self()

      :ok =
        Native.ingest(session, [
          # 9_223_372_036_854_775_000 ns, the last microsecond that fits
          {:trace_ts, pid, :in, 0, {9223, 372_036, 854_775}},
          {:trace_ts, pid, :out, 0, {9223, 372_036, 854_776}},
          {:trace_ts, pid, :out, 0, {9224, 0, 0}},
          {:trace_ts, pid, :out, 0, {999_999_999, 999_999, 999_999}}
        ])

      assert %{events: 1, malformed_events: 3} = Native.stats(session)
    end

    test "an integer timestamp in a slow native unit is malformed" do
      pid = self()
      # 1 unit a second: 9_223_372_036 s is the last that fits.
      session = Native.new(%{native_per_second: 1})

      :ok =
        Native.ingest(
          session,
          for(
            ts <- [9_223_372_036, -9_223_372_036, 2 ** 40, 9_223_372_037, -9_223_372_037],
            do: {:trace_ts, pid, :in, 0, ts}
          )
        )

      assert %{events: 2, malformed_events: 3} = Native.stats(session)

      # 3 units a second does not divide 1e9: the conversion is exact.
      session = Native.new(%{native_per_second: 3})

      :ok =
        Native.ingest(
          session,
          for(
            ts <- [3, 27_670_116_110, 27_670_116_111, 2 ** 62],
            do: {:trace_ts, pid, :in, 0, ts}
          )
        )

      assert %{events: 2, malformed_events: 2} = Native.stats(session)
    end

    test "finish/2 with an end in a slow native unit raises and leaves the session open" do
      session = Native.new(%{native_per_second: 1})
      :ok = Native.ingest(session, [{:trace_ts, self(), :in, 0, 1}])

      for bad <- [2 ** 40, 9_223_372_037, -(2 ** 40)] do
        assert_raise ArgumentError, fn -> Native.finish(session, bad) end
      end

      assert {{_, _, _, _}, %{events: 1}} = Native.finish(session, 9_223_372_036)
    end

    test "a graph session's times, moved to the tracer clock, past int64 are malformed or raise" do
      # Ingested times move by the session's clock offset (Erlang monotonic
      # - tracer clock, about -2^59 ns): one end of int64 overflows then.
      {_, _, %{clock_offset_ns: offset}} = Native.finish(Native.new(%{label: 1_000_009}), nil)
      assert offset != 0

      {overflows, fits} =
        if offset < 0, do: {2 ** 63 - 1, -(2 ** 63)}, else: {-(2 ** 63), 2 ** 63 - 1}

      session = Native.new(%{label: 1_000_009})
      pid = self()
      :ok = Native.ingest(session, [{:trace_ts, pid, :in, 0, fits}])
      :ok = Native.ingest(session, [{:trace_ts, pid, :out, 0, overflows}])
      assert %{events: 1, malformed_events: 1} = Native.stats(session)

      assert_raise ArgumentError, fn -> Native.finish(session, overflows) end
      assert {{_, _, _, _}, %{events: 1}, %{spans: _}} = Native.finish(session, fits)
    end

    test "stop/1 in a native unit finer than a nanosecond saturates" do
      # Erlang's monotonic clock starts far below 0: 1000 units a ns take
      # it past int64.
      ns = System.monotonic_time(:nanosecond)
      stopped = Native.stop(Native.new(%{native_per_second: 1_000_000_000_000}))
      assert stopped in -(2 ** 63)..(2 ** 63 - 1)
      if ns * 1000 < -(2 ** 63), do: assert(stopped == -(2 ** 63))

      # A unit that divides neither way converts exactly.
      stopped = Native.stop(Native.new(%{native_per_second: 3_000_000_007}))
      assert_in_delta stopped, div(ns * 3_000_000_007, 1_000_000_000), 3_000_000_007
    end
  end

  test "stats/1 has every counter" do
    stats = Native.stats(Native.new(%{}))

    for key <- ~w(events dropped_events malformed_events ignored_events truncated_stacks
                  depth_truncations node_limit_hits frame_limit_hits process_limit_hits
                  stack_overflows clock_skews resyncs memory_bytes nodes processes frames)a do
      assert is_integer(Map.fetch!(stats, key)), "#{key}"
    end
  end
end
