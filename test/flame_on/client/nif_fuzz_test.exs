defmodule FlameOn.Client.NifFuzzTest do
  # Random and malformed terms into every NIF entry point: each call must
  # return or raise ArgumentError, and the VM must stay up. Seeded, so a
  # failure reproduces; FO_FUZZ_SEED / FO_FUZZ_CASES change the run.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Native

  @cases String.to_integer(System.get_env("FO_FUZZ_CASES", "3000"))
  @seed String.to_integer(System.get_env("FO_FUZZ_SEED", "20261122"))

  setup do
    :rand.seed(:exsss, {@seed, 7, 11})
    :ok
  end

  defp pick(list), do: Enum.at(list, :rand.uniform(length(list)) - 1)

  # A random term, of bounded depth.
  defp term(0), do: leaf()

  defp term(depth) do
    case :rand.uniform(8) do
      1 -> List.to_tuple(for _ <- 1..:rand.uniform(7), do: term(depth - 1))
      2 -> for _ <- 1..:rand.uniform(5), do: term(depth - 1)
      3 -> [term(depth - 1) | term(depth - 1)]
      4 -> %{term(0) => term(depth - 1), pick([:max_nodes, :label, :max_depth]) => term(0)}
      _ -> leaf()
    end
  end

  defp leaf do
    pick([
      fn -> :rand.uniform(1000) end,
      fn -> -:rand.uniform(1000) end,
      fn -> 2 ** :rand.uniform(200) end,
      fn -> :rand.uniform() * 1.0e10 end,
      fn ->
        pick([
          :call,
          :return_to,
          :in,
          :out,
          :exit,
          :undefined,
          :trace_ts,
          :seq_trace,
          :graph,
          nil,
          true,
          :send
        ])
      end,
      fn -> :crypto.strong_rand_bytes(:rand.uniform(8)) end,
      fn -> self() end,
      fn -> make_ref() end,
      fn -> [:alias | make_ref()] end,
      fn ->
        {pick([:m, Enum, :lists]), pick([:f, :map, :reverse]), pick([0, 1, 2, 300, -1, [1, 2]])}
      end,
      fn -> [] end
    ]).()
  end

  # Something shaped like a trace message, with random fields.
  defp trace_message do
    tag = pick([:call, :return_to, :in, :out, :exit, :gc_minor_start, :spawn, :send, term(0)])
    fields = for _ <- 1..pick([1, 2, 3]), do: pick([term(1), {:m, :f, 1}, :undefined, 0])
    ts = pick([:rand.uniform(1_000_000), -5, 2 ** 70, {1, 2, 3}, :now])

    List.to_tuple(
      [pick([:trace_ts, :trace_ts, :trace, term(0)]), pick([self(), term(0)]), tag] ++
        fields ++ [ts]
    )
  end

  defp session, do: Native.new(%{})

  defp state, do: pick([session(), :graph, term(1)])

  defp call(fun) do
    try do
      fun.()
      :ok
    rescue
      ArgumentError -> :badarg
    end
  end

  test "every NIF entry point takes #{@cases} random calls and raises nothing but ArgumentError" do
    outcomes =
      for _ <- 1..@cases, reduce: %{ok: 0, badarg: 0} do
        acc ->
          op =
            pick([
              fn ->
                Native.new(pick([term(2), %{max_nodes: term(0)}, %{label: term(0)}, %{}]))
              end,
              fn ->
                Native.ingest(
                  pick([session(), term(1)]),
                  pick([term(2), for(_ <- 1..5, do: trace_message())])
                )
              end,
              fn -> Native.stats(pick([session(), term(1)])) end,
              fn -> Native.finish(pick([session(), term(1)]), pick([nil, :stop, term(0), 5])) end,
              fn -> Native.stop(pick([session(), term(1)])) end,
              fn ->
                Native.graph_start(
                  pick([session(), Native.new(%{label: 1_000_000 + :rand.uniform(1000)}), term(1)]),
                  pick([self(), term(0)])
                )
              end,
              fn ->
                Native.enabled(
                  pick([:call, :trace_status, :seq_trace, term(0)]),
                  state(),
                  term(1)
                )
              end,
              fn ->
                Native.trace(
                  pick([:call, :return_to, :seq_trace, :in, term(0)]),
                  state(),
                  pick([self(), term(0), 7]),
                  term(2),
                  pick([%{}, %{match_spec_result: term(1)}, term(1)])
                )
              end
            ])

          Map.update!(acc, call(op), &(&1 + 1))
      end

    # Both outcomes happen, so the generator reaches past the argument checks.
    assert outcomes.ok > @cases / 10
    assert outcomes.badarg > @cases / 10
    assert Process.alive?(self())
    assert_node_clean()
  end

  test "ingest with random trace-shaped messages counts what it cannot use and keeps going" do
    native = Native.new(%{})

    for _ <- 1..200 do
      :ok = Native.ingest(native, for(_ <- 1..20, do: trace_message()))
    end

    stats = Native.stats(native)
    assert stats.events + stats.malformed_events + stats.ignored_events == 4000
    assert stats.malformed_events > 0
    {stacks, _} = Native.finish(native, :rand.uniform(1000))
    assert is_map(stacks)
  end
end
