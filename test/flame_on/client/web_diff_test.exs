defmodule FlameOn.Client.WebDiffTest.Work do
  @moduledoc false
  # Three functions, each counting down on itself (its own self time, no
  # other call): the two traces compared run them for different counts.
  def run(grows, shrinks, steady) do
    grows(grows * 1000)
    shrinks(shrinks * 1000)
    steady(steady * 1000)
    :ok
  end

  def grows(0), do: :ok
  def grows(n), do: grows(n - 1)
  def shrinks(0), do: :ok
  def shrinks(n), do: shrinks(n - 1)
  def steady(0), do: :ok
  def steady(n), do: steady(n - 1)
end

defmodule FlameOn.Client.WebDiffTest do
  # Two traces of the web UI compared (/diff): chosen on the list or from
  # a trace's page, the diff's flame graph inline (red grew, blue shrank),
  # the self-time tables, the normalisation switch, the downloads, and the
  # error pages. Over real HTTP, against traces of real runs in the store.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Diff
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web
  alias FlameOn.Client.WebDiffTest.Work

  @work "FlameOn.Client.WebDiffTest.Work"

  setup do
    ensure_app_started()
    assert_node_clean()
    TraceStore.clear()
    {:ok, url} = Web.start(port: 0)
    on_exit(fn -> Web.stop(url) end)

    # grows 4x, shrinks to a quarter, steady the same (and the most, so
    # that the median normalisation leaves it as it is)
    base = traced!("checkout <run>", fn -> Work.run(5, 20, 40) end)
    new = traced!("checkout <run>", fn -> Work.run(20, 5, 40) end)
    %{url: url, base: base, new: new}
  end

  defp traced!(name, fun) do
    {_, profile} = FlameOn.Client.profile(fun, name: name)
    {:ok, id} = TraceStore.put(profile)
    %{profile | trace_id: id}
  end

  # --- a small HTTP client --------------------------------------------------------

  import FlameOn.Client.Test.WebClient, only: [get: 2]

  # The fill of the diff SVG's frame whose title starts with `function`.
  defp fill(svg, function) do
    [_, fill] =
      Regex.run(
        ~r{<title>#{Regex.escape(function)} \(base [^<]*</title><rect [^>]*fill="([^"]+)"},
        svg
      )

    fill
  end

  defp rgb(fill) do
    [r, g, b] = Regex.run(~r/rgb\((\d+),(\d+),(\d+)\)/, fill, capture: :all_but_first)
    Enum.map([r, g, b], &String.to_integer/1)
  end

  # A table's rows as [[cell text]], header row left out.
  defp table(body, id) do
    [_, table] = Regex.run(~r{<table id="#{id}">(.*?)</table>}s, body)

    table
    |> String.split("<tr>", trim: true)
    |> Enum.drop(1)
    |> Enum.map(fn row ->
      Regex.scan(~r{<td[^>]*>(.*?)</td>}s, row, capture: :all_but_first)
      |> Enum.map(fn [cell] -> cell |> String.replace(~r/<[^>]+>/, "") end)
    end)
  end

  test "the list is a form that picks a base and a new trace for /diff", ctx do
    %{url: url, base: base, new: new} = ctx
    {200, _, body} = get(url, "/")
    assert body =~ ~s(<form method="get" action="/diff" id="compare-form">)
    # the newest is the new one, the other run of its name the base
    assert body =~
             ~s(name="base" value="#{base.trace_id}" aria-label="base #{base.trace_id}" checked)

    assert body =~ ~s(name="new" value="#{new.trace_id}" aria-label="new #{new.trace_id}" checked)
    assert body =~ ~s(<select name="normalize"><option value="median">)
    assert body =~ ~s(id="compare-submit")
    # no inline handler anywhere: the strict CSP would not run it
    refute body =~ ~r/ on[a-z]+=/
  end

  test "a trace's page links to its diff with the other run of its name", ctx do
    %{url: url, base: base, new: new} = ctx
    _other = traced!("another name", fn -> Work.run(1, 1, 1) end)
    {200, _, body} = get(url, "/traces/#{new.trace_id}")
    [_, links] = Regex.run(~r{<p class="procs" id="compare">(.*?)</p>}s, body)
    assert links =~ ~s(href="/diff?base=#{base.trace_id}&amp;new=#{new.trace_id}")
    assert [_] = Regex.scan(~r/<a /, links)

    {200, _, body} = get(url, "/traces/#{base.trace_id}")
    assert body =~ ~s(href="/diff?base=#{base.trace_id}&amp;new=#{new.trace_id}")
  end

  test "/diff: both traces, the flame graph red where it grew and blue where it shrank, the tables",
       ctx do
    %{url: url, base: base, new: new} = ctx
    {200, headers, body} = get(url, "/diff?base=#{base.trace_id}&new=#{new.trace_id}")
    assert headers["content-security-policy"] =~ "script-src 'nonce-"
    refute headers["content-security-policy"] =~ "unsafe-inline"

    # both traces, escaped
    assert body =~ "<h1>Diff: checkout &lt;run&gt;</h1>"
    refute body =~ "checkout <run>"
    assert body =~ ~s(<tr id="diff-base"><th>Base</th><td><a href="/traces/#{base.trace_id}">)
    assert body =~ ~s(<tr id="diff-new"><th>New</th><td><a href="/traces/#{new.trace_id}">)
    assert body =~ "Normalised: the new run scaled ×"

    assert body =~
             ~s(<a class="current" href="/diff?base=#{base.trace_id}&amp;new=#{new.trace_id}&amp;normalize=median">median</a>)

    refute body =~ "same-trace"

    # the SVG inline, its script and style under the page's nonce
    [_, nonce] = Regex.run(~r/script-src 'nonce-([^']+)'/, headers["content-security-policy"])
    assert body =~ "<svg"
    refute body =~ ~s(onload=)
    assert body =~ ~s[<script nonce="#{nonce}">init(null);</script>]
    assert [_ | _] = Regex.scan(~r/<script nonce="#{nonce}"/, body)
    refute body =~ ~r/<script>/

    [gr, gg, gb] = rgb(fill(body, "#{@work}.grows/1"))
    assert gr == 255 and gg < 200 and gb == gg, "grows/1: red"
    [sr, sg, sb] = rgb(fill(body, "#{@work}.shrinks/1"))
    assert sb == 255 and sr < 200 and sg == sr, "shrinks/1: blue"
    # unchanged within a few percent: grey or pale
    assert Enum.min(rgb(fill(body, "#{@work}.steady/1"))) >= 180, "steady/1: pale"

    # the self-time tables: grows/1 grew most, shrinks/1 shrank most
    assert [["#{@work}.grows/1", _b, _n, "+" <> _, "+" <> _] | _] = table(body, "grown")
    assert [["#{@work}.shrinks/1", _b, _n, "-" <> _, "-" <> _] | _] = table(body, "shrunk")
    refute Enum.any?(table(body, "grown"), &(hd(&1) == "#{@work}.shrinks/1"))

    # the same, absolute
    {200, _, none} = get(url, "/diff?base=#{base.trace_id}&new=#{new.trace_id}&normalize=none")

    assert none =~ "Normalised: none: absolute values"

    assert none =~
             ~s(<a class="current" href="/diff?base=#{base.trace_id}&amp;new=#{new.trace_id}&amp;normalize=none">none</a>)

    [r, _, _] = rgb(fill(none, "#{@work}.grows/1"))
    assert r == 255
  end

  test "the downloads are the diff's files", ctx do
    %{url: url, base: base, new: new} = ctx
    query = "base=#{base.trace_id}&new=#{new.trace_id}&normalize=total"
    {200, _, body} = get(url, "/diff?" <> query)
    escaped = String.replace(query, "&", "&amp;")

    for name <- ~w(folded svg speedscope pprof-base pprof-new) do
      assert body =~ ~s(<a href="/diff/download/#{name}?#{escaped}" download>)
    end

    assert body =~
             "go tool pprof -diff_base=checkout_run_.base.pb.gz checkout_run_.new.pb.gz"

    diff = FlameOn.Client.diff(base, new, normalize: :total)

    {200, headers, folded} = get(url, "/diff/download/folded?" <> query)
    assert headers["content-type"] =~ "text/plain"
    assert headers["content-disposition"] == ~s(attachment; filename="checkout_run_.diff.folded")
    assert folded == IO.iodata_to_binary(Diff.folded(diff))
    assert folded =~ ~r/#{Regex.escape(@work)}\.grows\/1 \d+ \d+\n/

    {200, headers, svg} = get(url, "/diff/download/svg?" <> query)
    assert headers["content-type"] == "image/svg+xml"
    assert svg =~ ~s[onload="init(evt)"]
    assert [255 | _] = rgb(fill(svg, "#{@work}.grows/1"))

    {200, _, speedscope} = get(url, "/diff/download/speedscope?" <> query)
    json = FlameOn.Client.Test.ExportHelpers.json_decode!(speedscope)

    assert [%{"name" => "checkout <run> base" <> _}, %{"name" => "checkout <run> new" <> _}] =
             json["profiles"]

    for side <- ["base", "new"] do
      {200, headers, pprof} = get(url, "/diff/download/pprof-#{side}?" <> query)
      assert headers["content-disposition"] =~ ~s(filename="checkout_run_.#{side}.pb.gz")
      assert byte_size(:zlib.gunzip(pprof)) > 0
    end

    assert {404, _, _} = get(url, "/diff/download/exe?" <> query)
  end

  test "errors: a trace not in the store, a missing side, a bad normalisation", ctx do
    %{url: url, base: base, new: new} = ctx
    assert {404, _, body} = get(url, "/diff?base=#{base.trace_id}&new=999999")
    assert body =~ ~s(id="error-message")
    assert body =~ "no trace 999999 in the store"
    assert {404, _, _} = get(url, "/diff?base=abc&new=#{new.trace_id}")
    assert {404, _, _} = get(url, "/diff/download/folded?base=1&new=2")
    assert {400, _, body} = get(url, "/diff?base=#{base.trace_id}")
    assert body =~ "choose a base and a new trace"
    assert {400, _, body} = get(url, "/diff?base=1&new=2&normalize=%3Cb%3E")
    assert body =~ "normalize must be one of median, total, none, got: &quot;&lt;b&gt;&quot;"
    refute body =~ "<b>"
  end

  test "the same trace twice: allowed, and the page says nothing changed", ctx do
    %{url: url, new: new} = ctx
    {200, _, body} = get(url, "/diff?base=#{new.trace_id}&new=#{new.trace_id}")
    assert body =~ ~s(id="same-trace")
    assert body =~ "the same trace"
    assert body =~ ~s(<p class="hint" id="grown">None.</p>)
    assert body =~ ~s(<p class="hint" id="shrunk">None.</p>)
  end

  # --- headless chromium ------------------------------------------------------------

  test "chromium: Compare on the list opens the diff, whose flame graph renders and searches",
       ctx do
    browser = FlameOn.Client.Test.Chromium.start!()
    alias FlameOn.Client.Test.Chromium

    try do
      page = Chromium.open!(browser, ctx.url)
      Chromium.click!(page, "#compare-submit")

      Chromium.wait_for!(
        page,
        "location.pathname == '/diff' && document.getElementById('frames')"
      )

      query = URI.decode_query(String.trim_leading(Chromium.eval!(page, "location.search"), "?"))

      assert query == %{
               "base" => "#{ctx.base.trace_id}",
               "new" => "#{ctx.new.trace_id}",
               "normalize" => "median"
             }

      assert Chromium.eval!(page, "document.querySelectorAll('#frames g').length") >= 4
      # the SVG's script ran under the page's CSP: search answers
      Chromium.eval!(page, "search('grows')")

      assert Chromium.eval!(page, "document.getElementById('matched').textContent") =~
               ~r/Matched \/grows\//

      assert Chromium.eval!(page, "document.querySelectorAll('#grown tr').length") >= 2

      screenshot =
        Path.join(
          System.tmp_dir!(),
          "flame_on_web_diff_#{System.unique_integer([:positive])}.png"
        )

      Chromium.eval!(page, "search(null); window.scrollTo(0, 0)")
      Chromium.screenshot!(page, screenshot)
      assert File.stat!(screenshot).size > 10_000
      IO.puts("\nweb UI diff page screenshot: #{screenshot}")
    after
      Chromium.stop(browser)
    end
  end
end
