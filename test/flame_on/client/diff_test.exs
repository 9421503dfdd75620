defmodule FlameOn.Client.DiffTest do
  # async: false: the workload test traces (call patterns are node-global).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers
  import FlameOn.Client.Test.ExportHelpers, only: [svg_parse!: 1, svg_frames: 1]

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Diff

  @steady "FlameOn.Client.Test.Workloads.steady/1"
  @grown "FlameOn.Client.Test.Workloads.grown/1"

  defp pid(n), do: :c.pid(0, n, 0)

  defp profile(root, stacks, names) do
    %Profile{name: "run", pid: root, stacks: stacks, process_names: names}
  end

  # %{[frame, ...] => {base, new}}: the diff's frames (every prefix of
  # every stack), as a flame graph draws them.
  defp frames(%Diff{stacks: stacks}) do
    for {_group, rows} <- stacks,
        {stack, b, n} <- rows,
        path = String.split(stack, ";"),
        k <- 1..length(path),
        reduce: %{} do
      acc -> Map.update(acc, Enum.take(path, k), {b, n}, fn {x, y} -> {x + b, y + n} end)
    end
  end

  describe "two runs of a real workload" do
    # The machine is shared: a spike of load inside one run moves a frame's
    # time however exact the trace (the unit of work is mostly a wait to
    # keep that small). Each attempt profiles afresh; the diff's numbers
    # must hold in one of four. A wrong normalisation fails every attempt:
    # :total, say, puts the unchanged frames at -50%.
    test "the function doing 4x the work is +300% (±10%), unchanged frames within ±5%" do
      Workloads.two_parts(1)
      {_, _} = FlameOn.Client.profile(fn -> Workloads.two_parts(1) end)

      result =
        Enum.reduce_while(1..4, [], fn _attempt, failures ->
          {_, base} = FlameOn.Client.profile(fn -> Workloads.two_parts(1) end)
          {_, new} = FlameOn.Client.profile(fn -> Workloads.two_parts(4) end)
          diff = FlameOn.Client.diff(base, new)

          case check_workload_diff(diff, base, new) do
            :ok -> {:halt, {:ok, diff}}
            {:error, why} -> {:cont, [why | failures]}
          end
        end)

      diff =
        case result do
          {:ok, diff} -> diff
          failures -> flunk("no attempt held:\n" <> Enum.join(Enum.reverse(failures), "\n"))
        end

      # its flame graph: grown/1 deep red, its title the change; steady/1 pale
      frames =
        diff
        |> FlameOn.Client.Export.DiffSVG.encode([])
        |> svg_parse!()
        |> svg_frames()
        |> Map.new(&{&1.name, &1})

      assert [_, g] = Regex.run(~r/\Argb\(255,(\d+),\1\)\z/, frames[@grown].fill)
      assert String.to_integer(g) < 60

      assert frames[@grown].title =~
               ~r/^#{@grown} \(base [\d,]+ µs, new [\d,]+ µs, \+[23]\d\d\.\d%, \+[\d,]+ µs\)$/

      assert [_ | channels] = Regex.run(~r/\Argb\((\d+),(\d+),(\d+)\)\z/, frames[@steady].fill)
      assert Enum.all?(channels, &(String.to_integer(&1) >= 200)), frames[@steady].fill
      assert_node_clean()
    end
  end

  defp check_workload_diff(diff, base, new) do
    frames = frames(diff)
    big = for {path, {b, n}} <- frames, b >= diff.base_total * 0.02, do: {path, b, n}
    grown = for {path, b, n} <- big, @grown in path, do: {List.last(path), Diff.percent(b, n)}
    steady = for {path, b, n} <- big, @steady in path, do: {List.last(path), Diff.percent(b, n)}
    {gb, gn} = Diff.inclusive(diff, @grown)

    # :total makes the new total the base's: 9 units against 18, all halved
    total = FlameOn.Client.diff(base, new, normalize: :total)
    {sb, sn} = Diff.inclusive(total, @steady)

    problems =
      for {what, bad} <- [
            {"grown/1 inclusive", abs(Diff.percent(gb, gn) - 300) > 30},
            {"grown frames #{inspect(grown)}", grown == [] or bad?(grown, 270, 330)},
            {"steady frames #{inspect(steady)}", steady == [] or bad?(steady, -5, 5)},
            {"steady with :total #{Diff.percent(sb, sn)}", abs(Diff.percent(sb, sn) + 50) > 7}
          ],
          bad,
          do: what

    if problems == [], do: :ok, else: {:error, "scale #{diff.scale}: #{inspect(problems)}"}
  end

  defp bad?(frames, low, high), do: Enum.any?(frames, fn {_f, p} -> p < low or p > high end)

  describe "inputs" do
    setup do
      {a, b} = {pid(9101), pid(9102)}

      profile =
        profile(a, %{a => [{"", 2}, {"main;work", 30}], b => [{"loop", 5}]}, %{
          b => "Task My.job/1"
        })

      %{profile: profile}
    end

    test "a profile, its folded text and its folded file give the same diff", %{profile: p} do
      other = %{p | stacks: %{p.pid => [{"main;work", 90}, {"main;new", 10}]}}
      folded = Profile.folded(p)
      path = Path.join(System.tmp_dir!(), "flame_on_diff_#{System.unique_integer([:positive])}")
      File.write!(path, folded)
      on_exit(fn -> File.rm(path) end)

      for by <- [:merged, :process] do
        expected = FlameOn.Client.diff(p, other, by: by)
        assert FlameOn.Client.diff(folded, other, by: by).stacks == expected.stacks
        assert FlameOn.Client.diff(path, other, by: by).stacks == expected.stacks

        assert FlameOn.Client.diff(IO.iodata_to_binary(folded), other, by: by).stacks ==
                 expected.stacks
      end

      assert FlameOn.Client.diff(path, other).base_name == path
    end

    test "plain folded lines of other tools, decimals, blank lines" do
      diff = FlameOn.Client.diff("a;b 10\n\na;c 2.6\r\n", "a;b 10\na;c 5\n", normalize: false)
      assert diff.stacks == %{all: [{"a;b", 10, 10}, {"a;c", 3, 5}]}
      assert diff.base_total == 13
    end

    test "a missing file, an unparseable line, no stacks, a bad option: ArgumentError" do
      assert_raise ArgumentError, ~r/no such folded file: nope\/x.folded/, fn ->
        FlameOn.Client.diff("nope/x.folded", "a 1\n")
      end

      assert_raise ArgumentError, ~r/folded text, line 2: not a folded stack.*"a;b twelve"/, fn ->
        FlameOn.Client.diff("a 1\na;b twelve\n", "a 1\n")
      end

      assert_raise ArgumentError, ~r/no folded stacks/, fn ->
        FlameOn.Client.diff("\n\n", "a 1\n")
      end

      assert_raise ArgumentError, ~r/folded text, line 1: three columns \(a diff's/, fn ->
        FlameOn.Client.diff("a;b 10 40\n", "a 1\n")
      end

      assert_raise ArgumentError, ~r/got: :nope/, fn -> FlameOn.Client.diff(:nope, "a 1\n") end

      assert_raise ArgumentError, ~r/invalid diff option :by: :pid/, fn ->
        FlameOn.Client.diff("a 1\n", "a 1\n", by: :pid)
      end

      assert_raise ArgumentError, ~r/unknown keys \[:scale\]/, fn ->
        FlameOn.Client.diff("a 1\n", "a 1\n", scale: 2)
      end
    end

    test "alloc: true compares the profiles' alloc field (words), none is empty", %{profile: p} do
      with_alloc = Map.put(p, :alloc, %{p.pid => [{"main;work", 400}]})
      grown = Map.put(p, :alloc, %{p.pid => [{"main;work", 1000}]})
      diff = FlameOn.Client.diff(with_alloc, grown, alloc: true, normalize: false)
      assert diff.stacks == %{all: [{"main;work", 400, 1000}]}
      assert {diff.measure, diff.unit} == {:alloc, "words"}
      assert FlameOn.Client.diff(p, p, alloc: true).stacks == %{}
    end
  end

  describe "by: :process" do
    test "roots with each other, named processes by name, the unnamed together" do
      [r1, s1, t1, t2, u1, r2, s2, t3, u2, u3] = Enum.map(9201..9210, &pid/1)
      names1 = %{r1 => "ExUnit", s1 => "MyApp.Cart", t1 => "Task My.job/1", t2 => "Task My.job/1"}
      names2 = %{r2 => "Other", s2 => "MyApp.Cart", t3 => "Task My.job/1"}

      base =
        profile(
          r1,
          %{
            r1 => [{"run", 100}],
            s1 => [{"handle_call", 40}],
            t1 => [{"job", 10}],
            t2 => [{"job", 10}],
            u1 => [{"x", 7}]
          },
          names1
        )

      new =
        profile(
          r2,
          %{
            r2 => [{"run", 100}],
            s2 => [{"handle_call", 80}],
            t3 => [{"job", 20}],
            u2 => [{"x", 3}],
            u3 => [{"x", 4}]
          },
          names2
        )

      diff = FlameOn.Client.diff(base, new, by: :process)

      assert diff.groups == [
               {:root, "[root]"},
               {{:name, "MyApp.Cart"}, "MyApp.Cart"},
               {{:name, "Task_My.job/1"}, "Task_My.job/1"},
               {:unnamed, "[unnamed]"}
             ]

      assert diff.stacks == %{
               :root => [{"run", 100, 100}],
               {:name, "MyApp.Cart"} => [{"handle_call", 40, 80}],
               {:name, "Task_My.job/1"} => [{"job", 20, 20}],
               :unnamed => [{"x", 7, 7}]
             }

      # merged: every process together
      assert FlameOn.Client.diff(base, new).stacks == %{
               all: [{"handle_call", 40, 80}, {"job", 20, 20}, {"run", 100, 100}, {"x", 7, 7}]
             }

      # from its folded text, or made without a pid, the root is the
      # process with the most time
      from_folded = FlameOn.Client.diff(Profile.folded(base), new, by: :process)
      assert from_folded.stacks == diff.stacks
      assert FlameOn.Client.diff(%{base | pid: nil}, new, by: :process).stacks == diff.stacks
    end
  end

  describe "normalize" do
    @base "r;a 100\nr;b 100\nr;c 100\n"
    @new "r;a 100\nr;b 100\nr;c 400\nr;d 50\n"

    test "median (default): the typical stack is unchanged" do
      diff = FlameOn.Client.diff(@base, @new)
      assert diff.normalize == :median and diff.scale == 1.0

      assert diff.stacks.all == [
               {"r;a", 100, 100},
               {"r;b", 100, 100},
               {"r;c", 100, 400},
               {"r;d", 0, 50}
             ]

      # a run slower as a whole is scaled back
      slower = "r;a 110\nr;b 110\nr;c 440\n"
      diff = FlameOn.Client.diff(@base, slower, normalize: true)
      assert diff.stacks.all == [{"r;a", 100, 100}, {"r;b", 100, 100}, {"r;c", 100, 400}]
      assert {diff.base_total, diff.new_total} == {300, 660}
    end

    test ":total scales new to the base's total, false keeps it" do
      diff = FlameOn.Client.diff(@base, @new, normalize: :total)
      assert diff.scale == 300 / 650
      assert Enum.sum(for {_s, _b, n} <- diff.stacks.all, do: n) in 299..301

      diff = FlameOn.Client.diff(@base, @new, normalize: false)
      assert diff.scale == 1.0
      assert {"r;c", 100, 400} in diff.stacks.all
    end

    test "median without a common stack is :total; nothing to scale is 1.0" do
      assert FlameOn.Client.diff("a 10\n", "b 40\n").scale == 0.25
      assert FlameOn.Client.diff(%Profile{}, "b 40\n").scale == 1.0
    end
  end

  test "inclusive/2 counts a frame once per stack, in every group" do
    diff = FlameOn.Client.diff("f;g;f 10\nf 5\nh 1\n", "f;g;f 20\nf 5\nh 1\n", normalize: false)
    assert Diff.inclusive(diff, "f") == {15, 25}
    assert Diff.inclusive(diff, "g") == {10, 20}
    assert Diff.inclusive(diff, "nowhere") == {0, 0}
  end
end
