defmodule FlameOn.Client.GraphTest do
  # Tracing is node-global (patterns, flags, the seq_trace system tracer).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Graph.Span
  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.Test.Workloads

  # Durations compared with this relative tolerance (the machine is shared).
  @tolerance 0.10

  setup do
    assert_node_clean()
    on_exit(fn -> assert_node_clean() end)
    :ok
  end

  # Every graph trace must leave its caller without a seq_trace token.
  defp graph_profile(fun, opts \\ []) do
    result = Client.profile(fun, [cross_process: true] ++ opts)
    assert :seq_trace.get_token() == []
    result
  end

  defp span_of(%Graph{spans: spans}, pid), do: Enum.find(spans, &(&1.pid == pid))
  defp duration(%Span{started_at: a, ended_at: b}), do: b - a

  # The caller's view of a call: its result, and the monotonic µs before
  # and after it (the spans' clock).
  defp timed(fun) do
    t0 = System.monotonic_time(:microsecond)
    result = fun.()
    {result, {t0, System.monotonic_time(:microsecond)}}
  end

  # A busy spin of `ms` lasts at least that long in wall time. How much
  # longer is the machine's business (a loaded one deschedules the spinning
  # process), so its upper bound is not a time but its caller's wait: the
  # callee's span lies inside it (assert_inside/3). (Relations the profiler
  # measures from the same events, such as an attributed wait against the
  # callee's span, use assert_close/3.)
  defp assert_spun(actual_us, ms, label) do
    assert actual_us >= 0.95 * ms * 1000,
           "#{label}: #{actual_us} µs for a spin of #{ms} ms (expected #{ms} ms or more)"
  end

  # `span` lies inside `outer`: a span of its caller, or `{t0, t1}` from
  # timed/1 around the call (a request's span starts when the callee takes
  # it and ends at the reply: after the caller sent it, before it got the
  # answer), up to a microsecond of rounding.
  defp assert_inside(span, %Span{started_at: t0, ended_at: t1}, label),
    do: assert_inside(span, {t0, t1}, label)

  defp assert_inside(%Span{started_at: a, ended_at: b}, {t0, t1}, label) do
    assert a >= t0 - 1 and b <= t1 + 1,
           "#{label}: the span #{a}..#{b} is not inside #{t0}..#{t1} (its caller's wait)"
  end

  defp assert_close(actual, expected, label) do
    assert abs(actual - expected) <= @tolerance * expected,
           "#{label}: #{actual} µs, expected #{expected} µs ±#{trunc(@tolerance * 100)}%"
  end

  test "a single-process trace has no graph and keeps SLEEP" do
    {:ok, server} = Server.start()
    {_, profile} = Client.profile(fn -> GenServer.call(server, {:sleep, 20}) end)
    assert profile.graph == nil
    assert time_where(profile, self(), &String.ends_with?(&1, "SLEEP")) >= 15_000
    refute Map.has_key?(profile.stacks, server)
  end

  test "the caller's wait is attributed to the callee that did the work" do
    {:ok, server} = Server.start()

    {{result, call}, profile} =
      graph_profile(fn -> timed(fn -> GenServer.call(server, {:spin, 30}) end) end)

    assert result == :done

    %Graph{spans: spans} = graph = profile.graph
    assert length(spans) == 2
    root = span_of(graph, self())
    callee = span_of(graph, server)

    assert root.parent_span_id == nil
    assert root.children == [callee.span_id]
    assert callee.parent_span_id == root.span_id
    assert root.waiting_on_pid == server
    assert callee.status == :ok and root.status == :ok

    assert_spun(duration(callee), 30, "callee span")
    assert_inside(callee, call, "callee span")
    assert_close(root.attributed_wait_us, duration(callee), "attributed wait")
    assert root.wait_us == root.attributed_wait_us + root.unattributed_wait_us
    assert root.unattributed_wait_us < 0.1 * root.wait_us
    # its own time (running, or preempted on a loaded machine): no wait
    assert callee.self_us + callee.gc_us + callee.runnable_us >= 0.9 * duration(callee)

    # The callee's own stacks join the profile under its pid, linked by the
    # span, never continued from the caller's stack.
    assert Enum.any?(profile.stacks[server], fn {stack, _} ->
             stack =~ "FlameOn.Client.Test.Server.handle_call/3"
           end)

    refute Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "handle_call" end)
    assert_close(Client.Profile.total_us(profile, server), duration(callee), "callee stacks")

    # The explained wait is not a SLEEP (nor anything else) in the caller's
    # stacks; what is left of the wait is WAITING.
    refute Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "SLEEP" end)
    waiting = time_where(profile, self(), &String.ends_with?(&1, "WAITING"))
    assert waiting <= root.unattributed_wait_us + 100

    assert Client.Profile.total_us(profile, self()) <
             profile.duration_us - 0.9 * root.attributed_wait_us
  end

  test "sleep: :raw keeps the caller's wait as SLEEP" do
    {:ok, server} = Server.start()

    {_, profile} = graph_profile(fn -> GenServer.call(server, {:spin, 30}) end, sleep: :raw)

    root = span_of(profile.graph, self())
    slept = time_where(profile, self(), &String.ends_with?(&1, "gen:do_call/4;SLEEP"))
    assert_close(slept, root.wait_us, "raw SLEEP under the call")
    refute Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "WAITING" end)

    assert_close(
      Client.Profile.total_us(profile, self()),
      profile.duration_us,
      "raw stacks total"
    )
  end

  test "off-CPU time nothing explains is WAITING in a cross-process trace" do
    {slept_us, profile} =
      graph_profile(fn ->
        t0 = System.monotonic_time(:microsecond)
        Process.sleep(30)
        System.monotonic_time(:microsecond) - t0
      end)

    waiting = time_where(profile, self(), &String.ends_with?(&1, "Process.sleep/1;WAITING"))
    # against the sleep's own wall time (the VM may wake it late when loaded)
    assert slept_us >= 30_000
    assert_close(waiting, slept_us, "Process.sleep as WAITING")
    refute Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "SLEEP" end)
  end

  test "mode: :process works too: same spans, the callee's stacks, the root's own via the session" do
    {:ok, c} = Server.start()
    {:ok, b} = Server.start()

    {result, profile} =
      graph_profile(fn -> GenServer.call(b, {:forward, 10, c, {:spin, 20}}) end, mode: :process)

    assert result == {:forwarded, :done}
    assert profile.mode == :process
    graph = profile.graph
    [root, span_b, span_c] = Enum.map([self(), b, c], &span_of(graph, &1))
    assert span_b.parent_span_id == root.span_id
    assert span_c.parent_span_id == span_b.span_id
    assert_spun(duration(span_c), 20, "C")
    assert_inside(span_c, span_b, "C")
    assert_inside(span_b, root, "B")
    assert_close(span_b.attributed_wait_us, duration(span_c), "B's wait on C")
    assert_close(root.attributed_wait_us, duration(span_b), "A's wait on B")
    assert root.unattributed_wait_us < 0.1 * root.wait_us

    for pid <- [b, c] do
      assert Enum.any?(profile.stacks[pid], fn {stack, _} -> stack =~ "Server.handle_call/3" end)
    end

    # The root's stacks come from its trace messages, on the same clock as
    # the rest: they add up to the traced time. (In this mode its call wait
    # stays a WAITING leaf; the spans carry the attributed split.)
    assert_close(Client.Profile.total_us(profile, self()), profile.duration_us, "root stacks")
    assert time_where(profile, self(), &String.ends_with?(&1, "gen:do_call/4;WAITING")) > 0
    assert profile.stats.lifetime_exceeded == false
  end

  test "mode: :process: the traced process killed mid-trace leaves the node clean" do
    {:ok, server} = Server.start()
    parent = self()

    pid =
      spawn(fn ->
        graph_profile(
          fn ->
            send(parent, {:tracing, self()})
            GenServer.call(server, {:spin, 5_000}, 10_000)
          end,
          mode: :process
        )
      end)

    assert_receive {:tracing, ^pid}, 5_000
    Process.sleep(50)
    Process.exit(pid, :kill)
    assert_node_clean(6_000)
  end

  test "nested hops A -> B -> C give a chain of spans" do
    {:ok, c} = Server.start()
    {:ok, b} = Server.start()

    {{result, call}, profile} =
      graph_profile(fn ->
        timed(fn -> GenServer.call(b, {:forward, 15, c, {:spin, 25}}) end)
      end)

    assert result == {:forwarded, :done}
    graph = profile.graph
    [root, span_b, span_c] = Enum.map([self(), b, c], &span_of(graph, &1))

    assert span_b.parent_span_id == root.span_id
    assert span_c.parent_span_id == span_b.span_id
    assert root.children == [span_b.span_id]
    assert span_b.children == [span_c.span_id]

    assert_spun(duration(span_c), 25, "C")
    assert_inside(span_c, span_b, "C")
    assert_inside(span_b, call, "B")
    assert_close(span_b.attributed_wait_us, duration(span_c), "B's wait on C")
    # B's own work: its spin, and not C's (its wait on C, checked above,
    # leaves at most duration(B) - 0.9 * duration(C) for it)
    assert_spun(span_b.self_us + span_b.gc_us + span_b.runnable_us, 15, "B's own work")
    assert_close(root.attributed_wait_us, duration(span_b), "A's wait on B")
    assert Enum.all?([b, c], &Map.has_key?(profile.stacks, &1))
  end

  test "a reply that comes back without a token does not end the trace: the next call is followed" do
    {:ok, forgetful} = Server.start()
    {:ok, server} = Server.start()

    for mode <- [:nif, :process] do
      {result, profile} =
        graph_profile(
          fn ->
            :dropped = GenServer.call(forgetful, :drop_token)
            token_after_reply = :seq_trace.get_token()
            {GenServer.call(server, {:spin, 5}), token_after_reply}
          end,
          mode: mode
        )

      # The reply cleared the caller's token; the next request got it back.
      assert {:done, []} = result
      assert Enum.any?(profile.graph.spans, &(&1.pid == forgetful)), "#{mode}"

      assert Enum.any?(profile.graph.spans, &(&1.pid == server)),
             "#{mode}: the next call was not followed"

      assert Map.has_key?(profile.stacks, server)
    end
  end

  test "wait nothing explains stays unattributed" do
    {:ok, server} = Server.start()

    # max_spans: 1 leaves room for the root only: the callee is not followed.
    {_, profile} = graph_profile(fn -> GenServer.call(server, {:sleep, 20}) end, max_spans: 1)

    [root] = profile.graph.spans
    assert root.attributed_wait_us == 0
    assert root.unattributed_wait_us >= 18_000
    # Who it waited on is still known (the request's receiver).
    assert root.waiting_on_pid == server
    assert profile.graph.stats.dropped_spans == 1
    refute Map.has_key?(profile.stacks, server)

    # Unexplained, it stays visible in the caller's stacks as WAITING.
    waiting = time_where(profile, self(), &String.ends_with?(&1, "gen:do_call/4;WAITING"))
    assert_close(waiting, root.unattributed_wait_us, "WAITING under the call")
  end

  @tag :capture_log
  test "a callee that crashes ends its span with {:exit, reason} and the trace finishes" do
    {:ok, server} = Server.start()

    {caught, profile} =
      graph_profile(fn ->
        try do
          GenServer.call(server, {:crash, 10})
        catch
          :exit, reason -> {:caught, reason}
        end
      end)

    assert {:caught, {{%RuntimeError{message: "crash on purpose"}, _}, _}} = caught
    callee = span_of(profile.graph, server)
    assert {:exit, {%RuntimeError{message: "crash on purpose"}, _stack}} = callee.status
    assert span_of(profile.graph, self()).status == :ok
  end

  test "concurrent graph traces through one server never mix spans" do
    {:ok, server} = Server.start()
    parent = self()

    tasks =
      for ms <- [20, 30] do
        Task.async(fn ->
          {calls, profile} =
            graph_profile(fn ->
              for _ <- 1..3, do: timed(fn -> GenServer.call(server, {:spin, ms}) end)
            end)

          send(parent, {:done, self()})
          {self(), ms, calls, profile}
        end)
      end

    for {pid, ms, calls, profile} <- Task.await_many(tasks, 10_000) do
      root = span_of(profile.graph, pid)
      callees = Enum.filter(profile.graph.spans, &(&1.pid == server))
      assert length(callees) == 3, "trace of #{ms} ms calls saw #{length(callees)} callee spans"
      assert Enum.all?(callees, &(&1.parent_span_id == root.span_id))
      assert length(profile.graph.spans) == 4

      # each request's span inside the call it answered, in order
      assert Enum.map(calls, &elem(&1, 0)) == [:done, :done, :done]

      for {span, {:done, call}} <- Enum.zip(Enum.sort_by(callees, & &1.started_at), calls) do
        assert_spun(
          span.self_us + span.gc_us + span.runnable_us,
          ms,
          "callee of the #{ms} ms trace"
        )

        assert_inside(span, call, "callee of the #{ms} ms trace")
      end

      # Each trace has the shared server's own stacks for its requests.
      assert Enum.any?(Map.get(profile.stacks, server, []), fn {stack, _} ->
               stack =~ "Server.handle_call/3"
             end),
             "the #{ms} ms trace has no stacks of the shared server"

      # Its own three requests' stacks, never the other trace's.
      server_us = Client.Profile.total_us(profile, server)
      spans_us = callees |> Enum.map(&duration/1) |> Enum.sum()

      label =
        "shared server's stacks in the #{ms} ms trace: #{server_us} µs, spans #{spans_us} µs"

      assert server_us <= (1 + @tolerance) * spans_us, label
      assert server_us >= (1 - @tolerance) * spans_us, label
    end
  end

  # A trace that ends turns its followers' flags off. Another trace's
  # message may already wait in such a follower (the send pattern found
  # its flags on, so it set nothing): the follower keeps its flags for it,
  # and its stacks for that request are whole.
  test "a trace ending does not take the flags from a shared server another trace's request waits in" do
    {:ok, server} = Server.start()
    # no message from the first trace's root to this process: it would
    # follow that trace, and so would the second trace's root it spawns
    called = :atomics.new(1, [])

    first =
      Task.async(fn ->
        graph_profile(fn ->
          GenServer.call(server, {:spin, 5})
          :atomics.put(called, 1, 1)
          receive do: (:finish -> :ok)
        end)
      end)

    wait_until(fn -> :atomics.get(called, 1) == 1 end)
    # the server takes no request now: the second trace's waits in its
    # queue as the first trace ends
    :ok = :sys.suspend(server)

    second = Task.async(fn -> graph_profile(fn -> GenServer.call(server, {:spin, 30}) end) end)

    wait_until(fn -> queued(server) == 1 end)
    send(first.pid, :finish)
    Task.await(first, 10_000)
    # the first trace's owner turns its followers off in a process of its
    # own, a moment after it returned
    Process.sleep(200)
    :ok = :sys.resume(server)
    {:done, profile} = Task.await(second, 10_000)

    [callee] = Enum.filter(profile.graph.spans, &(&1.pid == server))

    spun =
      for {stack, us} <- profile.stacks[server],
          stack =~ "spin_until",
          reduce: 0,
          do: (a -> a + us)

    assert_spun(spun, 30, "the second trace's request in the shared server")
    assert Client.Profile.total_us(profile, server) <= (1 + @tolerance) * duration(callee)
  end

  defp queued(pid), do: elem(Process.info(pid, :message_queue_len), 1)

  defp wait_until(check, tries \\ 2_500) do
    cond do
      check.() -> :ok
      tries == 0 -> flunk("the condition never held")
      true -> Process.sleep(2) && wait_until(check, tries - 1)
    end
  end

  test "max_duration_ms ends capture early, says so, and the function still completes" do
    {:ok, server} = Server.start()

    # Calls of 20 ms until the capture has ended (the VM took its tracer
    # off this process: its flags are gone), then one more: the end is
    # what the work waits for, not a time, however late a loaded machine
    # ends it.
    call_until_untraced = fn again, results ->
      results = [GenServer.call(server, {:spin, 20}) | results]

      if our_flags(self()) == [] or length(results) == 500,
        do: Enum.reverse([GenServer.call(server, {:spin, 20}) | results]),
        else: again.(again, results)
    end

    {{results, returned_at}, profile} =
      graph_profile(
        fn ->
          results = call_until_untraced.(call_until_untraced, [])
          {results, System.monotonic_time(:microsecond)}
        end,
        max_duration_ms: 60
      )

    assert Enum.uniq(results) == [:done] and length(results) < 500
    assert profile.stats.lifetime_exceeded == true
    root = span_of(profile.graph, self())
    # not before its 60 ms (the root span starts a moment after the clock
    # does), and while the function still ran
    assert duration(root) >= 55_000
    assert root.ended_at < returned_at
    # calls are followed until then, and none after: the last one (made
    # once the capture was over) is not
    callees = Enum.filter(profile.graph.spans, &(&1.pid == server))
    assert length(callees) in 1..(length(results) - 1)
    assert Enum.all?(callees, &(&1.started_at < root.ended_at))

    {_, quick} = graph_profile(fn -> GenServer.call(server, {:spin, 1}) end)
    assert quick.stats.lifetime_exceeded == false
  end

  test "a traced root that serves another trace's request goes back to its own trace" do
    parent = self()

    a =
      spawn(fn ->
        {_, profile} =
          graph_profile(
            fn ->
              send(parent, {:ready, self()})

              # serve one GenServer request by hand, then work on
              receive do
                {:"$gen_call", from, :hello} -> GenServer.reply(from, :hi)
              end

              Workloads.fib(16)
            end,
            collapse_recursion: false
          )

        send(parent, {:a_done, profile})
      end)

    assert_receive {:ready, ^a}
    # B's trace stays open while a works on, so a's later events must not
    # be routed to B.
    {reply, profile_b} =
      graph_profile(fn ->
        reply = GenServer.call(a, :hello)
        assert_receive {:a_done, profile_a}, 10_000
        send(self(), {:a_done, profile_a})
        reply
      end)

    assert reply == :hi
    assert_receive {:a_done, profile_a}

    # B saw a as its callee; a's own trace kept its work after serving.
    assert Enum.any?(profile_b.graph.spans, &(&1.pid == a))
    assert max_frame_count(profile_a, a, "FlameOn.Client.Test.Workloads.fib/1") >= 10
  end

  test "another tool owning the seq_trace system tracer is refused and kept" do
    other = spawn(fn -> receive do: (:stop -> :ok) end)
    :seq_trace.set_system_tracer(other)

    try do
      assert_raise ArgumentError, ~r/system tracer/, fn ->
        graph_profile(fn -> :never_runs end)
      end

      assert :seq_trace.get_system_tracer() == other
    after
      :seq_trace.set_system_tracer(false)
      send(other, :stop)
    end
  end

  test "the traced process killed mid-trace leaves the node clean" do
    {:ok, server} = Server.start()
    parent = self()

    pid =
      spawn(fn ->
        graph_profile(fn ->
          send(parent, {:tracing, self()})
          GenServer.call(server, {:spin, 5_000}, 10_000)
        end)
      end)

    assert_receive {:tracing, ^pid}, 5_000
    Process.sleep(50)
    Process.exit(pid, :kill)
    assert_node_clean(6_000)
  end

  test "after the trace, a callee working under its stale token changes nothing" do
    {:ok, c} = Server.start()
    {:ok, b} = Server.start()
    {_, profile} = graph_profile(fn -> GenServer.call(b, {:spin, 1}) end)
    spans = length(profile.graph.spans)

    # b still holds the trace's token until its next tokenless receive.
    assert {:forwarded, :done} = GenServer.call(b, {:forward, 1, c, {:spin, 1}})
    assert length(profile.graph.spans) == spans
    assert_node_clean()
  end

  test "cross_process is validated and comes from app config" do
    assert_raise ArgumentError, ~r/cross_process/, fn ->
      Client.profile(fn -> :ok end, cross_process: :yes)
    end

    assert_raise ArgumentError, ~r/max_duration_ms/, fn ->
      Client.profile(fn -> :ok end, cross_process: true, max_duration_ms: 0)
    end

    assert_raise ArgumentError, ~r/:sleep/, fn ->
      Client.profile(fn -> :ok end, cross_process: true, sleep: :hidden)
    end

    Application.put_env(:flame_on_client, :cross_process, true)

    try do
      {_, profile} = Client.profile(fn -> :ok end)
      assert %Graph{spans: [%Span{pid: pid}]} = profile.graph
      assert pid == self()
    after
      Application.delete_env(:flame_on_client, :cross_process)
    end
  end
end
