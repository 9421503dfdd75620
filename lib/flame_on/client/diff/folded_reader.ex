defmodule FlameOn.Client.Diff.FoldedReader do
  @moduledoc false
  # Reads collapsed ("folded") stacks back into processes for a diff.
  # Two kinds of line, told apart line by line:
  #
  #   name;<process>;frame;...;frame N   as Profile.folded/1 writes them: the
  #                                      trace's name, then the process
  #                                      (`<0.96.0>` or `MyApp.Inventory_<0.96.0>`)
  #   frame;...;frame N                  any other tool's (one process)
  #
  # N is the line's value (an integer, or a decimal as flamegraph.pl
  # allows). The root of the file is its process with the most time: a
  # trace's own process is busy for the whole trace (its stacks add up to
  # the wall time); the processes a cross-process trace followed are not.

  @process ~r/(?:\A|_)<\d+\.\d+\.\d+>(?:@\S*)?\z/

  @doc "`{trace name or nil, processes}` (see `FlameOn.Client.Diff.Input`)."
  @spec parse!(String.t(), String.t()) :: {String.t() | nil, [map()]}
  def parse!(text, source) do
    {name, order, stacks, _line} =
      text
      |> String.split("\n")
      |> Enum.reduce({nil, [], %{}, 1}, fn line, {name, order, stacks, n} ->
        case String.trim_trailing(line) do
          "" ->
            {name, order, stacks, n + 1}

          line ->
            {trace, process, stack, value} = line!(line, source, n, stacks)
            order = if Map.has_key?(stacks, process), do: order, else: [process | order]
            sums = stacks |> Map.get(process, %{}) |> Map.update(stack, value, &(&1 + value))
            {name || trace, order, Map.put(stacks, process, sums), n + 1}
        end
      end)

    if order == [], do: raise(ArgumentError, "#{source}: no folded stacks in it")

    order = Enum.reverse(order)
    root = Enum.max_by(order, &total(stacks[&1]))

    processes =
      for process <- order do
        %{name: name_of(process), root?: process == root, stacks: Map.to_list(stacks[process])}
      end

    {name, processes}
  end

  @doc "Whether `text` reads as one folded line (`stack N`)."
  @spec line?(String.t()) :: boolean()
  def line?(text), do: match?({:ok, _, _}, split_value(String.trim_trailing(text)))

  # {trace name | nil, process label | nil, stack, value}; `known`'s keys
  # are the processes seen so far.
  defp line!(line, source, n, known) do
    case split_value(line) do
      {:ok, stack, value} ->
        # a stack that ends in a number too: a diff's "stack base new"
        if stack != "" and :binary.last(stack) in ?0..?9 and
             match?({:ok, _, _}, split_value(stack)) do
          raise ArgumentError,
                "#{source}, line #{n}: three columns (a diff's stack base new?), " <>
                  "where a side of a diff has folded stacks (stack count)"
        end

        fields(stack, value, known)

      :error ->
        raise ArgumentError,
              "#{source}, line #{n}: not a folded stack (frame;frame;... count): " <>
                inspect(String.slice(line, 0, 120))
    end
  end

  # Profile.folded/1's "name;<process>;frames" or another tool's "frames".
  defp fields(stack, value, known) do
    with [trace, rest] <- :binary.split(stack, ";"),
         [process | frames] <- :binary.split(rest, ";"),
         true <- Map.has_key?(known, process) or Regex.match?(@process, process) do
      {trace, process, Enum.join(frames), value}
    else
      _ -> {nil, nil, stack, value}
    end
  end

  # "a;b 12" is {:ok, "a;b", 12}; the value follows the last blank.
  defp split_value(line) do
    with [_ | _] = blanks <- :binary.matches(line, [" ", "\t"]),
         {at, 1} = List.last(blanks),
         stack = line |> binary_part(0, at) |> String.trim_trailing(),
         {:ok, value} <- number(binary_part(line, at + 1, byte_size(line) - at - 1)) do
      {:ok, stack, value}
    else
      _ -> :error
    end
  end

  defp number(text) do
    case Integer.parse(text) do
      {n, ""} when n >= 0 ->
        {:ok, n}

      _ ->
        case Float.parse(text) do
          {f, ""} when f >= 0 -> {:ok, f}
          _ -> :error
        end
    end
  end

  defp total(sums), do: sums |> Map.values() |> Enum.sum()

  # The process's name: its label less the pid (`MyApp.Inventory_<0.96.0>`).
  defp name_of(nil), do: nil

  defp name_of(label) do
    case Regex.replace(~r/_?<\d+\.\d+\.\d+>(?:@\S*)?\z/, label, "") do
      "" -> nil
      name -> name
    end
  end
end
