defmodule FlameOn.Client.RecursionTest.Work do
  @moduledoc false
  # Enum.map/2 over a list runs Enum's list helper, a body recursion as
  # deep as the list is long; body/1 is one written by hand, calling a
  # leaf at every level; fib/1 recurses twice per level.
  def double_all(list), do: Enum.map(list, fn x -> x * 2 end)

  def body([]), do: 0
  def body([x | rest]), do: leaf(x) + body(rest)

  def leaf(x), do: rem(x, 7)

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  # a -> b -> a -> b ...: mutual, not direct
  def ping(0), do: 0
  def ping(n), do: 1 + pong(n - 1)
  def pong(0), do: 0
  def pong(n), do: 1 + ping(n - 1)
end

defmodule FlameOn.Client.RecursionTest do
  # Tracing is node-global (patterns, flags): never async.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.RecursionTest.Work

  @body "FlameOn.Client.RecursionTest.Work.body/1"
  @leaf "FlameOn.Client.RecursionTest.Work.leaf/1"
  @fib "FlameOn.Client.RecursionTest.Work.fib/1"
  # Elixir's name for double_all/1's fun
  @fun "FlameOn.Client.RecursionTest.Work.-double_all/1-fun-0-/1"

  setup do
    assert_node_clean()
    :ok
  end

  defp texts(profile, pid), do: Enum.map(profile.stacks[pid], &elem(&1, 0))

  # No stack has a frame directly on top of itself.
  defp refute_direct_repeats(profile, pid) do
    for text <- texts(profile, pid) do
      frames = String.split(text, ";")

      refute Enum.any?(Enum.chunk_every(frames, 2, 1, :discard), fn [a, b] -> a == b end),
             "a frame on top of itself: #{text}"
    end
  end

  defp svg_height(profile) do
    [_, height] =
      Regex.run(~r/<svg[^>]*\sheight="(\d+)"/, IO.iodata_to_binary(Export.svg(profile)))

    String.to_integer(height)
  end

  for mode <- [:nif, :process], n <- [3_000, 30_000] do
    @tag mode: mode, n: n
    test "Enum.map/2 over #{n} items, mode #{inspect(mode)}: one map frame, nothing truncated, a short SVG",
         %{mode: mode, n: n} do
      list = Enum.to_list(1..n)
      {result, profile} = Client.profile(fn -> Work.double_all(list) end, mode: mode)
      assert length(result) == n

      assert profile.stats.truncated_stacks == 0
      assert profile.stats.depth_truncations == 0
      # the helper called itself once per item (and once more for [])
      assert profile.stats.collapsed_recursion >= n
      refute Enum.any?(texts(profile, self()), &String.contains?(&1, "…"))
      refute_direct_repeats(profile, self())

      # the list helper is one frame, and the fun it calls at every level is
      # one stack under it
      helper = Enum.filter(texts(profile, self()), &String.contains?(&1, "lists^map"))
      assert helper != [], inspect(texts(profile, self()))

      under_helper =
        for text <- helper,
            [_, below] <- [String.split(text, ~r/lists\^map[^;]*/, parts: 2)],
            below != "",
            do: below

      called =
        for below <- under_helper,
            frame = hd(String.split(below, ";", trim: true)),
            frame not in ["SLEEP", "RUNNABLE", "GC_MINOR", "GC_MAJOR"],
            uniq: true,
            do: frame

      assert called == [@fun]
      # one stack for the fun, not one per level
      assert Enum.count(under_helper, &(&1 == ";" <> @fun)) == 1

      assert svg_height(profile) < 2_000
      assert_node_clean()
    end
  end

  for mode <- [:nif, :process] do
    @tag mode: mode
    test "a body recursion 3 000 deep, mode #{inspect(mode)}: one frame, its leaf calls merged",
         %{mode: mode} do
      list = Enum.to_list(1..3_000)
      {_, profile} = Client.profile(fn -> Work.body(list) end, mode: mode)

      assert profile.stats.truncated_stacks == 0
      refute_direct_repeats(profile, self())
      assert max_frame_count(profile, self(), @body) == 1
      # leaf/1's calls from every level are one stack under the one body/1
      leaves = Enum.filter(texts(profile, self()), &String.ends_with?(&1, @body <> ";" <> @leaf))
      assert length(leaves) <= 1
      assert_node_clean()
    end
  end

  test "both exact modes give the same collapsed stacks for the same work" do
    shapes = fn mode ->
      {_, profile} = Client.profile(fn -> Work.fib(12) end, mode: mode)

      # (a collection lands wherever the heap fills up: not part of the shape)
      for text <- texts(profile, self()),
          String.contains?(text, @fib) and not String.contains?(text, ";GC_M"),
          into: MapSet.new(),
          do: text
    end

    nif = shapes.(:nif)
    assert MapSet.size(nif) >= 1
    assert nif == shapes.(:process)
    assert_node_clean()
  end

  test "collapse_recursion: false keeps the real depth, folded past max_depth" do
    list = Enum.to_list(1..3_000)

    {_, exact} =
      Client.profile(fn -> Work.double_all(list) end, mode: :nif, collapse_recursion: false)

    assert exact.stats.collapsed_recursion == 0
    assert exact.stats.depth_truncations > 0
    assert Enum.any?(texts(exact, self()), &String.contains?(&1, "…"))
    assert svg_height(exact) > 2_000
    assert_node_clean()
  end

  test "collapsing moves no time: the profile's total matches its duration, as without it" do
    list = Enum.to_list(1..30_000)

    for collapse <- [true, false] do
      {_, profile} =
        Client.profile(fn -> Work.double_all(list) end,
          mode: :nif,
          collapse_recursion: collapse,
          max_depth: 100_000
        )

      total = Profile.total_us(profile, self())
      # µs rounding is per stack (under 1 µs each, and a stack that rounds
      # to 0 is left out): the uncollapsed profile has a stack per level
      slack = 0.05 * profile.duration_us + profile.stats.nodes

      assert abs(total - profile.duration_us) <= slack,
             "collapse_recursion: #{collapse}: stacks #{total} µs, duration #{profile.duration_us} µs"

      assert profile.stats.truncated_stacks == 0
    end

    assert_node_clean()
  end

  test "fib/1 is one frame per stack by default, every level with collapse_recursion: false" do
    {6765, collapsed} = Client.profile(fn -> Work.fib(20) end)
    assert max_frame_count(collapsed, self(), @fib) == 1
    # fib(20) makes 21 890 calls, all but the first from fib/1 itself
    assert collapsed.stats.collapsed_recursion == 21_890

    {6765, exact} = Client.profile(fn -> Work.fib(20) end, collapse_recursion: false)
    assert max_frame_count(exact, self(), @fib) in 15..20
    assert_node_clean()
  end

  test "mutual recursion keeps its depth" do
    {200, profile} = Client.profile(fn -> Work.ping(200) end)
    assert max_frame_count(profile, self(), "FlameOn.Client.RecursionTest.Work.ping/1") >= 90
    assert_node_clean()
  end

  test "mode :sample: a deep recursion's stacks have no frame on top of itself" do
    list = Enum.to_list(1..30_000)

    {_, profile} =
      Client.profile(
        fn ->
          for _ <- 1..20, do: Work.body(list)
        end,
        mode: :sample
      )

    assert profile.stats.truncated_stacks == 0
    refute_direct_repeats(profile, self())
    assert svg_height(profile) < 2_000
    assert_node_clean()
  end

  test "the option is checked" do
    assert_raise ArgumentError, ~r/:collapse_recursion to be a boolean/, fn ->
      Client.profile(fn -> :ok end, collapse_recursion: :yes)
    end
  end

  test "a truncation warning names the options that raise the limit" do
    stats = %{truncated_stacks: 12, depth_truncations: 12}
    assert Profile.truncation_hint(stats) =~ ":max_depth"
    assert Profile.truncation_hint(stats) =~ ":collapse_recursion"
    assert Profile.truncation_hint(stats, :switches) =~ "--max-depth"
    assert Profile.truncation_hint(stats, :switches) =~ "--no-collapse-recursion"

    assert Profile.truncation_hint(%{truncated_stacks: 3, node_limit_hits: 3}) =~
             "raise :max_nodes"

    assert Profile.truncation_hint(%{truncated_stacks: 0}) == nil
  end
end
