defmodule FlameOn.Client.Web.TracePage do
  @moduledoc false
  # The page of one trace (Web.Pages.trace/2): its facts, the process
  # selector, the flame graph inline, the spans, the stats and the
  # downloads.

  import FlameOn.Client.Web.HTML,
    only: [layout: 3, h: 1, time: 1, duration: 1, pid_text: 1, inline_svg: 2]

  alias FlameOn.Client.Export
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile

  defp only(nil, _pid), do: nil
  defp only(tree, pid), do: %{tree | nodes: Map.take(tree.nodes, [pid])}

  @doc """
  One trace: facts, links to compare it with `others` (`[{summary, :older
  | :newer}]`), process selector, flame graph, spans, stats, downloads.
  """
  @spec trace(Profile.t(), pid() | nil, String.t(), [{map(), :older | :newer}]) :: iodata()
  def trace(%Profile{} = profile, pid, nonce, others \\ []) do
    id = profile.trace_id
    names = process_names(profile)

    shown =
      if pid,
        do: %{profile | stacks: Map.take(profile.stacks, [pid]), tree: only(profile.tree, pid)},
        else: profile

    title = if pid, do: "#{profile.name} #{names[pid]}", else: profile.name

    layout(
      profile.name,
      [
        "<h1>",
        h(profile.name),
        "</h1>",
        facts(profile, names),
        compare_links(profile, others),
        undersampled(profile),
        truncated(profile),
        "<h2>Flame graph</h2>",
        processes(profile, pid, names),
        ~s(<div class="flame" id="flame">),
        inline_svg(Export.svg(shown, title: title), nonce),
        "</div>",
        ~s(<p class="hint">Hover a frame for its time; click to zoom in, the root to zoom out; ),
        "Ctrl-F or / to search. Time off CPU is <b>SLEEP</b> (grey), <b>RUNNABLE</b> ",
        "(green: preempted, ready to run) or, cross-process, ",
        "<b>WAITING</b> (blue: wait no traced callee explains).</p>",
        spans(profile, names),
        "<h2>Downloads</h2><p>",
        for format <- downloads() do
          ~s(<a href="/traces/#{id}/download/#{format}" download>#{format}</a> )
        end,
        ~s(</p><p class="hint">folded: flamegraph.pl, inferno · speedscope: speedscope.app · ),
        "perfetto: ui.perfetto.dev · pprof: go tool pprof</p>",
        stats(profile)
      ],
      nonce
    )
  end

  defp facts(profile, names) do
    rows = [
      {"When (UTC)",
       time(profile.started_at && profile.started_at + System.time_offset(:microsecond))},
      {"Duration", duration(profile.duration_us)},
      {"Mode", h(to_string(profile.mode))},
      {"Process", h(if(profile.pid, do: names[profile.pid], else: "-"))},
      {"Processes", Integer.to_string(map_size(profile.stacks))},
      {"Spans", Integer.to_string(if(profile.graph, do: length(profile.graph.spans), else: 0))},
      {"Trace id", Integer.to_string(profile.trace_id)}
    ]

    [
      ~s(<table class="facts" id="facts"><tr>),
      for({k, _} <- rows, do: ["<th>", k, "</th>"]),
      "</tr><tr>",
      for({_, v} <- rows, do: ["<td>", v, "</td>"]),
      "</tr></table>"
    ]
  end

  # Other traces of the same name, each a link to its diff with this one:
  # the older of the two is the base.
  defp compare_links(_profile, []), do: []

  defp compare_links(profile, others) do
    [
      ~s(<p class="procs" id="compare">Compare with another run of this name: ),
      for {other, age} <- others do
        {base, new} =
          if age == :older,
            do: {other.trace_id, profile.trace_id},
            else: {profile.trace_id, other.trace_id}

        [
          ~s(<a href="/diff?base=#{base}&amp;new=#{new}">),
          if(age == :older, do: "older ", else: "newer "),
          Integer.to_string(other.trace_id),
          " · ",
          time(other.started_at_system_us),
          " · ",
          duration(other.duration_us),
          "</a>"
        ]
      end,
      "</p>"
    ]
  end

  defp processes(profile, current, names) do
    pids = profile.stacks |> Map.keys() |> Enum.sort_by(&{&1 != profile.pid, &1})

    if length(pids) < 2 and current == nil do
      []
    else
      [
        ~s(<p class="procs" id="processes">Process: ),
        link_class("?", current == nil),
        "all</a>",
        for p <- pids do
          [
            link_class("?pid=#{pid_text(p)}", current == p),
            h(names[p]),
            " · ",
            duration(Profile.total_us(profile, p)),
            "</a>"
          ]
        end,
        "</p>"
      ]
    end
  end

  defp link_class(href, true), do: ~s(<a class="current" href="#{h(href)}">)
  defp link_class(href, false), do: ~s(<a href="#{h(href)}">)

  defp spans(%Profile{graph: nil}, _names), do: []

  defp spans(%Profile{graph: %Graph{spans: spans} = graph} = profile, names) do
    t0 = spans |> Enum.map(& &1.started_at) |> Enum.min(fn -> 0 end)

    [
      "<h2>Spans</h2>",
      ~s(<p class="hint">One span per process part: the root, and each request a traced callee handled. ),
      "A caller's wait on its callee is <i>attributed</i> when the callee's span explains it.</p>",
      ~s(<table id="spans"><tr><th>Span</th><th>Parent</th><th>Process</th><th class="n">Start</th>),
      ~s(<th class="n">Duration</th><th class="n">Self</th><th class="n">GC</th>),
      ~s(<th class="n">Runnable</th><th class="n">Wait</th>),
      ~s(<th class="n">Attributed</th><th class="n">Unattributed</th><th>Waiting on</th><th>Status</th></tr>),
      for s <- spans do
        [
          ~s(<tr id="span-#{s.span_id}"><td>#{s.span_id}</td><td>),
          if(s.parent_span_id,
            do: ~s(<a href="#span-#{s.parent_span_id}">#{s.parent_span_id}</a>),
            else: "-"
          ),
          "</td><td>",
          if(Map.has_key?(profile.stacks, s.pid),
            do: [
              ~s(<a href="?pid=#{pid_text(s.pid)}">),
              h(names[s.pid]),
              "</a>"
            ],
            else: h(names[s.pid])
          ),
          ~s(</td><td class="n">+),
          duration(s.started_at - t0),
          ~s(</td><td class="n">),
          duration(s.ended_at - s.started_at),
          ~s(</td><td class="n">),
          duration(s.self_us),
          ~s(</td><td class="n">),
          duration(s.gc_us),
          ~s(</td><td class="n">),
          duration(s.runnable_us),
          ~s(</td><td class="n">),
          duration(s.wait_us),
          ~s(</td><td class="n">),
          duration(s.attributed_wait_us),
          ~s(</td><td class="n">),
          duration(s.unattributed_wait_us),
          "</td><td>",
          waiting_on(s, spans, names),
          "</td><td>",
          h(status(s.status)),
          "</td></tr>"
        ]
      end,
      "</table>",
      counters("Graph counters", graph.stats)
    ]
  end

  defp waiting_on(%{waiting_on_pid: nil}, _spans, _names), do: "-"

  defp waiting_on(%{waiting_on_pid: pid} = span, spans, names) do
    case Enum.find(spans, &(&1.pid == pid and &1.parent_span_id == span.span_id)) do
      nil -> h(names[pid])
      callee -> [~s(<a href="#span-#{callee.span_id}">), h(names[pid]), "</a>"]
    end
  end

  defp status(:ok), do: "ok"
  defp status(other), do: inspect(other, limit: 8, printable_limit: 200)

  defp stats(profile), do: counters("Stats", profile.stats)

  # A sampler that saw a process fewer than a few times shows next to
  # nothing of its work (stats.undersampled_processes).
  defp undersampled(%{mode: :sample, stats: %{undersampled_processes: n}}) when n > 0 do
    [
      ~s(<p class="hint"><b>Few samples:</b> ),
      if(n == 1, do: "a process was", else: "#{n} processes were"),
      " sampled fewer than 3 times: the call was shorter than a few sampling ",
      "intervals, so its stacks show little of it. Capture it in exact mode ",
      "(<code>mode: :nif</code>) to see inside.</p>"
    ]
  end

  defp undersampled(_profile), do: []

  # Stacks cut by a limit: which one, and the option that raises it.
  defp truncated(profile) do
    case Profile.truncation_hint(profile.stats) do
      text when text in [nil, ""] -> []
      text -> [~s(<p class="hint" id="truncated"><b>Truncated:</b> ), h(text), ".</p>"]
    end
  end

  defp counters(_title, stats) when map_size(stats) == 0, do: []

  # Four counters a row: the page stays short.
  defp counters(title, stats) do
    rows = stats |> Enum.sort() |> Enum.chunk_every(4)

    [
      "<h2>",
      title,
      ~s(</h2><table class="counters">),
      for row <- rows do
        [
          "<tr>",
          for(
            {k, v} <- row,
            do: ["<td>", h(to_string(k)), ~s(</td><td class="n">), h(inspect(v)), "</td>"]
          ),
          "</tr>"
        ]
      end,
      "</table>"
    ]
  end

  # Each process as every output shows it (Profile.process_label/2: its
  # name, read while tracing, then its pid), the spans' and the waited-on
  # processes too: %{pid => label}.
  defp process_names(profile) do
    names = Profile.names(profile)
    spans = if profile.graph, do: profile.graph.spans, else: []

    pids =
      [profile.pid | Map.keys(profile.stacks)] ++
        Enum.flat_map(spans, &[&1.pid, &1.waiting_on_pid])

    for pid <- pids, pid != nil, into: %{}, do: {pid, Profile.process_label(pid, names)}
  end

  @doc "The formats a trace page offers for download."
  @spec downloads() :: [String.t()]
  def downloads, do: ~w(folded speedscope perfetto pprof svg)
end
