defmodule FlameOn.Client.Export.SVG do
  @moduledoc false
  # A self-contained interactive flame graph (root at the bottom), in the
  # spirit of flamegraph.pl: one <g> per frame holding a <title>, a <rect>
  # and a <text>; an embedded script for hover details, click-to-zoom and
  # search. See FlameOn.Client.Export.svg/2 for the options. This module
  # lays the frames out; the stylesheet and the script are SVG.Template's.

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Export.Util
  alias FlameOn.Client.Profile.Tree
  alias FlameOn.Client.Export.SVG.Template

  @defaults [
    per_process: false,
    width: 1200,
    frame_height: 16,
    font_size: 12,
    min_width: 0.1,
    title: nil,
    unit: "µs"
  ]

  @pad 10
  @header 64
  @footer 30

  @spec defaults() :: keyword()
  def defaults, do: @defaults

  @spec encode(Profile.t(), keyword()) :: iodata() | %{pid() => iodata()}
  def encode(%Profile{} = profile, opts) do
    opts = validate!(opts)
    names = Util.names(profile)
    tree = Tree.of(profile)

    if opts[:per_process] do
      Map.new(Util.pids(profile), fn pid ->
        label = Util.process_label(pid, names)
        title = opts[:title] || "#{profile.name} #{label}"
        root = nested(tree, pid)
        page = page(profile, title, 1, root.us, opts[:unit])
        {pid, render(page, {"#{profile.name} #{label}", :root, root}, opts)}
      end)
    else
      processes =
        for pid <- Util.pids(profile) do
          {Util.process_label(pid, names), :process, nested(tree, pid)}
        end

      root = %{
        us: Enum.reduce(processes, 0, fn {_, _, n}, acc -> acc + n.us end),
        kids: processes
      }

      page = page(profile, opts[:title] || profile.name, length(processes), root.us, opts[:unit])
      render(page, {profile.name, :root, root}, opts)
    end
  end

  # A profile's texts, legend and colours (a diff has its own: Export.DiffSVG).
  # `unit`: what the widths count (`"µs"`; `"words"` for an allocation view).
  defp page(profile, title, processes, total, unit) do
    %{
      title: title,
      subtitle:
        "#{thousands(total)} #{unit} in #{processes} process#{if processes == 1, do: "", else: "es"}" <>
          " · trace #{profile.trace_id || "-"} · aggregated stacks, not a timeline",
      legend: [
        {"CPU", color(:frame, "CPU")},
        {"WAITING (unexplained wait)", color(:frame, "WAITING")},
        {"SLEEP (scheduled out)", color(:frame, "SLEEP")},
        {"GC", color(:frame, "GC_MINOR")},
        {"RUNNABLE (preempted)", color(:frame, "RUNNABLE")}
      ],
      paint: &paint(&1, &2, total, unit)
    }
  end

  defp paint({name, kind, _node}, {w_us, self_us}, total, unit) do
    info = [
      escape(name),
      " (",
      thousands(w_us),
      " ",
      unit,
      ", ",
      percent(w_us, total),
      "%; self ",
      thousands(self_us),
      " ",
      unit,
      ")"
    ]

    {color(kind, name), info}
  end

  @doc false
  # The options, checked (`ArgumentError` on a bad one).
  @spec validate!(keyword()) :: keyword()
  def validate!(opts) do
    opts = Keyword.validate!(opts, @defaults)

    for {key, value} <- opts do
      valid? =
        case key do
          :per_process -> is_boolean(value)
          :width -> is_integer(value) and value >= 100
          :frame_height -> is_integer(value) and value >= 4
          :font_size -> is_number(value) and value > 0
          :min_width -> is_number(value) and value >= 0
          :title -> is_nil(value) or is_binary(value)
          :unit -> is_binary(value) and value != ""
        end

      valid? || raise ArgumentError, "invalid SVG option #{inspect(key)}: #{inspect(value)}"
    end

    opts
  end

  ## Call tree

  # A process's tree as nested nodes `%{us: total, kids: [{name, :frame,
  # node}]}`, children in name order, from the profile's tree (preorder, so
  # one descent); nodes without time are left out. The merged root's kids
  # are `{label, :process, node}` in process order.
  defp nested(tree, pid) do
    records =
      tree
      |> Tree.reduce(pid, [], fn
        {_depth, _name, _self, 0, _s, _w}, acc -> acc
        {depth, name, _self, us, _s, _w}, acc -> [{depth, name, us} | acc]
      end)
      |> Enum.reverse()

    case records do
      [{0, _root, us} | rest] ->
        {kids, []} = kids_of(rest, 0, tree)
        %{us: us, kids: kids}

      [] ->
        %{us: 0, kids: []}
    end
  end

  defp kids_of([{d, name, us} | rest], depth, tree) when d == depth + 1 do
    {grandkids, rest} = kids_of(rest, d, tree)
    {siblings, rest} = kids_of(rest, depth, tree)
    {[{Tree.name(tree, name), :frame, %{us: us, kids: grandkids}} | siblings], rest}
  end

  defp kids_of(rest, _depth, _tree), do: {[], rest}

  defp children(%{kids: kids}), do: kids

  ## Layout: frames as {name, kind, x_us, w_us, depth, self_us, node}

  defp layout({name, kind, node}, x, depth, min_us, acc) do
    if node.us == 0 or node.us < min_us do
      acc
    else
      kids = children(node)
      self_us = node.us - Enum.reduce(kids, 0, fn {_, _, n}, sum -> sum + n.us end)
      acc = [{name, kind, x, node.us, depth, self_us, node} | acc]

      {_x, acc} =
        Enum.reduce(kids, {x, acc}, fn {_, _, child} = kid, {cx, acc} ->
          {cx + child.us, layout(kid, cx, depth + 1, min_us, acc)}
        end)

      acc
    end
  end

  ## Rendering

  @doc false
  # Lays out and draws `tree`, `{name, kind, %{us: total, kids: [tree]}}`
  # (a node may carry more fields, for `page.paint`), frames as wide as
  # their `us`. `page` gives the texts and colours: `:title`, `:subtitle`,
  # `:legend` (`[{label, fill}]`) and `:paint`, called per frame with
  # `{name, kind, node}` and `{us, self_us}`, giving `{fill, info}`: the
  # info is the frame's `<title>`, escaped, and must read `name (...)`
  # (the script takes the name back from it). `opts` are `validate!/1`'s.
  @spec render(map(), {String.t(), atom(), map()}, keyword()) :: iodata()
  def render(page, {_name, _kind, root} = tree, opts) do
    width = opts[:width]
    fh = opts[:frame_height]
    total = root.us
    inner = width - 2 * @pad
    min_us = if total > 0, do: opts[:min_width] * total / inner, else: 0
    frames = tree |> layout(0, 0, min_us, []) |> Enum.reverse()
    levels = frames |> Enum.map(&elem(&1, 4)) |> Enum.max(fn -> 0 end) |> Kernel.+(1)
    height = @header + levels * fh + @footer
    base = @header + (levels - 1) * fh
    scale = if total > 0, do: inner / total, else: 0.0

    ctx = %{
      scale: scale,
      fh: fh,
      base: base,
      paint: page.paint,
      char_width: opts[:font_size] * 0.59
    }

    [
      ~s(<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n),
      ~s(<svg version="1.1" xmlns="http://www.w3.org/2000/svg" width="#{width}" height="#{height}" ),
      ~s|viewBox="0 0 #{width} #{height}" onload="init(evt)">\n|,
      ["<title>", escape(page.title), "</title>\n"],
      Template.style(opts[:font_size]),
      Template.script(width, @pad, opts[:font_size], total),
      ~s(<rect class="bg" x="0" y="0" width="#{width}" height="#{height}"/>\n),
      ~s(<text id="title" x="#{div(width, 2)}" y="24" text-anchor="middle">),
      escape(page.title),
      "</text>\n",
      ~s(<text class="sub" x="#{@pad}" y="46">),
      escape(page.subtitle),
      "</text>\n",
      legend(page.legend, width),
      ~s(<text id="unzoom" class="h" x="#{@pad}" y="24">Reset Zoom</text>\n),
      ~s(<text id="search" x="#{width - @pad}" y="24" text-anchor="end">Search</text>\n),
      ~s(<text id="details" x="#{@pad}" y="#{height - 10}">),
      "Click a frame to zoom in, the root to zoom out; Ctrl-F or / to search.",
      "</text>\n",
      ~s(<text id="matched" x="#{width - @pad}" y="#{height - 10}" text-anchor="end"> </text>\n),
      if(frames == [],
        do:
          ~s(<text x="#{div(width, 2)}" y="#{base + fh - 4}" text-anchor="middle">no samples</text>\n),
        else: []
      ),
      ~s(<g id="frames">\n),
      Enum.map(frames, &frame(&1, ctx)),
      "</g>\n</svg>\n"
    ]
  end

  defp frame({name, kind, x_us, w_us, depth, self_us, node}, ctx) do
    x = @pad + x_us * ctx.scale
    w = w_us * ctx.scale
    y = ctx.base - depth * ctx.fh
    {fill, info} = ctx.paint.({name, kind, node}, {w_us, self_us})

    [
      ~s(<g data-x="#{x_us}" data-w="#{w_us}" data-d="#{depth}"><title>),
      info,
      ~s(</title><rect x="#{num(x)}" y="#{y}" width="#{num(w)}" height="#{ctx.fh - 1}" rx="2" ),
      ~s(fill="#{fill}"/><text x="#{num(x + 3)}" y="#{y + ctx.fh - 4}">),
      escape(fit(name, w, ctx.char_width)),
      "</text></g>\n"
    ]
  end

  # Text that fits `width` pixels: the name, or its start and "..".
  defp fit(name, width, char_width) do
    chars = trunc((width - 6) / char_width)

    cond do
      chars < 3 -> ""
      String.length(name) <= chars -> name
      true -> String.slice(name, 0, chars - 2) <> ".."
    end
  end

  # Warm colours for frames on a CPU; off-CPU time and synthetic frames stand out.
  defp color(:root, _name), do: "rgb(236,226,200)"
  defp color(:process, _name), do: "rgb(222,205,160)"
  defp color(:frame, "WAITING"), do: "rgb(80,140,230)"
  defp color(:frame, "SLEEP"), do: "rgb(165,165,165)"
  defp color(:frame, "GC_MINOR"), do: "rgb(180,120,220)"
  defp color(:frame, "GC_MAJOR"), do: "rgb(150,90,200)"
  defp color(:frame, "RUNNABLE"), do: "rgb(120,190,150)"
  defp color(:frame, "…"), do: "rgb(205,205,205)"
  defp color(:frame, "[truncated]"), do: "rgb(205,205,205)"

  # flamegraph.pl's "hot" palette, the same colour for the same name.
  defp color(:frame, name) do
    <<a, b, c>> = <<:erlang.phash2(name, 16_777_216)::24>>
    "rgb(#{205 + div(a * 50, 255)},#{div(b * 230, 255)},#{div(c * 55, 255)})"
  end

  defp legend(items, width) do
    {parts, _x} =
      Enum.map_reduce(Enum.reverse(items), width - @pad, fn {label, fill}, right ->
        x = right - 12 - String.length(label) * 7

        part = [
          ~s(<rect class="legend" x="#{x}" y="37" width="10" height="10" fill="#{fill}"/>),
          ~s(<text class="sub" x="#{x + 14}" y="46">),
          escape(label),
          "</text>\n"
        ]

        {part, x - 14}
      end)

    Enum.reverse(parts)
  end

  ## Text

  @doc false
  # `1234567` as `"1,234,567"`.
  @spec thousands(integer()) :: String.t()
  def thousands(n) when n < 0, do: "-" <> thousands(-n)

  def thousands(n) do
    n
    |> Integer.to_string()
    |> String.reverse()
    |> String.replace(~r/(\d{3})(?=\d)/, "\\1,")
    |> String.reverse()
  end

  defp percent(_us, 0), do: "0.00"
  defp percent(us, total), do: :erlang.float_to_binary(us * 100 / total, decimals: 2)

  defp num(x) when is_integer(x), do: Integer.to_string(x)
  defp num(x), do: :erlang.float_to_binary(x / 1, decimals: 2)

  @doc false
  # XML text and attribute escaping. Characters XML 1.0 does not allow
  # (most C0 controls, U+FFFE, U+FFFF) and invalid UTF-8 become U+FFFD.
  @spec escape(String.t()) :: iodata()
  def escape(text), do: escape(text, text, 0, 0, [])

  defp escape(<<>>, orig, 0, len, []) when len == byte_size(orig), do: orig
  defp escape(<<>>, orig, start, len, acc), do: [acc | part(orig, start, len)]

  defp escape(<<byte, rest::binary>>, orig, start, len, acc)
       when byte in [?&, ?<, ?>, ?", ?'] or (byte < 0x20 and byte not in [?\t, ?\n, ?\r]) do
    escape(rest, orig, start + len + 1, 0, [acc, part(orig, start, len) | entity(byte)])
  end

  defp escape(<<byte, rest::binary>>, orig, start, len, acc) when byte < 0x80 do
    escape(rest, orig, start, len + 1, acc)
  end

  defp escape(<<char::utf8, rest::binary>>, orig, start, len, acc)
       when char not in [0xFFFE, 0xFFFF] do
    escape(rest, orig, start, len + byte_size(<<char::utf8>>), acc)
  end

  defp escape(<<char::utf8, rest::binary>>, orig, start, len, acc) do
    size = byte_size(<<char::utf8>>)
    escape(rest, orig, start + len + size, 0, [acc, part(orig, start, len) | "\uFFFD"])
  end

  defp escape(<<_invalid, rest::binary>>, orig, start, len, acc) do
    escape(rest, orig, start + len + 1, 0, [acc, part(orig, start, len) | "\uFFFD"])
  end

  defp part(_orig, _start, 0), do: []
  defp part(orig, start, len), do: binary_part(orig, start, len)

  defp entity(?&), do: "&amp;"
  defp entity(?<), do: "&lt;"
  defp entity(?>), do: "&gt;"
  defp entity(?"), do: "&quot;"
  defp entity(?'), do: "&apos;"
  defp entity(_control), do: "\uFFFD"
end
