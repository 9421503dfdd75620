defmodule FlameOn.Client.CleanupTest do
  # Whatever of ours dies mid-trace (the pattern owner, a session, the
  # supervisor, the whole application, the NIF reloaded), within 1 s nothing
  # of ours stays set on the node, and the next profile/2 works. The traced
  # function is blocked in a call to an Agent that never returns, so the
  # trace is live (patterns, flags, send clause, system tracer) at the kill.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Node.Sweep
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Test.Workloads

  @captures [
    {"mode :nif", [mode: :nif]},
    {"mode :process", [mode: :process]},
    {"mode :sample", [mode: :sample]},
    {"mode :nif, cross_process", [mode: :nif, cross_process: true]},
    {"mode :process, cross_process", [mode: :process, cross_process: true]},
    {"mode :sample, cross_process", [mode: :sample, cross_process: true]}
  ]

  setup do
    ensure_app_started()
    assert_node_clean()
    on_exit(&ensure_app_started/0)
    :ok
  end

  # A process blocked inside profile/2 on an Agent call that never returns.
  defp stuck_trace(opts) do
    {:ok, agent} = Agent.start(fn -> :state end)
    test = self()

    root =
      spawn(fn ->
        FlameOn.Client.profile(
          fn ->
            send(test, :tracing)
            Agent.get(agent, fn _ -> Process.sleep(:infinity) end, :infinity)
          end,
          opts
        )
      end)

    assert_receive :tracing
    assert patterns_set?() == (opts[:mode] != :sample)
    assert our_flags(root) != []

    if opts[:cross_process] do
      # The send pattern turned tracing on in the Agent with its request.
      wait_until(fn -> our_flags(agent) != [] end)
      assert {Native, :graph} = :seq_trace.get_system_tracer()
    end

    {root, agent}
  end

  defp ours?(pid) do
    case Process.info(pid, :dictionary) do
      {:dictionary, dict} ->
        case dict[:"$initial_call"] do
          {module, _, _} ->
            name = Atom.to_string(module)

            String.starts_with?(name, "Elixir.FlameOn.Client.") and
              not String.starts_with?(name, "Elixir.FlameOn.Client.Test.")

          _ ->
            false
        end

      nil ->
        false
    end
  end

  defp kill(pid) when is_pid(pid) do
    ref = Process.monitor(pid)
    Process.exit(pid, :kill)
    assert_receive {:DOWN, ^ref, :process, ^pid, _}
  end

  defp kill_all(pids), do: Enum.each(pids, &kill/1)

  defp wait_until(fun, timeout \\ 2_000) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn -> fun.() || (Process.sleep(5) && false) end)
    |> Enum.find(fn ok -> ok or System.monotonic_time(:millisecond) > deadline end)

    assert fun.(), "condition not met within #{timeout} ms"
  end

  # The node holds nothing of ours within 1 s, and tracing works again.
  # A sampled run is longer: on a loaded machine the sampler may tick
  # late, and 20 ms of fib could end before its first tick
  # (bench/RESULTS.md).
  defp assert_clean_and_usable(opts) do
    assert_no_trace_leftovers(1_000)
    ensure_app_started()
    busy_ms = if opts[:mode] == :sample, do: 80, else: 20
    {_, profile} = FlameOn.Client.profile(fn -> Workloads.busy(busy_ms) end, opts)
    assert Enum.any?(Map.get(profile.stacks, self(), []), &String.contains?(elem(&1, 0), "fib/1"))
    assert_node_clean()
  end

  for {label, opts} <- @captures do
    describe label do
      test "every process of ours killed, then the traced process and the callee" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        ours = Enum.filter(Process.list(), &ours?/1)
        assert Process.whereis(Patterns) in ours
        kill_all(ours)
        kill_all([root, agent])
        assert_clean_and_usable(opts)
      end

      test "the pattern owner killed; the traced process lives on" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        kill(Process.whereis(Patterns))
        assert_no_trace_leftovers(1_000)
        # The traced process gets its own token back when its call ends.
        kill(agent)
        wait_until(fn -> not Process.alive?(root) end)
        assert_clean_and_usable(opts)
      end

      test "the session killed" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        sessions = for {_, pid, _, _} <- sessions(), do: pid

        if opts[:mode] in [:nif, :sample] and !opts[:cross_process] do
          # No session process in this mode: the traced process is the owner.
          assert sessions == []
          kill(root)
        else
          assert sessions != []
          kill_all(sessions)
        end

        assert_no_trace_leftovers(1_000)
        kill_all([agent | [root] -- [self()]] |> Enum.filter(&Process.alive?/1))
        assert_clean_and_usable(opts)
      end

      test "the supervisor killed" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        kill(Process.whereis(FlameOn.Client.Supervisor))
        assert_no_trace_leftovers(1_000)
        kill_all([root, agent])
        assert_clean_and_usable(opts)
      end

      test "the application stopped" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        :ok = Application.stop(:flame_on_client)
        assert_no_trace_leftovers(1_000)
        kill_all([root, agent])
        assert_clean_and_usable(opts)
      end

      test "the NIF reloaded, then everything of ours killed" do
        opts = unquote(opts)
        {root, agent} = stuck_trace(opts)
        :code.purge(Native)
        {:module, _} = :code.load_file(Native)
        kill_all(Enum.filter(Process.list(), &ours?/1))
        :code.purge(Native)
        assert_no_trace_leftovers(1_000)
        kill_all([root, agent])
        assert_clean_and_usable(opts)
      end
    end
  end

  defp sessions, do: DynamicSupervisor.which_children(FlameOn.Client.OwnerSupervisor)

  test "a traced process that outlives a killed owner gets its own token back" do
    {:ok, server} = FlameOn.Client.Test.Server.start()
    test = self()

    root =
      spawn(fn ->
        # profile/2 raises: its session died before the function returned.
        result =
          try do
            FlameOn.Client.profile(
              fn ->
                send(test, :tracing)
                receive do: (:go -> GenServer.call(server, {:spin, 1}))
              end,
              cross_process: true
            )
          rescue
            error in RuntimeError -> error.message
          end

        send(test, {:result, result})
        send(test, {:token, :seq_trace.get_token()})
        receive do: (:never -> :ok)
      end)

    assert_receive :tracing
    kill_all(Enum.filter(Process.list(), &ours?/1))
    assert_no_trace_leftovers(1_000)
    send(root, :go)
    assert_receive {:result, message}
    assert message =~ "ended before returning the profile"
    assert_receive {:token, []}
    assert {:sequential_trace_token, []} = Process.info(root, :sequential_trace_token)
    kill(root)
    GenServer.stop(server)
    assert_clean_and_usable([])
  end

  describe "another tool's call tracing" do
    setup do
      FlameOn.Client.Test.Tools.otp_lib!(:runtime_tools, "erlang-runtime-tools")
      on_exit(fn -> :dbg.stop() end)
    end

    test "in the legacy session: refused with a clear error (OTP 25), or traced beside in a session of ours (OTP 27+); its pattern and process flags are kept" do
      tool = spawn(fn -> receive do: (:never -> :ok) end)
      traced = spawn(fn -> receive do: (:never -> :ok) end)
      :erlang.trace_pattern({Workloads, :loop, 2}, true, [:local])
      :erlang.trace(traced, true, [:call, {:tracer, tool}])

      for opts <- [[mode: :nif], [mode: :process], [cross_process: true]] do
        if TraceBackend.sessions?() do
          assert {5, profile} =
                   FlameOn.Client.profile(
                     fn -> Workloads.fib(5) end,
                     [collapse_recursion: false] ++ opts
                   )

          assert max_frame_count(profile, self(), "FlameOn.Client.Test.Workloads.fib/1") >= 4
        else
          error =
            assert_raise ArgumentError, fn ->
              FlameOn.Client.profile(fn -> Workloads.fib(5) end, opts)
            end

          assert error.message =~ "another tool is call tracing"
          assert error.message =~ inspect(traced)
        end
      end

      # Still theirs, and nothing of ours is set.
      assert :erlang.trace_info({Workloads, :loop, 2}, :traced) == {:traced, :local}
      assert :erlang.trace_info({:lists, :reverse, 1}, :traced) == {:traced, false}
      assert {:tracer, ^tool} = :erlang.trace_info(traced, :tracer)
      assert :seq_trace.get_system_tracer() == false
      assert Patterns.users() == 0

      :erlang.trace(traced, false, [:all])
      :erlang.trace_pattern({Workloads, :loop, 2}, false, [:local])
      Enum.each([tool, traced], &kill/1)
      assert_node_clean()
    end

    test "for new processes (dbg's p(new, c)): refused in the legacy session (OTP 25), traced beside (dbg has a session of its own on OTP 27+)" do
      {:ok, _} = :dbg.tracer(:process, {fn _msg, acc -> acc end, nil})
      {:ok, _} = :dbg.p(:new, [:c])

      if TraceBackend.sessions?() do
        assert {5, _profile} = FlameOn.Client.profile(fn -> Workloads.fib(5) end)
        assert :dbg in Keyword.keys(apply(:trace, :session_info, [:new]))
      else
        assert_raise ArgumentError, ~r/new processes are call traced/, fn ->
          FlameOn.Client.profile(fn -> Workloads.fib(5) end)
        end
      end

      :dbg.stop()
      assert_node_clean()
    end

    test "a meta or global pattern of another tool survives our traces" do
      :erlang.trace_pattern({Workloads, :boom!, 0}, true, [:meta])
      {_, _} = FlameOn.Client.profile(fn -> Workloads.fib(5) end)
      assert {:meta, _} = :erlang.trace_info({Workloads, :boom!, 0}, :meta)
      :erlang.trace_pattern({Workloads, :boom!, 0}, false, [:meta])
      assert_node_clean()
    end
  end

  test "Sweep recognises only what is ours" do
    other = spawn(fn -> receive do: (:never -> :ok) end)
    :seq_trace.set_system_tracer(other)
    send_ms = [{[:_, :_], [], [{:message, :other_tool}]}]
    :erlang.trace_pattern(:send, send_ms, [])

    assert %{system_tracer: false, send_pattern: false, call_patterns: false} = Sweep.run()
    assert :seq_trace.get_system_tracer() == other
    assert :erlang.trace_info(:send, :match_spec) == {:match_spec, send_ms}

    :seq_trace.set_system_tracer(false)
    :erlang.trace_pattern(:send, true, [])
    kill(other)
    assert_node_clean()
  end
end
