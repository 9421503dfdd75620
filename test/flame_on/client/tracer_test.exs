defmodule FlameOn.Client.TracerTest do
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Owners.Tracer
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Owners.Tracer

  @fib "FlameOn.Client.Test.Workloads.fib/1"

  setup do
    assert_node_clean()
    :ok
  end

  # A process that computes fib(n) when told to, reports, then waits.
  defp worker(n) do
    parent = self()

    spawn(fn ->
      receive do: (:go -> :ok)
      send(parent, {:done, self(), Workloads.fib(n)})
      receive do: (:stop -> :ok)
    end)
  end

  # A process that keeps calling fib until it is killed.
  defp spinner do
    parent = self()

    spawn(fn ->
      receive do: (:go -> :ok)
      send(parent, {:spinning, self()})
      spin()
    end)
  end

  defp spin do
    Workloads.fib(10)
    spin()
  end

  defp session_of(pid) do
    [session] = our_tracers(pid)
    assert is_pid(session)
    session
  end

  test "traces another process and turns its flags off at finish" do
    pid = worker(15)
    {:ok, session} = Tracer.start(pid: pid, name: "other")
    assert session_of(pid) == session
    send(pid, :go)
    assert_receive {:done, ^pid, 610}, 5_000

    assert {:ok, profile} = Tracer.finish(session)
    assert profile.pid == pid
    assert profile.name == "other"
    assert Map.keys(profile.stacks) == [pid]
    assert max_frame_count(profile, pid, @fib) >= 14
    refute Process.alive?(session)

    # The worker is still alive and no longer traced.
    assert Process.alive?(pid)
    assert our_flags(pid) == []
    assert_node_clean()
    send(pid, :stop)
  end

  test "start/1 errors" do
    dead = spawn(fn -> :ok end)
    Process.sleep(10)
    assert Tracer.start(pid: dead) == {:error, :noproc}

    pid = worker(1)
    assert {:error, {:invalid_limits, _}} = Tracer.start(pid: pid, limits: %{max_nodes: 0})

    {:ok, session} = Tracer.start(pid: pid)
    # Legacy session: the tracer is the session process; with trace
    # sessions, a trace session of ours traces it.
    by =
      if FlameOn.Client.Node.TraceBackend.sessions?(),
        do: {:trace_session, :flame_on_client},
        else: session

    assert Tracer.start(pid: pid) == {:error, {:already_traced, by}}
    assert {:ok, _} = Tracer.finish(session)
    send(pid, :stop)
    assert_node_clean()
  end

  describe "the traced process is killed mid-trace" do
    test "a session with another owner keeps the profile" do
      pid = spinner()
      {:ok, session} = Tracer.start(pid: pid)
      ref = Process.monitor(pid)
      send(pid, :go)
      assert_receive {:spinning, ^pid}, 5_000
      Process.sleep(30)
      Process.exit(pid, :kill)
      assert_receive {:DOWN, ^ref, :process, ^pid, :killed}

      assert {:ok, profile} = Tracer.finish(session)
      assert max_frame_count(profile, pid, @fib) >= 5
      assert profile.stats.events > 0
      assert_node_clean()
    end

    test "profile/2 in the killed process: the session stops on its own" do
      parent = self()

      pid =
        spawn(fn ->
          FlameOn.Client.profile(
            fn ->
              send(parent, {:tracing, self()})
              spin()
            end,
            mode: :process
          )
        end)

      assert_receive {:tracing, ^pid}, 5_000
      session = session_of(pid)
      session_ref = Process.monitor(session)
      Process.sleep(20)
      Process.exit(pid, :kill)

      assert_receive {:DOWN, ^session_ref, :process, ^session, :normal}, 5_000
      assert_node_clean()
    end
  end

  describe "the session is killed mid-trace" do
    test "in profile/2: profile raises after fun returns and the node is clean" do
      parent = self()

      error =
        assert_raise RuntimeError, ~r/owner .* ended before returning the profile/, fn ->
          FlameOn.Client.profile(
            fn ->
              session = session_of(self())
              ref = Process.monitor(session)
              Process.exit(session, :kill)
              receive do: ({:DOWN, ^ref, _, _, _} -> :ok)
              # Keep making calls with a dead tracer.
              send(parent, {:fib, Workloads.fib(15)})
            end,
            mode: :process
          )
        end

      assert error.message =~ "noproc"
      assert_received {:fib, 610}
      assert_node_clean()
    end

    test "tracing another process: its flags and the patterns are removed" do
      pid = spinner()
      {:ok, session} = Tracer.start(pid: pid)
      send(pid, :go)
      assert_receive {:spinning, ^pid}, 5_000
      Process.sleep(20)
      Process.exit(session, :kill)

      # The spinner keeps running, untraced.
      assert_node_clean()
      assert Process.alive?(pid)
      assert {:error, :noproc} = Tracer.finish(session)
      Process.exit(pid, :kill)
    end
  end

  test "finish drops what is left after its timeout and counts it" do
    pid = spinner()
    {:ok, session} = Tracer.start(pid: pid)
    # Let a backlog build up while the session does not run.
    :sys.suspend(session)
    send(pid, :go)
    assert_receive {:spinning, ^pid}, 5_000
    Process.sleep(30)
    task = Task.async(fn -> Tracer.finish(session, timeout: 0) end)
    Process.sleep(10)
    :sys.resume(session)

    assert {:ok, profile} = Task.await(task)
    assert profile.stats.unprocessed_events > 0
    assert profile.stats.dropped_events >= profile.stats.unprocessed_events
    assert profile.stats.events > 0
    Process.exit(pid, :kill)
    assert_node_clean()
  end

  test "the owner dies: the session stops and cleans up" do
    pid = worker(10)
    parent = self()

    owner =
      spawn(fn ->
        {:ok, session} = Tracer.start(pid: pid)
        send(parent, {:session, session})
        receive do: (:never -> :ok)
      end)

    assert_receive {:session, session}, 5_000
    ref = Process.monitor(session)
    Process.exit(owner, :kill)
    assert_receive {:DOWN, ^ref, :process, ^session, :normal}, 5_000
    assert Process.alive?(pid)
    assert_node_clean()
    send(pid, :stop)
  end

  describe "Patterns" do
    test "counts users: set by the first, cleared by the last" do
      refute patterns_set?()
      assert Patterns.acquire() == :ok
      assert patterns_set?()
      assert Patterns.acquire() == :ok
      assert Patterns.users() == 1

      parent = self()

      other =
        spawn_link(fn ->
          Patterns.acquire()
          send(parent, :acquired)
          receive do: (:release -> Patterns.release())
          send(parent, :released)
        end)

      assert_receive :acquired
      assert Patterns.users() == 2
      assert Patterns.release() == :ok
      assert patterns_set?()
      send(other, :release)
      assert_receive :released
      refute patterns_set?()
      assert Patterns.release() == :ok
      assert_node_clean()
    end

    test "a user that dies releases its share" do
      parent = self()

      # linked: if the test fails, the user dies with it and releases
      user =
        spawn_link(fn ->
          Patterns.acquire()
          send(parent, :acquired)
          receive do: (:never -> :ok)
        end)

      assert_receive :acquired
      assert patterns_set?()
      Process.unlink(user)
      Process.exit(user, :kill)
      assert_node_clean()
    end
  end
end
