defmodule FlameOn.Client.Export.DiffSVG do
  @moduledoc false
  # A diff's flame graph, drawn by FlameOn.Client.Export.SVG's layout: frames
  # as wide as the new profile's values (as flamegraph.pl draws a difffolded
  # file), red where the frame grew, blue where it shrank, the deeper the
  # colour the larger the change relative to the base (full at 4x or 1/4);
  # within 0.5% grey. Each frame's title gives base, new and the change.
  # A frame only the base has is 0 wide: its loss shows in its parents.

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export.SVG

  @neutral "rgb(225,225,225)"
  @same_within 0.5

  @spec encode(Diff.t(), keyword()) :: iodata()
  def encode(%Diff{} = diff, opts) do
    opts = SVG.validate!(opts)

    if opts[:per_process] do
      raise ArgumentError, "a diff is one flame graph: :per_process does not apply to it"
    end

    groups =
      for {group, label} <- diff.groups do
        {label, :process, nested(diff.stacks[group])}
      end

    kids =
      case groups do
        [{nil, :process, node}] -> node.kids
        groups -> groups
      end

    root = %{
      us: Enum.reduce(kids, 0, fn {_, _, n}, acc -> acc + n.us end),
      base: Enum.reduce(kids, 0, fn {_, _, n}, acc -> acc + n.base end),
      kids: kids
    }

    page = %{
      title: opts[:title] || "#{diff.name}: diff",
      subtitle: subtitle(diff),
      legend: [
        {"grew", color(1, 4)},
        {"shrank", color(4, 1)},
        {"within #{@same_within}%", @neutral}
      ],
      paint: &paint(&1, &2, diff.unit)
    }

    SVG.render(page, {diff.name, :root, root}, opts)
  end

  defp subtitle(diff) do
    how =
      case diff.normalize do
        :median -> "×#{round_to(diff.scale)}, the median stack's ratio"
        :total -> "×#{round_to(diff.scale)}, to the base's total"
        false -> "absolute"
      end

    "base #{SVG.thousands(diff.base_total)} #{diff.unit} · new " <>
      "#{SVG.thousands(diff.new_total)} #{diff.unit} (#{how}) · widths: the new run · " <>
      "red grew, blue shrank"
  end

  defp round_to(x), do: :erlang.float_to_binary(x / 1, decimals: 3)

  defp paint({name, _kind, node}, {_w, _self}, unit) do
    %{base: b, us: n} = node

    change =
      case Diff.percent(b, n) do
        :new -> "new"
        p -> sign(p) <> :erlang.float_to_binary(abs(p) / 1, decimals: 1) <> "%"
      end

    info = [
      SVG.escape(name),
      " (base ",
      SVG.thousands(b),
      " #{unit}, new ",
      SVG.thousands(n),
      " #{unit}, ",
      change,
      ", ",
      sign(n - b),
      SVG.thousands(abs(n - b)),
      " #{unit})"
    ]

    {color(b, n), info}
  end

  defp sign(x) when x < 0, do: "-"
  defp sign(_x), do: "+"

  # Red for growth, blue for shrinkage; intensity by the change relative
  # to base (log scale: 2x is half, 4x full).
  defp color(b, n) do
    case Diff.percent(b, n) do
      p when is_float(p) and abs(p) < @same_within ->
        @neutral

      p ->
        i = if p == :new or n == 0, do: 1.0, else: min(1.0, abs(:math.log2(n / b)) / 2)
        c = round(230 - 200 * i)
        if p == :new or p > 0, do: "rgb(255,#{c},#{c})", else: "rgb(#{c},#{c},255)"
    end
  end

  # A group's rows as SVG's nested nodes, each with its base too:
  # `%{us: new, base: base, kids: [{name, :frame, node}]}`, kids in name order.
  defp nested(rows) do
    rows
    |> Enum.reduce(trie(), fn {stack, b, n}, trie -> add(trie, frames(stack), b, n) end)
    |> finish()
  end

  defp trie, do: %{us: 0, base: 0, kids: %{}}

  defp add(trie, frames, b, n) do
    trie = %{trie | us: trie.us + n, base: trie.base + b}

    case frames do
      [] ->
        trie

      [frame | rest] ->
        kid = Map.get(trie.kids, frame, trie())
        %{trie | kids: Map.put(trie.kids, frame, add(kid, rest, b, n))}
    end
  end

  defp finish(trie) do
    kids = for {name, kid} <- Enum.sort(trie.kids), do: {name, :frame, finish(kid)}
    %{trie | kids: kids}
  end

  defp frames(""), do: []
  defp frames(stack), do: :binary.split(stack, ";", [:global])
end
