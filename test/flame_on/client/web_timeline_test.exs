defmodule FlameOn.Client.WebTimelineTest.Work do
  @moduledoc false
  # One process, two phases: in :a it runs PhaseA.spin/1 only; in :b
  # mostly PhaseB.spin/1 and a tenth as much PhaseA.spin/1, from the same
  # frames (loop/1), so that A's stacks are in both ranges and shrink.
  alias FlameOn.Client.WebTimelineTest.{PhaseA, PhaseB}

  def loop(phase) do
    receive do
      {:phase, next} -> loop(next)
      {:stop, from} -> send(from, :stopped)
    after
      0 ->
        step(phase)
        loop(phase)
    end
  end

  def step(:a), do: PhaseA.spin(5_000)

  def step(:b) do
    PhaseB.spin(5_000)
    PhaseA.spin(500)
  end
end

defmodule FlameOn.Client.WebTimelineTest.PhaseA do
  @moduledoc false
  def spin(0), do: :ok

  def spin(n) do
    _ = :erlang.phash2({n, :a})
    spin(n - 1)
  end
end

defmodule FlameOn.Client.WebTimelineTest.PhaseB do
  @moduledoc false
  def spin(0), do: :ok

  def spin(n) do
    _ = :erlang.phash2({n, :b})
    spin(n - 1)
  end
end

defmodule FlameOn.Client.WebTimelineTest do
  # The continuous-profiling timeline of the web UI (/timeline), over real
  # HTTP, against a ring of 200 ms windows of a workload that changes
  # phase: the bars, range A's flame graph, B's diff against A, the
  # downloads, the error pages, and (headless chromium) drag to pick.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers
  import FlameOn.Client.Test.WebClient

  alias FlameOn.Client.Continuous
  alias FlameOn.Client.Web
  alias FlameOn.Client.WebTimelineTest.Work

  @a "FlameOn.Client.WebTimelineTest.PhaseA.spin/1"
  @b "FlameOn.Client.WebTimelineTest.PhaseB.spin/1"

  # One run of the workload for every test of the module: three seconds
  # of one busy process.
  setup_all do
    ensure_app_started()
    Continuous.stop()
    {:ok, _} = Continuous.start(window_ms: 200, hz: 200)
    {:ok, url} = Web.start(port: 0)

    on_exit(fn ->
      Web.stop(url)
      Continuous.stop()
    end)

    t0 = System.os_time(:millisecond)
    worker = spawn(Work, :loop, [:a])
    Process.sleep(1_500)
    switch = System.os_time(:millisecond)
    send(worker, {:phase, :b})
    Process.sleep(1_500)
    t1 = System.os_time(:millisecond)
    send(worker, {:stop, self()})
    assert_receive :stopped, 5_000
    Process.sleep(500)

    # range A ends, range B starts, at window edges on either side of the
    # switch (a range takes every window it overlaps)
    windows = Continuous.windows()
    %{to: a_to} = windows |> Enum.filter(&(&1.to <= switch)) |> List.last()
    %{from: b_from} = Enum.find(windows, &(&1.from >= switch))

    worker =
      worker |> :erlang.pid_to_list() |> to_string() |> String.trim("<") |> String.trim(">")

    %{url: url, a: {t0, a_to}, b: {b_from, t1}, worker: worker}
  end

  defp query({a_from, a_to}, b \\ nil, extra \\ "") do
    b = if b, do: "&b_from=#{elem(b, 0)}&b_to=#{elem(b, 1)}", else: ""
    "a_from=#{a_from}&a_to=#{a_to}" <> b <> extra
  end

  # The fill of the diff SVG's frame of `function` that is widest on the
  # `side` (:base or :new): a function's frames under other parents are
  # thinner and may change otherwise.
  defp fill(svg, function, side) do
    frames =
      Regex.scan(
        ~r{<title>#{Regex.escape(function)} \(base ([\d,]+) µs, new ([\d,]+) µs[^<]*</title><rect [^>]*fill="rgb\((\d+),(\d+),(\d+)\)"},
        svg,
        capture: :all_but_first
      )
      |> Enum.map(fn fields ->
        [base, new | rgb] = Enum.map(fields, &String.to_integer(String.replace(&1, ",", "")))
        {if(side == :base, do: base, else: new), rgb}
      end)

    assert frames != [], "no frame of #{function}"
    frames |> Enum.max() |> elem(1)
  end

  # the flame graph's part of the page
  defp flame(body) do
    [_, flame] = Regex.run(~r{<div class="flame" id="flame">(.*?)</div>}s, body)
    flame
  end

  test "the index links the timeline, which draws a bar per window, each a link", %{url: url} do
    {200, _, index} = get(url, "/")
    assert index =~ ~s{<a href="/timeline">Continuous profiling</a> (running, }

    {200, headers, body} = get(url, "/timeline")
    windows = Continuous.windows()
    assert headers["content-security-policy"] =~ "script-src 'nonce-"
    assert body =~ ~s{id="timeline-status">Running (200 Hz, the 20 busiest processes}
    assert body =~ ~s(<svg id="timeline" class="timeline")

    bars =
      Regex.scan(
        ~r{<a class="win[^"]*" href="/timeline\?a_from=(\d+)&amp;a_to=(\d+)" data-i="(\d+)"},
        body,
        capture: :all_but_first
      )

    # every window closed by the time of the request, oldest first
    assert length(bars) >= 10
    froms = for [from, _to, _i] <- bars, do: String.to_integer(from)
    assert froms == Enum.take(Enum.map(windows, & &1.from), length(froms))

    assert Enum.map(bars, &String.to_integer(List.last(&1))) ==
             Enum.to_list(0..(length(bars) - 1))

    # the busiest windows are tall bars, with their samples in the title
    assert body =~ ~r{<title>\d\d:\d\d:\d\d[.\d]*-\d\d:\d\d:\d\d[.\d]* · [1-9]\d* samples · }

    # the form, nothing picked yet, and the drag script under the nonce
    assert body =~ ~s(<form class="capture" id="range-form" method="get" action="/timeline">)
    assert body =~ ~s(id="timeline-all">All windows</a>)
    # the ring holds seconds, not a minute
    refute body =~ "Last minute"
    refute body =~ ~s(id="flame")
    [_, nonce] = Regex.run(~r/script-src 'nonce-([^']+)'/, headers["content-security-policy"])
    assert body =~ ~s(<script nonce="#{nonce}">)
    refute body =~ ~r/<script>/
    refute body =~ ~r/ on[a-z]+=/
    refute body =~ ~r/ style=/
  end

  test "range A: its flame graph shows phase A's function and not B's, and downloads", ctx do
    %{url: url, a: a} = ctx
    {200, _, body} = get(url, "/timeline?" <> query(a))
    assert body =~ ~s(<h2 id="range-a">Range A: )
    assert body =~ ~s(<table class="facts" id="range-facts">)
    flame = flame(body)
    assert flame =~ "<svg"
    assert flame =~ @a
    refute body =~ @b
    # the picked windows are drawn as A
    assert body =~ ~s(<a class="win in-a")
    refute body =~ ~r/class="win[^"]*in-b/

    escaped = String.replace(query(a), "&", "&amp;")

    for format <- ~w(folded speedscope perfetto pprof svg) do
      assert body =~ ~s(<a href="/timeline/download/#{format}?#{escaped}" download>)
    end

    {200, headers, folded} = get(url, "/timeline/download/folded?" <> query(a))
    assert headers["content-disposition"] =~ ~r/filename="continuous_[0-9_.-]+\.folded"/
    assert folded =~ @a
    refute folded =~ @b

    {200, _, pprof} = get(url, "/timeline/download/pprof?" <> query(a))
    assert byte_size(:zlib.gunzip(pprof)) > 0
    assert {404, _, _} = get(url, "/timeline/download/exe?" <> query(a))

    # the worker's stacks alone
    {200, _, body} = get(url, "/timeline?" <> query(a, nil, "&pid=#{ctx.worker}"))

    assert body =~
             ~r{<a class="current" href="/timeline\?a_from=\d+&amp;a_to=\d+&amp;pid=#{ctx.worker}">}

    assert flame(body) =~ @a

    # B's range the other way round has both (B mostly), and a link to its
    # diff against the range as long before it
    {200, _, body} = get(url, "/timeline?" <> query(ctx.b))
    assert flame(body) =~ @b

    [_, before] =
      Regex.run(~r{<p class="procs" id="compare-before"><a href="/timeline\?([^"]+)">}, body)

    {200, _, diff} = get(url, "/timeline?" <> String.replace(before, "&amp;", "&"))
    assert diff =~ ~s(<table class="facts" id="diff-ranges">)
    [_, grown] = Regex.run(~r{<table id="grown">(.*?)</table>}s, diff)
    assert grown =~ @b
  end

  test "ranges A and B: B's diff against A, B's function red and A's blue", ctx do
    %{url: url, a: a, b: b} = ctx
    {200, headers, body} = get(url, "/timeline?" <> query(a, b, "&normalize=none"))
    assert headers["content-security-policy"] =~ "script-src 'nonce-"
    assert body =~ ~s(<table class="facts" id="diff-ranges">)
    assert body =~ "<th>Base (A)</th>"
    assert body =~ "Normalised: none: absolute values"
    assert body =~ ~s(<a class="win in-b")

    [br, bg, bb] = fill(body, @b, :new)
    assert br == 255 and bg < 200 and bb == bg, "#{@b}: red"
    [ar, ag, ab] = fill(body, @a, :base)
    assert ab == 255 and ar < 200 and ag == ar, "#{@a}: blue"

    [_, grown] = Regex.run(~r{<table id="grown">(.*?)</table>}s, body)
    assert grown =~ @b
    [_, shrunk] = Regex.run(~r{<table id="shrunk">(.*?)</table>}s, body)
    assert shrunk =~ @a

    # the normalisation links and the downloads stay on the timeline
    escaped = String.replace(query(a, b), "&", "&amp;")
    assert body =~ ~s(<a href="/timeline?#{escaped}&amp;normalize=total">total</a>)

    for name <- ~w(folded svg speedscope pprof-base pprof-new) do
      assert body =~
               ~s(<a href="/timeline/download/#{name}?#{escaped}&amp;normalize=none" download>)
    end

    {200, headers, folded} = get(url, "/timeline/download/folded?" <> query(a, b))

    assert headers["content-disposition"] =~
             ~r/filename="continuous_[0-9_.-]+_vs_[0-9_.-]+\.diff\.folded"/

    assert folded =~ ~r/#{Regex.escape(@b)}[^\n]* 0 [1-9]\d*\n/

    # the same range twice: nothing changed
    {200, _, same} = get(url, "/timeline?" <> query(a, a))
    assert same =~ ~s(id="same-range")
  end

  test "bad ranges are a 400 with the reason, escaped", ctx do
    %{url: url, a: {a_from, a_to}, b: b} = ctx

    for {path, message} <- [
          {"/timeline?a_from=abc&a_to=#{a_to}", "a_from must be a time in Unix milliseconds"},
          {"/timeline?a_from=#{a_to}&a_to=#{a_from}", "range A is empty"},
          {"/timeline?a_from=#{a_from}&a_to=#{a_from}", "range A is empty"},
          {"/timeline?a_from=#{a_from}", "range A needs both a_from and a_to"},
          {"/timeline?a_from=1&a_to=2", "range A (1 to 2, Unix ms) holds no window of the ring"},
          {"/timeline?b_from=#{elem(b, 0)}&b_to=#{elem(b, 1)}",
           "range B is compared with range A"},
          {"/timeline?" <> query({a_from, a_to}, {1, 2}),
           "range B (1 to 2, Unix ms) holds no window"},
          {"/timeline?" <> query({a_from, a_to}, b, "&normalize=%3Cb%3E"),
           "normalize must be one of median, total, none, got: &quot;&lt;b&gt;&quot;"},
          {"/timeline?" <> query({a_from, a_to}, nil, "&pid=0.0.0"),
           "no process &quot;0.0.0&quot; in range A"},
          {"/timeline?" <> query({a_from, a_to}, b, "&pid=#{ctx.worker}"),
           "is for range A alone, not for a diff"},
          {"/timeline?a_from=%3Cscript%3E&a_to=1",
           "a_from must be a time in Unix milliseconds, got: &quot;&lt;script&gt;&quot;"}
        ] do
      assert {400, _, body} = get(url, path), path
      assert body =~ ~s(<div class="error" id="error-message">), path
      assert body =~ message, path
      # the timeline still there, nothing picked
      assert body =~ ~s(<svg id="timeline"), path
      refute body =~ ~s(id="flame"), path
    end

    refute elem(get(url, "/timeline?a_from=%3Cscript%3E&a_to=1"), 2) =~ "<script>"

    assert {400, _, body} = get(url, "/timeline/download/folded?a_from=1&a_to=2")
    assert body =~ "holds no window"
    assert {400, _, body} = get(url, "/timeline/download/folded")
    assert body =~ "pick a range"
  end

  # --- headless chromium ------------------------------------------------------------

  test "chromium: with A picked, a drag across bars picks B and opens the diff", ctx do
    alias FlameOn.Client.Test.Chromium
    browser = Chromium.start!()

    try do
      page = Chromium.open!(browser, ctx.url <> "timeline?" <> query(ctx.a))
      # the script ran under the CSP: it shows the A/B picker, B checked
      assert Chromium.eval!(page, "document.getElementById('timeline-pick').hidden") == false
      assert Chromium.eval!(page, "document.querySelector('input[value=b]').checked")
      assert Chromium.eval!(page, "document.querySelectorAll('#frames g').length") >= 2

      range_a =
        Path.join(
          System.tmp_dir!(),
          "flame_on_web_range_#{System.unique_integer([:positive])}.png"
        )

      Chromium.screenshot!(page, range_a)
      IO.puts("\nweb UI range A screenshot: #{range_a}")

      # B: from the first window at or after the switch, three windows on
      i =
        Chromium.eval!(
          page,
          "+document.querySelector('a.win[data-from=\"#{elem(ctx.b, 0)}\"]').getAttribute('data-i')"
        )

      at = fn i ->
        Chromium.eval!(page, """
        (function () {
          var r = document.querySelector('a.win[data-i="#{i}"] .hit').getBoundingClientRect();
          return {x: r.left + r.width / 2, y: r.top + r.height / 2};
        })()
        """)
      end

      %{"x" => x0, "y" => y} = at.(i)
      %{"x" => x1} = at.(i + 3)
      Chromium.mouse!(page, "mouseMoved", x0, y)
      Chromium.mouse!(page, "mousePressed", x0, y)
      Chromium.mouse!(page, "mouseMoved", (x0 + x1) / 2, y)
      Chromium.mouse!(page, "mouseMoved", x1, y)
      Chromium.mouse!(page, "mouseReleased", x1, y)

      Chromium.wait_for!(page, "document.getElementById('diff-ranges')")
      search = Chromium.eval!(page, "location.search")
      query = URI.decode_query(String.trim_leading(search, "?"))
      {a_from, a_to} = ctx.a
      assert query["a_from"] == "#{a_from}" and query["a_to"] == "#{a_to}"
      assert query["b_from"] == "#{elem(ctx.b, 0)}"
      assert String.to_integer(query["b_to"]) > String.to_integer(query["b_from"])
      assert Chromium.eval!(page, "document.querySelectorAll('a.win.in-b').length") == 4
      assert Chromium.eval!(page, "document.querySelectorAll('#frames g').length") >= 2

      screenshot =
        Path.join(
          System.tmp_dir!(),
          "flame_on_web_timeline_#{System.unique_integer([:positive])}.png"
        )

      Chromium.screenshot!(page, screenshot)
      IO.puts("\nweb UI timeline screenshot: #{screenshot}")
    after
      Chromium.stop(browser)
    end
  end
end

defmodule FlameOn.Client.WebTimelineOffTest do
  # The timeline when continuous profiling does not run.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers
  import FlameOn.Client.Test.WebClient

  alias FlameOn.Client.Continuous
  alias FlameOn.Client.Web

  setup do
    ensure_app_started()
    Continuous.stop()
    # backtrace_depth back as it was, nothing left traced
    assert_node_clean()
    {:ok, url} = Web.start(port: 0)
    on_exit(fn -> Web.stop(url) end)
    %{url: url}
  end

  test "not running: the page says how to start it; a range is a 400", %{url: url} do
    {200, _, index} = get(url, "/")

    assert index =~
             ~s{<a href="/timeline">Continuous profiling</a> (not running: how to start it)}

    {200, _, body} = get(url, "/timeline")
    assert body =~ ~s(<div class="waiting" id="timeline-off">Continuous profiling is not running.)
    assert body =~ "config :flame_on_client, continuous: true"
    assert body =~ "<code>FlameOn.Client.Continuous.start()</code>"
    refute body =~ ~s(<svg id="timeline")
    refute body =~ "<script"

    assert {400, _, body} = get(url, "/timeline?a_from=1&a_to=2")
    assert body =~ "range A: continuous profiling is not running"
  end

  test "running, before its first window closed: says when to reload", %{url: url} do
    {:ok, _} = Continuous.start(window_ms: 60_000)

    try do
      {200, _, body} = get(url, "/timeline")
      assert body =~ ~s(<div class="waiting" id="timeline-empty">Continuous profiling runs)
      assert body =~ "no window has closed yet: reload in 60.00 s"
    after
      Continuous.stop()
    end
  end
end
