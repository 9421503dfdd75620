defmodule FlameOn.Client.LeakTest do
  # 10,000 traces (every mode), then everything they made must be gone: session
  # resources, processes, ETS tables and memory (within a stated tolerance).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.Test.Workloads

  @traces 10_000
  # Tolerance on the OS-level memory of the VM (C allocations are outside
  # :erlang.memory/0): allocator caching may keep some pages.
  @rss_tolerance_mb 32
  @beam_tolerance_mb 16

  defp rss_mb do
    [_size, resident | _] = File.read!("/proc/self/statm") |> String.split()
    String.to_integer(resident) * 4096 / 1_048_576
  end

  defp snapshot do
    %{
      sessions: Native.live_sessions(),
      processes: length(Process.list()),
      ets: length(:ets.all()),
      beam_mb: :erlang.memory(:total) / 1_048_576,
      rss_mb: rss_mb()
    }
  end

  defp settle do
    for pid <- Process.list(), do: :erlang.garbage_collect(pid)
    Process.sleep(50)
  end

  @tag timeout: 300_000
  test "#{@traces} traces leave no sessions, processes, ETS tables or memory behind" do
    {:ok, server} = Server.start()
    # Holding the call patterns keeps each trace from setting and clearing
    # them (milliseconds each): the loop measures the traces themselves.
    :ok = Patterns.acquire(nil)

    warm = fn ->
      for i <- 1..200 do
        FlameOn.Client.profile(fn -> Workloads.fib(8) end,
          mode: Enum.at([:nif, :process, :sample], rem(i, 3))
        )
      end
    end

    warm.()
    settle()

    start = snapshot()

    for i <- 1..@traces do
      case rem(i, 4) do
        0 ->
          FlameOn.Client.profile(fn -> Workloads.fib(8) end, mode: :process)

        1 ->
          FlameOn.Client.profile(fn -> GenServer.call(server, {:spin, 0}) end, cross_process: true)

        2 ->
          FlameOn.Client.profile(fn -> Workloads.fib(8) end, mode: :sample)

        _ ->
          FlameOn.Client.profile(fn -> Workloads.fib(8) end)
      end
    end

    Patterns.release()
    settle()

    finish = snapshot()

    assert finish.sessions <= start.sessions, inspect({start, finish})
    assert finish.processes <= start.processes, inspect({start, finish})
    assert finish.ets <= start.ets, inspect({start, finish})
    assert finish.beam_mb - start.beam_mb < @beam_tolerance_mb, inspect({start, finish})
    assert finish.rss_mb - start.rss_mb < @rss_tolerance_mb, inspect({start, finish})
    assert_node_clean()
  end
end
