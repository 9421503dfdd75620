defmodule FlameOn.Client.NextCallTest.Work do
  @moduledoc false
  # The functions captured below. `busy/1` spins for `ms` of wall time in
  # a tail-recursive loop (so its own frame is gone from sampled stacks,
  # the hard case); `work/1` spins, then waits in a tail call; `outer/1`
  # is what calls it (a frame outside the captured call that must not
  # show).

  def outer(ms), do: {:outer, work(ms)}

  def busy(ms), do: spin(System.monotonic_time(:microsecond) + ms * 1000, 0)

  # Spins 10 ms, then waits: many processes making this call at once
  # leave the CPU to the sampler on a loaded 2-core machine.
  def work(ms) do
    spin(System.monotonic_time(:microsecond) + 10_000, 0)
    nap(ms)
  end

  def nap(ms) do
    receive do
    after
      ms -> :napped
    end
  end

  def spin(deadline, acc) do
    if System.monotonic_time(:microsecond) < deadline,
      do: spin(deadline, acc + step(acc)),
      else: acc
  end

  def step(n), do: rem(n * 7 + 1, 13)

  def via_server(server, ms), do: {:via, GenServer.call(server, {:spin, ms})}

  def via_task(ms), do: {:task, Task.await(Task.async(fn -> busy(ms) end))}

  def fail(ms) do
    busy(ms)
    raise ArgumentError, "failed on purpose"
  end

  # Blocks until told: a call that is captured and still running.
  def block(ref) do
    receive do
      {:release, ^ref} -> :released
    end
  end

  def never_called, do: :never

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  def other(ms), do: busy(ms)
end

defmodule FlameOn.Client.NextCallTest do
  # capture_next/2: the next call of one function by any process, profiled
  # from its entry to its return; exactly one call when many processes
  # make it at once; the node clean afterwards, also on timeout and when
  # the waiting process dies; the one-function pattern beside exact traces'
  # wildcard patterns, in both orders.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.NextCall
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Node.Sweep
  alias FlameOn.Client.Node.Gates
  alias FlameOn.Client.NextCallTest.Work
  alias FlameOn.Client.Test.Server

  doctest FlameOn.Client.NextCall

  @busy {Work, :busy, 1}
  @root "FlameOn.Client.NextCallTest.Work.busy/1"

  setup do
    ensure_app_started()
    assert_node_clean()
    on_exit(fn -> assert_captures_clean() end)
    :ok
  end

  # No capture waits, no meta pattern of ours is left on the functions
  # used here, and nothing else of a trace.
  defp assert_captures_clean do
    deadline = System.monotonic_time(:millisecond) + 2_000
    problems = wait_for_clean(deadline)
    assert problems == [], "capture leftovers: #{inspect(problems)}"
    assert_node_clean()
  end

  defp wait_for_clean(deadline) do
    problems =
      for(
        mfa <- Work.__info__(:functions) |> Enum.map(fn {f, a} -> {Work, f, a} end),
        meta = :erlang.trace_info(mfa, :meta),
        # [] once a function with a local pattern has no meta pattern
        meta not in [{:meta, false}, {:meta, []}],
        do: {:meta, mfa, meta}
      ) ++
        case Gates.waiting() do
          [] -> []
          waiting -> [{:waiting, waiting}]
        end ++
        case :persistent_term.get({Gates, :armed}, nil) do
          nil -> []
          mfas -> [{:remembered, mfas}]
        end

    cond do
      problems == [] -> []
      System.monotonic_time(:millisecond) > deadline -> problems
      true -> Process.sleep(10) && wait_for_clean(deadline)
    end
  end

  # Starts capture_next in a task and returns once its pattern is set.
  defp capture_async(mfa, opts) do
    task = Task.async(fn -> FlameOn.Client.capture_next(mfa, opts) end)
    wait_until(fn -> Enum.any?(Gates.waiting(), &match?({^mfa, _}, &1)) end)
    task
  end

  defp wait_until(fun, timeout \\ 5_000) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn -> fun.() || (Process.sleep(5) && false) end)
    |> Enum.find(fn ok -> ok or System.monotonic_time(:millisecond) > deadline end)

    assert fun.(), "condition not met within #{timeout} ms"
  end

  # Processes that each call `fun` once on :go, then report their flags
  # (a loser must never have been traced).
  defp callers(n, fun) do
    parent = self()

    for _ <- 1..n do
      spawn(fn ->
        receive do
          :go -> :ok
        end

        result = fun.()
        send(parent, {:called, self(), result, :erlang.trace_info(self(), :flags)})
      end)
    end
  end

  defp go(pids) do
    Enum.each(pids, &send(&1, :go))

    for pid <- pids do
      assert_receive {:called, ^pid, result, flags}, 30_000
      {pid, result, flags}
    end
  end

  defp stacks(profile), do: profile.stacks |> Map.fetch!(profile.pid) |> Enum.map(&elem(&1, 0))

  for mode <- [:sample, :nif] do
    test "mode #{mode}: of 8 processes calling at once, exactly one call is captured, and only it" do
      task = capture_async({Work, :work, 1}, mode: unquote(mode), timeout: 20_000)
      pids = callers(8, fn -> Work.outer(60) end)
      results = go(pids)
      assert {:ok, profile} = Task.await(task, 30_000)

      # one process, one of the callers, and none of the others was traced
      assert profile.pid in pids
      assert Map.keys(profile.stacks) == [profile.pid]
      assert profile.mode == unquote(mode)

      for {pid, {:outer, :napped}, flags} <- results,
          pid != profile.pid,
          do: assert(flags == {:flags, []}, "#{inspect(pid)} was traced: #{inspect(flags)}")

      # the call and nothing around it: every stack starts at the captured
      # function, its caller (outer/1) is nowhere, its own work is there
      stacks = stacks(profile)
      root = "FlameOn.Client.NextCallTest.Work.work/1"
      assert Enum.all?(stacks, &String.starts_with?(&1, root)), inspect(stacks)
      refute Enum.any?(stacks, &(&1 =~ "outer/1")), inspect(stacks)
      assert Enum.any?(stacks, &(&1 =~ ~r/Work\.(spin\/2|nap\/1)/)), inspect(stacks)

      # from entry to return: 10 ms of spinning and 60 of waiting, and the
      # stacks add up to it
      assert profile.duration_us >= 69_000
      assert profile.duration_us < 10_000_000
      total = profile.stacks |> Map.fetch!(profile.pid) |> Enum.map(&elem(&1, 1)) |> Enum.sum()
      assert_in_delta total, profile.duration_us, profile.duration_us * 0.1 + 1_000
      assert profile.stats.lifetime_exceeded == false
      if unquote(mode) == :sample, do: assert(profile.stats.samples > 0)

      # kept for the web UI
      assert {:ok, ^profile} = FlameOn.Client.TraceStore.get(profile.trace_id)
      assert_captures_clean()
    end
  end

  test "a busy call from a tail-recursive loop is rooted at the captured function" do
    for mode <- [:sample, :nif] do
      task = capture_async(@busy, mode: mode)
      [{pid, 0, _}] = go(callers(1, fn -> Work.busy(40) * 0 end))
      assert {:ok, profile} = Task.await(task, 30_000)
      assert profile.pid == pid
      stacks = stacks(profile)
      assert Enum.all?(stacks, &String.starts_with?(&1, @root)), inspect(stacks)
      assert Enum.any?(stacks, &(&1 =~ "Work.spin/2")), inspect(stacks)
      assert profile.duration_us >= 39_000
    end

    assert_captures_clean()
  end

  test "no call within the timeout: {:error, :timeout} and nothing left on the node" do
    for mode <- [:sample, :nif] do
      started = System.monotonic_time(:millisecond)

      assert {:error, :timeout} =
               FlameOn.Client.capture_next({Work, :never_called, 0}, mode: mode, timeout: 150)

      assert System.monotonic_time(:millisecond) - started >= 150
      assert Patterns.users() == 0
      assert_captures_clean()
    end
  end

  test "calls racing the timeout are either captured whole or not at all" do
    caller = spawn_link(fn -> call_forever() end)

    for _ <- 1..30 do
      case FlameOn.Client.capture_next({Work, :step, 1}, timeout: 1, mode: :sample) do
        {:error, :timeout} ->
          :ok

        {:ok, profile} ->
          assert profile.pid == caller
          assert Map.keys(profile.stacks) == [caller]

          assert Enum.all?(
                   stacks(profile),
                   &String.starts_with?(&1, "FlameOn.Client.NextCallTest.Work.step/1")
                 )
      end

      assert :erlang.trace_info({Work, :step, 1}, :meta) == {:meta, false}
    end

    Process.unlink(caller)
    Process.exit(caller, :kill)
    assert_captures_clean()
  end

  defp call_forever do
    Work.step(1)
    call_forever()
  end

  for mode <- [:sample, :nif] do
    test "mode #{mode}, cross_process: the callee's work is a linked span of the captured call" do
      {:ok, server} = Server.start()
      task = capture_async({Work, :via_server, 2}, mode: unquote(mode), cross_process: true)
      [{caller, {:via, :done}, _flags}] = go(callers(1, fn -> Work.via_server(server, 30) end))
      assert {:ok, profile} = Task.await(task, 30_000)

      assert profile.pid == caller
      graph = profile.graph
      assert [root | callees] = graph.spans
      assert root.pid == caller
      assert [callee] = Enum.filter(callees, &(&1.pid == server))
      assert callee.parent_span_id == root.span_id
      # a 30 ms spin, timed by the wall clock: its span lasts as long, but
      # its on-CPU part (self_us) shrinks when a loaded machine preempts it
      assert callee.ended_at - callee.started_at >= 25_000
      assert callee.self_us > 0
      assert root.attributed_wait_us > 0
      assert Map.has_key?(profile.stacks, server)
      # nothing of the capture's own work joined the trace
      assert graph.stats.orphan_requests == 0
      assert graph.stats.unmatched_replies == 0
      assert length(graph.spans) == 2

      assert Enum.all?(
               stacks(profile),
               &String.starts_with?(&1, "FlameOn.Client.NextCallTest.Work.via_server/2")
             )

      GenServer.stop(server)
      assert_captures_clean()
    end
  end

  # The same graph whichever entry point traced the call: profile/2 with
  # cross_process: true shows a Task the call starts as a span of it.
  for mode <- [:sample, :nif] do
    test "mode #{mode}, cross_process: a Task.async of the captured call is a span of it" do
      task = capture_async({Work, :via_task, 1}, mode: unquote(mode), cross_process: true)
      [{caller, {:task, _}, _flags}] = go(callers(1, fn -> Work.via_task(30) end))
      assert {:ok, profile} = Task.await(task, 30_000)

      graph = profile.graph
      assert [root | others] = graph.spans
      assert root.pid == caller
      assert [work] = others
      assert work.parent_span_id == root.span_id
      assert work.ended_at - work.started_at >= 25_000
      assert work.self_us > 0
      assert root.attributed_wait_us > 0
      assert Map.has_key?(profile.stacks, work.pid)
      # the capture's own process (told of the call with the trace's token)
      # is no span of it
      refute Enum.any?(graph.spans, &(&1.pid == task.pid))
      assert_captures_clean()
    end
  end

  test "a call that raises is captured up to its exception" do
    task = capture_async({Work, :fail, 1}, mode: :nif)

    [{caller, {:raised, %ArgumentError{}}, _}] =
      go(callers(1, fn -> catch_raise(fn -> Work.fail(20) end) end))

    assert {:ok, profile} = Task.await(task, 30_000)
    assert profile.pid == caller
    assert profile.duration_us >= 19_000
    stacks = stacks(profile)
    assert Enum.all?(stacks, &String.starts_with?(&1, "FlameOn.Client.NextCallTest.Work.fail/1"))
    assert Enum.any?(stacks, &(&1 =~ "Work.fail/1;FlameOn.Client.NextCallTest.Work.busy/1"))
    assert_captures_clean()
  end

  defp catch_raise(fun) do
    fun.()
  rescue
    error -> {:raised, error}
  end

  test "a recursive function is captured once, at its outermost call" do
    # every level a frame (by default fib/1's recursion is one frame)
    task = capture_async({Work, :fib, 1}, mode: :nif, collapse_recursion: false)
    [{caller, 6765, _}] = go(callers(1, fn -> Work.fib(20) end))
    assert {:ok, profile} = Task.await(task, 30_000)
    assert profile.pid == caller
    stacks = stacks(profile)
    assert "FlameOn.Client.NextCallTest.Work.fib/1" in stacks
    # recursion keeps its depth under the one root
    assert Enum.any?(stacks, &(length(String.split(&1, ";")) >= 15))
    assert Enum.all?(stacks, &String.starts_with?(&1, "FlameOn.Client.NextCallTest.Work.fib/1"))
    assert_captures_clean()
  end

  test "a call still running after max_duration_ms is profiled up to there" do
    ref = make_ref()
    task = capture_async({Work, :block, 1}, mode: :sample, max_duration_ms: 100)
    [pid] = callers(1, fn -> Work.block(ref) end)
    send(pid, :go)
    assert {:ok, profile} = Task.await(task, 30_000)
    assert profile.pid == pid
    assert profile.stats.lifetime_exceeded
    assert profile.duration_us >= 95_000
    # the call runs on, untraced
    assert :erlang.trace_info(pid, :flags) == {:flags, []}
    send(pid, {:release, ref})
    assert_receive {:called, ^pid, :released, {:flags, []}}
    assert_captures_clean()
  end

  test "the waiting process dies: its pattern is cleared" do
    owner = spawn(fn -> FlameOn.Client.capture_next(@busy, timeout: 60_000) end)
    wait_until(fn -> Gates.waiting() == [{@busy, owner}] end)
    assert Gates.ours?(@busy)
    assert FlameOn.Client.status().captures_waiting == [{@busy, owner}]
    Process.exit(owner, :kill)
    assert_captures_clean()
    # and the function is free for the next capture
    task = capture_async(@busy, timeout: 5_000)
    go(callers(1, fn -> Work.busy(5) end))
    assert {:ok, _} = Task.await(task, 30_000)
  end

  for mode <- [:sample, :nif] do
    test "mode #{mode}: the waiting process dies mid-call: the calling process is untraced" do
      ref = make_ref()
      owner = spawn(fn -> FlameOn.Client.capture_next({Work, :block, 1}, mode: unquote(mode)) end)
      wait_until(fn -> Gates.waiting() == [{{Work, :block, 1}, owner}] end)
      [pid] = callers(1, fn -> Work.block(ref) end)
      send(pid, :go)
      wait_until(fn -> :erlang.trace_info(pid, :flags) != {:flags, []} end)
      Process.exit(owner, :kill)
      wait_until(fn -> :erlang.trace_info(pid, :flags) == {:flags, []} end)
      send(pid, {:release, ref})
      assert_receive {:called, ^pid, :released, {:flags, []}}
      assert_captures_clean()
    end
  end

  describe "beside exact traces (their {:_, :_, :_} local patterns)" do
    test "an exact trace starts and ends while a capture waits: the capture's pattern stays" do
      task = capture_async(@busy, mode: :sample)
      # 2 ms of step/1 calls: one call alone may round to 0 µs
      spin = fn -> Work.spin(System.monotonic_time(:microsecond) + 2_000, 0) end
      {_, exact} = FlameOn.Client.profile(spin, mode: :nif)

      assert exact.stacks
             |> Map.values()
             |> List.flatten()
             |> Enum.any?(&(elem(&1, 0) =~ "step/1"))

      # the local patterns came and went; the meta pattern is still ours
      assert :erlang.trace_info(@busy, :traced) == {:traced, false}
      assert Gates.ours?(@busy)
      # (60 ms: a sampler on a loaded machine may start late, and must
      # still see the spin)
      go(callers(1, fn -> Work.busy(60) end))
      assert {:ok, profile} = Task.await(task, 30_000)
      assert Enum.any?(stacks(profile), &(&1 =~ "Work.spin/2"))
      assert_captures_clean()
    end

    for mode <- [:sample, :nif] do
      test "mode #{mode}: a capture arms, fires and ends while an exact trace runs: the trace's patterns stay" do
        parent = self()

        exact =
          spawn(fn ->
            result =
              FlameOn.Client.profile(
                fn ->
                  send(parent, {:tracing, self()})

                  receive do
                    :finish -> Work.other(5)
                  end
                end,
                mode: :nif
              )

            send(parent, {:exact, result})
          end)

        assert_receive {:tracing, ^exact}
        # (the exact trace's patterns: in the legacy session, or in its own
        # trace session on OTP 27+, where the capture's meta pattern stays
        # in the legacy one)
        assert patterns_on?(@busy)

        task = capture_async(@busy, mode: unquote(mode))
        go(callers(1, fn -> Work.busy(20) end))
        assert {:ok, profile} = Task.await(task, 30_000)
        assert Enum.all?(stacks(profile), &String.starts_with?(&1, @root))

        # the exact trace's local patterns are untouched, its process still traced
        assert patterns_on?(@busy)
        legacy_local? = not FlameOn.Client.Node.TraceBackend.sessions?()
        assert :erlang.trace_info(@busy, :meta) == {:meta, if(legacy_local?, do: [], else: false)}
        assert Patterns.users() == 1
        assert our_flags(exact) != []

        send(exact, :finish)
        assert_receive {:exact, {_, exact_profile}}

        assert exact_profile.stacks
               |> Map.fetch!(exact)
               |> Enum.any?(&(elem(&1, 0) =~ "Work.other/1"))

        assert_captures_clean()
      end
    end
  end

  test "one capture per function; another tool's meta pattern is refused, not replaced" do
    task = capture_async(@busy, timeout: 10_000)
    owner = task.pid
    assert {:error, {:already_waiting, ^owner}} = FlameOn.Client.capture_next(@busy, timeout: 100)
    go(callers(1, fn -> Work.busy(5) end))
    assert {:ok, _} = Task.await(task, 30_000)

    tracer = spawn(fn -> Process.sleep(:infinity) end)
    1 = :erlang.trace_pattern(@busy, true, [{:meta, tracer}])

    try do
      assert {:error, {:meta_traced, ^tracer}} = FlameOn.Client.capture_next(@busy, timeout: 100)
      assert :erlang.trace_info(@busy, :meta) == {:meta, tracer}
    after
      :erlang.trace_pattern(@busy, false, [:meta])
      Process.exit(tracer, :kill)
    end

    assert_captures_clean()
  end

  test "the pattern owner is killed while a capture waits: its restart sweeps the pattern" do
    task = capture_async(@busy, timeout: 1_000)
    assert Gates.ours?(@busy)
    old = Process.whereis(Gates)
    Process.exit(old, :kill)
    wait_until(fn -> Process.whereis(Gates) not in [nil, old] end)
    # swept by the new owner, although nobody told it of the capture
    wait_until(fn -> :erlang.trace_info(@busy, :meta) == {:meta, false} end)
    # the capture finds nobody calls (the pattern is gone) and ends clean
    assert {:error, :timeout} = Task.await(task, 10_000)
    assert_captures_clean()
  end

  test "a pattern whose owner is gone is swept by FlameOn.Client.Node.Sweep" do
    # what a killed pattern owner leaves: our meta pattern, remembered
    native = FlameOn.Client.Core.Native.new(%{})
    gate = FlameOn.Client.Core.Native.next_new(native, self(), [])
    ms = [{:_, [], [{:exception_trace}]}]
    1 = :erlang.trace_pattern(@busy, ms, [{:meta, FlameOn.Client.Core.Native, {:next, gate}}])
    :persistent_term.put({Gates, :armed}, [@busy])
    assert Gates.ours?(@busy)
    assert %{next_call_patterns: 1} = Sweep.run()
    assert :erlang.trace_info(@busy, :meta) == {:meta, false}
    assert_captures_clean()
  end

  test "bad input raises ArgumentError and leaves nothing" do
    for {mfa, opts, message} <- [
          {{NoSuchModule, :f, 0}, [], ~r/module NoSuchModule is not available/},
          {{Work, :nope, 1}, [], ~r/does not define/},
          {{Work, :busy, 256}, [], ~r/arity must be an integer from 0 to 255/},
          {{Work, :busy, 1}, [timeout: 0], ~r/:timeout/},
          {{Work, :busy, 1}, [timeout: 10_000_000_000], ~r/:timeout/},
          {{Work, :busy, 1}, [mode: :fast], ~r/:mode/},
          {:not_an_mfa, [], ~r/expected \{module, function, arity\}/}
        ] do
      assert_raise ArgumentError, message, fn -> FlameOn.Client.capture_next(mfa, opts) end
    end

    assert_captures_clean()
  end

  test "parse/1 reads functions as typed in Elixir and in Erlang" do
    assert NextCall.parse("Enum.map/2") == {:ok, {Enum, :map, 2}}
    assert NextCall.parse("  &Enum.map/2 ") == {:ok, {Enum, :map, 2}}
    assert NextCall.parse(":lists.seq/2") == {:ok, {:lists, :seq, 2}}
    assert NextCall.parse("lists:seq/2") == {:ok, {:lists, :seq, 2}}
    assert NextCall.parse("'Elixir.Enum':map/2") == {:ok, {Enum, :map, 2}}
    assert NextCall.parse("FlameOn.Client.NextCallTest.Work.busy/1") == {:ok, @busy}
    assert NextCall.parse("String.valid?/1") == {:ok, {String, :valid?, 1}}

    assert {:error, "no module named Nope.Missing is loaded or can be loaded"} =
             NextCall.parse("Nope.Missing.f/1")

    assert {:error, "Enum does not define nope/1"} = NextCall.parse("Enum.nope/1")
    assert {:error, "the arity must be" <> _} = NextCall.parse("Enum.map/999")
    assert {:error, "expected Module.fun/arity" <> _} = NextCall.parse("Enum.map")
    assert {:error, "give a function" <> _} = NextCall.parse("")
    assert {:error, "the function is longer" <> _} = NextCall.parse(String.duplicate("A", 400))
    # no atom is made for a module that does not exist
    name = "NoSuchModule#{System.unique_integer([:positive])}"
    assert {:error, _} = NextCall.parse("#{name}.f/0")
    assert_raise ArgumentError, fn -> String.to_existing_atom("Elixir." <> name) end
  end
end
