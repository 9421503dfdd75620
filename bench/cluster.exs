# What a trace across nodes costs beside a trace on one node.
#
#     mix run bench/cluster.exs            # ~10 s
#     FO_BENCH_REPS=11 mix run bench/cluster.exs
#
# Starts this node distributed (epmd, 127.0.0.1) and one peer, B, running
# the application. Workloads: a caller making N GenServer.calls to a server
# that does a little work per call (the graph bench's `ping`), and the same
# as N plain messages each answered by a plain message (a process outside
# any behaviour), the server on this node (local) or on B (remote). Variants, interleaved (their order
# rotates each round), each run in a fresh process, medians of the runs:
#
#   local untraced     the calls to the local server
#   local traced       profile(fun, cross_process: true, mode: :nif,
#                      cluster: false): the one-node graph trace
#   remote untraced    the calls to B's server
#   remote traced      the same trace with B armed: B's part collected and
#                      merged at the end
#
# Columns: end to end (ms, and the ratio to the same calls untraced); what
# the end of the trace cost the origin, `graph.stats.collect_us` (B's part:
# clock offset, stop, transfer) and `merge_us` (the merge; for the local
# trace, the same code with no part); spans; bytes per span: for the
# remote trace, B's part as moved (`graph.stats.nodes[b].bytes`, external
# format, its spans and stacks) over B's spans; for the local trace, the
# origin's graph and stacks in the same format over its spans. The last
# line of each size: the remote trace's merge and bytes per span as ratios
# to the local trace's, and the end of the remote trace (collect + merge) as
# a share of its end to end.

defmodule FlameOn.Bench.Cluster do
  @moduledoc false

  @reps String.to_integer(System.get_env("FO_BENCH_REPS", "7"))
  @sizes [200, 1000]
  @workloads [:calls, :messages]
  @variants [:local_untraced, :local_traced, :remote_untraced, :remote_traced]

  @server """
  defmodule FlameOn.Bench.ClusterServer do
    @moduledoc false
    use GenServer
    def start, do: GenServer.start(__MODULE__, nil)
    @impl true
    def init(state), do: {:ok, state}
    @impl true
    def handle_call(:work, _from, state), do: {:reply, Enum.sum(1..200), state}

    # the same work, asked and answered by plain messages
    def start_plain, do: {:ok, spawn(fn -> plain() end)}

    defp plain do
      receive do
        {:work, from} -> send(from, {:done, Enum.sum(1..200)})
      end

      plain()
    end
  end
  """

  def run do
    b = start_peer()
    [{module, binary}] = Code.compile_string(@server)
    {:module, _} = :erpc.call(b, :code, :load_binary, [module, ~c"cluster_server", binary])
    {:ok, local} = module.start()
    {:ok, remote} = :erpc.call(b, module, :start, [])
    {:ok, local_plain} = module.start_plain()
    {:ok, remote_plain} = :erpc.call(b, module, :start_plain, [])

    IO.puts("flame_on_client cluster bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

    IO.puts(
      "OTP #{System.otp_release()}, Elixir #{System.version()}, #{@reps} runs each, medians"
    )

    IO.puts("origin #{node()}, B #{b}\n")

    servers = %{
      calls: %{local: local, remote: remote},
      messages: %{local: local_plain, remote: remote_plain}
    }

    for workload <- @workloads, n <- @sizes do
      results = measure(n, {workload, servers[workload]}, b)
      report(n, workload, results)
    end
  end

  defp start_peer do
    {_, 0} = System.cmd("epmd", ["-daemon"])

    unless Node.alive?() do
      {:ok, _} =
        Node.start(:"flame_on_bench_#{System.unique_integer([:positive])}@127.0.0.1", :longnames)
    end

    args =
      Enum.flat_map(:code.get_path(), &[~c"-pa", &1]) ++
        [~c"-setcookie", Atom.to_charlist(Node.get_cookie())]

    {:ok, _peer, b} =
      :peer.start(%{
        name: :"flame_on_bench_b_#{System.unique_integer([:positive])}",
        host: ~c"127.0.0.1",
        longnames: true,
        args: args
      })

    {:ok, _} = :erpc.call(b, Application, :ensure_all_started, [:flame_on_client])
    b
  end

  defp measure(n, servers, b) do
    for round <- 1..@reps, variant <- rotate(@variants, round), reduce: %{} do
      acc ->
        run = run_once(variant, n, servers, b)
        Map.update(acc, variant, [run], &[run | &1])
    end
  end

  defp rotate(list, k),
    do: Enum.drop(list, rem(k, length(list))) ++ Enum.take(list, rem(k, length(list)))

  defp run_once(variant, n, {workload, servers}, b) do
    server =
      if variant in [:local_untraced, :local_traced], do: servers.local, else: servers.remote

    calls =
      case workload do
        :calls ->
          fn -> for _ <- 1..n, do: GenServer.call(server, :work) end

        :messages ->
          fn ->
            for _ <- 1..n do
              send(server, {:work, self()})
              receive do: ({:done, _} -> :ok)
            end
          end
      end

    task =
      Task.async(fn ->
        t0 = System.monotonic_time(:microsecond)

        profile =
          case variant do
            v when v in [:local_untraced, :remote_untraced] ->
              calls.()
              nil

            :local_traced ->
              {_, p} =
                FlameOn.Client.profile(calls, cross_process: true, mode: :nif, cluster: false)

              p

            :remote_traced ->
              {_, p} =
                FlameOn.Client.profile(calls,
                  cross_process: true,
                  mode: :nif,
                  cluster: [nodes: [b]]
                )

              p
          end

        {System.monotonic_time(:microsecond) - t0, profile}
      end)

    {us, profile} = Task.await(task, 120_000)
    Map.merge(%{us: us}, figures(variant, profile, b))
  end

  defp figures(_variant, nil, _b), do: %{}

  defp figures(:local_traced, profile, _b) do
    spans = length(profile.graph.spans)
    bytes = :erlang.external_size(%{graph: profile.graph, stacks: profile.stacks})

    %{
      collect_us: profile.graph.stats.collect_us,
      merge_us: profile.graph.stats.merge_us,
      spans: spans,
      per_span: div(bytes, max(spans, 1))
    }
  end

  defp figures(:remote_traced, profile, b) do
    %{^b => node_stats} = profile.graph.stats.nodes

    if profile.graph.stats.joined_remote_calls + profile.graph.stats.joined_remote_work == 0,
      do: raise("B's part did not join: #{inspect(profile.graph.stats)}")

    %{
      collect_us: profile.graph.stats.collect_us,
      merge_us: profile.graph.stats.merge_us,
      spans: length(profile.graph.spans),
      per_span: div(node_stats.bytes, max(node_stats.spans, 1))
    }
  end

  defp median(values) do
    sorted = Enum.sort(values)
    Enum.at(sorted, div(length(sorted), 2))
  end

  defp med(runs, key), do: runs |> Enum.map(&Map.get(&1, key)) |> median()

  defp report(n, workload, results) do
    IO.puts(
      if workload == :calls,
        do: "#{n} GenServer.calls",
        else: "#{n} plain messages, each answered"
    )

    IO.puts(
      String.pad_trailing("variant", 17) <>
        Enum.map_join(
          ["ms", "x untraced", "collect ms", "merge ms", "spans", "B/span"],
          &String.pad_leading(&1, 11)
        )
    )

    for variant <- @variants do
      runs = results[variant]
      ms = med(runs, :us) / 1000

      base =
        if variant in [:local_untraced, :local_traced],
          do: :local_untraced,
          else: :remote_untraced

      ratio = ms / (med(results[base], :us) / 1000)
      traced? = variant in [:local_traced, :remote_traced]

      cells =
        [fmt(ms), fmt(ratio) <> "x"] ++
          if traced?,
            do: [
              fmt(med(runs, :collect_us) / 1000),
              fmt(med(runs, :merge_us) / 1000),
              Integer.to_string(med(runs, :spans)),
              Integer.to_string(med(runs, :per_span))
            ],
            else: ["", "", "", ""]

      IO.puts(
        String.pad_trailing(Atom.to_string(variant), 17) <>
          Enum.map_join(cells, &String.pad_leading(&1, 11))
      )
    end

    local = results[:local_traced]
    remote = results[:remote_traced]
    end_of_trace = med(remote, :collect_us) + med(remote, :merge_us)

    IO.puts(
      "remote / local traced: merge #{fmt(med(remote, :merge_us) / max(med(local, :merge_us), 1))}x, " <>
        "bytes per span #{fmt(med(remote, :per_span) / max(med(local, :per_span), 1))}x; " <>
        "collect + merge #{fmt(100 * end_of_trace / med(remote, :us))}% of the remote trace's " <>
        "end to end, #{fmt(med(remote, :merge_us) / max(med(remote, :spans), 1))} µs of merge per span\n"
    )
  end

  defp fmt(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 2)
end

FlameOn.Bench.Cluster.run()
