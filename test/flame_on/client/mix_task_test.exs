defmodule FlameOn.Client.MixTaskTest do
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper.Directory
  alias Mix.Tasks.Profile.Flame

  setup do
    assert_node_clean()
    out = Path.join(System.tmp_dir!(), "flame_on_mix_task_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(out) end)
    %{out: out}
  end

  defp run_task(args), do: capture_io(fn -> Flame.run(args) end)

  defp folded_lines(path) do
    lines = path |> File.read!() |> String.split("\n", trim: true)
    assert lines != []
    for line <- lines, do: assert(line =~ ~r/^[^ ]+ \d+$/, line)
    lines
  end

  test "-e profiles the expression, writes the files and prints a summary", %{out: out} do
    output = run_task(["-e", "Enum.sum(1..1000)", "--out", out])

    assert output =~ "Warmup..."
    assert output =~ "Profiling..."
    assert output =~ ~r/Profiled in \d+ ms/

    formats = if Directory.export?(), do: [:folded, :svg], else: [:folded]
    assert output =~ "Writing #{length(formats)} file"
    files = File.ls!(out)
    assert length(files) >= length(formats)

    folded = Path.join(out, Enum.find(files, &String.ends_with?(&1, ".folded")))
    assert output =~ "#{folded} (folded)"
    lines = folded_lines(folded)
    assert Enum.all?(lines, &String.starts_with?(&1, "eval;"))
    assert Enum.any?(lines, &(&1 =~ "Enum.sum/1"))

    assert output =~ ~s|Top 10 functions by self time ("eval", mode nif):|
    assert output =~ ~r/^\s+\d+\s+\d+\.\d%  Enum\.\S+$/m
    assert output =~ ~r/Total: \d+ µs in \d+ stacks? of 1 process \(\d+ µs wall\)/
    refute output =~ "Spans"
    assert_node_clean()
  end

  test "--mode sample --split-status --interval-us: sampled stacks, no call pattern", %{out: out} do
    code = "FlameOn.Client.Test.Workloads.busy(60); FlameOn.Client.TestHelpers.patterns_set?()"

    output =
      run_task(
        ~w(--mode sample --split-status --interval-us 2000 --no-warmup --format folded --out) ++
          [out, "-e", code]
      )

    assert output =~ ~s|Top 10 functions by self time ("eval", mode sample):|
    assert output =~ "FlameOn.Client.Test.Workloads.fib/1"
    lines = folded_lines(Path.join(out, "eval.folded"))
    # eval;<pid>;[status];... – the status is the stacks' root
    assert Enum.any?(lines, &(&1 =~ ~r/^eval;<[\d.]+>;\[(running|runnable)\];/))
    refute patterns_set?()
    assert_node_clean()
  end

  test "a script with arguments, --name, --mode process, --no-warmup", %{out: out} do
    script = Path.join(out, "work_script.exs")
    File.mkdir_p!(out)

    File.write!(script, """
    [n] = System.argv()
    FlameOn.Client.Test.Workloads.fib(String.to_integer(n))
    """)

    argv = System.argv()

    output =
      run_task([
        "--out",
        out,
        "--format",
        "folded",
        "--mode",
        "process",
        "--no-warmup",
        "--top",
        "3",
        script,
        "12"
      ])

    refute output =~ "Warmup..."
    assert output =~ ~s|Top 3 functions by self time ("work_script", mode process):|
    assert output =~ "FlameOn.Client.Test.Workloads.fib/1"
    lines = folded_lines(Path.join(out, "work_script.folded"))
    assert Enum.any?(lines, &(&1 =~ "FlameOn.Client.Test.Workloads.fib/1"))
    assert System.argv() == argv

    output = run_task(["--out", out, "--format", "folded", "--name", "named", script, "5"])
    assert output =~ ~s("named")
    assert File.exists?(Path.join(out, "named.folded"))
    assert_node_clean()
  end

  test "--cross-process prints the spans", %{out: out} do
    {:ok, server} = Agent.start_link(fn -> 0 end, name: :flame_on_mix_task_agent)

    output =
      run_task([
        "-e",
        "Agent.update(:flame_on_mix_task_agent, fn n -> FlameOn.Client.Test.Workloads.fib(15) + n end)",
        "--cross-process",
        "--format",
        "folded",
        "--out",
        out
      ])

    assert output =~ "Spans ("
    assert output =~ ~r/ATTRIBUTED µs\s+UNATTRIBUTED µs\s+PROCESS/
    # a process by its name, then its pid
    assert output =~ ~r/ flame_on_mix_task_agent <\d+\.\d+\.\d+> \(request\)/
    # the root's wait on the agent is explained by the agent's span
    assert output =~ "Waits explained by other spans ("
    assert output =~ ~r/\d+\s+1\s+0 \S+ -> 1 flame_on_mix_task_agent </
    assert output =~ "FlameOn.Client.Test.Workloads.fib/1"
    Agent.stop(server)
    assert_node_clean()
  end

  test "--alloc --cross-process: the words of the process the work reaches, in files and the table",
       %{out: out} do
    {:ok, server} = Agent.start_link(fn -> 0 end, name: :flame_on_mix_task_alloc)

    output =
      run_task([
        "-e",
        "Enum.each(1..10, fn _ -> Agent.get(:flame_on_mix_task_alloc, " <>
          "fn _ -> length(Enum.to_list(1..50_000)) end) end)",
        "--alloc",
        "--cross-process",
        "--format",
        "folded",
        "--out",
        out
      ])

    assert output =~ "Spans ("
    assert output =~ "functions by heap words allocated"
    [alloc_file] = out |> File.ls!() |> Enum.filter(&String.ends_with?(&1, ".alloc.folded"))
    lines = folded_lines(Path.join(out, alloc_file))
    # the agent's process built the lists: 10 times 50 000 elements, a
    # list and its reverse (4 words an element)
    agent_words =
      for line <- lines, line =~ "flame_on_mix_task_alloc", reduce: 0 do
        acc -> acc + (line |> String.split(" ") |> List.last() |> String.to_integer())
      end

    # (OTP 27+: a process's collections are traced from a moment after it
    # joins, FlameOn.Client.Owners.Namer, and these ten requests take a few
    # ms in all: 900 804 words in three runs there, the later requests')
    least = if FlameOn.Client.Node.TraceBackend.sessions?(), do: 0.35, else: 0.8
    assert agent_words >= least * 2_000_000 and agent_words <= 1.2 * 2_000_000, "#{agent_words}"
    Agent.stop(server)
    assert_node_clean()
  end

  test "the self-time table sums stacks by their leaf" do
    [a, b] = [:c.pid(0, 1, 0), :c.pid(0, 2, 0)]

    profile = %Profile{
      stacks: %{
        a => [{"", 1}, {"m:f/0", 5}, {"m:f/0;m:g/0", 7}],
        b => [{"x:y/0;m:g/0", 4}, {"x:y/0;SLEEP", 20}]
      }
    }

    assert FlameOn.Client.CLI.Report.self_times(profile) == [
             {"SLEEP", 20},
             {"m:g/0", 11},
             {"m:f/0", 5},
             {"(no traced function)", 1}
           ]
  end

  test "--summary call_time prints the top functions and writes every one as CSV", %{out: out} do
    code = "FlameOn.Client.Test.Workloads.fib(15)"
    output = run_task(["--summary", "call_time", "--top", "3", "--out", out, "-e", code])
    csv = Path.join(out, "eval.summary.csv")
    assert output =~ "#{csv} (csv, every function)"
    assert output =~ ~r/Top 3 functions by time \("eval", call_time, 1 process, \d+ µs wall\):/
    assert output =~ ~r/^FUNCTION +CALLS +TIME \(µs\) +PER CALL +\[ +%\]$/m
    # fib(15) makes 1973 calls of fib/1
    assert output =~ ~r/^FlameOn\.Client\.Test\.Workloads\.fib\/1 +1973 +\d+ /m
    [header | rows] = csv |> File.read!() |> String.split("\n", trim: true)
    assert header == "function,calls,time_us,per_call,percent"
    assert Enum.any?(rows, &String.starts_with?(&1, "FlameOn.Client.Test.Workloads.fib/1,1973,"))
    assert_node_clean()
  end

  test "--summary call_memory: words on OTP 26+, a clear error before", %{out: out} do
    args = ["--summary", "call_memory", "--no-warmup", "--out", out, "-e", "Enum.to_list(1..100)"]

    if :erlang.system_info(:otp_release) >= ~c"26" do
      output = run_task(args)
      assert output =~ ~r/^FUNCTION +CALLS +WORDS +PER CALL/m
      assert File.read!(Path.join(out, "eval.summary.csv")) =~ "function,calls,words,"
    else
      assert_raise Mix.Error, ~r/OTP 26/, fn -> run_task(args) end
    end

    assert_raise Mix.Error, ~r/--mode does not go with --summary/, fn ->
      run_task(["--summary", "call_time", "--mode", "nif", "-e", "1"])
    end

    assert_raise Mix.Error, ~r/usage/, fn -> run_task(["--summary", "calls", "-e", "1"]) end
    assert_node_clean()
  end

  test "a deep Enum.map is one frame; --no-collapse-recursion folds it past --max-depth and says how to raise it",
       %{out: out} do
    code = "Enum.map(Enum.to_list(1..3_000), &(&1 * 2))"
    collapsed = run_task(["-e", code, "--out", out, "--format", "folded", "--no-warmup"])
    refute collapsed =~ "Warning"
    lines = out |> File.ls!() |> Enum.map(&Path.join(out, &1)) |> Enum.flat_map(&folded_lines/1)
    refute Enum.any?(lines, &String.contains?(&1, "…"))
    assert Enum.any?(lines, &String.contains?(&1, "lists^map"))
    File.rm_rf!(out)

    exact =
      run_task([
        "-e",
        code,
        "--out",
        out,
        "--format",
        "folded",
        "--no-warmup",
        "--no-collapse-recursion",
        "--max-depth",
        "64"
      ])

    assert exact =~ ~r/Warning: truncated_stacks: \d+ \(\d+ calls went past --max-depth/
    assert exact =~ "raise --max-depth"
    assert exact =~ "--no-collapse-recursion"
    assert_node_clean()
  end

  test "bad options raise Mix.Error with the usage" do
    for args <- [
          ["--bogus"],
          [],
          ["-e", "1", "--mode", "fast"],
          ["-e", "1", "--sleep", "never"],
          ["-e", "1", "--format", "folded,gif"],
          ["-e", "1", "--format", ","],
          ["-e", "1", "--top", "0"],
          ["-e", "1", "--max-nodes", "many"],
          ["-e", "1", "extra.exs"]
        ] do
      assert_raise Mix.Error, ~r/usage: mix profile.flame/, fn -> run_task(args) end
    end

    assert_raise Mix.Error, ~r/No such file/, fn -> run_task(["no_such_script.exs"]) end

    unless Directory.export?() do
      assert_raise Mix.Error, ~r/FlameOn.Client.Export/, fn ->
        run_task(["-e", "1", "--format", "svg"])
      end
    end

    assert_node_clean()
  end
end
