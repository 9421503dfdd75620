defmodule FlameOn.Client.Diff.Input do
  @moduledoc false
  # One side of a diff, whatever it came as: a `FlameOn.Client.Profile`, a
  # folded file, or folded text. Each process keeps its stacks, its name
  # (as folded lines write it: whitespace and `;` made `_`) and whether it
  # is the traced root; `group/2` keys them the way a diff matches them.

  alias FlameOn.Client.Diff.FoldedReader
  alias FlameOn.Client.Profile

  defstruct name: "flame_on", source: nil, processes: []

  @typedoc "A process of one side: `stacks` are `[{stack, value}]`."
  @type process :: %{
          name: String.t() | nil,
          root?: boolean(),
          stacks: [{String.t(), number()}]
        }

  @type t :: %__MODULE__{name: String.t(), source: String.t() | nil, processes: [process()]}

  @doc """
  Reads a side: a profile (its `stacks`, or with `measure` `:alloc` its
  `alloc`), a folded file's path, folded text (iodata), or a side already
  read. Raises `ArgumentError` on a missing file or a line that is not a
  folded stack.
  """
  @spec read!(t() | Profile.t() | Path.t() | iodata(), :time | :alloc) :: t()
  def read!(%__MODULE__{} = input, _measure), do: input

  def read!(%Profile{} = profile, measure) do
    values =
      case measure do
        :time -> profile.stacks
        # the allocation profile, where the profile has one
        :alloc -> Map.get(profile, :alloc) || %{}
      end

    names = Profile.names(profile)
    root = root(values, profile.pid)

    processes =
      for {pid, stacks} <- Enum.sort(values) do
        %{name: sanitize(names[pid]), root?: pid == root, stacks: stacks}
      end

    %__MODULE__{
      name: profile.name,
      source: "profile #{inspect(profile.name)}",
      processes: processes
    }
  end

  def read!(path_or_text, _measure) when is_binary(path_or_text) do
    cond do
      String.contains?(path_or_text, "\n") -> text!(path_or_text, "folded text")
      File.regular?(path_or_text) -> file!(path_or_text)
      FoldedReader.line?(path_or_text) -> text!(path_or_text, "folded text")
      true -> raise ArgumentError, "no such folded file: #{path_or_text}"
    end
  end

  def read!(iodata, _measure) when is_list(iodata) do
    text!(IO.iodata_to_binary(iodata), "folded text")
  end

  def read!(other, _measure) do
    raise ArgumentError,
          "a diff compares FlameOn.Client.Profile structs, folded files or folded text, " <>
            "got: #{inspect(other, limit: 5)}"
  end

  # The traced process; in a profile made by hand without one, the process
  # with the most time (as in a folded file).
  defp root(values, pid) when is_map_key(values, pid), do: pid
  defp root(values, _pid) when values == %{}, do: nil

  defp root(values, _pid) do
    {pid, _stacks} =
      Enum.max_by(values, fn {_pid, stacks} -> stacks |> Enum.map(&elem(&1, 1)) |> Enum.sum() end)

    pid
  end

  defp file!(path) do
    case File.read(path) do
      {:ok, text} ->
        text!(text, path)

      {:error, reason} ->
        raise ArgumentError, "cannot read #{path}: #{:file.format_error(reason)}"
    end
  end

  defp text!(text, source) do
    {name, processes} = FoldedReader.parse!(text, source)

    %__MODULE__{
      name: name || Path.basename(source, ".folded"),
      source: source,
      processes: processes
    }
  end

  @doc """
  The side's stacks by group, `%{group => %{stack => value}}`: `:merged`
  sums all processes under `:all`; `:process` keys the root `:root`, a
  named process `{:name, name}` (processes of one name together) and the
  others `:unnamed`.
  """
  @spec group(t(), :merged | :process) :: %{term() => %{String.t() => number()}}
  def group(%__MODULE__{processes: processes}, by) do
    Enum.reduce(processes, %{}, fn process, acc ->
      key = key(process, by)
      sums = Map.get(acc, key, %{})

      sums =
        Enum.reduce(process.stacks, sums, fn {stack, value}, sums ->
          case sums do
            %{^stack => sum} -> %{sums | stack => sum + value}
            _ -> Map.put(sums, stack, value)
          end
        end)

      Map.put(acc, key, sums)
    end)
  end

  defp key(_process, :merged), do: :all
  defp key(%{root?: true}, :process), do: :root
  defp key(%{name: nil}, :process), do: :unnamed
  defp key(%{name: name}, :process), do: {:name, name}

  @doc "A name as folded lines write it (`Profile.folded/1`): whitespace and `;` made `_`."
  @spec sanitize(String.t() | nil) :: String.t() | nil
  def sanitize(nil), do: nil
  def sanitize(name), do: String.replace(name, ~r/[;\s]/u, "_")
end
