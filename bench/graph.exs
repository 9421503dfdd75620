# Cost of cross-process (graph) capture beside per-process tracing.
#
#     mix run bench/graph.exs            # ~20 s
#     FO_BENCH_REPS=11 mix run bench/graph.exs
#
# Workloads: `ping` – a caller making 2000 GenServer.calls to a server that
# does a little work per call; `nested` – 500 calls A -> B -> C. Variants,
# interleaved, each the median of the repetitions:
#   untraced           the workload alone
#   per_process        FlameOn.Client.profile(fun): the caller traced, the
#                      servers not (their work is a SLEEP in the caller)
#   cross_process      profile(fun, cross_process: true): seq_trace on the
#                      caller, call tracing turned on in every server it
#                      calls, spans built
# Ratios are to untraced and to per_process, inside this one run.

defmodule FlameOn.Bench.GraphServer do
  @moduledoc false
  use GenServer
  def start(next), do: GenServer.start(__MODULE__, next)
  @impl true
  def init(next), do: {:ok, next}
  @impl true
  def handle_call(:work, _from, nil), do: {:reply, Enum.sum(1..200), nil}
  def handle_call(:work, _from, next), do: {:reply, GenServer.call(next, :work) + 1, next}
end

defmodule FlameOn.Bench.Graph do
  @moduledoc false
  alias FlameOn.Bench.GraphServer

  @reps String.to_integer(System.get_env("FO_BENCH_REPS", "7"))

  def run do
    {:ok, leaf} = GraphServer.start(nil)
    {:ok, middle} = GraphServer.start(leaf)
    {:ok, top} = GraphServer.start(middle)

    workloads = [
      {"ping: 2000 calls to one server",
       fn -> for _ <- 1..2000, do: GenServer.call(leaf, :work) end},
      {"nested: 500 calls A -> B -> C", fn -> for _ <- 1..500, do: GenServer.call(top, :work) end}
    ]

    IO.puts("flame_on_client graph bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

    IO.puts(
      "OTP #{System.otp_release()}, Elixir #{System.version()}, #{@reps} runs each, medians\n"
    )

    for {name, work} <- workloads, do: report(name, work)
  end

  defp report(name, work) do
    variants = [:untraced, :per_process, :cross_process]
    # warm up every variant once (code loading, first pattern set)
    Enum.each(variants, &measure(&1, work))

    runs =
      for round <- 1..@reps, variant <- rotate(variants, round), reduce: %{} do
        acc -> Map.update(acc, variant, [measure(variant, work)], &[measure(variant, work) | &1])
      end

    medians = Map.new(runs, fn {variant, list} -> {variant, median(list)} end)
    base = medians.untraced.us
    per_process = medians.per_process.us

    IO.puts("== #{name} ==")

    IO.puts(
      String.pad_trailing("variant", 16) <>
        String.pad_leading("ms", 9) <>
        String.pad_leading("x untraced", 12) <>
        String.pad_leading("x per_proc", 12) <>
        String.pad_leading("events", 10) <> String.pad_leading("spans", 8)
    )

    for variant <- variants do
      m = medians[variant]

      IO.puts(
        String.pad_trailing(to_string(variant), 16) <>
          String.pad_leading(:erlang.float_to_binary(m.us / 1000, decimals: 2), 9) <>
          String.pad_leading(:erlang.float_to_binary(m.us / base, decimals: 2) <> "x", 12) <>
          String.pad_leading(:erlang.float_to_binary(m.us / per_process, decimals: 2) <> "x", 12) <>
          String.pad_leading(to_string(m.events), 10) <> String.pad_leading(to_string(m.spans), 8)
      )
    end

    IO.puts("")
  end

  defp rotate(list, n),
    do: Enum.drop(list, rem(n, length(list))) ++ Enum.take(list, rem(n, length(list)))

  # Each measurement in a fresh process: profile/2 traces its caller.
  defp measure(variant, work) do
    task =
      Task.async(fn ->
        t0 = System.monotonic_time(:microsecond)

        {events, spans} =
          case variant do
            :untraced ->
              work.()
              {0, 0}

            :per_process ->
              {_, p} = FlameOn.Client.profile(work)
              {p.stats.events, 0}

            :cross_process ->
              {_, p} = FlameOn.Client.profile(work, cross_process: true)
              {p.stats.events, length(p.graph.spans)}
          end

        %{us: System.monotonic_time(:microsecond) - t0, events: events, spans: spans}
      end)

    Task.await(task, 60_000)
  end

  defp median(list) do
    sorted = Enum.sort_by(list, & &1.us)
    Enum.at(sorted, div(length(sorted), 2))
  end
end

FlameOn.Bench.Graph.run()
