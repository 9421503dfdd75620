defmodule FlameOn.Client.StatusTest do
  # status/0's `sessions` counts the traces running now, whenever the
  # garbage collector frees the handles of finished ones; those are
  # `sessions_awaiting_gc` until it does.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Test.Workloads

  setup do
    ensure_app_started()
    on_exit(fn -> assert_node_clean() end)
  end

  test "sessions counts running traces only, without a forced GC" do
    assert FlameOn.Client.status().sessions == 0

    for mode <- [:nif, :process, :sample, :nif, :sample] do
      {_, _profile} = FlameOn.Client.profile(fn -> Workloads.fib(10) end, mode: mode)
    end

    # No :erlang.garbage_collect/1 here: the handles of the five finished
    # traces may well still be on this process's heap.
    status = FlameOn.Client.status()
    assert status.sessions == 0
    assert is_integer(status.sessions_awaiting_gc) and status.sessions_awaiting_gc >= 0

    target = spawn(fn -> Process.sleep(:infinity) end)
    {:ok, ref} = FlameOn.Client.start_trace(target, mode: :sample)
    assert FlameOn.Client.status().sessions == 1

    assert {:ok, _profile} = FlameOn.Client.stop_trace(ref)
    Process.exit(target, :kill)
    assert FlameOn.Client.status().sessions == 0
  end

  test "a trace whose fun raises, and one whose handle is dropped, are not running" do
    assert_raise RuntimeError, fn ->
      FlameOn.Client.profile(fn -> raise "boom" end, mode: :nif)
    end

    assert FlameOn.Client.status().sessions == 0

    # A session nobody stops or finishes is running until its handle goes.
    test = self()

    holder =
      spawn(fn ->
        _session = Native.new(%{})
        send(test, :made)
        Process.sleep(:infinity)
      end)

    assert_receive :made
    assert FlameOn.Client.status().sessions == 1
    ref = Process.monitor(holder)
    Process.exit(holder, :kill)
    assert_receive {:DOWN, ^ref, _, _, _}
    assert until(fn -> FlameOn.Client.status().sessions == 0 end, 200)
  end
end
