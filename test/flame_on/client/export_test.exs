defmodule FlameOn.Client.ExportTest do
  # Real traces at the end set node-global trace patterns.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers
  import FlameOn.Client.TestHelpers, only: [assert_node_clean: 0]

  alias FlameOn.Client
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Test.Server

  doctest FlameOn.Client.Export

  setup do
    dir =
      Path.join(System.tmp_dir!(), "flame_on_export_test_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    %{tmp_dir: dir}
  end

  defp bin(iodata), do: IO.iodata_to_binary(iodata)

  describe "folded" do
    test "is Profile.folded/1" do
      profile = fixture_profile()
      assert bin(Export.folded(profile)) == bin(Profile.folded(profile))
      assert bin(Export.folded(profile, pids: :all)) == bin(Profile.folded(profile))
    end

    test ":pids keeps some processes" do
      {a, b, _c} = pids()
      profile = fixture_profile()
      text = bin(Export.folded(profile, pids: [b]))
      # b is registered as :my_server (the fixture's span graph says so)
      assert text =~ "fixture;my_server_<0.9002.0>;Srv.handle_call/3 200\n"
      refute text =~ "<0.9001.0>"
      both = bin(Export.folded(profile, pids: [a, b]))

      assert both ==
               bin(Export.folded(profile, pids: [a])) <> bin(Export.folded(profile, pids: [b]))

      refute both =~ "<0.9003.0>"
      assert bin(Export.folded(profile, pids: [])) == ""
      assert_raise ArgumentError, fn -> Export.folded(profile, pids: :some) end
      assert_raise ArgumentError, fn -> Export.folded(profile, bogus: 1) end
    end

    test "per process: one file's worth per pid, together all lines" do
      profile = fixture_profile()
      files = Export.folded_per_process(profile)
      assert Map.keys(files) |> Enum.sort() == Map.keys(profile.stacks) |> Enum.sort()

      for {pid, data} <- files do
        assert bin(data) ==
                 bin(Profile.folded(%{profile | stacks: Map.take(profile.stacks, [pid])}))
      end

      # Profile.folded/1 writes the processes in pid order.
      assert files |> Enum.sort() |> Enum.map_join(fn {_pid, data} -> bin(data) end) ==
               bin(Profile.folded(profile))
    end
  end

  describe "speedscope" do
    test "has the file format's keys" do
      profile = fixture_profile()
      json = profile |> Export.speedscope() |> json_decode!()

      assert json["$schema"] == "https://www.speedscope.app/file-format-schema.json"
      assert json["name"] == "fixture"
      assert json["exporter"] =~ "flame_on_client"
      assert json["activeProfileIndex"] == 0
      assert %{"frames" => frames} = json["shared"]
      assert Enum.all?(frames, &match?(%{"name" => name} when is_binary(name), &1))
      names = Enum.map(frames, & &1["name"])
      assert names == Enum.uniq(names)
    end

    test "one evented profile per process, traced process first, registered names from the graph" do
      {a, b, c} = pids()
      profile = fixture_profile()
      json = profile |> Export.speedscope() |> json_decode!()

      assert Enum.map(json["profiles"], & &1["name"]) == [
               "fixture <0.9001.0>",
               "fixture my_server <0.9002.0>",
               "fixture <0.9003.0>"
             ]

      for {p, pid} <- Enum.zip(json["profiles"], [a, b, c]) do
        assert p["type"] == "evented"
        assert p["unit"] == "microseconds"
        assert p["startValue"] == 0
        assert p["endValue"] == Profile.total_us(profile, pid)
      end
    end

    test "open and close events: valid indexes, nested, the same stacks and times" do
      profile = fixture_profile()
      json = profile |> Export.speedscope() |> json_decode!()
      frames = Enum.map(json["shared"]["frames"], & &1["name"])

      for {p, pid} <- Enum.zip(json["profiles"], Client.Export.Util.pids(profile)) do
        assert Enum.all?(p["events"], fn e ->
                 e["type"] in ["O", "C"] and is_integer(e["frame"]) and e["frame"] >= 0 and
                   e["frame"] < length(frames)
               end)

        assert Enum.sort(speedscope_stacks(p, frames)) == Enum.sort(profile.stacks[pid])
      end
    end

    test "a recursion 10 000 frames deep is 20 000 events" do
      pid = self()
      deep = Enum.map_join(1..10_000, ";", fn _ -> "f" end)
      stacks = %{pid => for(n <- 1..10_000, do: {binary_part(deep, 0, 2 * n - 1), 1})}
      profile = %Profile{name: "deep", pid: pid, stacks: stacks}
      [p] = json_decode!(Export.speedscope(profile))["profiles"]
      assert length(p["events"]) == 20_000
      assert p["endValue"] == 10_000
    end

    test "frame names that need escaping survive" do
      json = fixture_profile() |> Export.speedscope() |> json_decode!()
      names = Enum.map(json["shared"]["frames"], & &1["name"])
      for name <- nasty_frames(), do: assert(name in names)
    end

    test "an empty profile is a valid file" do
      json = %Profile{name: "empty"} |> Export.speedscope() |> json_decode!()
      assert json["profiles"] == [] and json["shared"]["frames"] == []
    end
  end

  describe "write/4" do
    test "writes every format and returns the paths in order", %{tmp_dir: dir} do
      profile = fixture_profile(name: "my trace/1")
      out = Path.join(dir, "out")
      written = Export.write(profile, out, :all)

      assert Keyword.keys(written) == Export.formats()

      assert Keyword.values(written) ==
               Enum.map(
                 ~w(.folded .speedscope.json .perfetto.json .svg .pb.gz),
                 &Path.join(out, "my_trace_1" <> &1)
               )

      assert File.read!(written[:folded]) == bin(Export.folded(profile))
      assert File.read!(written[:speedscope]) == bin(Export.speedscope(profile))
      assert File.read!(written[:perfetto]) == bin(Export.perfetto(profile))
      assert File.read!(written[:svg]) == bin(Export.svg(profile))
      assert pprof_decode!(File.read!(written[:pprof])) == pprof_decode!(Export.pprof(profile))
    end

    test "a subset, in the order asked, duplicates once", %{tmp_dir: dir} do
      written = Export.write(fixture_profile(), dir, [:svg, :folded, :svg])

      assert written == [
               svg: Path.join(dir, "fixture.svg"),
               folded: Path.join(dir, "fixture.folded")
             ]

      assert File.ls!(dir) |> Enum.sort() == ["fixture.folded", "fixture.svg"]
    end

    test "per_process writes folded and svg files per process", %{tmp_dir: dir} do
      written =
        Export.write(fixture_profile(), dir, [:folded, :svg, :speedscope],
          per_process: true,
          width: 800
        )

      assert Enum.map(written, fn {f, p} -> {f, Path.basename(p)} end) == [
               folded: "fixture.0.9001.0.folded",
               folded: "fixture.0.9002.0.folded",
               folded: "fixture.0.9003.0.folded",
               svg: "fixture.0.9001.0.svg",
               svg: "fixture.0.9002.0.svg",
               svg: "fixture.0.9003.0.svg",
               speedscope: "fixture.speedscope.json"
             ]

      svg = File.read!(Path.join(dir, "fixture.0.9002.0.svg"))
      assert svg =~ ~s(width="800")

      assert File.read!(Path.join(dir, "fixture.0.9003.0.folded")) ==
               "fixture;<0.9003.0>;Leaf.work/0 80\nfixture;<0.9003.0>;Leaf.work/0;SLEEP 9\n"
    end

    test ":name and unsafe names", %{tmp_dir: dir} do
      assert [folded: path] = Export.write(fixture_profile(), dir, [:folded], name: "custom")
      assert Path.basename(path) == "custom.folded"
      assert [folded: path] = Export.write(fixture_profile(name: "../.."), dir, [:folded])
      assert Path.dirname(path) == dir
      assert [folded: path] = Export.write(fixture_profile(name: "…"), dir, [:folded])
      assert Path.basename(path) == "_.folded"
    end

    test "unknown formats and bad options raise before anything is written", %{tmp_dir: dir} do
      out = Path.join(dir, "never")

      assert_raise ArgumentError, ~r/unknown export format :flamegraph/, fn ->
        Export.write(fixture_profile(), out, [:folded, :flamegraph])
      end

      assert_raise ArgumentError, ~r/must be a list/, fn ->
        Export.write(fixture_profile(), out, :svg)
      end

      assert_raise ArgumentError, fn ->
        Export.write(fixture_profile(), out, [:svg], width: -1)
      end

      assert_raise ArgumentError, fn ->
        Export.write(fixture_profile(), out, [:svg], per_process: :yes)
      end

      assert_raise ArgumentError, fn ->
        Export.write(fixture_profile(), out, [:svg], colour: :red)
      end

      refute File.exists?(out)
    end
  end

  describe "real traces" do
    setup do
      assert_node_clean()
      on_exit(fn -> assert_node_clean() end)
    end

    test "a process trace exports consistently in every format", %{tmp_dir: dir} do
      {_, profile} =
        Client.profile(
          fn ->
            Enum.map(1..2_000, &Integer.to_string/1)
            Process.sleep(5)
          end,
          name: "real"
        )

      total = total_us(profile)
      assert total > 0

      written = Export.write(profile, dir, :all)
      assert length(written) == 5

      speedscope = json_decode!(File.read!(written[:speedscope]))
      assert speedscope["profiles"] |> Enum.map(& &1["endValue"]) |> Enum.sum() == total

      perfetto = json_decode!(File.read!(written[:perfetto]))
      assert [slice] = Enum.filter(perfetto["traceEvents"], &(&1["ph"] == "X"))
      assert slice["dur"] == profile.duration_us

      pprof = pprof_decode!(File.read!(written[:pprof]))
      assert pprof.samples |> Enum.flat_map(& &1.values) |> Enum.sum() == total

      frames = svg_frames(svg_parse!(File.read!(written[:svg])))
      assert [%{depth: 0, us: ^total}] = Enum.filter(frames, &(&1.depth == 0))
      assert Enum.any?(frames, &(&1.name == "Process.sleep/1"))
    end

    test "a cross-process trace through a GenServer", %{tmp_dir: dir} do
      {:ok, server} = Server.start()

      {_, profile} =
        Client.profile(
          fn ->
            GenServer.call(server, {:spin, 5})
            GenServer.call(server, {:sleep, 3})
          end,
          cross_process: true,
          name: "cross"
        )

      assert %{graph: %{spans: spans}} = profile
      assert length(spans) == 3
      assert Map.has_key?(profile.stacks, server)

      written = Export.write(profile, dir, :all)

      perfetto = json_decode!(File.read!(written[:perfetto]))
      slices = Enum.filter(perfetto["traceEvents"], &(&1["ph"] == "X"))
      assert Enum.count(slices, &(&1["cat"] == "span")) == 3
      flows = slices |> Enum.filter(& &1["bind_id"]) |> Enum.group_by(& &1["bind_id"])
      assert map_size(flows) == 2

      for {_id, [source, target]} <- flows do
        assert source["flow_out"] and source["cat"] == "wait"
        assert target["flow_in"] and target["cat"] == "span"
        assert source["tid"] == 1 and target["tid"] == 2
      end

      speedscope = json_decode!(File.read!(written[:speedscope]))
      assert length(speedscope["profiles"]) == 2

      assert speedscope["profiles"] |> Enum.map(& &1["endValue"]) |> Enum.sum() ==
               total_us(profile)

      # the server is named after its callback module
      server_pid = List.to_string(:erlang.pid_to_list(server))
      frames = svg_frames(svg_parse!(File.read!(written[:svg])))

      assert Enum.any?(
               frames,
               &(&1.depth == 1 and &1.name == "FlameOn.Client.Test.Server #{server_pid}")
             )

      pprof = pprof_decode!(File.read!(written[:pprof]))
      labels = pprof.samples |> Enum.flat_map(& &1.labels) |> Enum.uniq() |> Enum.sort()

      assert labels ==
               Enum.sort([
                 {"pid", server_pid},
                 {"process", "FlameOn.Client.Test.Server"},
                 {"pid", List.to_string(:erlang.pid_to_list(self()))}
               ])
    end
  end
end
