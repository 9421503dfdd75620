# Cost of cross-process (graph) capture beside per-process tracing, and of
# following every message beside following GenServer calls only.
#
#     mix run bench/graph.exs            # ~60 s
#     FO_BENCH_REPS=11 mix run bench/graph.exs
#
# Workloads: `ping` – a caller making 2000 GenServer.calls to a server that
# does a little work per call; `nested` – 500 calls A -> B -> C; `tasks` –
# 200 Task.async + Task.await of a little work; `messages` – 2000 plain
# send/receive round trips to a worker process; `bystander` – 2000 calls,
# while 4 other processes (untraced, never touched by the trace) exchange
# messages with the same server. Variants, interleaved, each the median of
# the repetitions:
#   untraced           the workload alone
#   per_process        FlameOn.Client.profile(fun): the caller traced, the
#                      processes it talks to not
#   calls              profile(fun, cross_process: true, follow: :calls):
#                      GenServer calls followed into the servers (no receive
#                      events, no spawn inheritance)
#   messages           profile(fun, cross_process: true) (follow: :messages,
#                      the default): every message and spawn followed, every
#                      wait of a follower settled by its receive event
# Ratios are to untraced, to per_process and to calls, inside this one run:
# `x calls` of the messages row is the added cost of following every message.

defmodule FlameOn.Bench.GraphServer do
  @moduledoc false
  use GenServer
  def start(next), do: GenServer.start(__MODULE__, next)
  @impl true
  def init(next), do: {:ok, next}
  @impl true
  def handle_call(:work, _from, nil), do: {:reply, Enum.sum(1..200), nil}
  def handle_call(:work, _from, next), do: {:reply, GenServer.call(next, :work) + 1, next}
  @impl true
  def handle_info({:ping, from}, state) do
    send(from, :pong)
    {:noreply, state}
  end
end

defmodule FlameOn.Bench.Graph do
  @moduledoc false
  alias FlameOn.Bench.GraphServer

  @reps String.to_integer(System.get_env("FO_BENCH_REPS", "7"))
  @variants [:untraced, :per_process, :calls, :messages]

  def run do
    {:ok, leaf} = GraphServer.start(nil)
    {:ok, middle} = GraphServer.start(leaf)
    {:ok, top} = GraphServer.start(middle)
    worker = spawn(fn -> worker() end)

    workloads = [
      {"ping: 2000 calls to one server",
       fn -> for _ <- 1..2000, do: GenServer.call(leaf, :work) end},
      {"nested: 500 calls A -> B -> C",
       fn -> for _ <- 1..500, do: GenServer.call(top, :work) end},
      {"tasks: 200 Task.async + Task.await",
       fn -> for _ <- 1..200, do: Task.async(fn -> Enum.sum(1..200) end) |> Task.await() end},
      {"messages: 2000 send/receive round trips to a worker",
       fn ->
         for _ <- 1..2000 do
           send(worker, {:job, self()})
           receive do: (:done -> :ok)
         end
       end},
      {"bystander: 2000 calls while 4 untraced processes message the server",
       fn -> for _ <- 1..2000, do: GenServer.call(leaf, :work) end, leaf}
    ]

    IO.puts("flame_on_client graph bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

    IO.puts(
      "OTP #{System.otp_release()}, Elixir #{System.version()}, #{@reps} runs each, medians\n"
    )

    for workload <- workloads do
      case workload do
        {name, work} -> report(name, work, nil)
        {name, work, bystanders_of} -> report(name, work, bystanders_of)
      end
    end
  end

  defp worker do
    receive do
      {:job, from} ->
        Enum.sum(1..200)
        send(from, :done)
    end

    worker()
  end

  # Processes outside the trace (started before it, never sent anything
  # by it) keep the server busy with messages of their own: what following
  # the server costs them and it.
  defp with_bystanders(nil, fun), do: fun.()

  defp with_bystanders(server, fun) do
    bystanders = for _ <- 1..4, do: spawn(fn -> bystander(server) end)

    try do
      fun.()
    after
      Enum.each(bystanders, &Process.exit(&1, :kill))
    end
  end

  defp bystander(server) do
    send(server, {:ping, self()})
    receive do: (:pong -> :ok)
    bystander(server)
  end

  defp report(name, work, bystanders_of) do
    measure = fn variant -> with_bystanders(bystanders_of, fn -> measure(variant, work) end) end
    # warm up every variant once (code loading, first pattern set)
    Enum.each(@variants, measure)

    runs =
      for round <- 1..@reps, variant <- rotate(@variants, round), reduce: %{} do
        acc -> Map.update(acc, variant, [measure.(variant)], &[measure.(variant) | &1])
      end

    medians = Map.new(runs, fn {variant, list} -> {variant, median(list)} end)
    base = medians.untraced.us
    per_process = medians.per_process.us
    calls = medians.calls.us

    IO.puts("== #{name} ==")

    IO.puts(
      String.pad_trailing("variant", 14) <>
        String.pad_leading("ms", 9) <>
        String.pad_leading("x untraced", 12) <>
        String.pad_leading("x per_proc", 12) <>
        String.pad_leading("x calls", 10) <>
        String.pad_leading("events", 9) <>
        String.pad_leading("spans", 7) <> String.pad_leading("wakes", 7)
    )

    for variant <- @variants do
      m = medians[variant]

      IO.puts(
        String.pad_trailing(to_string(variant), 14) <>
          String.pad_leading(:erlang.float_to_binary(m.us / 1000, decimals: 2), 9) <>
          ratio(m.us, base, 12) <>
          ratio(m.us, per_process, 12) <>
          ratio(m.us, calls, 10) <>
          String.pad_leading(to_string(m.events), 9) <>
          String.pad_leading(to_string(m.spans), 7) <> String.pad_leading(to_string(m.wakes), 7)
      )
    end

    IO.puts("")
  end

  defp ratio(us, base, width),
    do: String.pad_leading(:erlang.float_to_binary(us / base, decimals: 2) <> "x", width)

  defp rotate(list, n),
    do: Enum.drop(list, rem(n, length(list))) ++ Enum.take(list, rem(n, length(list)))

  # Each measurement in a fresh process: profile/2 traces its caller.
  defp measure(variant, work) do
    task =
      Task.async(fn ->
        t0 = System.monotonic_time(:microsecond)

        {events, spans, wakes} =
          case variant do
            :untraced ->
              work.()
              {0, 0, 0}

            :per_process ->
              {_, p} = FlameOn.Client.profile(work)
              {p.stats.events, 0, 0}

            follow ->
              {_, p} = FlameOn.Client.profile(work, cross_process: true, follow: follow)
              {p.stats.events, length(p.graph.spans), p.graph.stats.wakes}
          end

        %{
          us: System.monotonic_time(:microsecond) - t0,
          events: events,
          spans: spans,
          wakes: wakes
        }
      end)

    Task.await(task, 120_000)
  end

  defp median(list) do
    sorted = Enum.sort_by(list, & &1.us)
    Enum.at(sorted, div(length(sorted), 2))
  end
end

FlameOn.Bench.Graph.run()
