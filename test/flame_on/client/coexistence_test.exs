defmodule FlameOn.Client.CoexistenceTest do
  # Another tool traces the node while our traces run. It call-traces a
  # server with a pattern in the legacy session and, where the VM has trace
  # sessions (OTP 27+), with another pattern in a session of its own, and
  # adds patterns while ours run. With trace sessions every trace of ours
  # (each mode, cross-process ones with the tool's server as our callee,
  # traces of the tool's server itself) runs beside it: before, during and
  # after ours the tool keeps its patterns and flags and gets every event,
  # and ours leave nothing behind. In the legacy session (OTP 25-26) exact
  # and cross-process traces refuse to start while the tool traces, and a
  # sample trace of another process runs beside it; the tool's tracing is
  # kept.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Test.Workloads

  defmodule Target do
    @moduledoc false
    use GenServer

    @impl true
    def init(state), do: {:ok, state}

    @impl true
    def handle_call({:work, n}, _from, state),
      do: {:reply, {Workloads.fib(n), Workloads.loop(n, 0)}, state}
  end

  @fib {Workloads, :fib, 1}
  @loop {Workloads, :loop, 2}
  @busy {Workloads, :busy, 1}
  @mixed {Workloads, :mixed, 1}
  @fib_frame "FlameOn.Client.Test.Workloads.fib/1"
  # fib(6) makes 25 calls of fib/1, loop(6, 0) 7 of loop/2.
  @n 6
  @expected_events %{legacy: %{@loop => 7}, session: %{@fib => 25}}

  setup do
    ensure_app_started()
    assert_node_clean()
    {:ok, target} = GenServer.start(Target, nil)
    tool = start_tool(target)

    on_exit(fn ->
      stop_tool(tool)
      GenServer.stop(target)
    end)

    %{tool: tool, target: target}
  end

  @exact [
    {"mode :nif", [mode: :nif]},
    {"mode :process", [mode: :process]},
    {"mode :nif, cross_process", [mode: :nif, cross_process: true]},
    {"mode :process, cross_process", [mode: :process, cross_process: true]}
  ]
  @sampled [
    {"mode :sample", [mode: :sample]},
    {"mode :sample, cross_process", [mode: :sample, cross_process: true]}
  ]

  for {label, opts} <- @exact ++ @sampled do
    @opts opts
    test "profile/2, #{label}", %{tool: tool, target: target} do
      assert_tool_intact(tool)

      if TraceBackend.sessions?() or @opts == [mode: :sample] do
        {{result, events}, profile} =
          FlameOn.Client.profile(
            fn ->
              # The tool keeps working while ours runs, and sets more.
              add_tool_patterns(tool)
              result = GenServer.call(target, {:work, @n})
              Workloads.busy(30)
              # ours: sessions of its own where the VM has them, but a
              # trace of flags only (mode :sample of this process, which
              # no tool traces) in the legacy session: a session costs
              # ~0.8 ms to destroy there
              sessions = FlameOn.Client.status().trace_sessions

              if @opts == [mode: :sample] do
                assert sessions == 0

                assert {:tracer, {FlameOn.Client.Core.Native, _}} =
                         :erlang.trace_info(self(), :tracer)
              else
                assert if(TraceBackend.sessions?(), do: sessions >= 1, else: sessions == 0)
              end

              {result, tool_events(tool)}
            end,
            @opts
          )

        assert result == {8, @n}
        assert events == expected_events()
        assert time_where(profile, self(), &(&1 =~ "FlameOn.Client.Test.Workloads.")) > 0

        if @opts[:cross_process] == true and @opts[:mode] != :sample do
          # the tool's server was our callee: its work is in our profile
          assert time_where(profile, target, &(&1 =~ @fib_frame)) > 0
        end
      else
        error =
          assert_raise ArgumentError, fn ->
            FlameOn.Client.profile(fn -> GenServer.call(target, {:work, @n}) end, @opts)
          end

        # exact: our call patterns would replace its; cross-process: our
        # send pattern would take its server over
        assert error.message =~ ~r/another tool is (call )?tracing/
        add_tool_patterns(tool)
      end

      assert_only_tool_left(tool)
    end
  end

  # (A newcomer's report: after an exact trace and at once a cross-process
  # one, the tool's session got no more call events of the target.)
  test "an exact trace and right after it a cross-process one, of other code", %{tool: tool} do
    assert_tool_intact(tool)

    for opts <- [[mode: :nif], [mode: :nif, cross_process: true]] do
      if TraceBackend.sessions?() do
        assert {:ok, %FlameOn.Client.Profile{}} =
                 FlameOn.Client.profile(fn -> Workloads.busy(5) end, opts)
                 |> then(fn {_, profile} -> {:ok, profile} end)
      else
        assert_raise ArgumentError, fn -> FlameOn.Client.profile(fn -> :ok end, opts) end
      end
    end

    assert_ours_gone()
    assert_tool_intact(tool)
  end

  for mode <- [:process, :sample] do
    @mode mode
    test "start_trace/2 of the tool's own server, mode #{inspect(mode)}", %{
      tool: tool,
      target: target
    } do
      assert_tool_intact(tool)

      if TraceBackend.sessions?() do
        {:ok, ref} = Tracing.start_trace(target, mode: @mode)
        add_tool_patterns(tool)
        for _ <- 1..3, do: assert(GenServer.call(target, {:work, @n}) == {8, @n})
        assert tool_events(tool) == expected_events(3)
        assert_tool_intact(tool, added: true)
        assert {:ok, profile} = Tracing.stop_trace(ref)
        assert profile.pid == target
      else
        # One tracer per process in the legacy session: the tool's.
        assert {:error, {:already_traced, _}} = Tracing.start_trace(target, mode: @mode)
        add_tool_patterns(tool)
      end

      assert_only_tool_left(tool)
    end
  end

  test "concurrent traces of ours, all modes, while the tool traces", %{
    tool: tool,
    target: target
  } do
    modes =
      if TraceBackend.sessions?(),
        do: [[mode: :nif], [mode: :process], [mode: :sample], [mode: :nif, cross_process: true]],
        else: [[mode: :sample]]

    tasks =
      for opts <- modes do
        Task.async(fn ->
          FlameOn.Client.profile(
            fn -> {GenServer.call(target, {:work, @n}), Workloads.fib(14)} end,
            opts
          )
        end)
      end

    for {{result, 377}, _profile} <- Task.await_many(tasks, 30_000), do: assert(result == {8, @n})
    # every :work call was seen by the tool
    assert tool_events(tool) == expected_events(length(modes))
    assert_ours_gone()
    assert_tool_intact(tool)
  end

  test "summary/2 and tprof: each in its own session (OTP 27+), refused beside the tool before",
       %{
         tool: tool,
         target: target
       } do
    if TraceBackend.sessions?() do
      # tprof counts the target's fib/1 calls in its own session meanwhile
      FlameOn.Client.Test.Tools.otp_lib!(:tools, "erlang-tools")
      {:ok, tprof} = apply(:tprof, :start, [%{type: :call_time, session: :other_tprof}])
      on_exit(fn -> if Process.alive?(tprof), do: GenServer.stop(tprof) end)
      apply(:tprof, :enable_trace, [tprof, target, %{set_on_spawn: false}])
      apply(:tprof, :set_pattern, [tprof, Workloads, :fib, 1])

      for type <- [:call_time, :call_memory] do
        {{result, events}, summary} =
          FlameOn.Client.summary(
            fn ->
              add_tool_patterns(tool)
              {GenServer.call(target, {:work, @n}), tool_events(tool)}
            end,
            type: type
          )

        assert result == {8, @n}
        assert events == expected_events()
        # the target is not ours: only the function's process is in the summary
        assert Map.keys(summary.by_process) == [summary.pid]

        {_, _} =
          FlameOn.Client.profile(fn -> GenServer.call(target, {:work, @n}) end,
            cross_process: true
          )

        assert tool_events(tool) == expected_events()
      end

      # tprof saw every fib/1 call of the target: 2 summaries, 2 profiles,
      # and the checks in between
      {:call_time, [{Workloads, :fib, 1, [{^target, calls, _us}]}]} =
        apply(:tprof, :collect, [tprof])

      assert calls == 25 * 4
      GenServer.stop(tprof)
    else
      error = assert_raise ArgumentError, fn -> FlameOn.Client.summary(fn -> :ok end) end
      assert error.message =~ "another tool is call tracing"
      add_tool_patterns(tool)
    end

    assert_only_tool_left(tool)
  end

  # --- the other tool --------------------------------------------------------

  defp start_tool(target) do
    legacy = collector()
    :erlang.trace_pattern(@loop, true, [:local])
    :erlang.trace(target, true, [:call, {:tracer, legacy}])

    session =
      if TraceBackend.sessions?() do
        own = collector()
        handle = %TraceBackend{session: apply(:trace, :session_create, [:other_tool, own, []])}
        TraceBackend.pattern(handle, @fib, true, [:local])
        TraceBackend.trace(handle, target, true, [:call])
        %{handle: handle, collector: own}
      end

    %{target: target, legacy: legacy, session: session}
  end

  defp stop_tool(%{target: target, legacy: legacy, session: session}) do
    for mfa <- [@loop, @busy], do: :erlang.trace_pattern(mfa, false, [:local])

    try do
      :erlang.trace(target, false, [:all])
    rescue
      ArgumentError -> :ok
    end

    if session, do: TraceBackend.close(session.handle)

    Enum.each(
      Enum.reject([legacy, session && session.collector], &is_nil/1),
      &Process.exit(&1, :kill)
    )
  end

  # Patterns the tool adds while ours run.
  defp add_tool_patterns(%{session: session}) do
    :erlang.trace_pattern(@busy, true, [:local])
    if session, do: TraceBackend.pattern(session.handle, @mixed, true, [:local])
  end

  defp assert_tool_intact(%{target: target, legacy: legacy, session: session} = tool, opts \\ []) do
    added? = Keyword.get(opts, :added, false)
    assert :erlang.trace_info(@loop, :traced) == {:traced, :local}
    assert :erlang.trace_info(@busy, :traced) == {:traced, if(added?, do: :local, else: false)}
    assert :erlang.trace_info(target, :flags) == {:flags, [:call]}
    assert :erlang.trace_info(target, :tracer) == {:tracer, legacy}

    if session do
      h = session.handle
      assert TraceBackend.info(h, @fib, :traced) == {:traced, :local}

      assert TraceBackend.info(h, @mixed, :traced) ==
               {:traced, if(added?, do: :local, else: false)}

      assert TraceBackend.flags(h, target) == [:call]
      assert TraceBackend.tracer(h, target) == {:ok, session.collector}
    end

    # ... and it still gets its events, all of them.
    assert GenServer.call(target, {:work, @n}) == {8, @n}
    assert tool_events(tool) == expected_events()
  end

  defp expected_events(times \\ 1) do
    legacy = Map.new(@expected_events.legacy, fn {mfa, n} -> {mfa, n * times} end)
    session = Map.new(@expected_events.session, fn {mfa, n} -> {mfa, n * times} end)
    if TraceBackend.sessions?(), do: %{legacy: legacy, session: session}, else: %{legacy: legacy}
  end

  # The call events the tool got since it was last asked, by session.
  defp tool_events(%{target: target, legacy: legacy, session: session}) do
    ref = :erlang.trace_delivered(target)
    assert_receive {:trace_delivered, ^target, ^ref}
    legacy_events = %{legacy: take_counts(legacy)}

    if session do
      ref = TraceBackend.delivered(session.handle, target)
      assert_receive {:trace_delivered, ^target, ^ref}
      Map.put(legacy_events, :session, take_counts(session.collector))
    else
      legacy_events
    end
  end

  defp collector do
    spawn(fn -> collect(%{}) end)
  end

  defp collect(counts) do
    receive do
      {:trace, _pid, :call, {m, f, args}} ->
        collect(Map.update(counts, {m, f, length(args)}, 1, &(&1 + 1)))

      {:take, from} ->
        send(from, {:counts, self(), counts})
        collect(%{})
    end
  end

  defp take_counts(collector) do
    send(collector, {:take, self()})
    assert_receive {:counts, ^collector, counts}
    counts
  end

  # After a test: ours gone, the tool's settings and events intact, with
  # the patterns it added meanwhile.
  defp assert_only_tool_left(tool) do
    assert_ours_gone()
    assert_tool_intact(tool, added: true)
  end

  # Nothing of ours is left; the tool's settings are checked apart.
  defp assert_ours_gone do
    wait_until(fn -> TraceBackend.our_sessions() == [] and Patterns.users() == 0 end)
    assert TraceBackend.our_sessions() == []
    assert Patterns.users() == 0
    assert :seq_trace.get_system_tracer() == false
    assert :erlang.trace_info(:send, :match_spec) == {:match_spec, true}
    assert :erlang.trace_info({:lists, :reverse, 1}, :traced) == {:traced, false}
    assert :erlang.trace_info(:on_load, :traced) == {:traced, false}
  end

  defp wait_until(fun, tries \\ 200) do
    cond do
      fun.() -> :ok
      tries == 0 -> :timeout
      true -> Process.sleep(10) && wait_until(fun, tries - 1)
    end
  end
end
