defmodule FlameOn.Client.SvgBrowserTest do
  # The SVG flame graph in a real browser (Debian's chromium, headless): it
  # renders its frames, and search highlights the matching ones. Fails,
  # naming the package, when chromium is not installed (scripts/test
  # installs it).
  use ExUnit.Case, async: false

  alias FlameOn.Client.Export
  alias FlameOn.Client.Test.Workloads

  @highlight ~s{fill="rgb(230,0,230)"}
  @search_script "<script><![CDATA[window.addEventListener(\"load\", " <>
                   "function () { search(\"fib\"); });]]></script>"

  defp chromium(args) do
    task =
      Task.async(fn ->
        System.cmd(
          FlameOn.Client.Test.Tools.executable_of!(~w(chromium chromium-browser), "chromium"),
          ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars" | args],
          stderr_to_stdout: true
        )
      end)

    Task.await(task, 90_000)
  end

  test "the SVG renders its frames and search highlights the matching ones" do
    {_, profile} = FlameOn.Client.profile(fn -> Workloads.mixed(30) end, name: "browser")

    dir =
      Path.join(System.tmp_dir!(), "flame_on_svg_browser_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    svg = IO.iodata_to_binary(Export.svg(profile))
    plain = Path.join(dir, "flame.svg")
    File.write!(plain, svg)

    # The same file with a search for "fib" run once the page has loaded
    # (what the Search button does after its prompt).
    searched = Path.join(dir, "flame_search.svg")

    File.write!(
      searched,
      String.replace(
        svg,
        "</svg>",
        @search_script <> "</svg>"
      )
    )

    screenshot = Path.join(dir, "flame_search.png")

    {_, 0} =
      chromium(["--window-size=1300,900", "--screenshot=#{screenshot}", "file://#{searched}"])

    assert File.stat!(screenshot).size > 1_000
    IO.puts("\nSVG screenshot (search /fib/): #{screenshot}")

    {dom, 0} = chromium(["--dump-dom", "file://#{searched}"])
    {plain_dom, 0} = chromium(["--dump-dom", "file://#{plain}"])

    # Rendered: the frames are in the live DOM, one <g> with a <title> and a <rect> each.
    frames = Regex.scan(~r/<g [^>]*data-x[^>]*>\s*<title>([^<]*)<\/title>\s*<rect [^>]*>/, dom)
    assert length(frames) > 10

    # Search: exactly the frames whose name matches /fib/ are highlighted.
    highlighted = for [g, title] <- frames, String.contains?(g, @highlight), do: title
    assert highlighted != []

    assert Enum.all?(highlighted, &(&1 =~ "fib")),
           inspect(Enum.reject(highlighted, &(&1 =~ "fib")))

    unmatched = for [g, title] <- frames, not (title =~ "fib"), do: g
    refute Enum.any?(unmatched, &String.contains?(&1, @highlight))
    assert dom =~ ~r/Matched \/fib\/: [\d,]+ µs, \d+\.\d\d%/
    refute plain_dom =~ @highlight
  end
end
