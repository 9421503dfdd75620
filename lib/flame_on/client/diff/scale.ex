defmodule FlameOn.Client.Diff.Scale do
  @moduledoc false
  # The factor a diff multiplies the new profile's values by
  # (FlameOn.Client.Diff's `:normalize`).
  #
  #   :median  the median, weighted by the base value, of base/new over the
  #            stacks both sides have: the factor that leaves the typical
  #            stack unchanged. A function that did 4x the work moves only
  #            its own stacks; a run that was slower as a whole (a busy
  #            machine) is scaled back. Without a common stack, :total.
  #   :total   base total / new total (difffolded.pl -n, the other way round):
  #            the shares of the whole are compared, so when one function
  #            grows every other one looks smaller.
  #   false    1.0: absolute values.

  @type groups :: %{term() => %{String.t() => number()}}

  @doc "The factor for `how` (`:median`, `:total` or `false`)."
  @spec factor(:median | :total | false, groups(), groups()) :: float()
  def factor(false, _base, _new), do: 1.0

  def factor(:total, base, new) do
    case {total(base), total(new)} do
      {b, n} when b > 0 and n > 0 -> b / n
      _ -> 1.0
    end
  end

  def factor(:median, base, new) do
    pairs =
      for {group, stacks} <- base,
          others = Map.get(new, group, %{}),
          {stack, b} <- stacks,
          b > 0,
          n = Map.get(others, stack, 0),
          n > 0,
          do: {b / n, b}

    case pairs do
      [] -> factor(:total, base, new)
      pairs -> weighted_median(pairs)
    end
  end

  # The ratio where the weights, in ratio order, pass half their sum (the
  # mean of two ratios whose weights split it exactly).
  defp weighted_median(pairs) do
    half = Enum.reduce(pairs, 0, fn {_r, w}, acc -> acc + w end) / 2

    pairs
    |> Enum.sort()
    |> Enum.reduce_while(0, fn {ratio, w}, acc ->
      cond do
        acc + w > half -> {:halt, {:ratio, ratio}}
        acc + w == half -> {:halt, {:between, ratio}}
        true -> {:cont, acc + w}
      end
    end)
    |> case do
      {:ratio, ratio} -> ratio / 1
      {:between, ratio} -> (ratio + next_ratio(pairs, ratio)) / 2
    end
  end

  defp next_ratio(pairs, ratio) do
    pairs |> Enum.map(&elem(&1, 0)) |> Enum.filter(&(&1 > ratio)) |> Enum.min(fn -> ratio end)
  end

  defp total(groups) do
    for {_group, stacks} <- groups, {_stack, v} <- stacks, reduce: 0, do: (acc -> acc + v)
  end
end
