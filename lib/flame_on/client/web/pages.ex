defmodule FlameOn.Client.Web.Pages do
  @moduledoc false
  # The web UI's HTML, as iodata. Every value that comes from a trace or a
  # request is escaped; the only script is the flame graph's own.

  alias FlameOn.Client.Export
  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile
  alias FlameOn.Client.TraceStore

  @style """
  body { font: 14px/1.45 -apple-system, "Segoe UI", "DejaVu Sans", Verdana, sans-serif; margin: 0; color: #222; background: #fafaf6; }
  header { background: #3b2f2a; color: #fff; padding: 10px 24px; display: flex; gap: 24px; align-items: baseline; }
  header a { color: #ffd9a0; text-decoration: none; font-weight: 600; font-size: 17px; }
  header .node { color: #d8cfc8; font-size: 13px; }
  main { padding: 16px 24px 40px; max-width: 1400px; }
  h1 { font-size: 20px; margin: 8px 0 12px; }
  h2 { font-size: 16px; margin: 26px 0 8px; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #e3ddd0; padding: 4px 10px; text-align: left; vertical-align: top; }
  th { background: #f1ece0; font-weight: 600; }
  td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
  tr:target { background: #fff3c4; }
  form.capture { background: #fff; border: 1px solid #e3ddd0; padding: 12px 14px; display: flex; flex-wrap: wrap; gap: 12px; align-items: end; }
  form.capture label { display: flex; flex-direction: column; font-size: 12px; color: #555; gap: 3px; }
  form.capture input[type=text] { width: 340px; font: 14px monospace; padding: 5px; }
  form.capture input[type=number] { width: 80px; padding: 5px; }
  button { background: #b8561b; color: #fff; border: 0; padding: 7px 16px; font-size: 14px; border-radius: 3px; cursor: pointer; }
  button.secondary { background: #8a8178; padding: 3px 10px; font-size: 12px; }
  .hint { color: #666; font-size: 12px; }
  .error { background: #fde8e4; border: 1px solid #e4a597; padding: 12px 14px; }
  .waiting { background: #fff8e0; border: 1px solid #e8d48c; padding: 12px 14px; }
  .flame { background: #fff; border: 1px solid #e3ddd0; }
  .flame svg { display: block; width: 100%; height: auto; }
  .procs a { margin-right: 10px; white-space: nowrap; }
  .procs a.current { font-weight: 700; color: #000; text-decoration: none; }
  .facts th { font-weight: normal; color: #555; font-size: 12px; }
  .counters td:nth-child(odd) { color: #555; }
  code { font-size: 13px; }
  """

  @doc "The list of recent traces and the capture form."
  @spec index(map(), [TraceStore.summary()], [map()]) :: iodata()
  def index(config, traces, waiting) do
    layout("FlameOn", [
      "<h1>Capture the next call of a function</h1>",
      capture_form(config),
      waiting_list(waiting),
      "<h2>Recent traces</h2>",
      traces_table(traces)
    ])
  end

  defp capture_form(config) do
    max_s = div(config.max_timeout_ms, 1000)

    [
      ~s(<form class="capture" id="capture-form" method="post" action="/capture">),
      ~s(<input type="hidden" name="_csrf_token" value="#{h(config.csrf)}">),
      ~s(<label>Function <input type="text" name="function" id="capture-function" required ),
      ~s(placeholder="MyApp.Orders.checkout/2 or lists:seq/2" autocomplete="off" spellcheck="false"></label>),
      ~s{<label>Wait at most (s) <input type="number" name="timeout" value="30" min="1" max="#{max_s}"></label>},
      ~s{<label>Mode <select name="mode">},
      mode_options(),
      ~s{</select></label>},
      ~s(<label><span>Cross-process</span><input type="checkbox" name="cross_process" value="on"></label>),
      ~s(<button type="submit" id="capture-submit">Capture next call</button>),
      "</form>",
      ~s(<p class="hint">Waits for the next call of the function by any process and profiles that one call, ),
      "from its entry to its return; you land on its trace when it returns.</p>"
    ]
  end

  # every mode capture_next/2 takes, the default first selected
  defp mode_options do
    default = FlameOn.Client.Options.default_mode()

    for {name, description} <- FlameOn.Client.Options.modes(:capture_next) do
      selected = if name == default, do: " selected", else: ""
      ~s{<option value="#{name}"#{selected}>#{name} (#{h(description)})</option>}
    end
  end

  defp waiting_list([]), do: []

  defp waiting_list(waiting) do
    [
      "<h2>Waiting</h2><ul>",
      for capture <- waiting do
        [
          ~s(<li><a href="/captures/#{h(capture.id)}">),
          h(Profile.frame_name(capture.mfa)),
          "</a> since ",
          time(capture.started_at * 1000),
          "</li>"
        ]
      end,
      "</ul>"
    ]
  end

  defp traces_table([]) do
    ~s(<p class="hint">No trace yet. Traces of <code>trace/3</code>, <code>start_trace/2</code>, ) <>
      "telemetry and captures that pass their threshold show here (the last " <>
      "#{TraceStore.max_traces()}).</p>"
  end

  defp traces_table(traces) do
    [
      ~s{<table id="traces"><tr><th>Name</th><th>When (UTC)</th><th class="n">Duration</th>},
      ~s(<th class="n">Processes</th><th class="n">Spans</th><th>Mode</th></tr>),
      for t <- traces do
        [
          ~s(<tr><td><a href="/traces/#{t.trace_id}">),
          h(t.name),
          "</a></td><td>",
          time(t.started_at_system_us),
          ~s(</td><td class="n">),
          duration(t.duration_us),
          ~s(</td><td class="n">),
          Integer.to_string(t.processes),
          ~s(</td><td class="n">),
          Integer.to_string(t.spans),
          "</td><td>",
          h(to_string(t.mode)),
          "</td></tr>"
        ]
      end,
      "</table>"
    ]
  end

  @doc "A capture still waiting for its call: reloads itself every second."
  @spec waiting(map(), map()) :: iodata()
  def waiting(capture, config) do
    name = Profile.frame_name(capture.mfa)

    left =
      max(
        div(capture.started_at + capture.timeout_ms - System.system_time(:millisecond), 1000),
        0
      )

    layout(
      "Waiting for #{name}",
      [
        "<h1>Waiting for the next call of <code>",
        h(name),
        "</code></h1>",
        ~s(<div class="waiting" id="capture-waiting">No process has called it yet ),
        "(mode #{h(to_string(capture.opts[:mode]))}",
        if(capture.opts[:cross_process], do: ", cross-process", else: ""),
        "). This page reloads itself and opens the trace when the call returns; ",
        "it gives up in #{left} s.</div>",
        ~s(<form method="post" action="/captures/#{h(capture.id)}/cancel" style="margin-top:12px">),
        ~s(<input type="hidden" name="_csrf_token" value="#{h(config.csrf)}">),
        ~s(<button type="submit" class="secondary">Cancel</button></form>)
      ],
      ~s(<meta http-equiv="refresh" content="1">)
    )
  end

  @doc "A capture that ended without a trace."
  @spec capture_failed(map(), term()) :: iodata()
  def capture_failed(capture, reason) do
    name = Profile.frame_name(capture.mfa)

    text =
      case reason do
        :timeout ->
          "No process called #{name} within #{div(capture.timeout_ms, 1000)} s."

        :cancelled ->
          "The capture of #{name} was cancelled."

        :not_stored ->
          "#{name} was captured, but the trace store did not keep it (see FlameOn.Client.TraceStore)."

        {:breaker_open, why} ->
          "The circuit breaker is open (#{inspect(why)}): no trace starts now."

        {:refused, message} ->
          "The capture of #{name} could not start: #{message}"

        {:meta_traced, tracer} ->
          "Another tool meta-traces #{name} (#{inspect(tracer)})."

        other ->
          "The capture of #{name} failed: #{inspect(other)}"
      end

    layout("Capture of #{name}", [
      "<h1>Capture of <code>",
      h(name),
      "</code></h1>",
      ~s(<div class="error" id="capture-error">),
      h(text),
      ~s(</div><p><a href="/">Back to the traces</a></p>)
    ])
  end

  @doc "An error page."
  @spec error(pos_integer(), String.t()) :: iodata()
  def error(status, message) do
    layout("Error #{status}", [
      "<h1>Error #{status}</h1>",
      ~s(<div class="error" id="error-message">),
      h(message),
      ~s(</div><p><a href="/">Back to the traces</a></p>)
    ])
  end

  defp only(nil, _pid), do: nil
  defp only(tree, pid), do: %{tree | nodes: Map.take(tree.nodes, [pid])}

  @doc "One trace: facts, process selector, flame graph, spans, stats, downloads."
  @spec trace(Profile.t(), pid() | nil) :: iodata()
  def trace(%Profile{} = profile, pid) do
    id = profile.trace_id
    names = process_names(profile)

    shown =
      if pid,
        do: %{profile | stacks: Map.take(profile.stacks, [pid]), tree: only(profile.tree, pid)},
        else: profile

    title = if pid, do: "#{profile.name} #{names[pid]}", else: profile.name

    layout(profile.name, [
      "<h1>",
      h(profile.name),
      "</h1>",
      facts(profile),
      "<h2>Flame graph</h2>",
      processes(profile, pid, names),
      ~s(<div class="flame" id="flame">),
      inline_svg(shown, title),
      "</div>",
      ~s(<p class="hint">Hover a frame for its time; click to zoom in, the root to zoom out; ),
      "Ctrl-F or / to search. Time off CPU is <b>SLEEP</b> (grey) or, cross-process, ",
      "<b>WAITING</b> (blue: wait no traced callee explains).</p>",
      spans(profile, names),
      "<h2>Downloads</h2><p>",
      for format <- downloads() do
        ~s(<a href="/traces/#{id}/download/#{format}" download>#{format}</a> )
      end,
      ~s(</p><p class="hint">folded: flamegraph.pl, inferno · speedscope: speedscope.app · ),
      "perfetto: ui.perfetto.dev · pprof: go tool pprof</p>",
      stats(profile)
    ])
  end

  defp facts(profile) do
    rows = [
      {"When (UTC)",
       time(profile.started_at && profile.started_at + System.time_offset(:microsecond))},
      {"Duration", duration(profile.duration_us)},
      {"Mode", h(to_string(profile.mode))},
      {"Process", h(if(profile.pid, do: pid_label(profile.pid), else: "-"))},
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

  defp pid_label(pid), do: pid |> :erlang.pid_to_list() |> to_string()

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

  # The SVG of FlameOn.Client.Export, in the page: the same document, so
  # its script (hover, zoom, search) runs here.
  defp inline_svg(profile, title) do
    svg = profile |> Export.svg(title: title) |> IO.iodata_to_binary()

    case svg do
      "<?xml" <> _ -> svg |> String.split("\n", parts: 2) |> List.last()
      _ -> svg
    end
  end

  defp spans(%Profile{graph: nil}, _names), do: []

  defp spans(%Profile{graph: %Graph{spans: spans} = graph} = profile, names) do
    t0 = spans |> Enum.map(& &1.started_at) |> Enum.min(fn -> 0 end)

    [
      "<h2>Spans</h2>",
      ~s(<p class="hint">One span per process part: the root, and each request a traced callee handled. ),
      "A caller's wait on its callee is <i>attributed</i> when the callee's span explains it.</p>",
      ~s(<table id="spans"><tr><th>Span</th><th>Parent</th><th>Process</th><th class="n">Start</th>),
      ~s(<th class="n">Duration</th><th class="n">Self</th><th class="n">Wait</th>),
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
              h(names[s.pid] || pid_label(s.pid)),
              "</a>"
            ],
            else: h(s.name || pid_label(s.pid))
          ),
          ~s(</td><td class="n">+),
          duration(s.started_at - t0),
          ~s(</td><td class="n">),
          duration(s.ended_at - s.started_at),
          ~s(</td><td class="n">),
          duration(s.self_us),
          ~s(</td><td class="n">),
          duration(s.wait_us),
          ~s(</td><td class="n">),
          duration(s.attributed_wait_us),
          ~s(</td><td class="n">),
          duration(s.unattributed_wait_us),
          "</td><td>",
          waiting_on(s, spans),
          "</td><td>",
          h(status(s.status)),
          "</td></tr>"
        ]
      end,
      "</table>",
      counters("Graph counters", graph.stats)
    ]
  end

  defp waiting_on(%{waiting_on_pid: nil}, _spans), do: "-"

  defp waiting_on(%{waiting_on_pid: pid} = span, spans) do
    case Enum.find(spans, &(&1.pid == pid and &1.parent_span_id == span.span_id)) do
      nil -> h(pid_label(pid))
      callee -> [~s(<a href="#span-#{callee.span_id}">), h(pid_label(pid)), "</a>"]
    end
  end

  defp status(:ok), do: "ok"
  defp status(other), do: inspect(other, limit: 8, printable_limit: 200)

  defp stats(profile), do: counters("Stats", profile.stats)

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

  # A process's name: its registered name (from the span graph, or asked
  # now if it still runs), then its pid.
  defp process_names(profile) do
    # a span's name is its registered name, or its pid inspected
    from_graph =
      if profile.graph,
        do:
          for(
            s <- profile.graph.spans,
            s.name,
            s.name != inspect(s.pid),
            into: %{},
            do: {s.pid, s.name}
          ),
        else: %{}

    Map.new(Map.keys(profile.stacks), fn pid ->
      name =
        case from_graph[pid] do
          nil -> registered(pid)
          name -> "#{name} #{pid_label(pid)}"
        end

      {pid, name}
    end)
  end

  defp registered(pid) do
    case Process.info(pid, :registered_name) do
      {:registered_name, name} when is_atom(name) -> "#{inspect(name)} #{pid_label(pid)}"
      _ -> pid_label(pid)
    end
  end

  # --- helpers ----------------------------------------------------------------

  defp layout(title, body, head \\ []) do
    [
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
      "<title>",
      h(title),
      " · FlameOn</title>",
      head,
      "<style>",
      @style,
      "</style></head><body><header><a href=\"/\">FlameOn</a><span class=\"node\">",
      h(Atom.to_string(node())),
      "</span></header><main>",
      body,
      "</main></body></html>\n"
    ]
  end

  defp h(text) when is_binary(text), do: Export.SVG.escape(text)

  defp time(nil), do: "-"

  defp time(system_us) do
    system_us
    |> DateTime.from_unix!(:microsecond)
    |> Calendar.strftime("%Y-%m-%d %H:%M:%S")
  end

  @doc false
  # Microseconds for people: 850 µs, 12.3 ms, 4.56 s.
  @spec duration(integer()) :: String.t()
  def duration(us) when us < 1_000, do: "#{us} µs"

  def duration(us) when us < 1_000_000,
    do: :erlang.float_to_binary(us / 1000, decimals: 1) <> " ms"

  def duration(us), do: :erlang.float_to_binary(us / 1_000_000, decimals: 2) <> " s"

  @doc "A pid as the UI writes it in links: `0.123.0`."
  @spec pid_text(pid()) :: String.t()
  def pid_text(pid),
    do: pid |> :erlang.pid_to_list() |> to_string() |> String.trim("<") |> String.trim(">")

  @doc "The formats a trace page offers for download."
  @spec downloads() :: [String.t()]
  def downloads, do: ~w(folded speedscope perfetto pprof svg)
end
