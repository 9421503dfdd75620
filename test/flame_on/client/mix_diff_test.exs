defmodule FlameOn.Client.MixDiffTest do
  # mix profile.flame --diff-base: traces (node-global call patterns)
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import FlameOn.Client.TestHelpers

  alias Mix.Tasks.Profile.Flame

  @code "FlameOn.Client.Test.Workloads.two_parts(1)"

  setup do
    assert_node_clean()
    out = Path.join(System.tmp_dir!(), "flame_on_mix_diff_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(out) end)
    %{out: out}
  end

  defp run_task(args), do: capture_io(fn -> Flame.run(args) end)

  test "--diff-base FILE writes the diff against an earlier run and prints it", %{out: out} do
    run_task(~w(--no-warmup --format folded --out) ++ [out, "-e", @code])
    base = Path.join(out, "before.folded")
    File.rename!(Path.join(out, "eval.folded"), base)

    output =
      run_task(
        ~w(--no-warmup --format folded,svg,pprof,perfetto --diff-base) ++
          [base, "--out", out, "-e", "FlameOn.Client.Test.Workloads.two_parts(2)"]
      )

    assert output =~
             ~r/Diff against #{base}: base \d+ µs, new \d+ µs \(new scaled ×\d\.\d{3}, by the median/

    assert output =~ "  perfetto skipped: a diff has no timeline"

    for file <- ~w(eval.diff.folded eval.diff.svg eval.base.pb.gz eval.new.pb.gz) do
      path = Path.join(out, file)
      assert File.regular?(path), "#{file} is missing"
      assert output =~ path
    end

    refute File.exists?(Path.join(out, "eval.diff.perfetto.json"))
    assert output =~ "go tool pprof -diff_base=#{out}/eval.base.pb.gz #{out}/eval.new.pb.gz"
    assert output =~ "Largest changes in self time:"
    assert output =~ ~r/^\s+\d+\s+\d+\s+[+-]\d+%  SLEEP$/m

    lines = out |> Path.join("eval.diff.folded") |> File.read!() |> String.split("\n", trim: true)
    for line <- lines, do: assert(line =~ ~r/^eval;\S* \d+ \d+$/, line)

    grown = Enum.find(lines, &(&1 =~ "Workloads.grown/1;Process.sleep/1;SLEEP "))
    assert [_, b, n] = Regex.run(~r/ (\d+) (\d+)$/, grown)
    assert String.to_integer(b) > 0 and String.to_integer(n) > String.to_integer(b)
    assert_node_clean()
  end

  test "--next with --diff-base: the captured call against an earlier one", %{out: out} do
    next = ~w(--next FlameOn.Client.Test.Workloads.two_parts/1 --mode nif --format folded --out)
    run_task(next ++ [out, "-e", @code])
    base = Path.join(out, "before.folded")
    File.rename!(Path.join(out, "FlameOn.Client.Test.Workloads.two_parts_1.folded"), base)

    output =
      run_task(
        next ++ [out, "--diff-base", base, "-e", "FlameOn.Client.Test.Workloads.two_parts(4)"]
      )

    assert output =~ "Diff against #{base}"
    diff = Path.join(out, "FlameOn.Client.Test.Workloads.two_parts_1.diff.folded")
    assert output =~ "#{diff} (folded)"
    lines = diff |> File.read!() |> String.split("\n", trim: true)
    assert Enum.any?(lines, &(&1 =~ ~r/;FlameOn\.Client\.Test\.Workloads\.grown\/1;\S+ \d+ \d+$/))
    assert_node_clean()
  end

  test "--diff-normalize none compares absolute times", %{out: out} do
    base = Path.join(out, "base.folded")
    File.mkdir_p!(out)
    File.write!(base, "x;<0.1.0>;nothing_alike 10\n")

    output =
      run_task(
        ~w(--no-warmup --top 100 --format folded --diff-normalize none --diff-base) ++
          [base, "--out", out, "-e", "FlameOn.Client.Test.Workloads.fib(5)"]
      )

    assert output =~ "(absolute values)"
    assert output =~ ~r/^\s+10\s+0\s+-100%  nothing_alike$/m
  end

  test "a missing or unparseable FILE fails before anything runs", %{out: out} do
    missing = Path.join(out, "missing.folded")

    assert_raise Mix.Error, "--diff-base: no such file: #{missing}", fn ->
      run_task(["--diff-base", missing, "--out", out, "-e", "raise 'not run'"])
    end

    File.mkdir_p!(out)
    bad = Path.join(out, "bad.folded")
    File.write!(bad, "a;b 1\nthis is not folded\n")

    assert_raise Mix.Error, ~r/--diff-base: #{bad}, line 2: not a folded stack/, fn ->
      run_task(["--diff-base", bad, "--out", out, "-e", "raise 'not run'"])
    end

    refute File.exists?(Path.join(out, "eval.folded"))
  end

  test "--diff-normalize needs --diff-base; neither goes with --summary", %{out: out} do
    assert_raise Mix.Error, ~r/--diff-normalize goes with --diff-base/, fn ->
      run_task(["--diff-normalize", "total", "--out", out, "-e", "1"])
    end

    assert_raise Mix.Error, ~r/--diff-normalize must be median or none or total/, fn ->
      run_task(["--diff-normalize", "x", "--diff-base", "f", "--out", out, "-e", "1"])
    end

    assert_raise Mix.Error, ~r/--diff-base does not go with --summary/, fn ->
      run_task(["--summary", "call_time", "--diff-base", "f", "--out", out, "-e", "1"])
    end
  end
end
