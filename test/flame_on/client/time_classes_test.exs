defmodule FlameOn.Client.TimeClassesTest do
  # Where the time went besides running code: garbage collection, told
  # from the VM's own events.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

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

  # One scheduler online and a busy process beside the traced one: it is
  # preempted again and again, runnable rather than waiting. A sample that
  # finds it so makes that time off CPU a RUNNABLE leaf under its stack.
  test "mode :sample: a preempted process's time off CPU is RUNNABLE, under the stack it runs" do
    online = :erlang.system_flag(:schedulers_online, 1)

    try do
      hog = spawn(fn -> spin_until(System.monotonic_time(:microsecond) + 2_000_000) end)

      {_, profile} =
        FlameOn.Client.profile(
          fn -> spin_until(System.monotonic_time(:microsecond) + 300_000) end,
          mode: :sample
        )

      Process.exit(hog, :kill)
      stacks = profile.stacks[self()]
      runnable = for {stack, us} <- stacks, String.ends_with?(stack, ";RUNNABLE"), do: {stack, us}
      assert Enum.sum(Enum.map(runnable, &elem(&1, 1))) > 0, inspect(stacks)
      # where it runs, never waits
      assert Enum.all?(runnable, fn {stack, _} -> stack =~ "spin_until/1" end), inspect(runnable)
      refute Enum.any?(stacks, fn {stack, _} -> String.ends_with?(stack, ";WAITING") end)
    after
      :erlang.system_flag(:schedulers_online, online)
    end
  end
end
