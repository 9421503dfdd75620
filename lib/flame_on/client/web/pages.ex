defmodule FlameOn.Client.Web.Pages do
  @moduledoc false
  # The web UI's HTML, as iodata. Every value that comes from a trace or a
  # request is escaped; the only script is the flame graph's own. Each page
  # takes its response's nonce (see Web.HTML). Here:
  # the index, a waiting or failed capture, errors; the trace page is
  # Web.TracePage's, the shared frame and text helpers Web.HTML's.

  import FlameOn.Client.Web.HTML, only: [layout: 3, layout: 4, h: 1, time: 1, duration: 1]

  alias FlameOn.Client.Profile
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web.HTML
  alias FlameOn.Client.Web.TracePage

  @doc "The list of recent traces and the capture form."
  @spec index(map(), [TraceStore.summary()], [map()], String.t()) :: iodata()
  def index(config, traces, waiting, nonce) do
    layout(
      "FlameOn",
      [
        "<h1>Capture the next call of a function</h1>",
        capture_form(config),
        waiting_list(waiting),
        "<h2>Recent traces</h2>",
        traces_table(traces)
      ],
      nonce
    )
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

  # With two traces or more, each row has a radio button for the base and
  # one for the new side of a diff, and the table is a GET form to /diff:
  # the newest trace is the new one, the newest other of its name (else the
  # next) the base.
  defp traces_table(traces) do
    compare? = length(traces) >= 2
    {base_id, new_id} = if compare?, do: preselected(traces), else: {nil, nil}

    [
      if(compare?, do: ~s(<form method="get" action="/diff" id="compare-form">), else: []),
      ~s{<table id="traces"><tr><th>Name</th><th>When (UTC)</th><th class="n">Duration</th>},
      ~s(<th class="n">Processes</th><th class="n">Spans</th><th>Mode</th>),
      if(compare?, do: "<th>Base</th><th>New</th>", else: []),
      "</tr>",
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
          "</td>",
          if(compare?,
            do: [radio("base", t.trace_id, base_id), radio("new", t.trace_id, new_id)],
            else: []
          ),
          "</tr>"
        ]
      end,
      "</table>",
      if(compare?, do: compare_controls(), else: [])
    ]
  end

  defp preselected([newest | rest]) do
    base = Enum.find(rest, hd(rest), &(&1.name == newest.name))
    {base.trace_id, newest.trace_id}
  end

  defp radio(name, id, checked) do
    checked = if id == checked, do: " checked", else: ""

    ~s(<td><input type="radio" name="#{name}" value="#{id}" ) <>
      ~s(aria-label="#{name} #{id}"#{checked}></td>)
  end

  defp compare_controls do
    [
      ~s(<p class="compare">Normalise <select name="normalize">),
      for name <- FlameOn.Client.Web.Compare.normalizations() do
        ~s(<option value="#{name}">#{name}</option>)
      end,
      ~s(</select> <button type="submit" id="compare-submit">Compare base and new</button></p>),
      "</form>",
      ~s(<p class="hint">A differential flame graph of the two traces: red where the new one ),
      "grew, blue where it shrank.</p>"
    ]
  end

  @doc "A capture still waiting for its call: reloads itself every second."
  @spec waiting(map(), map(), String.t()) :: iodata()
  def waiting(capture, config, nonce) do
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
        ~s(<form class="cancel" method="post" action="/captures/#{h(capture.id)}/cancel">),
        ~s(<input type="hidden" name="_csrf_token" value="#{h(config.csrf)}">),
        ~s(<button type="submit" class="secondary">Cancel</button></form>)
      ],
      nonce,
      ~s(<meta http-equiv="refresh" content="1">)
    )
  end

  @doc "A capture that ended without a trace."
  @spec capture_failed(map(), term(), String.t()) :: iodata()
  def capture_failed(capture, reason, nonce) do
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

    layout(
      "Capture of #{name}",
      [
        "<h1>Capture of <code>",
        h(name),
        "</code></h1>",
        ~s(<div class="error" id="capture-error">),
        h(text),
        ~s(</div><p><a href="/">Back to the traces</a></p>)
      ],
      nonce
    )
  end

  @doc "An error page."
  @spec error(pos_integer(), String.t(), String.t()) :: iodata()
  def error(status, message, nonce) do
    layout(
      "Error #{status}",
      [
        "<h1>Error #{status}</h1>",
        ~s(<div class="error" id="error-message">),
        h(message),
        ~s(</div><p><a href="/">Back to the traces</a></p>)
      ],
      nonce
    )
  end

  @doc """
  One trace: facts, links to compare it with `others` (`[{summary, :older
  | :newer}]`, traces of the same name), process selector, flame graph,
  spans, stats, downloads.
  """
  @spec trace(Profile.t(), pid() | nil, String.t(), [{TraceStore.summary(), :older | :newer}]) ::
          iodata()
  defdelegate trace(profile, pid, nonce, others \\ []), to: TracePage

  @doc "Two traces compared: see `FlameOn.Client.Web.Compare`."
  @spec diff(FlameOn.Client.Web.Compare.t(), String.t()) :: iodata()
  defdelegate diff(compare, nonce), to: FlameOn.Client.Web.DiffPage, as: :render

  @doc "A pid as the UI writes it in links: `0.123.0`."
  @spec pid_text(pid()) :: String.t()
  defdelegate pid_text(pid), to: HTML

  @doc "The formats a trace page offers for download."
  @spec downloads() :: [String.t()]
  defdelegate downloads(), to: TracePage
end
