defmodule FlameOn.Client.ExportPerfettoEdgesTest do
  # The wait edges of a span graph in the Perfetto export: a wait slice on
  # the waiter's track for each edge, a flow from it to the waker's span,
  # and a flow from a work span's parent to it. The layout of spans and of a
  # request's wait on its caller is in export_perfetto_test.exs.
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers

  alias FlameOn.Client.Graph.Edge
  alias FlameOn.Client.Export
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Graph.Span

  @t 1_000_000

  # root A (0..1000) calls server B (request, 100..300), then awaits a task
  # T (work, 350..800) and sleeps; B, done with A's call, goes on with its
  # socket (continuation, 300..950) and A's last wait is on it.
  defp profile do
    a = :c.pid(0, 9101, 0)
    b = :c.pid(0, 9102, 0)
    t = :c.pid(0, 9103, 0)

    spans = [
      span(0, nil, a, 0, 1000, :root, children: [1, 2]),
      span(1, 0, b, 100, 300, :request, children: [3]),
      span(2, 0, t, 350, 800, :work),
      span(3, 1, b, 300, 950, :continuation)
    ]

    edges = [
      edge(0, 1, 100, 300, 200),
      edge(0, 2, 360, 800, 440, 3),
      edge(0, 3, 810, 950, 140)
    ]

    %Profile{
      trace_id: 9,
      name: "edges",
      mode: :nif,
      pid: a,
      started_at: @t,
      duration_us: 1000,
      stacks: %{a => [{"App.run/0", 100}], b => [{"B.loop/0", 50}], t => [{"T.work/0", 400}]},
      graph: %Graph{trace_id: 9, spans: spans, edges: edges}
    }
  end

  defp span(id, parent, pid, from, to, kind, fields \\ []) do
    struct!(
      %Span{trace_id: 9, span_id: id, parent_span_id: parent, pid: pid},
      [kind: kind, started_at: @t + from, ended_at: @t + to, self_us: to - from] ++ fields
    )
  end

  defp edge(waiter, waker, from, to, us, wakes \\ 1) do
    %Edge{
      waiter_span_id: waiter,
      waker_span_id: waker,
      started_at: @t + from,
      ended_at: @t + to,
      attributed_us: us,
      wakes: wakes
    }
  end

  setup do
    %{events: profile() |> Export.perfetto() |> json_decode!() |> Map.fetch!("traceEvents")}
  end

  defp span_slices(events),
    do: for(e <- events, e["cat"] == "span", into: %{}, do: {e["args"]["span_id"], e})

  test "a wait slice for each edge but the request's, inside the waiter's span", %{events: events} do
    spans = span_slices(events)
    root = spans[0]

    edge_waits =
      for e <- events, e["cat"] == "wait", Map.has_key?(e["args"], "waker_span_id"), do: e

    assert Enum.map(edge_waits, & &1["args"]["waker_span_id"]) |> Enum.sort() == [2, 3]

    for wait <- edge_waits do
      assert wait["ph"] == "X" and wait["tid"] == root["tid"]
      assert wait["ts"] >= root["ts"] and wait["ts"] + wait["dur"] <= root["ts"] + root["dur"]
    end

    task_wait = Enum.find(edge_waits, &(&1["args"]["waker_span_id"] == 2))
    assert {task_wait["ts"], task_wait["dur"]} == {360, 440}
    assert task_wait["args"]["attributed_us"] == 440 and task_wait["args"]["wakes"] == 3

    # the request's wait is drawn once, as before: over the callee's span
    assert [request_wait] =
             for(e <- events, e["cat"] == "wait", e["args"]["callee_span_id"] == 1, do: e)

    assert {request_wait["ts"], request_wait["dur"]} == {100, 200}
    # work brought in by a message or a spawn gets no wait on its parent
    refute Enum.any?(events, &(&1["cat"] == "wait" and &1["args"]["callee_span_id"] in [2, 3]))
  end

  test "each flow has a source on one track and a target on another, bound inside slices",
       %{events: events} do
    spans = span_slices(events)
    flows = Enum.filter(events, &(&1["ph"] in ["s", "f"]))
    by_id = Enum.group_by(flows, & &1["id"])

    # two wakes (edges to spans 2 and 3) and one join (span 2; span 3
    # continues its own request span, on the same track)
    assert flows |> Enum.map(& &1["cat"]) |> Enum.frequencies() == %{"wake" => 4, "join" => 2}

    for {_id, pair} <- by_id do
      assert [%{"ph" => "s"} = from, %{"ph" => "f", "bp" => "e"} = to] =
               Enum.sort_by(pair, & &1["ph"], :desc)

      assert from["cat"] == to["cat"] and from["name"] == to["name"]
      assert from["tid"] != to["tid"]
    end

    # wakes end in the waker's span
    for %{"ph" => "f", "cat" => "wake"} = f <- flows do
      assert Enum.any?([spans[2], spans[3]], fn s ->
               s["tid"] == f["tid"] and f["ts"] >= s["ts"] and f["ts"] <= s["ts"] + s["dur"]
             end)
    end

    # v1 flow ids never collide with the bind_ids of the request flows
    bind_ids = for e <- events, Map.has_key?(e, "bind_id"), do: e["bind_id"]
    assert MapSet.disjoint?(MapSet.new(bind_ids), MapSet.new(Map.keys(by_id)))
  end

  test "span args name the kind and the unattributed wait's causes", %{events: events} do
    spans = span_slices(events)
    assert spans[3]["args"]["kind"] == "continuation"
    assert spans[2]["args"]["kind"] == "work"

    assert spans[0]["args"]["unattributed_by"] == %{
             "process" => 0,
             "port" => 0,
             "timer" => 0,
             "other" => 0
           }
  end
end
