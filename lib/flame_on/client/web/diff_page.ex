defmodule FlameOn.Client.Web.DiffPage do
  @moduledoc false
  # The page of two traces compared (/diff, Web.Compare): both traces'
  # facts, the normalisation and the links to the others, the diff's flame
  # graph inline (red grew, blue shrank), the functions whose self time
  # grew and shrank most, and the downloads.

  import FlameOn.Client.Web.HTML, only: [layout: 3, h: 1, time: 1, duration: 1, inline_svg: 2]

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export.DiffSVG
  alias FlameOn.Client.Web.Compare

  @top 10

  @doc "Two traces compared: facts, normalisation, diff flame graph, changes, downloads."
  @spec render(Compare.t(), String.t()) :: iodata()
  def render(compare, nonce) do
    %{base: base, new: new, diff: diff} = compare
    title = "Diff: #{diff.name}"

    layout(
      title,
      [
        "<h1>",
        h(title),
        "</h1>",
        facts(compare),
        same_trace(base, new),
        normalization(compare),
        "<h2>Flame graph of the change</h2>",
        ~s(<div class="flame" id="flame">),
        inline_svg(DiffSVG.encode(diff, title: title), nonce),
        "</div>",
        ~s(<p class="hint">Frames are as wide as the new run's time; <b>red</b> grew, ),
        "<b>blue</b> shrank, the deeper the larger the change (full at 4x or a quarter), ",
        "grey within 0.5%. Hover a frame for both runs' times; click to zoom in; ",
        "Ctrl-F or / to search.</p>",
        changes(diff),
        downloads(compare)
      ],
      nonce
    )
  end

  defp facts(%{base: base, new: new}) do
    [
      ~s{<table class="facts" id="diff-traces"><tr><th></th><th>Trace</th><th>When (UTC)</th>},
      ~s(<th class="n">Duration</th><th>Mode</th></tr>),
      for {label, profile} <- [{"Base", base}, {"New", new}] do
        [
          ~s(<tr id="diff-#{String.downcase(label)}"><th>#{label}</th>),
          ~s(<td><a href="/traces/#{profile.trace_id}">),
          h(profile.name),
          "</a> (",
          Integer.to_string(profile.trace_id),
          ")</td><td>",
          time(profile.started_at && profile.started_at + System.time_offset(:microsecond)),
          ~s(</td><td class="n">),
          duration(profile.duration_us),
          "</td><td>",
          h(to_string(profile.mode)),
          "</td></tr>"
        ]
      end,
      "</table>"
    ]
  end

  defp same_trace(%{trace_id: id}, %{trace_id: id}) do
    ~s(<p class="waiting" id="same-trace">Base and new are the same trace: nothing changed. ) <>
      ~s(Pick two different traces on <a href="/">the list</a>.</p>)
  end

  defp same_trace(_base, _new), do: []

  defp normalization(%{diff: diff} = compare) do
    how =
      case diff.normalize do
        :median -> "the new run scaled ×#{scale(diff)}, by the median stack's ratio"
        :total -> "the new run scaled ×#{scale(diff)}, to the base's total"
        false -> "none: absolute values"
      end

    [
      ~s(<p class="procs" id="normalization">Normalised: ),
      h(how),
      ". Base ",
      duration(diff.base_total),
      ", new ",
      duration(diff.new_total),
      " (in stacks). Switch: ",
      for name <- Compare.normalizations() do
        class = if name == compare.normalize, do: ~s( class="current"), else: ""
        [~s(<a#{class} href="/diff?), h(Compare.query(compare, name)), ~s(">), name, "</a>"]
      end,
      "</p>",
      ~s(<p class="hint">median: the typical stack comes out unchanged, so a slower machine ),
      "is scaled away and what grew stands out · total: the shares of the whole are compared · ",
      "none: the times as measured.</p>"
    ]
  end

  defp scale(diff), do: :erlang.float_to_binary(diff.scale / 1, decimals: 3)

  defp changes(diff) do
    changes = Diff.self_changes(diff)
    grown = changes |> Enum.filter(fn {_f, b, n} -> n > b end) |> Enum.take(@top)
    shrunk = changes |> Enum.filter(fn {_f, b, n} -> n < b end) |> Enum.take(@top)

    [
      "<h2>Self time: grew most</h2>",
      change_table("grown", grown, diff.unit),
      "<h2>Self time: shrank most</h2>",
      change_table("shrunk", shrunk, diff.unit)
    ]
  end

  defp change_table(id, [], _unit), do: ~s(<p class="hint" id="#{id}">None.</p>)

  defp change_table(id, rows, unit) do
    [
      ~s(<table id="#{id}"><tr><th>Function</th><th class="n">Base</th><th class="n">New</th>),
      ~s(<th class="n">Change</th><th class="n">Change %</th></tr>),
      for {function, b, n} <- rows do
        [
          "<tr><td><code>",
          h(function),
          ~s(</code></td><td class="n">),
          amount(b, unit),
          ~s(</td><td class="n">),
          amount(n, unit),
          ~s(</td><td class="n">),
          if(n >= b, do: "+", else: "-"),
          amount(abs(n - b), unit),
          ~s(</td><td class="n">),
          percent(b, n),
          "</td></tr>"
        ]
      end,
      "</table>"
    ]
  end

  defp amount(value, "µs"), do: duration(value)
  defp amount(value, unit), do: "#{value} #{h(unit)}"

  defp percent(b, n) do
    case Diff.percent(b, n) do
      :new -> "new"
      p -> if(p >= 0, do: "+", else: "") <> :erlang.float_to_binary(p / 1, decimals: 1) <> "%"
    end
  end

  defp downloads(compare) do
    link = fn name ->
      [
        ~s(<a href="/diff/download/#{name}?),
        h(Compare.query(compare)),
        ~s(" download>),
        h(Compare.file_name(compare, name)),
        "</a> "
      ]
    end

    [
      ~s(<h2>Downloads</h2><p id="diff-downloads">),
      Enum.map(Compare.downloads(), link),
      ~s(</p><p class="hint">folded: difffolded.pl's stack base new, for flamegraph.pl · ),
      "speedscope: both runs in one file · pprof: the base and the new run, for:</p>",
      ~s(<pre id="pprof-command">go tool pprof -diff_base=),
      h(Compare.file_name(compare, "pprof-base")),
      " ",
      h(Compare.file_name(compare, "pprof-new")),
      "</pre>"
    ]
  end
end
