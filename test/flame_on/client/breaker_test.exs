defmodule FlameOn.Client.BreakerTest do
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Node.Breaker
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Test.Workloads

  setup do
    on_exit(fn ->
      Application.delete_env(:flame_on_client, :breaker)
      Breaker.check()
    end)

    :ok
  end

  defp limit_node_memory(mb),
    do: Application.put_env(:flame_on_client, :breaker, max_node_memory_mb: mb)

  defp node_mb, do: :erlang.memory(:total) / 1_048_576

  test "past a limit no new trace starts; below resume_ratio of it they start again" do
    assert Breaker.check() == :ok
    assert FlameOn.Client.status().breaker == :closed

    limit_node_memory(1)

    assert_raise RuntimeError, ~r/circuit breaker is open/, fn ->
      FlameOn.Client.profile(fn -> Workloads.fib(5) end)
    end

    assert {:open, {:node_memory, bytes, limit}} = FlameOn.Client.status().breaker
    assert bytes > limit
    assert_node_clean()

    # Hysteresis: under the limit but above 80% of it, it stays open.
    limit_node_memory(node_mb() / 0.9)
    assert {:error, {:breaker_open, _}} = Breaker.check()

    limit_node_memory(node_mb() * 3)
    assert Breaker.check() == :ok
    assert {_, profile} = FlameOn.Client.profile(fn -> Workloads.fib(5) end)
    assert profile.stats.events > 0
    assert_node_clean()
  end

  test "check_sessionless/0 (a kept tail request's copy): reads a closed breaker only, checks an open one" do
    assert Breaker.check() == :ok
    # a closed breaker is not checked again: the node limit set now opens
    # it at the next full check only
    limit_node_memory(1)
    assert Breaker.check_sessionless() == :ok
    assert Breaker.state() == nil
    assert {:error, {:breaker_open, {:node_memory, _, _}}} = Breaker.check()

    # an open one is: still over its limit, it stays open; under it, closes
    assert {:error, {:breaker_open, _}} = Breaker.check_sessionless()
    limit_node_memory(node_mb() * 3)
    assert Breaker.check_sessionless() == :ok
    assert Breaker.state() == nil
  end

  test "live sessions' tables are counted and given back" do
    before = Native.session_bytes()
    session = Native.new(%{})
    pid = self()

    messages =
      for i <- 1..500 do
        {:trace_ts, pid, :call, {:m, String.to_atom("f#{rem(i, 50)}"), 0}, :undefined, i * 10}
      end

    :ok = Native.ingest(session, messages)
    held = Native.session_bytes() - before
    assert held >= Native.stats(session).memory_bytes
    assert FlameOn.Client.status().sessions_memory_bytes >= held

    Native.finish(session, nil)
    assert Native.session_bytes() == before
  end

  test "the sessions memory limit opens the breaker" do
    session = Native.new(%{})
    :ok = Native.ingest(session, [{:trace_ts, self(), :call, {:m, :f, 0}, :undefined, 1}])

    Application.put_env(:flame_on_client, :breaker,
      max_sessions_memory_mb: Native.session_bytes() / 2 / 1_048_576
    )

    assert {:error, {:breaker_open, {:sessions_memory, _, _}}} = Breaker.check()
    Native.finish(session, nil)
    Application.put_env(:flame_on_client, :breaker, max_sessions_memory_mb: 512)
    assert Breaker.check() == :ok
  end
end
