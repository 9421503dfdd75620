defmodule FlameOn.Client.Web.TimelinePage do
  @moduledoc false
  # The continuous-profiling page (/timeline, Web.Timeline): the ring's
  # windows as a bar chart drawn here (an inline SVG, one bar a window as
  # tall as its samples, each a link that picks it as range A), a GET form
  # for range A and range B, and what they pick: range A's flame graph and
  # downloads, or B's diff against A (Web.DiffPage's). A small script
  # (under the page's nonce) lets a drag across the bars fill the form;
  # without it the links and the form do everything.

  import FlameOn.Client.Web.HTML,
    only: [layout: 3, h: 1, time: 1, duration: 1, inline_svg: 2, pid_text: 1]

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Web.Compare
  alias FlameOn.Client.Web.DiffPage
  alias FlameOn.Client.Web.Timeline
  alias FlameOn.Client.Web.TracePage

  # the chart's drawing area, in SVG units (the SVG scales to the page)
  @width 1000
  @height 150
  @left 56
  @axis 22

  @doc "The timeline, and an error message above it when the query was bad."
  @spec render(Timeline.t(), String.t() | nil, String.t()) :: iodata()
  def render(timeline, error, nonce) do
    layout(
      "Continuous profiling",
      [
        "<h1>Continuous profiling</h1>",
        if(error,
          do: [~s(<div class="error" id="error-message">), h(error), "</div>"],
          else: []
        ),
        status(timeline),
        chart(timeline),
        form(timeline),
        selection(timeline, nonce),
        script(timeline, nonce)
      ],
      nonce
    )
  end

  # --- what runs -------------------------------------------------------------------

  defp status(%{status: false, windows: []}) do
    [
      ~s(<div class="waiting" id="timeline-off">Continuous profiling is not running. ),
      "It samples the whole node all the time at a low frequency and keeps the last hour ",
      "as windows; this page shows them, a flame graph of any range, and the diff of two. ",
      "Start it from the application environment:",
      "<pre>config :flame_on_client, continuous: true   # or [window_ms: 10_000, hz: 19, top: 20]</pre>",
      "or at runtime: <code>FlameOn.Client.Continuous.start()</code>, ",
      "and reload this page once its first window closed (10 s by default).</div>"
    ]
  end

  defp status(%{status: false, windows: windows}) do
    [~s(<p class="procs" id="timeline-status">Not running; ), held(windows), "</p>"]
  end

  defp status(%{status: status, windows: []}) do
    [
      ~s(<div class="waiting" id="timeline-empty">Continuous profiling runs ),
      settings(status),
      ", and no window has closed yet: reload in ",
      duration(status.window_ms * 1000),
      ".</div>"
    ]
  end

  defp status(%{status: status, windows: windows}) do
    [
      ~s(<p class="procs" id="timeline-status">Running ),
      settings(status),
      "; ",
      held(windows),
      if(status.dropped_windows > 0,
        do: ", #{status.dropped_windows} older windows dropped",
        else: ""
      ),
      ".</p>"
    ]
  end

  defp settings(%{mode: :native} = status) do
    "(#{status.hz} Hz, every scheduler thread's CPU samples, node-wide, windows of " <>
      "#{duration(status.window_ms * 1000)})"
  end

  defp settings(status) do
    "(#{status.hz} Hz, the #{status.top} busiest processes, windows of " <>
      "#{duration(status.window_ms * 1000)})"
  end

  defp held(windows) do
    first = hd(windows)
    last = List.last(windows)

    [
      Integer.to_string(length(windows)),
      if(length(windows) == 1, do: " window, ", else: " windows, "),
      h(time(first.from * 1000)),
      " to ",
      h(Timeline.clock(last.to)),
      " UTC"
    ]
  end

  # --- the chart --------------------------------------------------------------------

  defp chart(%{windows: []}), do: []

  defp chart(%{windows: windows} = timeline) do
    n = length(windows)
    slot = (@width - @left) / n
    gap = if slot >= 4, do: slot * 0.15, else: 0
    top = windows |> Enum.map(& &1.samples) |> Enum.max() |> max(1)
    interval_us = timeline.status && Map.get(timeline.status, :interval_us)

    [
      "<h2>Samples per window</h2>",
      ~s(<p class="hint" id="timeline-pick" hidden>Drag across the bars to pick range ),
      ~s(<label><input type="radio" name="timeline-side" value="a"#{checked(timeline, "a")}> A</label> ),
      ~s(<label><input type="radio" name="timeline-side" value="b"#{checked(timeline, "b")}> B</label>),
      "; click a bar for its window alone.</p>",
      ~s(<svg id="timeline" class="timeline" xmlns="http://www.w3.org/2000/svg" ),
      ~s(viewBox="0 0 #{@width} #{@height + @axis}" role="img" ),
      ~s(aria-label="samples per window of continuous profiling">),
      ~s(<text class="axis" x="#{@left - 6}" y="12" text-anchor="end">#{top}</text>),
      ~s(<text class="axis" x="#{@left - 6}" y="#{@height}" text-anchor="end">0</text>),
      ~s(<line class="base" x1="#{@left}" y1="#{@height}" x2="#{@width}" y2="#{@height}"/>),
      windows
      |> Enum.with_index()
      |> Enum.map(fn {w, i} ->
        x = @left + i * slot
        bar = max(round(w.samples / top * (@height - 16)), if(w.samples > 0, do: 1, else: 0))

        [
          ~s(<a class="win#{side_class(timeline, w)}" href="/timeline?a_from=#{w.from}&amp;a_to=#{w.to}" ),
          ~s(data-i="#{i}" data-from="#{w.from}" data-to="#{w.to}"><title>),
          h(Timeline.span(w.from, w.to)),
          " · #{w.samples} samples",
          if(interval_us, do: [" · ", duration(w.samples * interval_us), " CPU"], else: []),
          " · #{w.processes} ",
          if(w.processes == 1, do: "process", else: "processes"),
          "</title>",
          ~s(<rect class="hit" x="#{num(x)}" y="0" width="#{num(slot)}" height="#{@height}"/>),
          ~s(<rect class="bar" x="#{num(x + gap / 2)}" y="#{@height - bar}" ),
          ~s(width="#{num(max(slot - gap, 0.5))}" height="#{bar}"/></a>)
        ]
      end),
      labels(windows, slot),
      ~s(<rect id="timeline-drag" class="drag" x="0" y="0" width="0" height="#{@height}"/>),
      "</svg>",
      ~s(<p class="hint">Each bar is a window, as tall as the stack samples taken in it ),
      "(CPU time: samples × the sampling interval); <b>A</b> and <b>B</b> are the ranges picked.</p>"
    ]
  end

  # the side a drag fills: B once A is picked and B is not
  defp checked(%{a: a, b: nil}, "b") when a != nil, do: " checked"
  defp checked(%{a: nil}, "a"), do: " checked"
  defp checked(%{b: b}, "a") when b != nil, do: " checked"
  defp checked(_timeline, _side), do: ""

  defp side_class(timeline, w) do
    in? = fn range -> range != nil and w.to > range.from and w.from < range.to end

    case {in?.(timeline.a), in?.(timeline.b)} do
      {true, true} -> " in-a in-b"
      {true, false} -> " in-a"
      {false, true} -> " in-b"
      {false, false} -> ""
    end
  end

  # the times of a few windows' starts under the axis, and the last end
  defp labels(windows, slot) do
    every = max(div(length(windows), 6), 1)

    # a start label (about 90 units wide) ends clear of the last window's
    # end, drawn as wide to the left of the right edge
    starts =
      for {w, i} <- Enum.with_index(windows),
          rem(i, every) == 0,
          x = @left + i * slot,
          i == 0 or @width - x >= 190,
          do: {x, w.from, "start"}

    for {x, ms, anchor} <- starts ++ [{@width, List.last(windows).to, "end"}] do
      [
        ~s(<text class="axis" x="#{num(x)}" y="#{@height + 16}" text-anchor="#{anchor}">),
        h(Timeline.clock(ms)),
        "</text>"
      ]
    end
  end

  defp num(x), do: :erlang.float_to_binary(x / 1, decimals: 1)

  # --- the form ---------------------------------------------------------------------

  defp form(%{windows: []}), do: []

  defp form(%{windows: windows} = timeline) do
    {a_from, a_to} =
      case timeline.a do
        nil -> {hd(windows).from, List.last(windows).to}
        a -> {a.from, a.to}
      end

    {b_from, b_to} = if b = timeline.b, do: {b.from, b.to}, else: {nil, nil}
    starts = Enum.map(windows, & &1.from)
    ends = Enum.map(windows, & &1.to)

    [
      ~s(<form class="capture" id="range-form" method="get" action="/timeline">),
      ~s(<label>Range A from <select name="a_from" id="a_from">),
      options(starts, a_from, false),
      ~s(</select></label><label>to <select name="a_to" id="a_to">),
      options(ends, a_to, false),
      ~s{</select></label><label>Range B (to compare) from <select name="b_from" id="b_from">},
      options(starts, b_from, true),
      ~s(</select></label><label>to <select name="b_to" id="b_to">),
      options(ends, b_to, true),
      ~s(</select></label><label>Normalise <select name="normalize">),
      for name <- Compare.normalizations() do
        selected = if name == timeline.normalize, do: " selected", else: ""
        ~s(<option value="#{name}"#{selected}>#{name}</option>)
      end,
      ~s(</select></label><button type="submit" id="range-submit">Show</button></form>),
      ~s(<p class="hint">Range A alone: its flame graph. With range B: B's ),
      "differential flame graph against A (red grew, blue shrank). A range takes every ",
      "window it overlaps. ",
      quick_links(windows),
      ~s(<a href="/timeline" id="timeline-clear">Clear</a></p>)
    ]
  end

  # the last minute, 5 and 15 (as far as the ring reaches back), all of it
  defp quick_links(windows) do
    first = hd(windows).from
    last = List.last(windows).to

    lasts =
      for {ms, label} <- [
            {60_000, "Last minute"},
            {300_000, "last 5 minutes"},
            {900_000, "last 15 minutes"}
          ],
          first < last - ms do
        [~s(<a href="/timeline?a_from=#{last - ms}&amp;a_to=#{last}">#{label}</a> · )]
      end

    [
      lasts,
      ~s(<a href="/timeline?a_from=#{first}&amp;a_to=#{last}" id="timeline-all">All windows</a> · )
    ]
  end

  # the windows' edges (UTC times of day), the picked one selected even
  # when it is no edge (a range given by hand)
  defp options(edges, picked, blank?) do
    edges = if picked && picked not in edges, do: Enum.sort([picked | edges]), else: edges

    [
      if(blank?, do: ~s(<option value="">–</option>), else: []),
      for ms <- edges do
        selected = if ms == picked, do: " selected", else: ""
        [~s(<option value="#{ms}"#{selected}>), h(Timeline.clock(ms)), "</option>"]
      end
    ]
  end

  # --- what the ranges pick ------------------------------------------------------------

  defp selection(%{a: nil}, _nonce), do: []

  defp selection(%{a: a, b: nil} = timeline, nonce) do
    profile = a.profile
    query = URI.encode_query(Timeline.query_params(a, nil))
    names = Profile.names(profile)
    pid = timeline.pid

    {shown, title} =
      if pid,
        do: {only(profile, pid), profile.name <> " " <> Profile.process_label(pid, names)},
        else: {profile, profile.name}

    [
      ~s(<h2 id="range-a">Range A: ),
      h(Timeline.span(a.from, a.to)),
      " UTC</h2>",
      range_table("range-facts", [{"A", a}]),
      if(profile.stats.samples == 0,
        do:
          ~s(<p class="waiting" id="no-samples">No samples in this range: no sampled process ) <>
            "was on CPU (an idle node).</p>",
        else: []
      ),
      "<h2>Flame graph</h2>",
      processes(profile, pid, names, query),
      ~s(<div class="flame" id="flame">),
      inline_svg(Export.svg(shown, title: title), nonce),
      "</div>",
      ~s{<p class="hint">Hover a frame for its CPU time (samples × the sampling interval); },
      "click to zoom in, the root to zoom out; Ctrl-F or / to search. A process is its name ",
      "(registered name, label or initial call): processes of one name are merged.</p>",
      ~s(<h2>Downloads</h2><p id="range-downloads">),
      for format <- TracePage.downloads() do
        [
          ~s(<a href="/timeline/download/#{format}?),
          h(query),
          ~s(" download>#{format}</a> )
        ]
      end,
      ~s(</p><p class="hint">folded: flamegraph.pl, inferno · speedscope: speedscope.app · ),
      "perfetto: ui.perfetto.dev · pprof: go tool pprof</p>",
      compare_before(a, timeline.windows),
      TracePage.counters("Stats", profile.stats)
    ]
  end

  defp selection(%{a: a, b: b, compare: compare}, nonce) do
    [
      "<h2>Range B against range A</h2>",
      range_table("diff-ranges", [{"Base (A)", a}, {"New (B)", b}]),
      if(a.from == b.from and a.to == b.to,
        do:
          ~s(<p class="waiting" id="same-range">A and B are the same range: nothing changed.</p>),
        else: []
      ),
      DiffPage.body(compare, nonce)
    ]
  end

  # What changed: the range as long as A's windows just before them as the
  # base, A's windows as the new side.
  defp compare_before(%{windows: [first | _] = windows}, all) do
    from = first.from
    to = List.last(windows).to
    before = from - (to - from)

    if Enum.any?(all, &(&1.to > before and &1.from < from)) do
      [
        ~s(<p class="procs" id="compare-before"><a href="/timeline?a_from=#{before}&amp;a_to=#{from}),
        ~s(&amp;b_from=#{from}&amp;b_to=#{to}">Compare with the ),
        duration((to - from) * 1000),
        " before it</a> (the diff of this range against the one before, as the base)</p>"
      ]
    else
      []
    end
  end

  defp only(profile, pid) do
    tree = profile.tree && %{profile.tree | nodes: Map.take(profile.tree.nodes, [pid])}

    %{
      profile
      | stacks: Map.take(profile.stacks, [pid]),
        samples: Map.take(profile.samples || %{}, [pid]),
        tree: tree
    }
  end

  # One link a process, busiest first (as the trace page's selector).
  defp processes(profile, current, names, query) do
    pids =
      profile.stacks
      |> Map.keys()
      |> Enum.map(&{Profile.total_us(profile, &1), &1})
      |> Enum.sort(:desc)

    if length(pids) < 2 and current == nil do
      []
    else
      link = fn href, current? ->
        class = if current?, do: ~s( class="current"), else: ""
        [~s(<a#{class} href="/timeline?), h(href), ~s(">)]
      end

      [
        ~s(<p class="procs" id="processes">Process: ),
        link.(query, current == nil),
        "all</a>",
        for {us, p} <- pids do
          [
            link.(query <> "&pid=" <> pid_text(p), current == p),
            h(Profile.process_label(p, names)),
            " · ",
            duration(us),
            "</a>"
          ]
        end,
        "</p>"
      ]
    end
  end

  defp range_table(id, ranges) do
    [
      ~s{<table class="facts" id="#{id}"><tr><th></th><th>Range (UTC)</th>},
      ~s(<th class="n">Windows</th><th class="n">Samples</th><th class="n">CPU</th>),
      ~s(<th class="n">Processes</th></tr>),
      for {label, r} <- ranges do
        stats = r.profile.stats

        [
          ~s(<tr><th>#{label}</th><td><a href="/timeline?),
          h(URI.encode_query(Timeline.query_params(r, nil))),
          ~s(">),
          h(time(r.profile.started_at + System.time_offset(:microsecond))),
          " + ",
          duration(r.profile.duration_us),
          ~s(</a></td><td class="n">),
          Integer.to_string(stats.windows),
          ~s(</td><td class="n">),
          Integer.to_string(stats.samples),
          ~s(</td><td class="n">),
          duration(cpu_us(r.profile)),
          ~s(</td><td class="n">),
          Integer.to_string(stats.processes),
          "</td></tr>"
        ]
      end,
      "</table>"
    ]
  end

  defp cpu_us(profile),
    do: profile.stacks |> Map.keys() |> Enum.reduce(0, &(Profile.total_us(profile, &1) + &2))

  # --- drag to pick ---------------------------------------------------------------------

  defp script(%{windows: []}, _nonce), do: []

  # Mouse down on a bar, move, up on another: the windows between fill
  # the form's range (A or B, as the radio buttons say) and it is
  # submitted. A click without a move is the bar's own link.
  defp script(_timeline, nonce) do
    [
      ~s(<script nonce="#{h(nonce)}">),
      """
      (function () {
        var svg = document.getElementById('timeline');
        var form = document.getElementById('range-form');
        var band = document.getElementById('timeline-drag');
        if (!svg || !form) return;
        document.getElementById('timeline-pick').hidden = false;
        var wins = svg.querySelectorAll('a.win');
        var start = null, end = null, moved = false;
        function at(e) {
          var a = e.target.closest && e.target.closest('a.win');
          return a ? +a.getAttribute('data-i') : null;
        }
        function show() {
          var lo = wins[Math.min(start, end)].querySelector('.hit');
          var hi = wins[Math.max(start, end)].querySelector('.hit');
          var x = +lo.getAttribute('x');
          band.setAttribute('x', x);
          band.setAttribute('width', +hi.getAttribute('x') + +hi.getAttribute('width') - x);
        }
        svg.addEventListener('mousedown', function (e) {
          var i = at(e);
          if (e.button !== 0 || i === null) return;
          start = end = i; moved = false;
          e.preventDefault();
          show();
        });
        svg.addEventListener('mousemove', function (e) {
          var i = at(e);
          if (start === null || i === null || i === end) return;
          end = i; moved = true;
          show();
        });
        svg.addEventListener('click', function (e) {
          if (moved) { e.preventDefault(); moved = false; }
        });
        document.addEventListener('mouseup', function () {
          if (start === null) return;
          var lo = Math.min(start, end), hi = Math.max(start, end);
          start = null;
          if (!moved) { band.setAttribute('width', 0); return; }
          var side = form.ownerDocument.querySelector('input[name=timeline-side]:checked');
          side = side ? side.value : 'a';
          form.elements[side + '_from'].value = wins[lo].getAttribute('data-from');
          form.elements[side + '_to'].value = wins[hi].getAttribute('data-to');
          form.submit();
        });
      })();
      """,
      "</script>"
    ]
  end
end
