defmodule FlameOn.Client.ExportSampledTest do
  # A real mode: :sample profile through the exporters: pprof gets the
  # sample count and reductions as sample types beside wall time, Perfetto
  # gets counter tracks from the metrics series. Read back with the
  # independent decoders of ExportHelpers.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Export
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
      assert samples == profile.stats.samples and samples > 10
      series = profile.metrics[profile.pid]
      assert reductions == List.last(series).reductions - hd(series).reductions
      assert reductions > 0
    end
  end
end
