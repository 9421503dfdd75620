defmodule FlameOn.Client.DemoTest do
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  doctest FlameOn.Client
  doctest FlameOn.Client.CLI.Demo

  test "mix flame_on.demo writes the flame graph and span graph files and prints the top stacks" do
    out = Path.join(System.tmp_dir!(), "flame_on_demo_test_#{System.unique_integer([:positive])}")
    Mix.shell(Mix.Shell.Process)

    try do
      Mix.Tasks.FlameOn.Demo.run(["--out", out])
    after
      Mix.shell(Mix.Shell.IO)
    end

    on_exit(fn -> File.rm_rf!(out) end)

    path = Path.join(out, "demo.folded")
    assert_received {:mix_shell, :info, ["Wrote " <> wrote]}
    assert String.starts_with?(wrote, path)

    for file <- ~w(demo.svg demo.speedscope.json demo.perfetto.json) do
      assert File.stat!(Path.join(out, file)).size > 0, file
    end

    # The span graph: the root and the Echo server's span, linked by a flow.
    perfetto = File.read!(Path.join(out, "demo.perfetto.json"))
    assert perfetto =~ ~s("flow_out":true)
    assert perfetto =~ ~s("flow_in":true)

    assert_received {:mix_shell, :info,
                     ["\nSpans (self / attributed wait / unattributed wait, µs):"]}

    assert_received {:mix_shell, :info, ["  span 0 " <> root]}
    assert root =~ "(root)"
    assert_received {:mix_shell, :info, ["  span 1 " <> callee]}
    assert callee =~ "<- span 0"

    lines = path |> File.read!() |> String.split("\n", trim: true)
    assert lines != []

    for line <- lines do
      # the process: its pid, after its name if it has one (Echo_<0.123.0>)
      assert line =~ ~r/^demo;([^; ]+_)?<\d+\.\d+\.\d+>;?[^ ]* \d+$/, line
    end

    text = Enum.join(lines, "\n")
    # fib's recursion is one frame (collapse_recursion: true, the default)
    assert text =~ "FlameOn.Client.CLI.Demo.fib/1"
    refute text =~ "FlameOn.Client.CLI.Demo.fib/1;FlameOn.Client.CLI.Demo.fib/1"
    # cross-process view: off-CPU time nothing explains is WAITING
    assert text =~ "Process.sleep/1;WAITING"
    assert text =~ "FlameOn.Client.CLI.Demo.word_counts/0"
    assert text =~ "FlameOn.Client.CLI.Demo.round_trip/1"
    assert text =~ "FlameOn.Client.CLI.Demo.file_io/0"

    assert_received {:mix_shell, :info, ["\nTop 10 stacks by time:"]}
    assert_received {:mix_shell, :info, ["\nStats:"]}
    assert_received {:mix_shell, :info, ["  events: " <> _]}
    assert_node_clean()
  end

  test "the task rejects unknown arguments" do
    assert_raise Mix.Error, ~r/usage/, fn -> Mix.Tasks.FlameOn.Demo.run(["--bogus"]) end
  end
end
