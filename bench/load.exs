# Load: many concurrent traced requests with graph capture over a pool of
# GenServers, for a bounded time.
#
#     mix run bench/load.exs                   # 200 requesters, 5 s per phase
#     FO_LOAD_CONCURRENCY=400 FO_LOAD_SECONDS=10 mix run bench/load.exs
#
# Phases, one after the other on the same pool: untraced, then every
# request traced with `cross_process: true`. Prints per-request latency
# (median, p99) in both phases and their ratio, trace volume (events,
# spans), drops (dropped events, dropped spans and the other graph
# counters), the peak message-queue length of every process of ours, the
# peak memory of our sessions (`Native.session_bytes/0`, sampled every
# 10 ms) against the bound the limits give, and whether every request got a
# complete trace or a counted drop.

defmodule FlameOn.Bench.LoadServer do
  @moduledoc false
  use GenServer
  def start(next), do: GenServer.start(__MODULE__, next)
  @impl true
  def init(next), do: {:ok, next}
  @impl true
  def handle_call(:work, _from, nil), do: {:reply, Enum.sum(Enum.map(1..300, &(&1 * 2))), nil}
  def handle_call(:work, _from, next), do: {:reply, GenServer.call(next, :work) + 1, next}
end

defmodule FlameOn.Bench.Load do
  @moduledoc false
  alias FlameOn.Bench.LoadServer
  alias FlameOn.Client.Core.Native

  @concurrency String.to_integer(System.get_env("FO_LOAD_CONCURRENCY", "200"))
  @seconds String.to_integer(System.get_env("FO_LOAD_SECONDS", "5"))
  @calls_per_request 4
  @limits [max_nodes: 5_000, max_spans: 64, max_processes: 64, max_fanout: 32]

  def run do
    # A pool of 8 leaf servers and 8 front servers that forward to a leaf:
    # each request makes @calls_per_request calls, half of them two hops.
    leaves = for _ <- 1..8, do: elem(LoadServer.start(nil), 1)
    fronts = for leaf <- leaves, do: elem(LoadServer.start(leaf), 1)
    pool = List.to_tuple(leaves ++ fronts)

    IO.puts("flame_on_client load bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

    IO.puts(
      "OTP #{System.otp_release()}, #{System.schedulers_online()} schedulers, " <>
        "#{@concurrency} concurrent requesters, #{@seconds} s per phase, pool of 16 servers, " <>
        "#{@calls_per_request} calls per request"
    )

    IO.puts("limits per trace: #{inspect(@limits)}\n")

    untraced = phase(:untraced, pool)
    traced = phase(:traced, pool)
    report(untraced, traced)
  end

  defp request(pool) do
    for _ <- 1..@calls_per_request do
      GenServer.call(elem(pool, :rand.uniform(tuple_size(pool)) - 1), :work)
    end
  end

  defp phase(kind, pool) do
    parent = self()
    deadline = System.monotonic_time(:millisecond) + @seconds * 1000
    sampler = spawn_link(fn -> sample(parent, %{session_bytes: 0, queues: %{}}) end)

    workers =
      for _ <- 1..@concurrency do
        spawn_link(fn -> send(parent, {:done, self(), loop(kind, pool, deadline, [])}) end)
      end

    results = for w <- workers, do: receive(do: ({:done, ^w, r} -> r))
    send(sampler, :stop)
    peaks = receive(do: ({:peaks, p} -> p))
    %{kind: kind, results: List.flatten(results), peaks: peaks}
  end

  defp loop(kind, pool, deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline do
      acc
    else
      t0 = System.monotonic_time(:microsecond)

      outcome =
        case kind do
          :untraced ->
            request(pool)
            nil

          :traced ->
            {_, p} =
              FlameOn.Client.profile(fn -> request(pool) end, [cross_process: true] ++ @limits)

            p
        end

      loop(kind, pool, deadline, [{System.monotonic_time(:microsecond) - t0, outcome} | acc])
    end
  end

  # Our processes: the pattern owner, the application's supervisors and
  # any :process-mode session.
  defp ours do
    sessions =
      for {_, pid, _, _} <- DynamicSupervisor.which_children(FlameOn.Client.OwnerSupervisor),
          is_pid(pid),
          do: pid

    named =
      for name <- [
            FlameOn.Client.Node.Patterns,
            FlameOn.Client.OwnerSupervisor,
            FlameOn.Client.Supervisor
          ],
          pid = Process.whereis(name),
          do: {name, pid}

    named ++ Enum.map(sessions, &{:session, &1})
  end

  defp sample(parent, peaks) do
    receive do
      :stop -> send(parent, {:peaks, peaks})
    after
      10 ->
        queues =
          Enum.reduce(ours(), peaks.queues, fn {name, pid}, acc ->
            case Process.info(pid, :message_queue_len) do
              {:message_queue_len, n} -> Map.update(acc, name, n, &max(&1, n))
              nil -> acc
            end
          end)

        sample(parent, %{
          session_bytes: max(peaks.session_bytes, Native.session_bytes()),
          queues: queues
        })
    end
  end

  defp percentile(sorted, p),
    do: Enum.at(sorted, min(length(sorted) - 1, trunc(length(sorted) * p)))

  defp latency(results) do
    sorted = results |> Enum.map(&elem(&1, 0)) |> Enum.sort()
    %{n: length(sorted), median: percentile(sorted, 0.5), p99: percentile(sorted, 0.99)}
  end

  defp report(untraced, traced) do
    u = latency(untraced.results)
    t = latency(traced.results)
    profiles = for {_, p} <- traced.results, p != nil, do: p

    IO.puts("== latency per request (µs) ==")
    IO.puts("untraced: #{u.n} requests, median #{u.median}, p99 #{u.p99}")
    IO.puts("traced:   #{t.n} requests, median #{t.median}, p99 #{t.p99}")

    IO.puts(
      "ratio traced/untraced: median #{Float.round(t.median / u.median, 2)}x, p99 #{Float.round(t.p99 / u.p99, 2)}x"
    )

    IO.puts("per-request overhead (median): #{t.median - u.median} µs\n")

    sum = fn f -> Enum.reduce(profiles, 0, &(&2 + f.(&1))) end
    graph_sum = fn key -> sum.(&Map.get(&1.graph.stats, key, 0)) end
    expected_spans = 1 + @calls_per_request

    complete = Enum.count(profiles, &(length(&1.graph.spans) >= expected_spans))

    counted =
      Enum.count(profiles, fn p ->
        length(p.graph.spans) < expected_spans and
          (p.graph.stats.dropped_spans > 0 or p.stats.dropped_events > 0 or
             p.stats[:lifetime_exceeded])
      end)

    IO.puts("== trace volume ==")
    IO.puts("events folded: #{sum.(& &1.stats.events)}, spans: #{sum.(&length(&1.graph.spans))}")

    IO.puts(
      "dropped events: #{sum.(& &1.stats.dropped_events)}, truncated stacks: #{sum.(& &1.stats.truncated_stacks)}"
    )

    IO.puts(
      "graph: dropped spans #{graph_sum.(:dropped_spans)}, orphan requests #{graph_sum.(:orphan_requests)}, " <>
        "unmatched replies #{graph_sum.(:unmatched_replies)}, late replies #{graph_sum.(:late_replies)}"
    )

    IO.puts(
      "traces: #{length(profiles)}, complete (#{expected_spans}+ spans) #{complete}, incomplete with a counted drop #{counted}, incomplete and uncounted #{length(profiles) - complete - counted}\n"
    )

    IO.puts("== our processes and memory ==")

    for {name, peak} <- Enum.sort_by(traced.peaks.queues, &inspect(elem(&1, 0))) do
      IO.puts("peak mailbox #{inspect(name)}: #{peak}")
    end

    peak_mb = traced.peaks.session_bytes / 1_048_576
    max_session = Enum.reduce(profiles, 0, &max(&2, &1.stats.memory_bytes))

    IO.puts(
      "peak memory of all live sessions: #{Float.round(peak_mb, 2)} MiB (largest single session at its finish: #{Float.round(max_session / 1024, 1)} KiB)"
    )

    bound_mb = FlameOn.Client.Node.Breaker.config()[:max_sessions_memory_mb]

    IO.puts(
      "configured bound (breaker max_sessions_memory_mb): #{bound_mb} MiB -> #{if peak_mb < bound_mb, do: "PASS", else: "MISS"}"
    )

    IO.puts("breaker now: #{inspect(FlameOn.Client.status().breaker)}")
  end
end

FlameOn.Bench.Load.run()
