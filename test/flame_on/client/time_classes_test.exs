defmodule FlameOn.Client.TimeClassesTest do
  # Where the time went besides running code: garbage collection, told
  # from the VM's own events.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile.TimeClasses

  doctest TimeClasses

  setup do
    ensure_app_started()
    assert_node_clean()
    :ok
  end

  # Builds a 200 000-element list from a binary, several times: the heap
  # grows past a few MB, so the VM collects (minor and major).
  def build_lists(times) do
    bin = :binary.copy(<<1>>, 200_000)
    for _ <- 1..times, reduce: 0, do: (acc -> acc + length(:erlang.binary_to_list(bin)))
  end

  # the least share of the collections' time under the allocating function
  defp placed_share(mode) when mode in [:nif, :process], do: 1.0
  defp placed_share(:native), do: 0.5
  defp placed_share(:sample), do: 0.0

  # what an independent :erlang.trace of the same work says: collections
  # and their time (µs)
  defp traced_gc(fun) do
    parent = self()

    worker =
      spawn(fn ->
        receive do
          :go -> send(parent, {:done, fun.()})
        end
      end)

    :erlang.trace(worker, true, [:garbage_collection, :monotonic_timestamp])
    send(worker, :go)
    assert_receive {:done, _}
    gc_time(worker, nil, 0, 0)
  end

  defp gc_time(pid, started, count, us) do
    receive do
      {:trace_ts, ^pid, tag, _info, ts} when tag in [:gc_minor_start, :gc_major_start] ->
        gc_time(pid, ts, count + 1, us)

      {:trace_ts, ^pid, tag, _info, ts} when tag in [:gc_minor_end, :gc_major_end] ->
        gc_time(
          pid,
          nil,
          count,
          us + :erlang.convert_time_unit(ts - started, :native, :microsecond)
        )
    after
      200 -> {count, us}
    end
  end

  for mode <- [:nif, :process, :sample, :native] do
    @tag if(mode == :native, do: :native, else: :gc)
    test "mode #{mode}: a collection is a GC leaf under the stack that started it, counted in stats" do
      {_, profile} = FlameOn.Client.profile(fn -> build_lists(6) end, mode: unquote(mode))
      stacks = profile.stacks[self()]
      gc_stacks = for {stack, us} <- stacks, String.contains?(stack, ";GC_M"), do: {stack, us}
      assert gc_stacks != [], inspect(stacks)

      # a leaf under the root, never the bare root
      assert Enum.all?(gc_stacks, fn {stack, _} ->
               String.starts_with?(stack, "FlameOn.Client.profile/2;") and
                 String.ends_with?(stack, ["GC_MINOR", "GC_MAJOR"])
             end),
             inspect(gc_stacks)

      # under the function that allocated (binary_to_list/1 is a BIF: its
      # caller's frame): all of it where every call is seen, most of it
      # with CPU samples. Mode :sample puts a collection in a burst no sample
      # saw yet where the burst's first sample shows (test_sample.c), but a
      # loaded node's sampler may see none of this short work: then they
      # stay under the root.
      in_builder = Enum.sum(for {stack, us} <- gc_stacks, stack =~ "build_lists/1", do: us)
      all_gc = Enum.sum(Enum.map(gc_stacks, &elem(&1, 1)))

      assert in_builder >= placed_share(unquote(mode)) * all_gc, inspect(gc_stacks)

      stats = profile.stats
      assert stats.gc_minor + stats.gc_major >= 1
      gc_us = time_where(profile, self(), &String.contains?(&1, ";GC_M"))
      # the leaves hold what the stats count (µs rounding per stack)
      assert_in_delta gc_us,
                      div(stats.gc_minor_ns + stats.gc_major_ns, 1000),
                      length(gc_stacks) + 1

      # as many collections as an independent trace sees for the same work
      # (the same heap sizes: the same points), within a few
      {count, _us} = traced_gc(fn -> build_lists(6) end)
      assert_in_delta stats.gc_minor + stats.gc_major, count, max(3, count * 0.3)
      # the stacks still add up to the traced wall time
      assert_in_delta Enum.sum(Enum.map(stacks, &elem(&1, 1))),
                      profile.duration_us,
                      profile.duration_us * 0.05

      assert_node_clean()
    end
  end

  def spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline), else: :ok
  end

  # A server that builds lists on request: its collections are its own.
  defmodule Builder do
    use GenServer

    def init(:ok), do: {:ok, nil}

    def handle_call({:build, times}, _from, state),
      do: {:reply, FlameOn.Client.TimeClassesTest.build_lists(times), state}
  end

  # The classes of a process's spans, summed (its spans do not nest here).
  defp span_classes(profile, pid) do
    for %{pid: ^pid} = s <- profile.graph.spans,
        reduce: %{gc: 0, runnable: 0, wait: 0, self: 0} do
      acc ->
        %{
          acc
          | gc: acc.gc + s.gc_us,
            runnable: acc.runnable + s.runnable_us,
            wait: acc.wait + s.wait_us,
            self: acc.self + s.self_us
        }
    end
  end

  defp assert_identity(profile) do
    for s <- profile.graph.spans do
      assert s.self_us + s.gc_us + s.runnable_us + s.wait_us == s.ended_at - s.started_at,
             inspect(s)
    end
  end

  # within 2%, and a few µs of rounding (one per stack, one per span)
  defp assert_agree(spans_us, stacks_us, label) do
    assert_in_delta spans_us, stacks_us, max(0.02 * stacks_us, 5), label
  end

  for mode <- [:nif, :process, :sample] do
    @tag :gc
    test "mode #{mode}, cross_process: collections are GC in the stacks and the spans, and they agree" do
      {:ok, server} = GenServer.start(Builder, :ok)

      try do
        {_, profile} =
          FlameOn.Client.profile(
            fn -> {build_lists(4), GenServer.call(server, {:build, 4})} end,
            cross_process: true,
            mode: unquote(mode)
          )

        assert_identity(profile)

        for pid <- [self(), server] do
          classes = profile.time_classes[pid]
          spans = span_classes(profile, pid)
          label = "#{inspect(pid)}: spans #{inspect(spans)}, stacks #{inspect(classes)}"
          assert classes.gc_count >= 1, label
          stacks_gc = classes.gc_minor_us + classes.gc_major_us
          assert stacks_gc > 0, label
          assert_agree(spans.gc, stacks_gc, label)
          assert_agree(spans.runnable, classes.runnable_us, label)
          # none of it is wait: the root waits for the server only
          if pid == server, do: assert(spans.wait <= 0.05 * (spans.self + spans.gc), label)
        end

        # the root's wait on the server is attributed to it
        root = Enum.find(profile.graph.spans, &(&1.kind == :root))
        assert root.attributed_wait_us >= 0.9 * root.wait_us, inspect(root)
        assert profile.graph.stats.collections >= 2
      after
        GenServer.stop(server)
      end

      assert_node_clean()
    end
  end

  # The issue's example: one large list, then its length. The collection
  # (on a dirty scheduler for a heap this size) was WAITING in the stacks.
  test "cross_process: binary_to_list/1 of 200 KB then length/1 is GC, not WAITING" do
    {_, profile} =
      FlameOn.Client.profile(
        fn -> length(:erlang.binary_to_list(:binary.copy(<<1>>, 200_000))) end,
        cross_process: true
      )

    classes = profile.time_classes[self()]
    assert classes.gc_minor_us + classes.gc_major_us > 0, inspect(profile.stacks[self()])

    assert classes.waiting_us <= 0.05 * (classes.gc_minor_us + classes.gc_major_us),
           inspect(profile.stacks[self()])

    [root] = profile.graph.spans
    assert root.wait_us == 0 and root.gc_us > 0, inspect(root)
    assert_agree(root.gc_us, classes.gc_minor_us + classes.gc_major_us, inspect(root))
    assert_identity(profile)
  end

  # One scheduler online, a busy process beside the traced one for 400 ms:
  # its time off a CPU is runnable (preempted), in the stacks and the spans.
  defp with_one_scheduler(fun) do
    online = :erlang.system_flag(:schedulers_online, 1)

    try do
      fun.()
    after
      :erlang.system_flag(:schedulers_online, online)
    end
  end

  defp competing(
         opts,
         work \\ fn -> spin_until(System.monotonic_time(:microsecond) + 400_000) end
       ) do
    with_one_scheduler(fn ->
      hog = spawn(fn -> spin_until(System.monotonic_time(:microsecond) + 5_000_000) end)

      try do
        FlameOn.Client.profile(work, opts)
      after
        Process.exit(hog, :kill)
      end
    end)
  end

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  # A tight recursion: a reductions' slice of it lasts about 5 µs here, as
  # short as a waiting process's answer to a signal.
  def fib_until(deadline) do
    fib(12)
    if System.monotonic_time(:microsecond) < deadline, do: fib_until(deadline), else: :ok
  end

  defp off_cpu(classes), do: classes.runnable_us + classes.waiting_us

  # Cross-process traces: the span graph decides, the same way whatever
  # the mode's stacks come from.
  for mode <- [:nif, :sample, :native] do
    @tag if(mode == :native, do: :native, else: :classes)
    test "mode #{mode}, cross_process: a preempted process's time off CPU is RUNNABLE, in the stacks and the spans" do
      {_, profile} = competing(cross_process: true, mode: unquote(mode))
      assert_starved(profile, "spin_until/1")
      classes = profile.time_classes[self()]
      [root] = profile.graph.spans
      assert_identity(profile)
      assert_agree(root.runnable_us, classes.runnable_us, "#{inspect(root)} #{inspect(classes)}")
      assert root.wait_us < 0.05 * off_cpu(classes), inspect(root)
      assert_node_clean()
    end

    @tag if(mode == :native, do: :native, else: :classes)
    test "mode #{mode}, cross_process: a sleeping process's time off CPU is waiting, not RUNNABLE" do
      {_, profile} =
        with_one_scheduler(fn ->
          FlameOn.Client.profile(fn -> for _ <- 1..20, do: Process.sleep(10) end,
            cross_process: true,
            mode: unquote(mode)
          )
        end)

      classes = profile.time_classes[self()]
      label = "#{inspect(classes)} #{inspect(profile.stacks[self()])}"
      assert off_cpu(classes) >= 150_000, label
      assert classes.waiting_us >= 0.95 * off_cpu(classes), label
      [root] = profile.graph.spans
      assert_identity(profile)
      assert root.runnable_us < 0.05 * root.wait_us, inspect(root)
      assert root.unattributed_by.timer >= 0.95 * root.wait_us, inspect(root)
      assert_node_clean()
    end
  end

  # Every mode tells it by receive events: no message taken before the
  # process ran its code on means it was runnable. The exact modes see the
  # code run (a call); :sample takes every slice for code but one its
  # sampler's stack request woke a waiting process for; :native, a slice
  # with a CPU sample of its code, or 100 µs long.
  for mode <- [:nif, :process, :sample, :native] do
    @tag if(mode == :native, do: :native, else: :classes)
    test "mode #{mode}: a preempted process's time off CPU is RUNNABLE, a sleeping one's SLEEP" do
      {_, profile} = competing(mode: unquote(mode))
      assert_starved(profile, "spin_until/1")

      # slices as short as a signal's answer
      {_, profile} =
        competing([mode: unquote(mode)], fn ->
          fib_until(System.monotonic_time(:microsecond) + 400_000)
        end)

      assert_starved(profile, "fib_until/1")

      {_, profile} =
        with_one_scheduler(fn ->
          FlameOn.Client.profile(fn -> for _ <- 1..20, do: Process.sleep(10) end,
            mode: unquote(mode)
          )
        end)

      classes = profile.time_classes[self()]
      label = "#{inspect(classes)} #{inspect(profile.stacks[self()])}"
      assert off_cpu(classes) >= 150_000, label
      assert classes.waiting_us >= 0.95 * off_cpu(classes), label
      assert_node_clean()
    end
  end

  # A starved process: at least 80% of its time off CPU is RUNNABLE, under
  # 5% waiting, and its RUNNABLE time is where it runs (the trace's own
  # start and stop may be preempted too, for a little).
  defp assert_starved(profile, function) do
    classes = profile.time_classes[self()]
    label = "#{inspect(classes)} #{inspect(profile.stacks[self()])}"
    assert off_cpu(classes) >= 20_000, label
    assert classes.runnable_us >= 0.8 * off_cpu(classes), label
    assert classes.waiting_us < 0.05 * off_cpu(classes), label

    runnable = for {stack, us} <- profile.stacks[self()], stack =~ ";RUNNABLE", do: {stack, us}
    working = for {stack, us} <- runnable, stack =~ function, reduce: 0, do: (acc -> acc + us)
    assert working >= 0.9 * classes.runnable_us, inspect(runnable)
  end

  test "time_classes add up to each process's stacks" do
    {_, profile} = FlameOn.Client.profile(fn -> build_lists(2) end)

    for {pid, stacks} <- profile.stacks do
      c = profile.time_classes[pid]

      assert c.running_us + c.gc_minor_us + c.gc_major_us + c.runnable_us + c.waiting_us ==
               Enum.sum(Enum.map(stacks, &elem(&1, 1)))

      assert c.gc_count == c.gc_minor_count + c.gc_major_count
    end

    classes = profile.time_classes[self()]
    assert classes.gc_count == profile.stats.gc_minor + profile.stats.gc_major
    assert_in_delta classes.gc_minor_us, div(profile.stats.gc_minor_ns, 1000), 3
    refute Map.has_key?(profile.stats, :process_gcs)
  end
end
