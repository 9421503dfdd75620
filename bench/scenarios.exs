# Cross-process scenarios outside the test suite: servers that sleep and
# compute for known times, nesting, a crash, concurrency. Prints each
# trace's spans and any parent whose attributed wait is off by more than
# 10% from the sum of its callees' spans (expected: none).
#
#     mix run bench/scenarios.exs
#

defmodule Leaf do
  use GenServer
  def init(x), do: {:ok, x}

  def handle_call({:compute, ms}, _f, s) do
    t = System.monotonic_time(:microsecond) + ms * 1000
    spin = fn f -> if System.monotonic_time(:microsecond) < t, do: f.(f), else: :ok end
    spin.(spin)
    {:reply, :computed, s}
  end

  def handle_call({:nap, ms}, _f, s),
    do:
      (
        Process.sleep(ms)
        {:reply, :napped, s}
      )

  def handle_call(:boom, _f, _s), do: exit(:boom)
end

defmodule Mid do
  use GenServer
  def init(leaf), do: {:ok, leaf}

  def handle_call({:via, req, own_ms}, _f, leaf) do
    Process.sleep(own_ms)
    {:reply, GenServer.call(leaf, req), leaf}
  end
end

{:ok, leaf} = GenServer.start(Leaf, nil)
{:ok, mid} = GenServer.start(Mid, leaf)
{:ok, crasher} = GenServer.start(Leaf, nil)

check = fn name, profile ->
  spans = profile.graph.spans
  by_id = Map.new(spans, &{&1.span_id, &1})

  bad =
    for s <- spans, s.parent_span_id != nil do
      parent = by_id[s.parent_span_id]
      callee_dur = s.ended_at - s.started_at
      # the parent's attributed wait covers all its children: compare sums
      {parent.span_id, callee_dur}
    end
    |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
    |> Enum.flat_map(fn {pid_id, durs} ->
      p = by_id[pid_id]
      sum = Enum.sum(durs)

      if abs(p.attributed_wait_us - sum) > 0.1 * sum,
        do: [{pid_id, p.attributed_wait_us, sum}],
        else: []
    end)

  IO.puts("#{name}: #{length(spans)} spans, attribution off by >10%: #{inspect(bad)}")

  for s <- spans,
      do:
        IO.puts(
          "   span #{s.span_id} <- #{inspect(s.parent_span_id)} #{s.name} self=#{s.self_us} wait=#{s.wait_us} attr=#{s.attributed_wait_us} unattr=#{s.unattributed_wait_us} #{inspect(s.status)}"
        )
end

{_, p1} =
  FlameOn.Client.profile(
    fn ->
      GenServer.call(mid, {:via, {:compute, 30}, 10})
      GenServer.call(leaf, {:nap, 20})
    end,
    cross_process: true
  )

check.("nested+sleep (nif)", p1)

{_, p2} =
  FlameOn.Client.profile(
    fn ->
      try do
        GenServer.call(crasher, :boom)
      catch
        :exit, _ -> :caught
      end

      GenServer.call(leaf, {:compute, 15})
    end,
    cross_process: true,
    mode: :process
  )

check.("crash then compute (process)", p2)

tasks =
  for i <- 1..4,
      do:
        Task.async(fn ->
          {_, p} =
            FlameOn.Client.profile(
              fn -> for _ <- 1..3, do: GenServer.call(mid, {:via, {:compute, 5 * i}, 2}) end,
              cross_process: true
            )

          {i, p}
        end)

for {i, p} <- Task.await_many(tasks, 30_000) do
  roots = Enum.count(p.graph.spans, &(&1.parent_span_id == nil))

  IO.puts(
    "concurrent #{i}: #{length(p.graph.spans)} spans (expect 7), roots #{roots}, foreign pids: #{inspect((Enum.uniq(Enum.map(p.graph.spans, & &1.pid)) -- [mid, leaf]) |> length)}"
  )

  check.("concurrent #{i}", p)
end
