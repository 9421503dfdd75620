defmodule FlameOn.Client.ClusterTest do
  # Cross-node traces with real nodes: peers on 127.0.0.1 (long names, no
  # host name to resolve), each with this project's code paths. B and C run
  # the application; D has the code but not the application.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Graph.Span
  alias FlameOn.Client.Test.RemoteWorker
  alias FlameOn.Client.Test.Server

  @moduletag timeout: 120_000

  setup_all do
    {_, 0} = System.cmd("epmd", ["-daemon"])
    started_here = not Node.alive?()

    if started_here do
      {:ok, _} =
        Node.start(
          :"flame_on_cluster_#{System.unique_integer([:positive])}@127.0.0.1",
          :longnames
        )
    end

    args = peer_args()

    peers =
      for name <- [:b, :c, :d], into: %{} do
        {:ok, peer, node} =
          :peer.start(%{
            name: :"flame_on_#{name}_#{System.unique_integer([:positive])}",
            host: ~c"127.0.0.1",
            longnames: true,
            args: args
          })

        if name != :d,
          do: {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:flame_on_client])

        {name, %{peer: peer, node: node}}
      end

    on_exit(fn ->
      for {_, %{peer: peer}} <- peers, do: quietly(fn -> :peer.stop(peer) end)
      if started_here, do: Node.stop()
    end)

    %{peers: peers}
  end

  setup %{peers: peers} do
    ensure_app_started()
    assert_node_clean()
    for name <- [:b, :c], do: assert_peer_clean(peers[name].node)
    :ok
  end

  # A server on node, registered there under name.
  defp server(node, name) do
    {:ok, pid} = :erpc.call(node, Server, :start, [[]])
    true = :erpc.call(node, Process, :register, [pid, name])
    on_exit(fn -> quietly(fn -> :erpc.call(node, Process, :exit, [pid, :kill]) end) end)
    pid
  end

  # the project's code, this node's cookie; no partition checks by global
  # (a test stops a peer on purpose)
  defp peer_args do
    Enum.flat_map(:code.get_path(), &[~c"-pa", &1]) ++
      [~c"-setcookie", Atom.to_charlist(Node.get_cookie())] ++
      [~c"-kernel", ~c"prevent_overlapping_partitions", ~c"false"]
  end

  # the peer may be gone already
  defp quietly(fun) do
    fun.()
  catch
    _, _ -> :ok
  end

  defp assert_peer_clean(node) do
    problems = :erpc.call(node, FlameOn.Client.Test.ClusterPeer, :leftovers, [2_000])
    assert problems == [], "#{node} is not clean: #{inspect(problems)}"
  end

  defp profile(fun, opts \\ []),
    do: FlameOn.Client.profile(fun, [cross_process: true, mode: :nif] ++ opts)

  # every format writes the profile; each export has B's or the origin's
  # processes
  defp assert_exports(profile) do
    for format <- FlameOn.Client.Export.formats() do
      data =
        case format do
          :folded -> FlameOn.Client.Export.folded(profile)
          :speedscope -> FlameOn.Client.Export.speedscope(profile)
          :perfetto -> FlameOn.Client.Export.perfetto(profile)
          :svg -> FlameOn.Client.Export.svg(profile)
          :pprof -> FlameOn.Client.Export.pprof(profile)
        end

      assert IO.iodata_length(data) > 0, "#{format} is empty"
    end
  end

  defp perfetto_events(profile) do
    profile
    |> FlameOn.Client.Export.perfetto()
    |> FlameOn.Client.Test.ExportHelpers.json_decode!()
    |> Map.fetch!("traceEvents")
  end

  defp perfetto_group(profile, %Span{span_id: id}) do
    Enum.find_value(perfetto_events(profile), fn
      %{"cat" => "span", "args" => %{"span_id" => ^id}, "pid" => pid} -> pid
      _ -> nil
    end)
  end

  defp node_group(profile, node) do
    Enum.find_value(perfetto_events(profile), fn
      %{"name" => "process_name", "pid" => pid, "args" => %{"name" => name}} ->
        if String.ends_with?(name, " on #{node}"), do: pid

      _ ->
        nil
    end)
  end

  defp inspect_pid(pid), do: List.to_string(:erlang.pid_to_list(pid))

  defp duration(%Span{started_at: s, ended_at: e}), do: e - s

  # The waiter's wait is the work of `span`, within 10%: what is attributed
  # to it is its whole duration or, on a loaded machine (where the waiter
  # may have been runnable, not waiting, for part of it), 90% of what the
  # waiter waited, and at least half of the work.
  defp assert_explained(waiter, span) do
    work = duration(span)
    explained = waiter.attributed_wait_us

    assert explained <= 1.1 * work and
             (explained >= 0.9 * work or
                (explained >= 0.9 * waiter.wait_us and explained >= 0.5 * work)),
           "#{explained} µs of a #{waiter.wait_us} µs wait attributed to #{work} µs of work"
  end

  defp span_of(%Graph{spans: spans}, pid), do: Enum.find(spans, &(&1.pid == pid))

  # How late pid's part flagged it (µs after its span began). On a loaded
  # machine the part may run long after a process joined from another node;
  # what its stacks miss is counted, and checked here.
  defp flag_lag(graph, pid) do
    lag = Map.get(graph.stats.flag_lag_us, pid, 0)

    if lag >= 1_000 do
      assert graph.stats.late_flags >= 1 and graph.stats.late_flag_us >= lag
      assert graph.stats.nodes[node(pid)].late_flags >= 1
      IO.puts(:stderr, "note: #{inspect(pid)} was flagged #{lag} µs after its span began")
    end

    lag
  end

  # pid's stacks (a process of another node) spend at least 3/4 of the
  # time it worked in `frame` (work_us, default its whole span) there; of
  # what was left of it after its flags when it was flagged late.
  defp assert_remote_stacks(profile, graph, pid, frame, work_us \\ nil) do
    stacks = Map.get(profile.stacks, pid, [])
    work_us = work_us || duration(span_of(graph, pid))
    lag = flag_lag(graph, pid)
    seen = if lag < 1_000, do: work_us, else: max(work_us - lag, 0)
    spun = time_where(profile, pid, &String.contains?(&1, frame))

    assert spun >= 0.75 * seen,
           "#{inspect(pid)}'s stacks (flagged #{lag} µs late, #{spun} of #{seen} µs under #{frame}): " <>
             inspect(stacks, limit: 12)
  end

  test "A -> B: the root's wait is B's span on B, B's stacks are under its remote pid", %{
    peers: peers
  } do
    b = peers.b.node
    b_pid = server(b, :fo_cluster_b)

    {result, %Profile{graph: graph} = profile} =
      profile(fn -> GenServer.call({:fo_cluster_b, b}, {:spin, 40}) end)

    assert result == :done
    [root | _] = graph.spans
    assert root.kind == :root and root.node == node()

    b_span = span_of(graph, b_pid)
    assert %Span{kind: :request, node: ^b, parent_span_id: 0, opener_pid: opener} = b_span
    assert opener == self()
    assert b_span.span_id in root.children
    # the work took 40 ms on B (more when B's schedulers are busy)
    assert duration(b_span) >= 39_000

    # the root's wait is attributed to B's span, within 10% (what the root
    # waited beyond it is the network and the queues of a loaded machine)
    assert_explained(root, b_span)
    assert root.wait_us >= root.attributed_wait_us

    assert [edge] = Enum.filter(graph.edges, &(&1.waiter_span_id == 0))
    assert edge.waker_span_id == b_span.span_id
    assert edge.attributed_us == root.attributed_wait_us

    # no :remote span is left: B's part answered it; the root waited on
    # B's pid (not on the name it called)
    refute Enum.any?(graph.spans, &(&1.kind == :remote))
    assert root.waiting_on_pid == b_pid
    assert_exports(profile)

    # B's stacks, under B's pid: its spin, on a CPU
    assert_remote_stacks(profile, graph, b_pid, "FlameOn.Client.Test.Server.spin_until/1")
    assert graph.stats.nodes[b].flagged == 1

    assert %{^b => %{clock_uncertainty_us: u, bytes: bytes}} = graph.stats.nodes
    assert u >= 0 and u < 5_000 and bytes > 0
    assert graph.stats.joined_remote_calls == 1
    assert graph.stats.collect_us > 0 and graph.stats.merge_us > 0
    assert graph.stats.lost_parts == 0
    assert {peers.d.node, :not_running} in graph.stats.unreachable_nodes

    assert_node_clean()
    assert_peer_clean(b)
    assert_peer_clean(peers.c.node)
  end

  test "alloc: true: B's server's words are under its remote pid, at its building function", %{
    peers: peers
  } do
    b = peers.b.node
    b_pid = server(b, :fo_cluster_b)
    requests = 5
    length = 100_000

    {_, profile} =
      profile(
        fn ->
          for _ <- 1..requests,
              do: GenServer.call({:fo_cluster_b, b}, {:when_flagged, {:build, length}})
        end,
        alloc: true
      )

    words = Enum.sum(for {_stack, w} <- Map.get(profile.alloc, b_pid, []), do: w)

    building =
      Enum.sum(
        for {stack, w} <- Map.get(profile.alloc, b_pid, []),
            stack =~ "FlameOn.Client.Test.Server.build/2",
            do: w
      )

    IO.puts("alloc across nodes: B's server #{words} words, #{building} at build/2")
    # the first request may run before B's part flags the server
    expected = (requests - 1) * 2 * length
    assert building >= 0.8 * expected, "#{building} of #{words} words at build/2"
    assert profile.stats.alloc_words == Enum.sum(for {_, e} <- profile.alloc, {_, w} <- e, do: w)
    assert Profile.alloc_view(profile).stacks[b_pid] != nil
    assert_node_clean()
    assert_peer_clean(b)
  end

  test "A -> B -> C: each hop's span is a child of its caller's, waits explained hop by hop", %{
    peers: peers
  } do
    {b, c} = {peers.b.node, peers.c.node}
    b_pid = server(b, :fo_cluster_b)
    c_pid = server(c, :fo_cluster_c)

    # B and C start their work once their node's part has flagged them
    # (:when_flagged): however late that is on a loaded machine, B's wait
    # on C and C's spin are seen
    c_request = {:when_flagged, {:spin, 30}}

    {result, %Profile{graph: graph} = profile} =
      profile(fn ->
        GenServer.call(
          {:fo_cluster_b, b},
          {:when_flagged, {:forward, 20, {:fo_cluster_c, c}, c_request}}
        )
      end)

    assert result == {:forwarded, :done}
    [root | _] = graph.spans
    b_span = span_of(graph, b_pid)
    c_span = span_of(graph, c_pid)
    assert %Span{node: ^b, parent_span_id: 0} = b_span
    assert %Span{node: ^c, kind: :request, opener_pid: ^b_pid} = c_span
    assert c_span.parent_span_id == b_span.span_id
    assert c_span.span_id in b_span.children
    # parents before children
    assert b_span.span_id < c_span.span_id

    # B waited for C (30 ms), the root for B (50 ms): each wait is
    # attributed to the next hop's span, within 10%
    assert duration(c_span) >= 29_000
    assert_explained(b_span, c_span)
    assert_explained(root, b_span)
    # B's own 20 ms spin is not wait
    assert b_span.self_us + b_span.gc_us + b_span.runnable_us >= 19_000

    assert Enum.any?(
             graph.edges,
             &(&1.waiter_span_id == b_span.span_id and &1.waker_span_id == c_span.span_id)
           )

    # times on the origin's clock: C's span inside B's, B's inside the root
    slack =
      graph.stats.nodes[b].clock_uncertainty_us + graph.stats.nodes[c].clock_uncertainty_us +
        1_000

    assert c_span.started_at >= b_span.started_at - slack
    assert c_span.ended_at <= b_span.ended_at + slack
    assert b_span.started_at >= root.started_at - slack

    # B spun 20 ms, then waited for C
    assert_remote_stacks(profile, graph, b_pid, "FlameOn.Client.Test.Server.spin_until/1", 20_000)
    assert_remote_stacks(profile, graph, c_pid, "FlameOn.Client.Test.Server.spin_until/1")
    assert graph.stats.joined_remote_calls == 2

    # folded lines: one per stack, the remote ones too, each remote pid as
    # its node prints it, then @node, after its name (read on its node)
    folded = profile |> Profile.folded() |> IO.iodata_to_binary()
    [_, number, serial] = Regex.run(~r/^<\d+\.(\d+)\.(\d+)>$/, inspect_pid(c_pid))
    c_text = "<0.#{number}.#{serial}>@#{c}"
    assert Profile.pid_text(c_pid) == c_text
    assert profile.process_names[c_pid] == "fo_cluster_c"
    assert c_span.name == "fo_cluster_c"

    # C's spin is in its stacks
    assert folded
           |> String.split("\n", trim: true)
           |> Enum.any?(
             &(String.starts_with?(&1, "flame_on;fo_cluster_c_#{c_text};") and
                 &1 =~ "FlameOn.Client.Test.Server.spin_until/1")
           )

    # that is how C itself prints it
    assert :erpc.call(c, :erlang, :pid_to_list, [c_pid]) == ~c"<0.#{number}.#{serial}>"

    # Perfetto: one process group per node, the origin's first; each span
    # on its node's group; a flow from each caller's wait to its callee's
    # span, across groups
    events = perfetto_events(profile)

    groups =
      for %{"name" => "process_name", "pid" => pid, "args" => %{"name" => name}} <- events,
          into: %{},
          do: {name |> String.split(" on ") |> List.last() |> String.to_atom(), pid}

    assert %{^b => gb, ^c => gc} = groups
    assert groups[node()] == 1 and gb > 1 and gc > 1 and gb != gc

    spans = for %{"cat" => "span"} = e <- events, into: %{}, do: {e["args"]["span_id"], e}
    assert spans[b_span.span_id]["pid"] == gb and spans[c_span.span_id]["pid"] == gc
    assert spans[0]["pid"] == 1

    flows =
      for %{"cat" => "wait", "flow_out" => true, "bind_id" => id} = w <- events,
          %{"cat" => "span", "flow_in" => true, "bind_id" => ^id} = s <- events,
          do: {w["pid"], s["pid"]}

    assert {1, gb} in flows and {gb, gc} in flows

    assert_node_clean()
    assert_peer_clean(b)
    assert_peer_clean(c)
  end

  test "A -> B by plain messages: B's process works for the trace, the root's wait is its span",
       %{peers: peers} do
    b = peers.b.node
    worker = :erpc.call(b, RemoteWorker, :start, [])
    on_exit(fn -> quietly(fn -> send(worker, :stop) end) end)

    {result, %Profile{graph: graph} = profile} =
      profile(fn ->
        send(worker, {:job, self(), 40})
        receive do: ({:done, ^worker} -> :ok)
      end)

    assert result == :ok
    [root | _] = graph.spans

    # the worker joined on B: a work span opened by the root's message,
    # child of the root's span, ended by its answer
    w_span = span_of(graph, worker)
    assert %Span{kind: :work, node: ^b, parent_span_id: 0, status: :ok} = w_span
    assert w_span.opener_pid == self()
    assert w_span.span_id in root.children
    assert duration(w_span) >= 39_000
    refute Enum.any?(graph.spans, &(&1.kind == :remote))

    # the root's wait is attributed to it across the node boundary, within
    # 10%, through one edge
    assert_explained(root, w_span)
    assert [edge] = Enum.filter(graph.edges, &(&1.waiter_span_id == 0))
    assert edge.waker_span_id == w_span.span_id
    assert root.waiting_on_pid == worker

    assert graph.stats.joined_remote_work == 1 and graph.stats.joined_remote_calls == 0
    assert graph.stats.remote_sends == 1 and graph.stats.remote_joins == 1
    assert_remote_stacks(profile, graph, worker, "FlameOn.Client.Test.RemoteWorker.spin_until/1")
    assert_exports(profile)

    assert_node_clean()
    assert_peer_clean(b)
  end

  test "a plain message to a registered name on B: answered by its pid, still linked", %{
    peers: peers
  } do
    b = peers.b.node
    worker = :erpc.call(b, RemoteWorker, :start, [])
    true = :erpc.call(b, Process, :register, [worker, :fo_cluster_w])
    on_exit(fn -> quietly(fn -> send(worker, :stop) end) end)

    {:ok, %Profile{graph: graph} = profile} =
      profile(fn ->
        send({:fo_cluster_w, b}, {:job, self(), 30})
        receive do: ({:done, ^worker} -> :ok)
      end)

    [root | _] = graph.spans
    assert %Span{kind: :work, parent_span_id: 0} = w_span = span_of(graph, worker)
    assert_explained(root, w_span)

    assert Enum.any?(
             graph.edges,
             &(&1.waiter_span_id == 0 and &1.waker_span_id == w_span.span_id)
           )

    # the root sent to the name, and waited on the pid that answered
    assert root.waiting_on_pid == worker
    assert_remote_stacks(profile, graph, worker, "FlameOn.Client.Test.RemoteWorker.spin_until/1")
    assert_peer_clean(b)
  end

  test "a DOWN from a process of B the trace never reached: a wait nothing on B explains", %{
    peers: peers
  } do
    b = peers.b.node
    # started outside the trace: its work is not the trace's
    pid = :erpc.call(b, RemoteWorker, :start_ending, [30])

    {:ok, %Profile{graph: graph}} =
      profile(fn ->
        ref = Process.monitor(pid)
        receive do: ({:DOWN, ^ref, :process, ^pid, _} -> :ok)
      end)

    # the signal carries no token: B's part saw nothing of the trace, and
    # the root's wait is a process's, unattributed
    assert [%Span{kind: :root} = root] = graph.spans
    assert graph.stats.nodes[b].spans == 0
    assert root.attributed_wait_us == 0
    assert root.unattributed_by.process == root.wait_us
    assert graph.edges == []
    assert_peer_clean(b)
  end

  # The root's wait for work on B that a spawn there started: B's child is
  # a work span of the trace (child of the root's span), its stacks under
  # its remote pid, and the wait is attributed to it within 10%.
  defp assert_spawned_work(profile, b, ms) do
    graph = profile.graph
    [root | _] = graph.spans

    assert [child] =
             Enum.filter(
               graph.spans,
               &(&1.node == b and &1.kind == :work and &1.parent_span_id == 0)
             )

    assert is_pid(child.pid) and node(child.pid) == b
    assert child.opener_pid == self()
    assert duration(child) >= (ms - 1) * 1000
    refute Enum.any?(graph.spans, &(&1.kind == :remote))

    # the root's waits the child ended
    edges =
      for %{waiter_span_id: 0, waker_span_id: id} = edge <- graph.edges,
          id == child.span_id,
          do: edge

    # (the root's wait for it: the edge, beside what else the root waited
    # for, e.g. loading code)
    edge_us = edges |> Enum.map(& &1.attributed_us) |> Enum.sum()
    # what the child did after the root woke (its exit on a loaded node)
    # no wait of the root can explain
    woke_at = edges |> Enum.map(& &1.ended_at) |> Enum.max(fn -> child.ended_at end)
    # and what it did before the root began waiting (the root still ran:
    # 16 ms of it once, OTP 27 in a fresh root)
    waited_from = edges |> Enum.map(& &1.started_at) |> Enum.min(fn -> child.started_at end)

    explainable =
      duration(child) - max(child.ended_at - woke_at, 0) -
        max(waited_from - child.started_at, 0)

    assert_in_delta edge_us,
                    explainable,
                    0.1 * duration(child),
                    "root: #{inspect(Map.take(root, [:started_at, :ended_at, :self_us, :wait_us, :attributed_wait_us]))}, " <>
                      "child: #{child.started_at}..#{child.ended_at}, edges: #{inspect(graph.edges)}"

    assert root.attributed_wait_us >= edge_us
    assert graph.stats.joined_remote_work == 1 and graph.stats.remote_joins == 1

    # its spin is the first `ms` of its span: flagged late, the rest of
    # it (none, flagged as it ended: a CPU-bound process is flagged from
    # another when it stops running, seen 40 ms late in fresh roots)
    assert_remote_stacks(
      profile,
      graph,
      child.pid,
      "FlameOn.Client.Test.RemoteWorker.spin_until/1",
      ms * 1000
    )

    assert_exports(profile)
    child
  end

  test ":erpc.call to B: the spawned process's work is B's span, the root's wait is attributed to it",
       %{peers: peers} do
    b = peers.b.node
    # the code is loaded on B beforehand (loading it is work of the trace)
    :done = :erpc.call(b, RemoteWorker, :spin, [0])

    {result, profile} = profile(fn -> :erpc.call(b, RemoteWorker, :spin, [40]) end)

    assert result == :done
    child = assert_spawned_work(profile, b, 40)
    # the erpc process ends by exiting with the result ({Ref, :return, Result})
    assert {:exit, {_ref, :return, :done}} = child.status
    assert_node_clean()
    assert_peer_clean(b)
  end

  test "a root in mode :process: :erpc.call and a plain message to a name on B are linked as in the other modes",
       %{peers: peers} do
    b = peers.b.node
    :done = :erpc.call(b, RemoteWorker, :spin, [0])

    {result, profile} =
      FlameOn.Client.profile(fn -> :erpc.call(b, RemoteWorker, :spin, [40]) end,
        cross_process: true,
        mode: :process
      )

    assert result == :done
    assert profile.mode == :process
    assert_spawned_work(profile, b, 40)

    worker = :erpc.call(b, RemoteWorker, :start, [])
    name = :"fo_cluster_process_#{System.unique_integer([:positive])}"
    true = :erpc.call(b, Process, :register, [worker, name])
    on_exit(fn -> quietly(fn -> send(worker, :stop) end) end)

    {reply, %Profile{graph: graph}} =
      FlameOn.Client.profile(
        fn ->
          send({name, b}, {:job, self(), 40})
          receive do: ({:done, from} -> from)
        end,
        cross_process: true,
        mode: :process
      )

    assert reply == worker
    [root | _] = graph.spans
    w_span = span_of(graph, worker)
    assert %Span{node: ^b} = w_span
    assert_explained(root, w_span)
    assert_node_clean()
    assert_peer_clean(b)
  end

  test ":rpc.call to B is followed like :erpc", %{peers: peers} do
    b = peers.b.node
    :done = :rpc.call(b, RemoteWorker, :spin, [0])

    {result, profile} = profile(fn -> :rpc.call(b, RemoteWorker, :spin, [40]) end)

    assert result == :done
    assert_spawned_work(profile, b, 40)
    assert_node_clean()
    assert_peer_clean(b)
  end

  test "Node.spawn on B that messages back: the child's work explains the root's wait", %{
    peers: peers
  } do
    b = peers.b.node
    :done = :erpc.call(b, RemoteWorker, :spin, [0])
    Code.ensure_loaded!(RemoteWorker)

    {result, profile} =
      profile(fn ->
        Node.spawn(b, RemoteWorker.teller(self(), 40))
        receive do: (:done -> :ok)
      end)

    assert result == :ok
    child = assert_spawned_work(profile, b, 40)
    # its work ended with its answer (its exit follows)
    assert child.status == :ok
    assert_node_clean()
    assert_peer_clean(b)
  end

  test "servers on B found through :global and :pg are followed like any call", %{
    peers: peers
  } do
    b = peers.b.node
    b_pid = server(b, :fo_cluster_named_b)
    name = {:fo_cluster_global, System.unique_integer([:positive])}
    :yes = :erpc.call(b, :global, :register_name, [name, b_pid])
    on_exit(fn -> quietly(fn -> :erpc.call(b, :global, :unregister_name, [name]) end) end)

    scope = :"fo_cluster_pg_#{System.unique_integer([:positive])}"
    {:ok, here} = :pg.start(scope)
    {:ok, there} = :erpc.call(b, :pg, :start, [scope])

    on_exit(fn ->
      quietly(fn -> Process.exit(here, :kill) end)
      quietly(fn -> :erpc.call(b, Process, :exit, [there, :kill]) end)
    end)

    :ok = :erpc.call(b, :pg, :join, [scope, :workers, b_pid])
    # both names reach this node (:global's sync can take seconds on a
    # loaded machine: past 5 s, a sync of this node's :global is asked for)
    assert until(fn -> :global.whereis_name(name) == b_pid end, 500) or
             (:global.sync() == :ok and until(fn -> :global.whereis_name(name) == b_pid end, 500))

    assert until(fn -> :pg.get_members(scope, :workers) == [b_pid] end, 500)

    for call <- [
          fn -> GenServer.call({:global, name}, {:spin, 40}) end,
          fn ->
            [member] = :pg.get_members(scope, :workers)
            GenServer.call(member, {:spin, 40})
          end
        ] do
      {result, %Profile{graph: graph}} = profile(call)
      assert result == :done
      [root | _] = graph.spans
      b_span = span_of(graph, b_pid)
      assert %Span{kind: :request, node: ^b} = b_span
      assert b_span.span_id in root.children
      assert duration(b_span) >= 39_000
      assert_explained(root, b_span)
      refute Enum.any?(graph.spans, &(&1.kind == :remote))
      assert_node_clean()
      assert_peer_clean(b)
    end
  end

  test "mode :sample across nodes: B's server is sampled, no call pattern is set on either node",
       %{peers: peers} do
    b = peers.b.node
    b_pid = server(b, :fo_cluster_sampled_b)
    parent = self()
    depth_on_b = fn -> :erpc.call(b, FlameOn.Client.Test.ClusterPeer, :backtrace_depth, []) end
    depth_before = depth_on_b.()

    {result, %Profile{graph: graph} = profile} =
      FlameOn.Client.profile(
        fn ->
          # (long enough that a sampler started late on a loaded machine
          # still sees most of it)
          reply = GenServer.call({:fo_cluster_sampled_b, b}, {:spin, 100})
          # while the trace runs, on both nodes
          on_b = :erpc.call(b, FlameOn.Client.TestHelpers, :patterns_set?, [])
          send(parent, {:while, patterns_set?(), on_b, depth_on_b.()})
          reply
        end,
        cross_process: true,
        mode: :sample
      )

    assert result == :done
    assert_receive {:while, false, false, 64}
    assert depth_on_b.() == depth_before

    [root | _] = graph.spans
    b_span = span_of(graph, b_pid)
    assert %Span{kind: :request, node: ^b} = b_span
    assert b_span.span_id in root.children
    assert duration(b_span) >= 99_000
    assert_explained(root, b_span)

    # sampled there: its spin in its stacks, its series under its pid
    assert_remote_stacks(profile, graph, b_pid, "FlameOn.Client.Test.Server.spin_until/1")
    assert [%{status: _, reductions: _} | _] = profile.metrics[b_pid]
    # (a tick a millisecond while it spun; fewer when B's schedulers are busy)
    assert length(profile.metrics[b_pid]) >= 3
    assert graph.stats.nodes[b].sampling.sampled_processes >= 1
    assert_exports(profile)
    assert_node_clean()
    assert_peer_clean(b)
  end

  # The peers inherit ERL_FLAGS: in scripts/test-native's run they sample
  # natively too.
  @tag :native
  test "mode :native across nodes: B's server's CPU is in its stacks, no call pattern anywhere",
       %{peers: peers} do
    b = peers.b.node
    b_pid = server(b, :fo_cluster_native_b)
    parent = self()

    {result, %Profile{graph: graph} = profile} =
      FlameOn.Client.profile(
        fn ->
          reply = GenServer.call({:fo_cluster_native_b, b}, {:spin, 60})
          on_b = :erpc.call(b, FlameOn.Client.TestHelpers, :patterns_set?, [])
          send(parent, {:while, patterns_set?(), on_b})
          reply
        end,
        cross_process: true,
        mode: :native
      )

    assert result == :done
    assert profile.mode == :native
    assert_receive {:while, false, false}

    [root | _] = graph.spans
    b_span = span_of(graph, b_pid)
    assert %Span{kind: :request, node: ^b} = b_span
    assert b_span.span_id in root.children
    # B's CPU under B's handler (a CPU sample whose chain the kernel cut in
    # C code can lose the spin_until/1 frame between them: native mode's
    # fidelity, issue #23)
    assert_remote_stacks(profile, graph, b_pid, "FlameOn.Client.Test.Server.handle_call/3")
    assert_node_clean()
    assert_peer_clean(b)
    # B's sampler closed with its part
    assert until(
             fn -> :erpc.call(b, FlameOn.Client.Core.Native, :perf_stats, []).threads == 0 end,
             200
           )
  end

  test "a node that goes away mid-trace costs its part, not the trace", %{peers: peers} do
    b = peers.b.node
    # a node of its own, to lose
    args = peer_args()

    {:ok, peer, e} =
      :peer.start(%{
        name: :"flame_on_e_#{System.unique_integer([:positive])}",
        host: ~c"127.0.0.1",
        longnames: true,
        args: args
      })

    {:ok, _} = :erpc.call(e, Application, :ensure_all_started, [:flame_on_client])
    b_pid = server(b, :fo_cluster_b)
    _ = server(e, :fo_cluster_e)

    {result, %Profile{graph: graph} = profile} =
      profile(fn ->
        GenServer.call({:fo_cluster_b, b}, {:spin, 10})
        test = self()
        spawn(fn -> Process.sleep(50) && :peer.stop(peer) && send(test, :stopped) end)
        catch_exit(GenServer.call({:fo_cluster_e, e}, {:spin, 2_000}))
      end)

    assert {{:nodedown, ^e}, _} = result
    assert graph.stats.lost_parts == 1
    assert [{^e, _reason}] = graph.stats.lost_nodes
    # B's part made it
    assert %Span{node: ^b} = span_of(graph, b_pid)
    # the call to E: the caller's view of it is left (and so are the
    # messages :peer.stop sent E's processes: the only :remote spans left
    # are E's, whose part is lost)
    assert %Span{kind: :remote, node: ^e} =
             remote = Enum.find(graph.spans, &(&1.pid == {:fo_cluster_e, e}))

    assert graph.spans |> Enum.filter(&(&1.kind == :remote)) |> Enum.all?(&(&1.node == e))

    # every format takes the lost node's :remote span: Perfetto draws it in
    # E's process group
    assert_exports(profile)
    assert perfetto_group(profile, remote) == node_group(profile, e)

    assert_node_clean()
    assert_peer_clean(b)
  end

  test "the origin dying mid-trace: every node cleans up by itself", %{peers: peers} do
    b = peers.b.node
    _ = server(b, :fo_cluster_b)
    test = self()

    root =
      spawn(fn ->
        profile(fn ->
          send(test, :calling)
          GenServer.call({:fo_cluster_b, b}, {:spin, 300})
        end)
      end)

    assert_receive :calling, 5_000
    # B's part is running
    assert :erpc.call(b, FlameOn.Client.Test.ClusterPeer, :parts, []) == 1
    Process.sleep(50)
    Process.exit(root, :kill)

    assert_node_clean()
    assert_peer_clean(b)
    assert :erpc.call(b, FlameOn.Client.Test.ClusterPeer, :parts, []) == 0
  end

  test "a node without the application is listed, and the trace goes on", %{peers: peers} do
    d = peers.d.node
    b = peers.b.node
    b_pid = server(b, :fo_cluster_b)

    {_, %Profile{graph: graph}} =
      profile(fn -> GenServer.call({:fo_cluster_b, b}, {:spin, 5}) end)

    assert {d, :not_running} in graph.stats.unreachable_nodes
    refute Map.has_key?(graph.stats.nodes, d)
    assert %Span{node: ^b} = span_of(graph, b_pid)
    # D was never touched
    assert :erpc.call(d, :seq_trace, :get_system_tracer, []) == false
  end

  test "cluster: false arms no node: a call to B is a :remote span", %{peers: peers} do
    b = peers.b.node
    _ = server(b, :fo_cluster_b)

    {_, %Profile{graph: graph} = profile} =
      profile(fn -> GenServer.call({:fo_cluster_b, b}, {:spin, 20}) end, cluster: false)

    assert_exports(profile)

    [root | _] = graph.spans
    assert [%Span{kind: :remote, node: ^b, parent_span_id: 0} = remote] = tl(graph.spans)
    assert remote.pid == {:fo_cluster_b, b}
    # the wait for B is still the call's: the :remote span explains it
    assert_explained(root, remote)
    assert duration(remote) >= 20_000
    assert graph.stats.nodes == %{}
  end
end
