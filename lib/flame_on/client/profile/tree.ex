defmodule FlameOn.Client.Profile.Tree do
  @moduledoc """
  A profile's stacks as one calling-context tree per process: the form
  every exporter walks, so that writing a flame graph costs what the tree
  holds and not its depth times its stacks (a recursion 10 000 frames deep
  is 10 000 nodes here, where its stack texts hold 50 million frames).

  `FlameOn.Client.Profile.build/4` makes it in C next to `stacks` (the
  `tree` field of a profile); `of/1` builds it from `stacks` and `samples`
  for a profile made by hand.

  ## Fields

    * `names` – a tuple of frame names (the texts of `stacks`); nodes
      refer to them by index.
    * `nodes` – `%{pid => binary}`: the process's tree in preorder (a node,
      then its subtrees), children in the byte order of their names, one
      40-byte record per node: `<<depth::32, name::32, self_us::64,
      total_us::64, samples::64, weight::64>>`. Depth 0 is the process
      root (`name` is `0xFFFFFFFF`); `self_us` is the node's stack's time
      in `stacks` (0 when it has none), `total_us` that of the node and
      every node below; `samples` and `weight` as in `samples`. Only nodes
      with time or samples at or below them are there.

  ## Examples

      iex> pid = :c.pid(0, 42, 0)
      iex> profile = %FlameOn.Client.Profile{stacks: %{pid => [{"a", 1}, {"a;b", 2}, {"c", 4}]}}
      iex> tree = FlameOn.Client.Profile.Tree.of(profile)
      iex> FlameOn.Client.Profile.Tree.to_list(tree, pid)
      [{0, nil, 0, 7, 0, 0}, {1, "a", 1, 3, 0, 0}, {2, "b", 2, 2, 0, 0}, {1, "c", 4, 4, 0, 0}]
  """

  defstruct names: {}, nodes: %{}

  @type t :: %__MODULE__{names: tuple(), nodes: %{pid() => binary()}}

  @typedoc "One node: `{depth, name, self_us, total_us, samples, weight}`; `name` is `nil` at the root."
  @type tree_node ::
          {non_neg_integer(), String.t() | nil, non_neg_integer(), non_neg_integer(),
           non_neg_integer(), non_neg_integer()}

  @root_name 0xFFFFFFFF

  @doc "The profile's tree: its `tree` field, or one built from its `stacks` and `samples`."
  # (A profile is matched as a map: the tree is part of the profile's data
  # model and the profile builds it, so this module names no Profile.)
  @spec of(%{stacks: map(), samples: map(), tree: t() | nil}) :: t()
  def of(%{tree: %__MODULE__{} = tree}), do: tree
  def of(%{stacks: stacks, samples: samples}), do: from_stacks(stacks, samples)

  @doc """
  Folds `fun` over `pid`'s nodes in preorder. `fun` gets
  `{depth, name_index, self_us, total_us, samples, weight}` (the raw name
  index: see `name/2`) and the accumulator.
  """
  @spec reduce(t(), pid(), acc, (tuple(), acc -> acc)) :: acc when acc: term()
  def reduce(%__MODULE__{nodes: nodes}, pid, acc, fun) do
    walk(Map.get(nodes, pid, <<>>), acc, fun)
  end

  defp walk(<<d::32, n::32, s::64, t::64, c::64, w::64, rest::binary>>, acc, fun),
    do: walk(rest, fun.({d, n, s, t, c, w}, acc), fun)

  defp walk(<<>>, acc, _fun), do: acc

  @doc "The text of a name index (`nil` for the root's)."
  @spec name(t(), non_neg_integer()) :: String.t() | nil
  def name(_tree, @root_name), do: nil
  def name(%__MODULE__{names: names}, index), do: elem(names, index)

  @doc "`pid`'s nodes in preorder, names resolved (for tests and inspection)."
  @spec to_list(t(), pid()) :: [tree_node()]
  def to_list(tree, pid) do
    tree
    |> reduce(pid, [], fn {d, n, s, t, c, w}, acc -> [{d, name(tree, n), s, t, c, w} | acc] end)
    |> Enum.reverse()
  end

  @doc "The processes with a tree, the profile's own process first."
  @spec pids(t(), pid() | nil) :: [pid()]
  def pids(%__MODULE__{nodes: nodes}, root) do
    order(Map.keys(nodes), root)
  end

  @doc """
  A tree from `stacks` (`%{pid => [{text, us}]}`) and `samples`
  (`%{pid => [{text, samples, weight}]}`), the fields of a profile.
  """
  @spec from_stacks(map(), map()) :: t()
  def from_stacks(stacks, samples) do
    pids = Enum.uniq(Map.keys(stacks) ++ Map.keys(samples))

    {nodes, {names, _next}} =
      Enum.map_reduce(pids, {%{}, 0}, fn pid, names ->
        trie =
          Enum.reduce(Map.get(stacks, pid, []), new_trie(), fn {text, us}, trie ->
            add(trie, split(text), {us, 0, 0})
          end)

        trie =
          Enum.reduce(Map.get(samples, pid, []), trie, fn {text, n, w}, trie ->
            add(trie, split(text), {0, n, w})
          end)

        {records, names, _total, _below} = serialize(trie, 0, @root_name, names)
        {{pid, IO.iodata_to_binary(records)}, names}
      end)

    tuple = names |> Enum.sort_by(&elem(&1, 1)) |> Enum.map(&elem(&1, 0)) |> List.to_tuple()

    %__MODULE__{
      names: tuple,
      nodes: for({pid, bin} <- nodes, bin != <<>>, into: %{}, do: {pid, bin})
    }
  end

  defp split(""), do: []
  defp split(text), do: :binary.split(text, ";", [:global])

  defp new_trie, do: %{self: 0, samples: 0, weight: 0, kids: %{}}

  defp add(trie, [], {us, n, w}),
    do: %{trie | self: trie.self + us, samples: trie.samples + n, weight: trie.weight + w}

  defp add(trie, [frame | rest], value) do
    kid = Map.get(trie.kids, frame, new_trie())
    %{trie | kids: Map.put(trie.kids, frame, add(kid, rest, value))}
  end

  # {records in preorder, names, total_us, samples below}; a subtree with
  # neither time nor samples is left out.
  defp serialize(trie, depth, name_index, names) do
    {kids, {names, total, below}} =
      trie.kids
      |> Enum.sort_by(&elem(&1, 0))
      |> Enum.flat_map_reduce({names, trie.self, trie.samples}, fn {name, kid},
                                                                   {names, total, below} ->
        {index, interned} = intern(name, names)

        case serialize(kid, depth + 1, index, interned) do
          {[], _names, 0, 0} -> {[], {names, total, below}}
          {records, names, t, b} -> {records, {names, total + t, below + b}}
        end
      end)

    if total == 0 and below == 0 do
      {[], names, 0, 0}
    else
      record =
        <<depth::32, name_index::32, trie.self::64, total::64, trie.samples::64, trie.weight::64>>

      {[record | kids], names, total, below}
    end
  end

  @doc "Orders `pids` with `root` first and the rest sorted (the exporters' process order)."
  @spec order([pid()], pid() | nil) :: [pid()]
  def order(pids, root) do
    {first, rest} = pids |> Enum.uniq() |> Enum.sort() |> Enum.split_with(&(&1 == root))
    first ++ rest
  end

  @doc """
  Numbers things in order of first sight: `{index, {map, next}}` for `key`
  (a string table, a frame table).
  """
  @spec intern(term(), {map(), non_neg_integer()}) ::
          {non_neg_integer(), {map(), non_neg_integer()}}
  def intern(key, {index, next} = table) do
    case index do
      %{^key => i} -> {i, table}
      _ -> {next, {Map.put(index, key, next), next + 1}}
    end
  end
end
