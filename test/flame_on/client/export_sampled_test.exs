defmodule FlameOn.Client.ExportSampledTest do
  # A real mode: :sample profile through the exporters: pprof gets the
  # sample count and reductions as sample types beside wall time, Perfetto
  # gets counter tracks from the metrics series. Read back with the
  # independent decoders of ExportHelpers.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.Test.Workloads

  setup_all do
    ensure_app_started()
    assert_node_clean()

    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          for i <- 1..5, do: send(self(), {:note, i})
          Workloads.busy(30)
          for _ <- 1..5, do: receive(do: ({:note, _} -> :ok))
          Process.sleep(10)
          Workloads.busy(10)
        end,
        mode: :sample
      )

    assert_node_clean()
    %{profile: profile}
  end

  defp pid_text(pid), do: List.to_string(:erlang.pid_to_list(pid))

  describe "pprof" do
    setup %{profile: profile}, do: %{pprof: pprof_decode!(Export.pprof(profile))}

    test "has the sample types wall, samples and reductions", %{pprof: pprof} do
      assert pprof.sample_type == [
               {"wall", "microseconds"},
               {"samples", "count"},
               {"reductions", "count"}
             ]

      assert Enum.at(pprof.strings, pprof.default_sample_type) == "wall"
    end

    test "each stack's values are its time, samples and reductions", %{
      profile: profile,
      pprof: pprof
    } do
      name = fn location_id -> pprof.functions[hd(pprof.locations[location_id])] end
      me = pid_text(profile.pid)

      decoded =
        for sample <- pprof.samples, into: %{} do
          assert [{"pid", ^me}] = sample.labels
          assert [_, _, _] = sample.values
          {sample.locations |> Enum.reverse() |> Enum.map_join(";", name), sample.values}
        end

      assert map_size(decoded) == length(pprof.samples), "a stack has two samples"
      timed = Map.new(profile.stacks[profile.pid])
      sampled = Map.new(profile.samples[profile.pid], fn {stack, n, r} -> {stack, [n, r]} end)

      expected =
        for stack <- Enum.uniq(Map.keys(timed) ++ Map.keys(sampled)), into: %{} do
          {stack, [Map.get(timed, stack, 0) | Map.get(sampled, stack, [0, 0])]}
        end

      assert decoded == expected

      [wall, samples, reductions] =
        pprof.samples |> Enum.map(& &1.values) |> Enum.zip_with(&Enum.sum/1)

      assert wall == total_us(profile)
      # (~60 ms traced at 1 kHz; a sampler starved on a loaded machine takes fewer)
      assert samples == profile.stats.samples
      assert samples > 3, inspect(profile.stats)
      series = profile.metrics[profile.pid]
      assert reductions == List.last(series).reductions - hd(series).reductions
      assert reductions > 0
    end
  end

  describe "perfetto" do
    setup %{profile: profile} do
      events = profile |> Export.perfetto() |> json_decode!() |> Map.fetch!("traceEvents")
      %{events: events}
    end

    test "one counter track per metric, with a value per sample, inside the trace", %{
      profile: profile,
      events: events
    } do
      me = pid_text(profile.pid)
      series = profile.metrics[profile.pid]
      assert [slice] = for(%{"ph" => "X", "cat" => "process"} = e <- events, do: e)
      assert slice["args"]["pid"] == me

      for {name, key} <- [
            {"message_queue_len", :message_queue_len},
            {"memory", :memory},
            {"reductions/ms", :reductions}
          ] do
        counters = for %{"ph" => "C", "name" => ^name} = e <- events, do: e
        # a rate has no value at the first sample
        first = if key == :reductions, do: 1, else: 0
        assert length(counters) == length(series) - first, name

        for e <- counters do
          assert e["pid"] == 1 and e["tid"] == slice["tid"]
          assert Map.keys(e["args"]) == [me]
        end

        ts = Enum.map(counters, & &1["ts"])
        assert ts == Enum.sort(ts), "#{name}: timestamps go back"
        assert Enum.all?(ts, &(&1 >= slice["ts"] and &1 <= slice["ts"] + slice["dur"]))
        # the samples are spread over the trace, not piled at one edge (a
        # quarter of it: a sampler starved on a loaded machine skips ticks)
        assert List.last(ts) - hd(ts) >= div(slice["dur"], 4), inspect({ts, slice})

        values = Enum.map(counters, & &1["args"][me])

        case key do
          :reductions ->
            rates =
              Enum.zip_with(tl(series), series, fn m, prev ->
                round((m.reductions - prev.reductions) * 1000 / (m.t_us - prev.t_us))
              end)

            assert values == rates
            # busy/1 runs flat out: thousands of reductions per ms at times
            assert Enum.max(values) > 1000

          _ ->
            assert values == Enum.map(series, &Map.fetch!(&1, key))
        end
      end

      # the messages sent to itself show in the queue length
      queue = for %{"ph" => "C", "name" => "message_queue_len", "args" => a} <- events, do: a[me]
      assert Enum.max(queue) == 5
    end
  end

  describe "a cross-process sample trace" do
    setup do
      {:ok, a} = Server.start()

      {_, profile} =
        FlameOn.Client.profile(
          fn ->
            GenServer.call(a, {:spin, 20})
            Workloads.busy(10)
            GenServer.call(a, {:spin, 20})
          end,
          mode: :sample,
          cross_process: true
        )

      assert_node_clean()
      %{profile: profile, callee: a}
    end

    test "pprof: each process's samples and reductions add up", %{profile: profile, callee: a} do
      pprof = pprof_decode!(Export.pprof(profile))
      assert length(pprof.sample_type) == 3

      for pid <- [profile.pid, a] do
        text = pid_text(pid)
        mine = for s <- pprof.samples, match?([{"pid", ^text} | _], s.labels), do: s.values
        [wall, samples, reductions] = Enum.zip_with(mine, &Enum.sum/1)
        assert wall == Profile.total_us(profile, pid)
        assert samples == length(profile.metrics[pid])
        assert samples > 3, inspect({pid, profile.stats})
        assert reductions == profile.samples[pid] |> Enum.map(&elem(&1, 2)) |> Enum.sum()
      end
    end

    test "perfetto: the callee's counters are on its span's track, inside the trace", %{
      profile: profile,
      callee: a
    } do
      events = profile |> Export.perfetto() |> json_decode!() |> Map.fetch!("traceEvents")

      spans =
        for %{"ph" => "X", "cat" => "span"} = e <- events, e["args"]["pid"] == pid_text(a), do: e

      assert [%{"tid" => tid} | _] = spans
      assert Enum.all?(spans, &(&1["tid"] == tid))
      slices = for %{"ph" => "X"} = e <- events, do: e
      from = slices |> Enum.map(& &1["ts"]) |> Enum.min()
      to = slices |> Enum.map(&(&1["ts"] + &1["dur"])) |> Enum.max()

      # counters are keyed by the process's label: its name, then its pid
      label = "FlameOn.Client.Test.Server #{pid_text(a)}"

      for name <- ["message_queue_len", "memory", "reductions/ms"] do
        counters =
          for %{"ph" => "C", "name" => ^name, "args" => %{^label => _}} = e <- events, do: e

        assert counters != [], name
        assert Enum.all?(counters, &(&1["tid"] == tid))
        ts = Enum.map(counters, & &1["ts"])
        assert ts == Enum.sort(ts)
        assert Enum.all?(ts, &(&1 >= from and &1 <= to)), inspect({from, to, ts})
      end
    end
  end
end
