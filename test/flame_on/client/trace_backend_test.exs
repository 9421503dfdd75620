defmodule FlameOn.Client.TraceBackendTest do
  # The one module every flag and pattern of ours goes through: a handle
  # per trace, its own trace session where the VM has them (OTP 27+), the
  # legacy session otherwise; the same calls work on both.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Sweep
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Test.Workloads

  doctest TraceBackend

  setup do
    ensure_app_started()
    assert_node_clean()
    :ok
  end

  defp sleeper, do: spawn(fn -> receive do: (:stop -> :ok) end)

  test "open/2 picks trace sessions exactly where the VM has them" do
    handle = TraceBackend.open(:trace, self())
    on_exit(fn -> TraceBackend.close(handle) end)
    otp = :erlang.system_info(:otp_release) |> List.to_integer()
    assert TraceBackend.sessions?() == otp >= 27
    assert TraceBackend.shared?(handle) == not TraceBackend.sessions?()

    if TraceBackend.sessions?() do
      assert [{:flame_on_client, _id}] = TraceBackend.our_sessions()
      assert TraceBackend.scope(handle) != :legacy
    else
      assert TraceBackend.our_sessions() == []
      assert TraceBackend.scope(handle) == :legacy
    end

    assert TraceBackend.close(handle) == :ok
    assert TraceBackend.our_sessions() == []
    # closing twice is harmless
    assert TraceBackend.close(handle) == :ok
  end

  test "flags, tracer and untrace through a handle; another tracer is left alone" do
    pid = sleeper()
    native = Native.new(%{})
    handle = TraceBackend.open(:trace, {Native, native})
    assert TraceBackend.trace(handle, pid, true, [:running, :procs]) == 1
    assert Enum.sort(TraceBackend.flags(handle, pid)) == [:procs, :running]
    assert TraceBackend.tracer(handle, pid) == {:ok, {Native, native}}
    assert TraceBackend.check_tracee(pid) |> elem(0) == :error

    TraceBackend.untrace(handle, pid, [:procs])
    assert TraceBackend.flags(handle, pid) == [:running]
    TraceBackend.untrace(handle, pid)
    assert TraceBackend.flags(handle, pid) == []
    assert TraceBackend.check_tracee(pid) == :ok
    TraceBackend.close(handle)

    # In the legacy session untrace/3 leaves another tracer's flags alone.
    other = sleeper()
    :erlang.trace(pid, true, [:procs, {:tracer, other}])
    TraceBackend.untrace(TraceBackend.legacy({Native, native}), pid)
    assert :erlang.trace_info(pid, :flags) == {:flags, [:procs]}
    :erlang.trace(pid, false, [:all])

    send(pid, :stop)
    send(other, :stop)
    assert_node_clean()
  end

  test "a dead process: check_tracee says so, untrace does nothing" do
    pid = sleeper()
    send(pid, :stop)
    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}
    assert TraceBackend.check_tracee(pid) == {:error, :noproc}
    assert TraceBackend.check_tracee(:not_a_pid) == {:error, {:not_a_local_pid, :not_a_pid}}
    handle = TraceBackend.open(:trace, self())
    assert TraceBackend.untrace(handle, pid) == :ok
    assert TraceBackend.tracer(handle, pid) == :error
    assert_raise ArgumentError, fn -> TraceBackend.trace(handle, pid, true, [:running]) end
    TraceBackend.close(handle)
  end

  test "patterns through a handle, and a call trace that sees them" do
    collector = self()
    handle = TraceBackend.open(:trace, collector)
    on_exit(fn -> TraceBackend.close(handle) end)
    mfa = {Workloads, :fib, 1}
    assert TraceBackend.pattern(handle, mfa, true, [:local]) == 1
    assert TraceBackend.info(handle, mfa, :traced) == {:traced, :local}

    pid =
      spawn(fn ->
        receive do: (:go -> Workloads.fib(3))
      end)

    TraceBackend.trace(handle, pid, true, [:call, :arity])
    send(pid, :go)
    # fib(3) makes 5 calls of fib/1
    for _ <- 1..5, do: assert_receive({:trace, ^pid, :call, {Workloads, :fib, 1}})
    TraceBackend.pattern(handle, mfa, false, [:local])
    assert TraceBackend.info(handle, mfa, :traced) == {:traced, false}
    TraceBackend.close(handle)
    assert_node_clean()
  end

  test "enable_flags/2: a tracer in a match spec's trace action only for the legacy session" do
    legacy = TraceBackend.legacy({Native, :graph})
    assert TraceBackend.enable_flags(legacy, [:call]) == [:call, {:tracer, Native, :graph}]

    # (a session whose tracer module says it is not live cannot be made:
    # {Native, :graph} is live only while a graph trace is registered)
    handle = TraceBackend.open(:graph, self())
    expected = if TraceBackend.sessions?(), do: [:call], else: [:call, {:tracer, self()}]
    assert TraceBackend.enable_flags(handle, [:call]) == expected
    TraceBackend.close(handle)
  end

  test "set_flags/2 and clear_flags/2: several handles, one tracer in the legacy session" do
    pid = sleeper()
    first = TraceBackend.open(:trace, self())
    native = Native.new(%{})
    second = TraceBackend.open(:trace, {Native, native})
    TraceBackend.set_flags(pid, [{first, [:running]}, {second, [:procs]}])

    if TraceBackend.sessions?() do
      assert TraceBackend.flags(first, pid) == [:running]
      assert TraceBackend.flags(second, pid) == [:procs]
      assert TraceBackend.tracer(second, pid) == {:ok, {Native, native}}
    else
      assert Enum.sort(TraceBackend.flags(first, pid)) == [:procs, :running]
      assert TraceBackend.tracer(first, pid) == {:ok, self()}
    end

    TraceBackend.clear_flags(pid, [{first, [:running]}, {second, [:procs]}])
    assert TraceBackend.flags(first, pid) == []
    assert TraceBackend.flags(second, pid) == []
    Enum.each([first, second], &TraceBackend.close/1)
    send(pid, :stop)
    assert_node_clean()
  end

  test "a session of ours whose owner died is gone, and Sweep destroys a live one" do
    test = self()

    owner =
      spawn(fn ->
        handle = TraceBackend.open(:trace, test)
        TraceBackend.pattern(handle, {Workloads, :fib, 1}, true, [:local])
        send(test, :opened)
        receive do: (:stop -> :ok)
      end)

    assert_receive :opened
    expected = if TraceBackend.sessions?(), do: 1, else: 0
    assert length(TraceBackend.our_sessions()) == expected

    # Sweep (a restarted Patterns, the application's stop) destroys it,
    # whoever holds the handle.
    assert %{sessions: ^expected} = Sweep.run()
    assert TraceBackend.our_sessions() == []

    send(owner, :stop)

    # The VM destroys a session when its last handle is gone: a process
    # opens one, says what it opened (not the handle itself, which would
    # keep the session alive here) and exits.
    {opener, monitor} =
      spawn_monitor(fn ->
        handle = TraceBackend.open(:trace, test)
        send(test, {:opened, TraceBackend.scope(handle), length(TraceBackend.our_sessions())})
      end)

    assert_receive {:opened, scope, sessions}
    assert_receive {:DOWN, ^monitor, :process, ^opener, :normal}

    if TraceBackend.sessions?() do
      # its own session, alive while it held the handle
      assert scope != :legacy and sessions == 1
    else
      # no sessions before OTP 27: the handle names the legacy session,
      # which has nothing of its own to destroy
      assert scope == :legacy and sessions == 0
    end

    assert until(fn -> TraceBackend.our_sessions() == [] end, 500),
           "sessions left after their last handle went: #{inspect(TraceBackend.our_sessions())}"

    # On the legacy session the pattern was node-global: clear it.
    :erlang.trace_pattern({Workloads, :fib, 1}, false, [:local])
    assert_node_clean()
  end

  # OTP 27 goes down when a process has the garbage_collection flag in two
  # trace sessions; another tool's `dbg`-style trace (the legacy session)
  # counts. Ours leaves the flag out there, and the profile still comes
  # (its collections in its frames). OTP 25 has one tracer a process:
  # profile/2 refuses a process another tool traces, nothing to check.
  if TraceBackend.sessions?() do
    test "a process another tool traces for collections: ours leave the flag out, the node stays up" do
      sink = spawn(fn -> receive do: (:stop -> :ok) end)
      :erlang.trace(self(), true, [:garbage_collection, {:tracer, sink}])

      try do
        for mode <- [:nif, :sample] do
          {lists, profile} =
            FlameOn.Client.profile(fn -> for _ <- 1..300, do: Enum.to_list(1..20_000) end,
              mode: mode
            )

          assert length(lists) == 300
          assert Map.has_key?(profile.stacks, self())
          # the other tool's flag is still there
          assert {:flags, [:garbage_collection]} = :erlang.trace_info(self(), :flags)
        end
      after
        :erlang.trace(self(), false, [:garbage_collection])
        send(sink, :stop)
      end

      assert_node_clean()
    end

    # The send pattern cannot look before it turns flags on: there it
    # leaves :garbage_collection out, and the namer turns it on through
    # TraceBackend as each process joins.
    test "a process another trace of ours follows for collections becomes a callee: the node stays up" do
      {:ok, server} = FlameOn.Client.Test.Server.start()
      {:ok, watch} = FlameOn.Client.start_trace(server, mode: :nif)

      try do
        {results, profile} =
          FlameOn.Client.profile(
            fn -> for _ <- 1..50, do: GenServer.call(server, {:build, 20_000}) end,
            cross_process: true
          )

        assert length(results) == 50
        assert Enum.count(profile.graph.spans, &(&1.pid == server)) == 50
      after
        FlameOn.Client.stop_trace(watch)
      end

      assert_node_clean()
    end

    test "gc_traced_elsewhere?/2 sees another session's flag, never its own" do
      pid = sleeper()
      mine = TraceBackend.open(:trace, self())
      other = TraceBackend.open(:trace, self())
      {_, own} = mine.session

      try do
        refute TraceBackend.gc_traced_elsewhere?(own, pid)
        TraceBackend.trace(mine, pid, true, [:garbage_collection])
        refute TraceBackend.gc_traced_elsewhere?(own, pid)
        TraceBackend.trace(other, pid, true, [:garbage_collection, :running])
        assert TraceBackend.flags(other, pid) == [:running]
        # the legacy session too (the tail path's)
        TraceBackend.trace(TraceBackend.legacy(self()), pid, true, [:garbage_collection, :procs])
        assert :erlang.trace_info(pid, :flags) == {:flags, [:procs]}
        :erlang.trace(pid, false, [:all])
      after
        TraceBackend.close(mine)
        TraceBackend.close(other)
        send(pid, :stop)
      end
    end
  end
end
