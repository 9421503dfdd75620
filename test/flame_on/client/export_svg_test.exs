defmodule FlameOn.Client.ExportSVGTest do
  use ExUnit.Case, async: true

  import FlameOn.Client.Test.ExportHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  @width 1200
  @inner 1180

  defp svg_bin(profile, opts \\ []), do: profile |> Export.svg(opts) |> IO.iodata_to_binary()

  # What the SVG's frames must be, computed from the stacks alone:
  # %{[root, process, frame, ...] => microseconds}.
  defp expected_tree(profile, root, labels) do
    for {pid, entries} <- profile.stacks, {stack, us} <- entries, reduce: %{} do
      acc ->
        path = [root, labels[pid] | split_stack(stack)]

        Enum.reduce(1..length(path), acc, fn n, acc ->
          Map.update(acc, Enum.take(path, n), us, &(&1 + us))
        end)
    end
  end

  # The SVG's frames as %{path => frame}, parents found by containment.
  defp svg_tree(frames) do
    frames
    |> Enum.sort_by(& &1.depth)
    |> Enum.reduce(%{}, fn f, acc ->
      parent =
        Enum.find(acc, fn {path, p} ->
          length(path) == f.depth and p.x_us <= f.x_us and f.x_us + f.us <= p.x_us + p.us
        end)

      path =
        case parent do
          nil -> [f.name]
          {path, _} -> path ++ [f.name]
        end

      assert not Map.has_key?(acc, path), "two frames at #{inspect(path)}"
      Map.put(acc, path, f)
    end)
  end

  # The name as it must read back from XML: controls XML cannot hold become U+FFFD.
  defp xml_text(name), do: String.replace(name, ~r/[\x00-\x08\x0B\x0C\x0E-\x1F]/, "\uFFFD")

  defp labels do
    {a, b, c} = pids()
    %{a => "<0.9001.0>", b => "my_server <0.9002.0>", c => "<0.9003.0>"}
  end

  describe "merged graph" do
    setup do
      profile = fixture_profile()
      svg = svg_bin(profile)
      %{profile: profile, svg: svg, doc: svg_parse!(svg)}
    end

    test "is well-formed XML with an svg root", %{doc: doc, svg: svg} do
      assert xmlElement(doc, :name) == :svg
      assert svg =~ ~s(xmlns="http://www.w3.org/2000/svg")
      assert attr(doc, "width") == "#{@width}"
    end

    test "is self-contained: no external reference", %{doc: doc, svg: svg} do
      attribute_names =
        for a <- xpath(doc, "//@*"), do: xmlAttribute(a, :name) |> Atom.to_string()

      refute Enum.any?(
               attribute_names,
               &(&1 in ["href", "xlink:href", "src"] or String.ends_with?(&1, ":href"))
             )

      assert Regex.scan(~r/https?:[^"\s]*/, svg) == [["http://www.w3.org/2000/svg"]]
      refute svg =~ "url("
      refute svg =~ "@import"
      refute svg =~ "<image"
      refute svg =~ "<foreignObject"
      assert [_script] = xpath(doc, "//script")
    end

    test "one rect with a title per frame, exactly the call tree", %{profile: profile, doc: doc} do
      frames = svg_frames(doc)

      for g <- xpath(doc, "//g[@id='frames']/g") do
        assert child(g, "title") && child(g, "rect") && child(g, "text")
      end

      tree = svg_tree(frames)
      expected = expected_tree(profile, "fixture", labels())
      expected = Map.new(expected, fn {path, us} -> {Enum.map(path, &xml_text/1), us} end)
      assert Map.new(tree, fn {path, f} -> {path, f.us} end) == expected
    end

    test "widths and positions are proportional to time", %{profile: profile, doc: doc} do
      total = total_us(profile)

      for f <- svg_frames(doc) do
        assert_in_delta f.width, f.us * @inner / total, 0.01
        assert_in_delta f.x, 10 + f.x_us * @inner / total, 0.01
      end
    end

    test "processes are one level below the root, traced process first", %{doc: doc} do
      frames = svg_frames(doc)
      assert [%{name: "fixture", x_us: 0}] = Enum.filter(frames, &(&1.depth == 0))

      level1 =
        frames |> Enum.filter(&(&1.depth == 1)) |> Enum.sort_by(& &1.x_us) |> Enum.map(& &1.name)

      assert level1 == ["<0.9001.0>", "my_server <0.9002.0>", "<0.9003.0>"]
    end

    test "titles give time, share and self time", %{profile: profile, doc: doc} do
      frames = svg_frames(doc)
      total = total_us(profile)
      root = Enum.find(frames, &(&1.depth == 0))
      assert root.title == "fixture (#{total} µs, 100.00%; self 0 µs)"

      [map] = Enum.filter(frames, &(&1.name == "lists:map/2"))
      share = :erlang.float_to_binary(90 * 100 / total, decimals: 2)
      assert map.title == "lists:map/2 (90 µs, #{share}%; self 50 µs)"

      [process_a] = Enum.filter(frames, &(&1.name == "<0.9001.0>"))
      assert process_a.title =~ "self 5 µs"
    end

    test "WAITING and SLEEP stand apart from the warm CPU frames", %{doc: doc} do
      frames = svg_frames(doc)

      fills = fn name ->
        frames |> Enum.filter(&(&1.name == name)) |> Enum.map(& &1.fill) |> Enum.uniq()
      end

      assert fills.("WAITING") == ["rgb(80,140,230)"]
      assert fills.("SLEEP") == ["rgb(165,165,165)"]

      for f <- frames,
          f.depth >= 2,
          f.name not in ["WAITING", "SLEEP", "RUNNABLE", "GC_MINOR", "GC_MAJOR", "…"] do
        [r, g, b] =
          Regex.run(~r/rgb\((\d+),(\d+),(\d+)\)/, f.fill, capture: :all_but_first)
          |> Enum.map(&String.to_integer/1)

        assert r >= 205 and g <= 230 and b <= 55, "#{f.name} is #{f.fill}"
      end

      # The same name has the same colour everywhere.
      for {_name, fs} <- Enum.group_by(frames, & &1.name),
          do: assert(length(Enum.uniq_by(fs, & &1.fill)) == 1)
    end

    test "names that need escaping read back intact", %{doc: doc, svg: svg} do
      names = doc |> svg_frames() |> Enum.map(& &1.name)
      for name <- nasty_frames(), do: assert(xml_text(name) in names, "#{inspect(name)} missing")
      assert svg =~ "&lt;tag&gt; &amp; &apos;apos&apos;/0"
      assert svg =~ "App.&quot;quoted&quot;/1"
    end

    test "has the interactive parts", %{doc: doc} do
      for id <- ~w(details search matched unzoom title frames) do
        assert [_] = xpath(doc, "//*[@id='#{id}']"), "no ##{id}"
      end

      assert attr(doc, "onload") == "init(evt)"
      script = doc |> xpath("//script") |> hd() |> text()
      for f <- ~w(init zoom search fit place), do: assert(script =~ "function #{f}(")
    end

    test "labels fit their rectangles", %{doc: doc} do
      for g <- xpath(doc, "//g[@id='frames']/g") do
        label = g |> child("text") |> text()
        width = g |> child("rect") |> attr("width") |> String.to_float()
        assert String.length(label) * 12 * 0.59 <= width
      end
    end
  end

  describe "per process" do
    test "svgs/2 and per_process: true give one graph per pid" do
      profile = fixture_profile()
      graphs = Export.svgs(profile)
      assert Map.keys(graphs) |> Enum.sort() == Map.keys(profile.stacks) |> Enum.sort()
      assert Export.svg(profile, per_process: true) == graphs

      for {pid, svg} <- graphs do
        frames = svg |> svg_parse!() |> svg_frames()
        assert [root] = Enum.filter(frames, &(&1.depth == 0))
        assert root.name == "fixture " <> labels()[pid]
        assert root.us == Profile.total_us(profile, pid)

        expected =
          profile
          |> Map.update!(:stacks, &Map.take(&1, [pid]))
          |> expected_tree("fixture", labels())
          |> Enum.flat_map(fn
            {[_root], _us} ->
              []

            {[_root, label | rest], us} ->
              [{[Enum.join(["fixture", label], " ") | Enum.map(rest, &xml_text/1)], us}]
          end)
          |> Map.new()

        assert Map.new(svg_tree(frames), fn {path, f} -> {path, f.us} end) == expected
      end
    end
  end

  describe "options and edge cases" do
    test "min_width leaves out frames too narrow to see" do
      {a, _, _} = pids()

      profile = %Profile{
        name: "p",
        pid: a,
        stacks: %{a => [{"big", 10_000_000}, {"big;tiny", 1}]}
      }

      names = fn opts ->
        profile |> svg_bin(opts) |> svg_parse!() |> svg_frames() |> Enum.map(& &1.name)
      end

      refute "tiny" in names.([])
      assert "tiny" in names.(min_width: 0)
    end

    test "width, title, frame_height" do
      svg = svg_bin(fixture_profile(), width: 600, title: "A <title>", frame_height: 20)
      doc = svg_parse!(svg)
      assert attr(doc, "width") == "600"
      assert doc |> xpath("//*[@id='title']") |> hd() |> text() == "A <title>"
      [rect | _] = xpath(doc, "//g[@id='frames']/g/rect")
      assert attr(rect, "height") == "19"
    end

    test "bad options raise ArgumentError" do
      for opts <- [[width: 10], [min_width: -1], [per_process: 1], [title: :x], [colour: :red]] do
        assert_raise ArgumentError, fn -> Export.svg(fixture_profile(), opts) end
      end
    end

    test "an empty profile is a valid SVG that says so" do
      svg = svg_bin(%Profile{name: "empty"})
      doc = svg_parse!(svg)
      assert svg_frames(doc) == []
      assert svg =~ "no samples"
      assert Export.svgs(%Profile{name: "empty"}) == %{}
    end

    test "XML escaping of text" do
      esc = fn s -> s |> FlameOn.Client.Export.SVG.escape() |> IO.iodata_to_binary() end
      assert esc.("plain") == "plain"
      assert esc.(~S(<a href="x">&'</a>)) == "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;"
      assert esc.("tab\tnl\n…") == "tab\tnl\n…"
      assert esc.(<<"bad", 0xFF, "x", 0>>) == "bad\uFFFDx\uFFFD"
      assert esc.(<<0xEF, 0xBF, 0xBE>>) == "\uFFFD"
    end
  end

  describe "the embedded script" do
    # Runs the script in node against a minimal DOM (Debian's nodejs).
    test "hover, zoom, unzoom and search" do
      node = FlameOn.Client.Test.Tools.executable!("node", "nodejs")
      profile = fixture_profile()
      result = run_script(node, svg_bin(profile), System.tmp_dir!())
      check_script_result(result, profile)
    end
  end

  # Runs the SVG's script in node against a minimal DOM built from the
  # parsed SVG, and returns what it recorded (see the harness below).
  defp run_script(node, svg, dir) do
    doc = svg_parse!(svg)
    script = doc |> xpath("//script") |> hd() |> text()

    frames =
      for g <- xpath(doc, "//g[@id='frames']/g") do
        rect = child(g, "rect")

        %{
          "attrs" => %{
            "data-x" => attr(g, "data-x"),
            "data-w" => attr(g, "data-w"),
            "data-d" => attr(g, "data-d")
          },
          "title" => g |> child("title") |> text(),
          "rect" => %{
            "x" => attr(rect, "x"),
            "width" => attr(rect, "width"),
            "fill" => attr(rect, "fill")
          },
          "text" => g |> child("text") |> text()
        }
      end

    details = doc |> xpath("//*[@id='details']") |> hd() |> text()

    data =
      FlameOn.Client.Export.JSON.encode!(%{frames: frames, details: details})
      |> IO.iodata_to_binary()

    path = Path.join(dir, "flame_on_svg_#{System.unique_integer([:positive])}.js")
    File.write!(path, [harness(data), "\n", script, "\nrun();\n"])

    try do
      {out, 0} = System.cmd(node, [path], stderr_to_stdout: true)
      json_decode!(out)
    after
      File.rm(path)
    end
  end

  defp harness(data) do
    """
    var DATA = #{data};
    function El(tag, attrs, text) { this.tag = tag; this.attrs = attrs || {}; this.children = []; this.textContent = text || ""; this.parentNode = null; this.on = {}; }
    El.prototype.getAttribute = function (n) { return n in this.attrs ? this.attrs[n] : null; };
    El.prototype.setAttribute = function (n, v) { this.attrs[n] = String(v); };
    El.prototype.addEventListener = function (t, f) { this.on[t] = f; };
    El.prototype.add = function (c) { c.parentNode = this; this.children.push(c); return c; };
    El.prototype.getElementsByTagName = function (t) {
      var out = [];
      (function walk(e) { e.children.forEach(function (c) { if (c.tag === t) out.push(c); walk(c); }); })(this);
      return out;
    };
    var ids = {details: new El("text", {}, DATA.details), matched: new El("text", {}, " "),
               search: new El("text", {}, "Search"), unzoom: new El("text", {"class": "h"}, "Reset Zoom"),
               frames: new El("g", {id: "frames"})};
    var docListeners = {};
    var document = {getElementById: function (id) { return ids[id]; },
                    addEventListener: function (t, f) { docListeners[t] = f; }};
    var answer = null;
    var window = {prompt: function () { return answer; }, alert: function (m) { throw new Error(m); }};
    var gs = DATA.frames.map(function (f) {
      var g = ids.frames.add(new El("g", f.attrs));
      g.add(new El("title", {}, f.title));
      g.add(new El("rect", f.rect));
      g.add(new El("text", {x: f.rect.x}, f.text));
      return g;
    });
    function state() {
      return gs.map(function (g) {
        var r = g.children[1];
        return {cls: g.getAttribute("class") || "", x: +r.getAttribute("x"), width: +r.getAttribute("width"),
                fill: r.getAttribute("fill"), label: g.children[2].textContent};
      });
    }
    function find(name) {
      for (var i = 0; i < gs.length; i++) if (gs[i].children[0].textContent.indexOf(name + " (") === 0) return i;
      throw new Error("no frame " + name);
    }
    function run() {
      init({});
      var out = {initial: state()};
      var box = ids.frames, map = find("lists:map/2");
      box.on.mouseover({target: gs[map].children[1]});
      out.hover = ids.details.textContent;
      box.on.mouseout({target: gs[map].children[1]});
      out.unhover = ids.details.textContent;
      box.on.click({target: gs[map].children[1]});
      out.zoomed = state();
      out.unzoomClass = ids.unzoom.getAttribute("class");
      box.on.click({target: gs[find("fixture")].children[2]});
      out.reset = state();
      out.resetUnzoomClass = ids.unzoom.getAttribute("class");
      answer = "WAITING";
      docListeners.keydown({key: "/", preventDefault: function () {}});
      out.searched = state();
      out.matched = ids.matched.textContent;
      out.searchLabel = ids.search.textContent;
      docListeners.keydown({key: "Escape", preventDefault: function () {}});
      out.cleared = state();
      out.clearedMatched = ids.matched.textContent;
      answer = "^App";
      ids.search.on.click({});
      out.appMatched = ids.matched.textContent;
      console.log(JSON.stringify(out));
    }
    """
  end

  defp check_script_result(r, profile) do
    frames = svg_parse!(svg_bin(profile)) |> svg_frames()
    names = Enum.map(frames, & &1.name)
    total = total_us(profile)
    idx = fn name -> Enum.find_index(names, &(&1 == name)) end
    map = Enum.at(frames, idx.("lists:map/2"))

    assert r["hover"] == map.title
    assert r["unhover"] =~ "Click a frame"

    # Zoomed into lists:map/2: it spans the width, its child scales with it,
    # its ancestors stay full width and faded, the rest is hidden.
    zoomed = r["zoomed"]
    z = Enum.at(zoomed, idx.("lists:map/2"))
    assert z["cls"] == "" and and_in(z["x"], 10) and and_in(z["width"], @inner)
    step = Enum.at(zoomed, idx.("App.step/1"))
    assert step["cls"] == ""
    assert_in_delta step["width"], 40 / 90 * @inner, 0.01

    for name <- ["fixture", "<0.9001.0>", "App.run/0"] do
      a = Enum.at(zoomed, idx.(name))
      assert a["cls"] == "p" and and_in(a["width"], @inner)
    end

    for name <- ["my_server <0.9002.0>", "Leaf.work/0", "SLEEP"] do
      assert Enum.at(zoomed, idx.(name))["cls"] == "h"
    end

    assert r["unzoomClass"] == ""

    # Clicking the root puts everything back as it was drawn.
    assert r["resetUnzoomClass"] == "h"

    for {before, now} <- Enum.zip(r["initial"], r["reset"]) do
      assert now["cls"] == ""
      assert_in_delta now["x"], before["x"], 0.01
      assert_in_delta now["width"], before["width"], 0.01
      assert now["label"] == before["label"]
    end

    # Search: WAITING frames highlighted, their share shown; Escape clears.
    waiting_us = 20 + 10
    pct = :erlang.float_to_binary(waiting_us * 100 / total, decimals: 2)
    assert r["matched"] == "Matched /WAITING/: #{waiting_us} µs, #{pct}%"
    assert r["searchLabel"] == "Reset Search"

    for {f, s} <- Enum.zip(frames, r["searched"]) do
      if f.name == "WAITING",
        do: assert(s["fill"] == "rgb(230,0,230)"),
        else: assert(s["fill"] == f.fill)
    end

    for {f, s} <- Enum.zip(frames, r["cleared"]), do: assert(s["fill"] == f.fill)
    assert r["clearedMatched"] == " "

    # Nested matches count once: App.run/0 contains App.step/1.
    app_us = 100 + 20 + 30 + 50 + 40 + 7
    pct = :erlang.float_to_binary(app_us * 100 / total, decimals: 2)
    assert r["appMatched"] == "Matched /^App/: #{app_us} µs, #{pct}%"
  end

  defp and_in(value, expected), do: abs(value - expected) < 0.01
end
