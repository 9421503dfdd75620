defmodule FlameOn.Client.ExportPerfettoTest do
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  defp events(profile),
    do: profile |> Export.perfetto() |> json_decode!() |> Map.fetch!("traceEvents")

  defp slices(events), do: Enum.filter(events, &(&1["ph"] == "X"))

  defp thread_names(events) do
    for %{"ph" => "M", "name" => "thread_name", "tid" => tid, "args" => %{"name" => name}} <-
          events,
        into: %{},
        do: {tid, name}
  end

  describe "with a span graph" do
    setup do
      profile = fixture_profile()
      %{profile: profile, events: events(profile)}
    end

    test "top-level keys", %{profile: profile} do
      json = profile |> Export.perfetto() |> json_decode!()
      assert json["displayTimeUnit"] == "ms"
      assert is_list(json["traceEvents"])
      assert json["otherData"]["name"] == "fixture"
    end

    test "every event has a phase, pid 1 and a tid", %{events: events} do
      for e <- events do
        assert e["ph"] in ["M", "X"]
        assert e["pid"] == 1
        assert is_integer(e["tid"])
        assert is_binary(e["name"])
      end
    end

    test "one tid per process, each named by a thread_name event", %{events: events} do
      names = thread_names(events)
      assert names == %{1 => "<0.9001.0>", 2 => "my_server <0.9002.0>", 3 => "<0.9003.0>"}

      # Unique: no tid named twice, no two tids with one name.
      named = for %{"ph" => "M", "name" => "thread_name", "tid" => tid} <- events, do: tid
      assert named == Enum.uniq(named)
      assert Map.values(names) == Enum.uniq(Map.values(names))

      for s <- slices(events),
          do: assert(Map.has_key?(names, s["tid"]), "tid #{s["tid"]} has no name")

      assert [%{"args" => %{"name" => "fixture (flame_on trace 7)"}}] =
               for(%{"ph" => "M", "name" => "process_name"} = e <- events, do: e)
    end

    test "every slice has integer ts and dur, relative to the earliest span", %{events: events} do
      slices = slices(events)
      assert Enum.all?(slices, &(is_integer(&1["ts"]) and &1["ts"] >= 0))
      assert Enum.all?(slices, &(is_integer(&1["dur"]) and &1["dur"] >= 0))
      assert slices |> Enum.map(& &1["ts"]) |> Enum.min() == 0
    end

    test "one slice per span with its numbers", %{profile: profile, events: events} do
      spans = for s <- slices(events), s["cat"] == "span", do: s
      assert length(spans) == length(profile.graph.spans)
      t0 = profile.graph.spans |> Enum.map(& &1.started_at) |> Enum.min()

      for span <- profile.graph.spans do
        assert [slice] = Enum.filter(spans, &(&1["args"]["span_id"] == span.span_id))
        assert slice["ts"] == span.started_at - t0
        assert slice["dur"] == span.ended_at - span.started_at
        pid_text = List.to_string(:erlang.pid_to_list(span.pid))
        assert thread_names(events)[slice["tid"]] =~ pid_text

        for key <- ~w(self_us wait_us attributed_wait_us unattributed_wait_us) do
          assert slice["args"][key] == Map.fetch!(span, String.to_atom(key))
        end

        assert slice["args"]["parent_span_id"] == span.parent_span_id
      end

      names = Map.new(spans, &{&1["args"]["span_id"], &1["name"]})

      assert names == %{
               0 => "fixture",
               1 => "my_server <0.9002.0>",
               2 => "<0.9003.0>",
               3 => "my_server <0.9002.0>"
             }

      statuses = Map.new(spans, &{&1["args"]["span_id"], &1["args"]["status"]})
      assert statuses == %{0 => "ok", 1 => "ok", 2 => "ok", 3 => "exit: :boom"}
    end

    test "a wait slice on the caller's track for each callee span, inside the caller's span", %{
      events: events
    } do
      slices = slices(events)
      spans = Map.new(for(s <- slices, s["cat"] == "span", do: {s["args"]["span_id"], s}))
      waits = for s <- slices, s["cat"] == "wait", do: s
      assert length(waits) == 3

      for wait <- waits do
        callee = spans[wait["args"]["callee_span_id"]]
        caller = spans[callee["args"]["parent_span_id"]]
        assert wait["name"] == "wait"
        assert wait["tid"] == caller["tid"]
        assert wait["ts"] == callee["ts"] and wait["dur"] == callee["dur"]

        assert wait["ts"] >= caller["ts"] and
                 wait["ts"] + wait["dur"] <= caller["ts"] + caller["dur"]
      end
    end

    test "each flow has exactly one source (a wait) and one target (the callee span)", %{
      events: events
    } do
      flows =
        events |> Enum.with_index() |> Enum.filter(fn {e, _i} -> Map.has_key?(e, "bind_id") end)

      by_id = Enum.group_by(flows, fn {e, _i} -> e["bind_id"] end)
      assert map_size(by_id) == 3

      for {_id, members} <- by_id do
        assert [{source, si}] = Enum.filter(members, fn {e, _} -> e["flow_out"] == true end)
        assert [{target, ti}] = Enum.filter(members, fn {e, _} -> e["flow_in"] == true end)
        assert length(members) == 2
        assert source["ph"] == "X" and target["ph"] == "X"
        assert source["cat"] == "wait" and target["cat"] == "span"
        assert target["args"]["span_id"] == source["args"]["callee_span_id"]
        assert source["tid"] != target["tid"]
        # Replayed in file order at equal timestamps: the source comes first.
        assert si < ti
        refute Map.has_key?(source, "flow_in") or Map.has_key?(target, "flow_out")
      end
    end

    test "slices on one track nest properly, in order", %{events: events} do
      for {_tid, track} <- Enum.group_by(slices(events), & &1["tid"]) do
        # File order is by start, enclosing slices first.
        Enum.reduce(track, [], fn s, open ->
          open = Enum.drop_while(open, fn o -> o["ts"] + o["dur"] <= s["ts"] end)

          case open do
            [parent | _] ->
              assert s["ts"] + s["dur"] <= parent["ts"] + parent["dur"],
                     "#{inspect(s)} overlaps #{inspect(parent)}"

            [] ->
              :ok
          end

          assert Enum.all?(open, &(&1["ts"] <= s["ts"]))
          [s | open]
        end)
      end
    end
  end

  describe "a trace across nodes" do
    # the fixture with the server (b) on node b and the leaf (c) on node c
    setup do
      {a, b, c} = pids()
      [rb, rc] = [remote_pid(:"b@127.0.0.1", 9002), remote_pid(:"c@127.0.0.1", 9003)]
      moved = %{a => a, b => rb, c => rc}
      profile = fixture_profile()

      spans =
        for s <- profile.graph.spans,
            do: %{s | pid: moved[s.pid], node: node(moved[s.pid])}

      profile = %{
        profile
        | stacks: Map.new(profile.stacks, fn {pid, list} -> {moved[pid], list} end),
          graph: %{profile.graph | spans: spans}
      }

      %{events: events(profile), nodes: %{a: node(), b: node(rb), c: node(rc)}}
    end

    test "one trace-event process per node, the origin's first, each named", %{
      events: events,
      nodes: nodes
    } do
      named =
        for %{"ph" => "M", "name" => "process_name", "pid" => pid, "args" => %{"name" => n}} <-
              events,
            into: %{},
            do: {pid, n}

      assert named == %{
               1 => "fixture (flame_on trace 7) on #{nodes.a}",
               2 => "fixture (flame_on trace 7) on b@127.0.0.1",
               3 => "fixture (flame_on trace 7) on c@127.0.0.1"
             }

      # each process's track is in its node's group, its pid as its node
      # prints it, with the node
      threads =
        for %{"ph" => "M", "name" => "thread_name", "pid" => pid, "tid" => tid} = e <- events,
            into: %{},
            do: {tid, {pid, e["args"]["name"]}}

      assert threads == %{
               1 => {1, "<0.9001.0>"},
               2 => {2, "my_server <0.9002.0>@b@127.0.0.1"},
               3 => {3, "<0.9003.0>@c@127.0.0.1"}
             }

      for e <- events, e["ph"] != "M", do: assert(e["pid"] == elem(threads[e["tid"]], 0))
    end

    test "the flows cross from the caller's node to the callee's", %{events: events} do
      flows = Enum.filter(slices(events), &Map.has_key?(&1, "bind_id"))

      pairs =
        for %{"flow_out" => true, "bind_id" => id} = wait <- flows,
            %{"flow_in" => true, "bind_id" => ^id} = callee <- flows,
            do: {wait["pid"], callee["pid"]}

      # a -> b twice, b -> c once
      assert Enum.sort(pairs) == [{1, 2}, {1, 2}, {2, 3}]
    end
  end

  test "a callee span that outlives its caller's gets a wait clipped to the caller" do
    profile = fixture_profile()
    [root, s1, s2, s3] = profile.graph.spans
    late = %{s2 | ended_at: s1.ended_at + 50}
    profile = %{profile | graph: %{profile.graph | spans: [root, s1, late, s3]}}
    slices = profile |> events() |> slices()

    [wait] = for s <- slices, s["cat"] == "wait", s["args"]["callee_span_id"] == 2, do: s
    [caller] = for s <- slices, s["cat"] == "span", s["args"]["span_id"] == 1, do: s
    assert wait["ts"] + wait["dur"] == caller["ts"] + caller["dur"]
    assert wait["args"]["callee_us"] == late.ended_at - late.started_at
  end

  describe "without a span graph" do
    test "one slice per process over the whole trace with its top stacks" do
      profile = fixture_profile(graph: false)
      events = events(profile)
      slices = slices(events)
      names = thread_names(events)

      assert length(slices) == 3
      assert Map.keys(names) |> Enum.sort() == [1, 2, 3]
      # Registered names come from the graph only.
      assert names[2] == "<0.9002.0>"

      for s <- slices do
        assert s["ts"] == 0 and s["dur"] == profile.duration_us
        assert s["cat"] == "process"

        pid =
          Enum.find(
            Map.keys(profile.stacks),
            &(List.to_string(:erlang.pid_to_list(&1)) == s["args"]["pid"])
          )

        assert s["args"]["total_us"] == Profile.total_us(profile, pid)
        top = s["args"]["top_stacks"]
        assert length(top) == min(10, length(profile.stacks[pid]))
        assert Enum.map(top, & &1["us"]) == Enum.sort(Enum.map(top, & &1["us"]), :desc)
        assert hd(top)["us"] == profile.stacks[pid] |> Enum.map(&elem(&1, 1)) |> Enum.max()
      end

      refute Enum.any?(events, &Map.has_key?(&1, "bind_id"))
    end

    test "more than ten stacks keeps the ten largest; nasty names survive" do
      {a, _, _} = pids()
      stacks = for i <- 1..15, do: {"f#{i}", i}

      profile = %Profile{
        name: "n",
        pid: a,
        started_at: 5,
        duration_us: 20,
        stacks: %{a => stacks ++ [{Enum.join(nasty_frames(), ";"), 100}]}
      }

      [slice] = profile |> events() |> slices()

      assert Enum.map(slice["args"]["top_stacks"], & &1["us"]) == [
               100,
               15,
               14,
               13,
               12,
               11,
               10,
               9,
               8,
               7
             ]

      assert hd(slice["args"]["top_stacks"])["stack"] == Enum.join(nasty_frames(), ";")
    end

    test "an empty profile" do
      json = %Profile{name: "empty"} |> Export.perfetto() |> json_decode!()
      assert [%{"name" => "process_name"}] = json["traceEvents"]
    end
  end

  describe "metrics of a sampled profile" do
    setup do
      {a, b, _} = pids()
      t = 1_000_000

      metric = fn t_us, mql, memory, reds ->
        %{t_us: t_us, status: :running, message_queue_len: mql, memory: memory, reductions: reds}
      end

      profile = %{
        fixture_profile(graph: false)
        | mode: :sample,
          metrics: %{
            # the first sample is taken a few µs before the trace starts
            a => [
              metric.(t - 3, 0, 1000, 50),
              metric.(t + 400, 2, 3000, 250),
              metric.(t + 900, 1, 2000, 1250)
            ],
            b => [metric.(t + 100, 7, 500, 10), metric.(t + 1500, 0, 600, 15)]
          }
      }

      %{profile: profile, events: events(profile), a: a, b: b}
    end

    test "one counter event per sample and counter, on the process's tid", %{
      events: events,
      a: a,
      b: b
    } do
      tid = for {tid, name} <- thread_names(events), into: %{}, do: {name, tid}
      counters = Enum.filter(events, &(&1["ph"] == "C"))
      # no rate at a series' first sample
      assert length(counters) == 3 * 3 - 1 + (2 * 3 - 1)

      series = fn pid, name ->
        label = List.to_string(:erlang.pid_to_list(pid))

        for %{"name" => ^name, "args" => %{^label => value}} = e <- counters do
          assert e["pid"] == 1
          assert e["tid"] == tid[label]
          assert map_size(e["args"]) == 1
          {e["ts"], value}
        end
      end

      # ts relative to the trace start (slices start at 0), clamped into it
      assert series.(a, "message_queue_len") == [{0, 0}, {400, 2}, {900, 1}]
      assert series.(a, "memory") == [{0, 1000}, {400, 3000}, {900, 2000}]
      # reductions per ms since the previous sample: 200 in 403 µs, 1000 in 500 µs
      assert series.(a, "reductions/ms") == [{400, 496}, {900, 2000}]
      assert series.(b, "message_queue_len") == [{100, 7}, {1000, 0}]
      # 5 in 1400 µs (the sample after the trace's end is drawn at its end)
      assert series.(b, "reductions/ms") == [{1000, 4}]
    end

    test "counters come in timestamp order among the slices", %{events: events} do
      timed = Enum.reject(events, &(&1["ph"] == "M"))
      ts = Enum.map(timed, & &1["ts"])
      assert ts == Enum.sort(ts)
    end
  end
end
