defmodule FlameOn.Client.ExportPprofTest do
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  setup do
    profile = fixture_profile()
    %{profile: profile, pprof: pprof_decode!(Export.pprof(profile))}
  end

  test "is gzip", %{profile: profile} do
    assert <<0x1F, 0x8B, _::binary>> = Export.pprof(profile)
  end

  test "string table starts with the empty string and has no duplicates", %{pprof: pprof} do
    assert [""] ++ _ = pprof.strings
    assert pprof.strings == Enum.uniq(pprof.strings)
  end

  test "sample and period types are wall time in microseconds", %{pprof: pprof} do
    assert pprof.sample_type == [{"wall", "microseconds"}]
    assert pprof.period_type == [{"wall", "microseconds"}]
    assert pprof.period == 1
    assert Enum.at(pprof.strings, pprof.default_sample_type) == "wall"
  end

  test "duration, start time and comment", %{profile: profile, pprof: pprof} do
    assert pprof.duration_nanos == profile.duration_us * 1000
    expected = (profile.started_at + System.time_offset(:microsecond)) * 1000
    assert abs(pprof.time_nanos - expected) < 1_000_000_000
    assert [comment] = pprof.comments
    assert comment =~ "fixture"
  end

  test "every referenced location and function exists, one per distinct frame", %{
    profile: profile,
    pprof: pprof
  } do
    for sample <- pprof.samples, id <- sample.locations do
      assert Map.has_key?(pprof.locations, id), "location #{id} is missing"
    end

    for {_id, function_ids} <- pprof.locations do
      assert [function_id] = function_ids
      assert Map.has_key?(pprof.functions, function_id)
    end

    distinct =
      for {_pid, entries} <- profile.stacks,
          {stack, _} <- entries,
          frame <- split_stack(stack),
          uniq: true,
          do: frame

    assert map_size(pprof.locations) == length(distinct)
    assert Enum.sort(Map.values(pprof.functions)) == Enum.sort(distinct)
    assert Enum.all?(Map.keys(pprof.locations), &(&1 > 0))
  end

  test "sample values add up to the profile's microseconds", %{profile: profile, pprof: pprof} do
    assert Enum.all?(pprof.samples, &match?([_], &1.values))
    assert pprof.samples |> Enum.flat_map(& &1.values) |> Enum.sum() == total_us(profile)
  end

  test "samples are the stacks, leaf first, with a pid label", %{profile: profile, pprof: pprof} do
    name = fn location_id -> pprof.functions[hd(pprof.locations[location_id])] end

    decoded =
      for sample <- pprof.samples do
        # and a process label for the named process (b is :my_server)
        assert [{"pid", pid} | process] = sample.labels
        assert process == if(pid == "<0.9002.0>", do: [{"process", "my_server"}], else: [])
        stack = sample.locations |> Enum.reverse() |> Enum.map_join(";", name)
        {pid, stack, hd(sample.values)}
      end

    expected =
      for {pid, entries} <- profile.stacks, {stack, us} <- entries do
        {List.to_string(:erlang.pid_to_list(pid)), stack, us}
      end

    assert Enum.sort(decoded) == Enum.sort(expected)

    # Leaf first: a WAITING sample's first location is WAITING.
    assert Enum.any?(pprof.samples, fn s ->
             s.locations != [] and name.(hd(s.locations)) == "WAITING"
           end)
  end

  describe "a profile with stack samples" do
    setup %{profile: profile} do
      {a, b, _} = pids()

      samples = %{
        a => [
          {"App.run/0", 3, 300},
          {"App.run/0;SLEEP", 2, 0},
          # sampled, but its time rounded to 0 µs: not in profile.stacks
          {"App.run/0;App.brief/0", 1, 42}
        ],
        b => [{"Srv.handle_call/3", 4, 1_000_000_000_000}]
      }

      sampled = %{profile | mode: :sample, samples: samples}
      %{sampled: sampled, pprof: pprof_decode!(Export.pprof(sampled))}
    end

    test "has three sample types, wall the default", %{pprof: pprof} do
      assert pprof.sample_type == [
               {"wall", "microseconds"},
               {"samples", "count"},
               {"reductions", "count"}
             ]

      assert pprof.period_type == [{"wall", "microseconds"}]
      assert Enum.at(pprof.strings, pprof.default_sample_type) == "wall"
      assert pprof.strings == Enum.uniq(pprof.strings)
    end

    test "each sample has its stack's time, samples and reductions", %{
      sampled: profile,
      pprof: pprof
    } do
      name = fn location_id -> pprof.functions[hd(pprof.locations[location_id])] end

      decoded =
        for sample <- pprof.samples do
          assert [{"pid", pid} | _process] = sample.labels
          assert [_us, _samples, _reductions] = sample.values
          stack = sample.locations |> Enum.reverse() |> Enum.map_join(";", name)
          {{pid, stack}, sample.values}
        end

      assert length(decoded) == length(Enum.uniq_by(decoded, &elem(&1, 0)))
      decoded = Map.new(decoded)
      {a, b, c} = pids()
      text = &List.to_string(:erlang.pid_to_list(&1))

      assert decoded[{text.(a), "App.run/0"}] == [100, 3, 300]
      assert decoded[{text.(a), "App.run/0;SLEEP"}] == [30, 2, 0]
      assert decoded[{text.(a), "App.run/0;App.brief/0"}] == [0, 1, 42]
      assert decoded[{text.(a), "App.run/0;lists:map/2"}] == [50, 0, 0]
      assert decoded[{text.(b), "Srv.handle_call/3"}] == [200, 4, 1_000_000_000_000]
      assert decoded[{text.(c), "Leaf.work/0"}] == [80, 0, 0]

      # one row per stack of profile.stacks plus the one only sampled
      rows = for {_pid, entries} <- profile.stacks, reduce: 0, do: (n -> n + length(entries))
      assert map_size(decoded) == rows + 1

      sums = pprof.samples |> Enum.map(& &1.values) |> Enum.zip_with(&Enum.sum/1)
      assert sums == [total_us(profile), 3 + 2 + 1 + 4, 300 + 42 + 1_000_000_000_000]
    end
  end

  test "large values encode as multi-byte varints" do
    {a, _, _} = pids()
    big = 5_000_000_000_123
    profile = %Profile{name: "big", pid: a, duration_us: big, stacks: %{a => [{"x", big}]}}
    pprof = pprof_decode!(Export.pprof(profile))
    assert [%{values: [^big]}] = pprof.samples
    assert pprof.duration_nanos == big * 1000
    assert pprof.time_nanos == 0
  end

  test "an empty profile" do
    pprof = pprof_decode!(Export.pprof(%Profile{name: "empty"}))
    assert pprof.samples == [] and pprof.locations == %{}
    assert hd(pprof.strings) == ""
  end

  test "the test decoder reads varints" do
    assert varint(<<0>>) == {0, ""}
    assert varint(<<0xAC, 0x02, 9>>) == {300, <<9>>}
    assert pb_fields(<<0x08, 0x96, 0x01, 0x12, 0x02, ?h, ?i>>) == [{1, 150}, {2, "hi"}]
  end
end
