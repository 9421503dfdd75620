defmodule FlameOn.Client.Export.Diff do
  @moduledoc false
  # A FlameOn.Client.Diff's files, for FlameOn.Client.Export.write/4:
  #
  #   :folded      <stem>.diff.folded      difffolded.pl's `stack base new`
  #   :svg         <stem>.diff.svg         coloured by change (Export.DiffSVG)
  #   :speedscope  <stem>.diff.speedscope.json   the base and new profiles, one file
  #   :pprof       <stem>.base.pb.gz, <stem>.new.pb.gz
  #                go tool pprof -diff_base=<stem>.base.pb.gz <stem>.new.pb.gz
  #
  # :perfetto draws a timeline, which a diff does not have: ArgumentError.
  # The speedscope and pprof profiles hold the diff's values (new scaled).

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export.DiffSVG
  alias FlameOn.Client.Export.Pprof
  alias FlameOn.Client.Export.Speedscope
  alias FlameOn.Client.Profile.Tree

  @formats [:folded, :svg, :speedscope, :pprof]

  @doc "The formats a diff is written in."
  @spec formats() :: [atom()]
  def formats, do: @formats

  @doc "Raises `ArgumentError` unless `format` applies to a diff."
  @spec check_format!(atom()) :: :ok
  def check_format!(:perfetto) do
    raise ArgumentError,
          "a diff has no timeline: :perfetto does not apply to it " <>
            "(a diff is written as #{inspect(@formats)})"
  end

  def check_format!(_format), do: :ok

  @doc "`[{format, file name, data}]` for `format`."
  @spec outputs(Diff.t(), atom(), String.t(), keyword()) :: [{atom(), String.t(), iodata()}]
  def outputs(diff, :folded, stem, _svg_opts),
    do: [{:folded, stem <> ".diff.folded", Diff.folded(diff)}]

  def outputs(diff, :svg, stem, svg_opts),
    do: [{:svg, stem <> ".diff.svg", DiffSVG.encode(diff, svg_opts)}]

  def outputs(diff, :speedscope, stem, _svg_opts),
    do: [{:speedscope, stem <> ".diff.speedscope.json", speedscope(diff)}]

  def outputs(diff, :pprof, stem, _svg_opts) do
    tree = tree(diff)

    for side <- [:base, :new],
        do: {:pprof, "#{stem}.#{side}.pb.gz", pprof(diff, tree, side)}
  end

  def outputs(_diff, format, _stem, _svg_opts), do: check_format!(format)

  @doc "speedscope's JSON: for each group, its base profile, then its new one."
  @spec speedscope(Diff.t()) :: iodata()
  def speedscope(%Diff{} = diff) do
    profiles =
      for {group, label} <- diff.groups, side <- [:base, :new] do
        {{side, group},
         Enum.join(Enum.reject([diff.name, title(diff, side), label], &is_nil/1), " ")}
      end

    unit = if diff.measure == :alloc, do: "none", else: "microseconds"
    Speedscope.encode_tree(diff.name, tree(diff), profiles, unit)
  end

  @doc "One side of the diff as a gzipped pprof profile."
  @spec pprof(Diff.t(), Tree.t(), :base | :new) :: binary()
  def pprof(%Diff{} = diff, tree \\ nil, side) do
    processes =
      for {group, label} <- diff.groups,
          do: {{side, group}, if(label, do: [{"process", label}], else: [])}

    total =
      for {_g, rows} <- diff.stacks, row <- rows, reduce: 0, do: (acc -> acc + value(row, side))

    Pprof.encode_tree(
      %{
        comment: "flame_on_client diff #{diff.name}: #{title(diff, side)}",
        duration_us: if(diff.measure == :time, do: total, else: 0),
        started_at: nil,
        value_type:
          if(diff.measure == :alloc, do: {"alloc", "words"}, else: {"wall", "microseconds"}),
        sampled?: false
      },
      tree || tree(diff),
      processes
    )
  end

  defp title(diff, :base), do: "base (#{diff.base_name})"

  defp title(%Diff{normalize: false} = diff, :new), do: "new (#{diff.new_name})"

  defp title(diff, :new) do
    "new (#{diff.new_name}, scaled ×#{:erlang.float_to_binary(diff.scale / 1, decimals: 3)})"
  end

  # Both sides of every group in one tree, keyed {side, group}.
  defp tree(diff) do
    stacks =
      for {group, rows} <- diff.stacks, side <- [:base, :new], into: %{} do
        {{side, group},
         for(row <- rows, value(row, side) > 0, do: {elem(row, 0), value(row, side)})}
      end

    Tree.from_stacks(stacks, %{})
  end

  defp value({_stack, base, _new}, :base), do: base
  defp value({_stack, _base, new}, :new), do: new
end
