defmodule FlameOn.Client.TreeTest.Work do
  @moduledoc false
  # Body recursion: a chain of n frames, and the same with a leaf call at
  # every level (a stack branching off at every depth).
  def deep(0), do: 0
  def deep(n), do: 1 + deep(n - 1)

  def deep_with_leaves(0), do: 0
  def deep_with_leaves(n), do: leaf(n) + deep_with_leaves(n - 1)

  def leaf(n), do: rem(n, 2)
end

defmodule FlameOn.Client.TreeTest do
  # Tracing is node-global (patterns, flags): never async.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Profile.Tree
  alias FlameOn.Client.Test.Workloads
  alias FlameOn.Client.TreeTest.Work

  doctest FlameOn.Client.Profile.Tree

  @deep "FlameOn.Client.TreeTest.Work.deep/1"

  setup do
    assert_node_clean()
    :ok
  end

  # The tree the exporters walk says what the stacks say.
  defp assert_tree_matches_stacks(profile) do
    built = profile.tree
    assert %Tree{} = built
    from_stacks = Tree.from_stacks(profile.stacks, profile.samples)

    for pid <- Map.keys(profile.stacks) do
      assert Tree.to_list(built, pid) == Tree.to_list(from_stacks, pid)
    end
  end

  test "a recursion 10 000 deep with max_depth: 10_000 keeps every level, one text for the chain" do
    {10_000, profile} =
      FlameOn.Client.profile(fn -> Work.deep(10_000) end,
        max_depth: 10_000,
        collapse_recursion: false
      )

    entries = profile.stacks[self()]
    chain = for {text, _us} <- entries, String.contains?(text, @deep), do: text
    depth = chain |> Enum.map(&length(String.split(&1, ";"))) |> Enum.max()
    # profile/2's frame, then (nearly) 10 000 frames of deep/1: a level
    # whose time rounds to 0 µs is no stack of its own
    assert depth >= 9_000
    # deep(10_000)..deep(0) under profile/2's frame: 10 002 frames, so the
    # last two fold into "…"
    assert profile.stats.depth_truncations == 2
    assert profile.stats.stacks_without_text == 0

    # The texts are slices of a few terminal ones (the chain's deepest
    # stack, the SLEEP leaves where the process was scheduled out): the
    # chain did not cost a text per level (that would be ~5 000 times the
    # deepest text).
    owners = chain |> Enum.map(&:binary.referenced_byte_size/1) |> Enum.uniq()
    deepest = chain |> Enum.map(&byte_size/1) |> Enum.max()
    assert Enum.sum(owners) < 50 * deepest

    assert_tree_matches_stacks(profile)
  end

  test "the default max_depth folds the same recursion, uncollapsed, into one … node" do
    {10_000, profile} =
      FlameOn.Client.profile(fn -> Work.deep(10_000) end, collapse_recursion: false)

    assert profile.stats.depth_truncations > 9_000
    assert Enum.any?(profile.stacks[self()], fn {text, _} -> String.ends_with?(text, ";…") end)
    assert_tree_matches_stacks(profile)
  end

  test "stacks stay in the byte order of their texts" do
    {_, profile} =
      FlameOn.Client.profile(
        fn ->
          Workloads.mixed(10)
          Work.deep_with_leaves(200)
        end,
        collapse_recursion: false
      )

    for {_pid, entries} <- profile.stacks do
      texts = Enum.map(entries, &elem(&1, 0))
      assert texts == Enum.sort(texts)
      assert texts == Enum.uniq(texts)
    end

    assert_tree_matches_stacks(profile)
  end

  test "max_stack_bytes leaves stacks out of stacks, counts them, and the tree keeps them" do
    pid = :c.pid(0, 4242, 0)
    # a chain 300 deep with a leaf at every level: 300 terminals, their
    # texts 300²/2 frames in all
    chain = for n <- 1..300, do: {:m, :"level_#{n}", 0}

    stacks =
      Enum.flat_map(1..300, fn n ->
        path = chain |> Enum.take(n) |> Enum.reverse()
        [{path, 1_000}, {[{:m, :leaf, 0} | path], 1_000}]
      end)

    build = fn max_bytes -> Profile.build(raw_tree(%{pid => stacks}, max_bytes), %{}, []) end
    full = build.(64 * 1024 * 1024)
    cut = build.(50_000)

    assert full.stats.stacks_without_text == 0
    assert length(full.stacks[pid]) == 600
    assert cut.stats.stacks_without_text > 0
    assert length(cut.stacks[pid]) + cut.stats.stacks_without_text == 600

    texts = cut.stacks[pid] |> Enum.map(&elem(&1, 0))

    # slices of one binary within the budget (OTP 27 copies small slices
    # out: those count only their own bytes)
    assert texts |> Enum.map(&:binary.referenced_byte_size/1) |> Enum.max() <= 50_000
    assert texts |> Enum.map(&byte_size/1) |> Enum.max() <= 50_000

    assert Enum.all?(texts, fn text -> {text, 1} in full.stacks[pid] end)

    # the tree, and the exporters walking it, keep every stack
    assert Tree.to_list(cut.tree, pid) == Tree.to_list(full.tree, pid)
    assert length(Tree.to_list(cut.tree, pid)) == 601

    assert cut |> Export.svg() |> IO.iodata_to_binary() ==
             full |> Export.svg() |> IO.iodata_to_binary()

    assert_raise ArgumentError, fn ->
      FlameOn.Client.profile(fn -> :ok end, max_stack_bytes: 0)
    end
  end

  test "a hand-made profile gets its tree from its stacks" do
    pid = :c.pid(0, 42, 0)

    profile = %Profile{
      pid: pid,
      stacks: %{pid => [{"", 1}, {"a", 2}, {"a;b", 3}, {"c;d", 4}]},
      samples: %{pid => [{"a;b", 2, 9}, {"a;x", 1, 1}]}
    }

    assert Tree.to_list(Tree.of(profile), pid) == [
             {0, nil, 1, 10, 0, 0},
             {1, "a", 2, 5, 0, 0},
             {2, "b", 3, 3, 2, 9},
             {2, "x", 0, 0, 1, 1},
             {1, "c", 0, 4, 0, 0},
             {2, "d", 4, 4, 0, 0}
           ]
  end

  test "render/2 merges frames that read the same and drops frames named nil" do
    pid = :c.pid(0, 4242, 0)

    tree =
      raw_tree(%{
        pid => [
          {[{:m, :a, 0}], 1_000},
          {[:sleep, {:m, :a, 0}], 2_000},
          {[:waiting, {:m, :a, 0}], 3_000},
          {[:attributed, {:m, :a, 0}], 4_000}
        ]
      })

    profile = Profile.build(tree, %{}, [], %{sleep: "WAITING", attributed: nil})
    assert profile.stacks == %{pid => [{"m:a/0", 1}, {"m:a/0;WAITING", 5}]}

    assert Tree.to_list(profile.tree, pid) == [
             {0, nil, 0, 6, 0, 0},
             {1, "m:a/0", 1, 6, 0, 0},
             {2, "WAITING", 5, 5, 0, 0}
           ]
  end
end
