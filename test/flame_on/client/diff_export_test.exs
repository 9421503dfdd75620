defmodule FlameOn.Client.DiffExportTest do
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  # A root process whose `grow` does 4x the work and whose `shrink` half,
  # `same` unchanged, `gone` only in base, `fresh` only in new; and a
  # named server that appears in both runs under other pids.
  setup do
    {a, b, _c} = pids()
    {x, y} = {:c.pid(0, 9501, 0), :c.pid(0, 9502, 0)}

    base = %Profile{
      name: "work",
      pid: a,
      process_names: %{b => "MyApp.Cart"},
      stacks: %{
        a => [
          {"", 4},
          {"main;same", 400},
          {"main;grow", 100},
          {"main;shrink", 200},
          {"main;gone", 50}
        ],
        b => [{"handle_call", 300}]
      }
    }

    new = %Profile{
      name: "work",
      pid: x,
      process_names: %{y => "MyApp.Cart"},
      stacks: %{
        x => [
          {"", 4},
          {"main;same", 400},
          {"main;grow", 400},
          {"main;shrink", 100},
          {"main;fresh", 30}
        ],
        y => [{"handle_call", 300}]
      }
    }

    dir =
      Path.join(System.tmp_dir!(), "flame_on_diff_export_#{System.unique_integer([:positive])}")

    on_exit(fn -> File.rm_rf!(dir) end)

    %{
      diff: FlameOn.Client.diff(base, new),
      by_process: FlameOn.Client.diff(base, new, by: :process),
      dir: dir
    }
  end

  describe "folded" do
    test "three columns, stack base new, that parse back into the diff", %{by_process: diff} do
      text = diff |> Diff.folded() |> IO.iodata_to_binary()
      lines = String.split(text, "\n", trim: true)

      parsed =
        for line <- lines do
          assert [_, stack, base, new] = Regex.run(~r/\A(\S+) (\d+) (\d+)\z/, line), line
          ["work", group | frames] = String.split(stack, ";")
          {group, Enum.join(frames, ";"), String.to_integer(base), String.to_integer(new)}
        end

      expected =
        for {group, label} <- diff.groups,
            {stack, b, n} <- diff.stacks[group],
            do: {label, stack, b, n}

      assert parsed == expected
      assert {"[root]", "main;grow", 100, 400} in parsed
      assert {"MyApp.Cart", "handle_call", 300, 300} in parsed
      assert {"[root]", "", 4, 4} in parsed
    end

    test "merged: name;stack base new", %{diff: diff} do
      text = diff |> Diff.folded() |> IO.iodata_to_binary()
      assert text =~ "\nwork;main;gone 50 0\n"
      assert text =~ "\nwork;main;fresh 0 30\n"
      assert String.starts_with?(text, "work 4 4\n")
    end
  end

  describe "svg" do
    setup %{diff: diff} do
      [{:svg, path}] =
        Export.write(diff, System.tmp_dir!(), [:svg],
          name: "diff_svg_#{System.unique_integer([:positive])}"
        )

      svg = File.read!(path)
      File.rm!(path)
      frames = svg |> svg_parse!() |> svg_frames() |> Map.new(&{&1.name, &1})
      %{svg: svg, frames: frames}
    end

    test "red for grown frames, blue for shrunk ones, grey for the same", %{frames: frames} do
      assert rgb(frames["grow"].fill) == {255, 30, 30}
      assert {r, g, 255} = rgb(frames["shrink"].fill)
      assert r == g and r < 255
      assert rgb(frames["same"].fill) == {225, 225, 225}
      assert rgb(frames["fresh"].fill) == {255, 30, 30}
      # a fall of half is half as deep a blue as a fourth
      assert r > 30
    end

    test "titles give base, new and the change; widths are the new profile's", %{frames: frames} do
      assert frames["grow"].title == "grow (base 100 µs, new 400 µs, +300.0%, +300 µs)"
      assert frames["shrink"].title == "shrink (base 200 µs, new 100 µs, -50.0%, -100 µs)"
      assert frames["fresh"].title == "fresh (base 0 µs, new 30 µs, new, +30 µs)"
      assert frames["main"].title == "main (base 750 µs, new 930 µs, +24.0%, +180 µs)"
      assert frames["grow"].us == 400 and frames["main"].us == 930
      # only in base: not drawn (its loss is in main's change)
      refute Map.has_key?(frames, "gone")
    end

    test "the page says what it compares", %{svg: svg} do
      assert svg =~ "<title>work: diff</title>"

      assert svg =~
               "base 1,054 µs · new 1,234 µs (×1.000, the median stack&apos;s ratio) · widths: the new run"

      assert svg =~ ">grew</text>" and svg =~ ">shrank</text>"
    end

    test "by: :process: a level per group, labelled", %{by_process: diff} do
      frames =
        diff
        |> Export.Diff.outputs(:svg, "x", [])
        |> then(fn [{:svg, _, io}] -> io end)
        |> svg_parse!()
        |> svg_frames()

      labels = for f <- frames, f.depth == 1, do: f.name
      assert labels == ["[root]", "MyApp.Cart"]
    end
  end

  describe "speedscope" do
    test "one file, base and new profiles, their stacks the diff's", %{by_process: diff} do
      json = diff |> Export.Diff.speedscope() |> json_decode!()
      names = for f <- json["shared"]["frames"], do: f["name"]

      assert for(p <- json["profiles"], do: p["name"]) == [
               "work base (profile \"work\") [root]",
               "work new (profile \"work\", scaled ×1.000) [root]",
               "work base (profile \"work\") MyApp.Cart",
               "work new (profile \"work\", scaled ×1.000) MyApp.Cart"
             ]

      [root_base, root_new | _] = json["profiles"]
      rows = diff.stacks[:root]

      assert Enum.sort(speedscope_stacks(root_base, names)) ==
               Enum.sort(for {s, b, _} <- rows, b > 0, do: {s, b})

      assert Enum.sort(speedscope_stacks(root_new, names)) ==
               Enum.sort(for {s, _, n} <- rows, n > 0, do: {s, n})
    end
  end

  describe "pprof" do
    test "two profiles, base and new, that decode; values the diff's", %{
      by_process: diff,
      dir: dir
    } do
      assert [pprof: base_path, pprof: new_path] = Export.write(diff, dir, [:pprof])
      assert Path.basename(base_path) == "work.base.pb.gz"
      assert Path.basename(new_path) == "work.new.pb.gz"

      for {path, index} <- [{base_path, 1}, {new_path, 2}] do
        pprof = path |> File.read!() |> pprof_decode!()
        assert pprof.sample_type == [{"wall", "microseconds"}]

        stacks =
          for sample <- pprof.samples, into: %{} do
            frames = sample.locations |> Enum.reverse() |> Enum.map(&pprof.functions[&1])
            {{sample.labels, Enum.join(frames, ";")}, hd(sample.values)}
          end

        expected =
          for {group, label} <- diff.groups,
              row <- diff.stacks[group],
              elem(row, index) > 0,
              into: %{},
              do: {{[{"process", label}], elem(row, 0)}, elem(row, index)}

        assert stacks == expected
      end
    end
  end

  describe "write" do
    test ":all writes every format a diff has, perfetto raises", %{diff: diff, dir: dir} do
      written = Export.write(diff, dir, :all)
      assert Keyword.keys(written) == [:folded, :svg, :speedscope, :pprof, :pprof]

      assert Enum.map(written, fn {_, p} -> Path.basename(p) end) ==
               ~w(work.diff.folded work.diff.svg work.diff.speedscope.json work.base.pb.gz work.new.pb.gz)

      for {_, path} <- written, do: assert(File.regular?(path))

      assert_raise ArgumentError, ~r/a diff has no timeline: :perfetto does not apply/, fn ->
        Export.write(diff, dir, [:folded, :perfetto])
      end

      assert_raise ArgumentError, ~r/:per_process does not apply/, fn ->
        Export.write(diff, dir, [:svg], per_process: true)
      end
    end
  end

  defp rgb(fill) do
    [_, r, g, b] = Regex.run(~r/\Argb\((\d+),(\d+),(\d+)\)\z/, fill)
    {String.to_integer(r), String.to_integer(g), String.to_integer(b)}
  end
end
