defmodule FlameOn.Client.CLI.Diff do
  @moduledoc false
  # mix profile.flame --diff-base FILE: the base is read before anything is
  # profiled (a bad FILE fails early, and the run may overwrite FILE), and
  # the diff of the new profile against it is written beside the profile
  # in the chosen formats that apply to a diff.

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Diff.Input
  alias FlameOn.Client.Export
  alias FlameOn.Client.Shipper.Directory

  @doc "The base of `--diff-base PATH` (nil without it), read and checked."
  @spec read_base!(String.t() | nil) :: Input.t() | nil
  def read_base!(nil), do: nil

  def read_base!(path) do
    cond do
      not File.regular?(path) ->
        Mix.raise("--diff-base: no such file: #{path}")

      not Directory.export?() ->
        Mix.raise("--diff-base needs FlameOn.Client.Export, which this build does not have")

      true ->
        try do
          Input.read!(path, :time)
        rescue
          error in ArgumentError -> Mix.raise("--diff-base: #{Exception.message(error)}")
        end
    end
  end

  @doc "Writes and prints the diff of `profile` against `base`: `[{format, path}]`."
  @spec write!(Input.t() | nil, FlameOn.Client.Profile.t(), map()) :: [{atom(), String.t()}]
  def write!(nil, _profile, _config), do: []

  def write!(base, profile, %{out: out, formats: formats, top: top} = config) do
    shell = Mix.shell()
    diff = FlameOn.Client.diff(base, profile, normalize: config.diff_normalize)
    {formats, skipped} = Enum.split_with(formats, &(&1 != :perfetto))

    shell.info(
      "\nDiff against #{base.source}: base #{diff.base_total} µs, new #{diff.new_total} µs " <>
        "(#{scaled(diff)})"
    )

    for format <- skipped, do: shell.info("  #{format} skipped: a diff has no timeline")
    paths = Export.write(diff, out, formats)
    Enum.each(paths, fn {format, path} -> shell.info("  #{path} (#{format})") end)

    case for {:pprof, path} <- paths, do: path do
      [base_pb, new_pb] -> shell.info("  go tool pprof -diff_base=#{base_pb} #{new_pb}")
      _ -> :ok
    end

    print_changes(diff, top)
    paths
  end

  defp scaled(%Diff{normalize: false}), do: "absolute values"

  defp scaled(%Diff{normalize: how, scale: scale}) do
    by = if how == :total, do: "to the base's total", else: "by the median stack's ratio"
    "new scaled ×#{:erlang.float_to_binary(scale, decimals: 3)}, #{by}"
  end

  # The functions whose self time changed most, either way.
  defp print_changes(diff, top) do
    shell = Mix.shell()
    shell.info("\nLargest changes in self time:")
    shell.info("     BASE µs      NEW µs   CHANGE  FUNCTION")

    diff
    |> Diff.self_changes()
    |> Enum.take(top)
    |> Enum.each(fn {leaf, b, n} ->
      shell.info("  #{pad(b, 10)}  #{pad(n, 10)}  #{change(b, n)}  #{leaf}")
    end)
  end

  defp change(b, n) do
    case Diff.percent(b, n) do
      :new ->
        String.pad_leading("new", 7)

      p ->
        (if(p >= 0, do: "+", else: "") <> :erlang.float_to_binary(p, decimals: 0) <> "%")
        |> String.pad_leading(7)
    end
  end

  defp pad(n, width), do: n |> Integer.to_string() |> String.pad_leading(width)
end
