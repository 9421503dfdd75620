defmodule FlameOn.Client.FaultsTest do
  # Faults around traces: after each, the node is as before and whatever
  # was captured is returned.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Test.Delegator
  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.Test.Workloads

  setup do
    assert_node_clean()
    :ok
  end

  defp graph_profile(fun, opts \\ []),
    do: FlameOn.Client.profile(fun, [cross_process: true] ++ opts)

  test "a callee that never replies in time: the caller times out, a late reply changes nothing" do
    {:ok, server} = Server.start()

    {caught, profile} =
      graph_profile(fn ->
        try do
          GenServer.call(server, {:sleep, 300}, 50)
        catch
          :exit, {:timeout, _} -> :timed_out
        end
      end)

    assert caught == :timed_out
    callee = Enum.find(profile.graph.spans, &(&1.pid == server))
    root = Enum.find(profile.graph.spans, &(&1.pid == self()))
    assert callee.status == :open_at_close
    assert root.attributed_wait_us == 0
    assert root.unattributed_wait_us >= 40_000

    # The late reply lands after the trace (an alias reply: dropped by the
    # VM once the call timed out); the server is still usable.
    Process.sleep(300)
    assert GenServer.call(server, {:spin, 1}) == :done
    assert_node_clean()
  end

  test "a reply sent by another process ends the callee's span (delegated)" do
    {:ok, server} = Delegator.start()
    {result, profile} = graph_profile(fn -> GenServer.call(server, {:delegate, 20}) end)
    assert result == :delegated
    callee = Enum.find(profile.graph.spans, &(&1.pid == server))
    assert callee.status == :ok
    assert profile.graph.stats.delegated_replies == 1
    root = Enum.find(profile.graph.spans, &(&1.pid == self()))
    assert root.attributed_wait_us >= 15_000
    assert_node_clean()
  end

  test "another tool takes the seq_trace system tracer mid-trace: ours finishes, theirs is kept" do
    {:ok, server} = Server.start()
    other = spawn(fn -> receive do: (:stop -> :ok) end)

    {_, profile} =
      graph_profile(fn ->
        GenServer.call(server, {:spin, 5})
        :seq_trace.set_system_tracer(other)
        GenServer.call(server, {:spin, 5})
      end)

    # Correlation stopped with the takeover; what came before is kept.
    assert Enum.count(profile.graph.spans, &(&1.pid == server)) >= 1
    assert :seq_trace.get_system_tracer() == other
    :seq_trace.set_system_tracer(false)
    send(other, :stop)
    assert_node_clean()
  end

  # Purge the old code first: a module keeps at most two versions.
  defp reload_native do
    :code.purge(FlameOn.Client.Core.Native)
    {:module, _} = :code.load_file(FlameOn.Client.Core.Native)
    :code.purge(FlameOn.Client.Core.Native)
  end

  test "the NIF module reloaded between and during traces" do
    {_, before} = FlameOn.Client.profile(fn -> Workloads.fib(10) end)
    assert before.stats.events > 0

    reload_native()
    {_, reloaded} = FlameOn.Client.profile(fn -> Workloads.fib(10) end)
    assert reloaded.stats.events > 0

    {_, during} =
      FlameOn.Client.profile(fn ->
        Workloads.fib(8)
        reload_native()
        Workloads.fib(8)
      end)

    assert during.stats.events > 0
    assert_node_clean()
  end
end
