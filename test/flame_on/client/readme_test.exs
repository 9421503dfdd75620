# The modules the README's examples call. Defined here, at the top level, so
# the examples run as written.
defmodule MyApp do
  @moduledoc false
  # A request: work in a task (another process) and in the caller.
  def handle(request) do
    task = Task.async(fn -> work() end)
    {request, Task.await(task), work()}
  end

  def work, do: Enum.reduce(1..5_000, 0, &(&1 + &2))
end

defmodule MyApp.Orders do
  @moduledoc false
  def checkout(cart, opts), do: {:ok, {cart, opts, MyApp.work()}}
end

defmodule FlameOn.Client.ReadmeTest do
  # Runs the README's code so that it stays true: every ```elixir block,
  # every `mix profile.flame` line of its ```sh blocks, and a few of its
  # claims checked against the code (the fields of a profile, the options
  # and their defaults). A block that cannot run here has
  # `<!-- readme-test: skip (reason) -->` on the line before it; the test
  # lists those, and @marked_skips must be changed to add one.
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.{Options, Profile}

  @readme Path.expand("../../../README.md", __DIR__)
  @marked_skips 2

  # What the examples call without defining it.
  defmodule Local do
    @moduledoc false
    def checkout(cart), do: {:checked_out, cart}
  end

  # Where an example cannot run as written on a shared test machine: each
  # {from, to} must match exactly one block.
  @substitutions [
    # port 4040 may be taken by another program
    {"FlameOn.Client.Web.start()", "FlameOn.Client.Web.start(port: 0)"}
  ]

  @work 12_502_500

  setup do
    ensure_app_started()
    assert_node_clean()

    dir = Path.join(System.tmp_dir!(), "flame_on_readme_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)
    File.write!(Path.join(dir, "script.exs"), "MyApp.handle(:script)\n")

    # pid: a running process to trace; a caller of MyApp.Orders.checkout/2
    # for capture_next/2 and --next to catch.
    pid = spawn(fn -> loop(fn -> MyApp.work() end) end)
    caller = spawn(fn -> loop(fn -> MyApp.Orders.checkout(:cart, []) end) end)

    on_exit(fn ->
      Enum.each([pid, caller], &Process.exit(&1, :kill))
      File.rm_rf!(dir)
    end)

    %{dir: dir, pid: pid, caller: caller}
  end

  defp loop(fun) do
    fun.()
    Process.sleep(5)
    loop(fun)
  end

  test "the README's code blocks run and do what the text says", context do
    blocks = blocks(File.read!(@readme))
    marked = for %{skip: reason} = block <- blocks, reason != nil, do: block
    runnable = blocks -- marked

    for {from, _to} <- @substitutions do
      assert Enum.count(runnable, &String.contains?(&1.code, from)) == 1,
             "the substitution of #{inspect(from)} must match exactly one block"
    end

    outcomes =
      File.cd!(context.dir, fn ->
        for block <- runnable, do: {block, run(block, context)}
      end)

    skipped =
      Enum.map(marked, &"line #{&1.line}: #{&1.skip}") ++
        for({block, {:skipped, why}} <- outcomes, do: "line #{block.line}: #{why}")

    IO.puts(
      "\nREADME: #{length(blocks)} code blocks, #{length(runnable)} run; skipped:\n" <>
        Enum.map_join(skipped, "\n", &("  " <> &1))
    )

    assert length(marked) == @marked_skips,
           "README blocks marked skip: #{length(marked)}, expected #{@marked_skips} " <>
             "(change @marked_skips if one more must be skipped)"

    assert_node_clean()
  end

  test "the fields of a profile are those the README's table lists" do
    table = section(File.read!(@readme), "## What you get")

    listed =
      for [_, cell] <- Regex.scan(~r/^\| ([^|]+) \|/m, table),
          [_, field] <- Regex.scan(~r/`(\w+)`/, cell),
          do: String.to_atom(field)

    fields = Map.keys(%Profile{}) -- [:__struct__]
    assert Enum.sort(listed) == Enum.sort(fields)
  end

  test "the options and defaults the README lists are profile/2's and trace/3's" do
    text = section(File.read!(@readme), "## Options and limits")
    [paragraph | _] = String.split(text, "Every option and its default is listed")

    listed =
      for [_, key, default] <-
            Regex.scan(~r/`:(\w+)` \((`[^`]+`|none|\d+(?: \d{3})*(?:\.\d+)?(?: MiB)?)/, paragraph),
          into: %{},
          do: {String.to_atom(key), default_value(default)}

    {settings, _capture} = Options.trace!([])
    defaults = Map.merge(Options.profile!([]), Map.put(settings, :shipper, []))

    assert Enum.sort(Map.keys(listed)) ==
             Enum.sort(Options.keys(:profile) ++ [:sample_rate, :threshold_ms, :shipper])

    for {key, value} <- listed do
      assert defaults[key] == value, "README: #{key} defaults to #{inspect(value)}"
    end
  end

  defp default_value("none"), do: []
  defp default_value("`" <> _ = quoted), do: quoted |> String.trim("`") |> eval()

  defp default_value(number) do
    case String.split(String.replace(number, " ", ""), "MiB") do
      [mib, ""] -> String.to_integer(mib) * 1024 * 1024
      [n] -> if n =~ ".", do: String.to_float(n), else: String.to_integer(n)
    end
  end

  defp eval(code), do: code |> Code.eval_string() |> elem(0)

  defp section(text, heading) do
    [_, rest] = String.split(text, heading <> "\n", parts: 2)
    rest |> String.split(~r/^## /m, parts: 2) |> hd()
  end

  # The fenced blocks: language, first line of code (1-based), code, and
  # the skip marker's reason on the line before the fence.
  defp blocks(text) do
    lines = text |> String.split("\n") |> Enum.with_index(1)

    {blocks, _} =
      Enum.reduce(lines, {[], {:out, nil}}, fn {line, n}, {blocks, state} ->
        case {state, line} do
          {{:out, skip}, "```" <> lang} when lang in ["elixir", "sh"] ->
            {blocks, {:in, %{lang: lang, line: n + 1, code: [], skip: skip}}}

          {{:out, _}, "```" <> _} ->
            {blocks, {:plain, nil}}

          {{:plain, _}, "```"} ->
            {blocks, {:out, nil}}

          {{:plain, _}, _} ->
            {blocks, state}

          {{:in, block}, "```"} ->
            code = block.code |> Enum.reverse() |> Enum.join("\n")
            {[%{block | code: code} | blocks], {:out, nil}}

          {{:in, block}, _} ->
            {blocks, {:in, %{block | code: [line | block.code]}}}

          {{:out, _}, _} ->
            {blocks, {:out, skip_reason(line)}}
        end
      end)

    Enum.reverse(blocks)
  end

  defp skip_reason(line) do
    case Regex.run(~r/^<!-- readme-test: skip \((.+)\) -->$/, line) do
      [_, reason] -> reason
      nil -> nil
    end
  end

  ## Running the blocks

  defp run(%{lang: "sh"} = block, context) do
    commands = for line <- String.split(block.code, "\n"), command = command(line), do: command

    assert commands != [] and
             Enum.all?(commands, &match?({_env, ["mix", "profile.flame" | _]}, &1)),
           "README line #{block.line}: a sh block runs only mix profile.flame lines; " <>
             "mark it <!-- readme-test: skip (reason) --> otherwise"

    skips = for command <- commands, why = mix!(command, context.dir), do: why
    if skips == [], do: :ok, else: {:skipped, Enum.join(skips, "; ")}
  end

  defp run(
         %{lang: "elixir", code: "config :flame_on_client,\n  continuous:" <> _} = block,
         context
       ) do
    file = Path.join(context.dir, "config.exs")
    File.write!(file, "import Config\n" <> block.code)
    opts = Config.Reader.read!(file)[:flame_on_client][:continuous]

    assert [{FlameOn.Client.Shipper.Pyroscope, _}] =
             FlameOn.Client.Continuous.validate!(opts)[:shipper]

    :ok
  end

  defp run(%{lang: "elixir", code: "config :flame_on_client," <> _} = block, context) do
    config_block(block, context.dir)
  end

  defp run(%{lang: "elixir"} = block, context) do
    code =
      Enum.reduce(@substitutions, block.code, fn {from, to}, code ->
        String.replace(code, from, to)
      end)

    binding = [request: :request, req: :req, cart: [:book], pid: context.pid]

    {value, binding} =
      with_io(fn ->
        Code.eval_string("import #{inspect(Local)}, warn: false; " <> code, binding,
          file: @readme,
          line: block.line
        )
      end)
      |> elem(0)

    check(block.code, value, Map.new(binding), context)
    :ok
  end

  # "ERL_FLAGS=... mix profile.flame ARGS  # comment" -> {env, argv}
  defp command(line) do
    case OptionParser.split(line) do
      [] ->
        nil

      ["#" <> _ | _] ->
        nil

      tokens ->
        {env, argv} = Enum.split_while(tokens, &(&1 =~ ~r/^[A-Z_]+=/))
        {env, Enum.take_while(argv, &(not String.starts_with?(&1, "#")))}
    end
  end

  # Runs one `mix profile.flame` line in this VM; a reason when it cannot.
  defp mix!({env, ["mix", "profile.flame" | args]}, dir) do
    args = reroot_out(args, dir)
    line = Enum.join(["mix profile.flame" | args], " ")
    release = :erlang.system_info(:otp_release) |> List.to_integer()

    cond do
      "native" in args and not FlameOn.Client.Node.PerfSampler.available?() ->
        "#{Enum.join(env, " ")} #{line}: needs a VM that samples natively " <>
          "(+JPperf true, perf events allowed; scripts/test-native runs this test so)"

      "call_memory" in args and release < 26 ->
        # what the README says: refused before OTP 26
        assert_raise Mix.Error, ~r/OTP 26/, fn -> mix_task(args) end
        nil

      true ->
        output = mix_task(args)

        written =
          Regex.scan(~r/^\s+(\S+) \((?:folded|svg|speedscope|perfetto|pprof|csv)/m, output)

        assert written != [], "#{line} wrote no file:\n#{output}"
        for [_, path] <- written, do: assert(File.exists?(path), "#{line}: #{path} missing")
        nil
    end
  end

  defp mix_task(args), do: capture_io(fn -> Mix.Task.rerun("profile.flame", args) end)

  defp reroot_out(["--out", out | rest], dir),
    do: ["--out", Path.join(dir, Path.basename(out)) | reroot_out(rest, dir)]

  defp reroot_out([arg | rest], dir), do: [arg | reroot_out(rest, dir)]
  defp reroot_out([], _dir), do: []

  # The application environment of the example, set for as long as the
  # options are read: what it says of each entry point must hold.
  defp config_block(block, dir) do
    file = Path.join(dir, "config.exs")
    File.write!(file, "import Config\n" <> block.code)
    config = Config.Reader.read!(file)[:flame_on_client]
    saved = for {key, _} <- config, do: {key, Application.fetch_env(:flame_on_client, key)}

    try do
      Enum.each(config, fn {key, value} -> Application.put_env(:flame_on_client, key, value) end)
      # profile/2 keeps :nif
      assert Options.profile!([]).mode == :nif
      {settings, capture} = Options.trace!([])
      assert capture.mode == config[:mode]
      assert settings.sample_rate == config[:sample_rate]
      assert settings.threshold_ms == config[:threshold_ms]
      assert [{FlameOn.Client.Shipper.Directory, _}] = settings.shippers
      assert Options.breaker()[:max_sessions_memory_mb] == 512
      assert Options.sample_budget() == config[:sample_budget]
      :ok
    after
      Enum.each(saved, fn
        {key, {:ok, value}} -> Application.put_env(:flame_on_client, key, value)
        {key, :error} -> Application.delete_env(:flame_on_client, key)
      end)
    end
  end

  # What each example's text says it gives, where it can be checked.
  defp check(code, value, binding, context) do
    cond do
      code =~ "Profile.folded(profile)" ->
        lines = "handle.folded" |> File.read!() |> String.split("\n", trim: true)
        assert lines != []

        for line <- lines,
            do: assert(line =~ ~r/^handle;<\d+\.\d+\.\d+>;FlameOn\.Client\.profile\/2\S* \d+$/)

        assert Enum.any?(lines, &(&1 =~ ";MyApp.handle/1"))

      code =~ "# mix.exs" ->
        assert {:flame_on_client, [path: _]} = value

      code =~ "# 1. One-off" ->
        assert binding.result == @work

        for file <- ~w(flame_on.svg flame_on.speedscope.json flame_on.perfetto.json),
            do: assert(File.exists?(Path.join("flame_on_out", file)))

        # the last profile is start_trace's, of pid
        assert binding.profile.pid == context.pid

      code =~ "# 4. Nothing in the code" ->
        assert binding.profile.pid == context.caller
        # its stacks start at the function
        for {stack, _us} <- binding.profile.stacks[context.caller],
            do: assert(String.starts_with?(stack, "MyApp.Orders.checkout/2"), stack)

        assert binding.url =~ ~r"^http://127\.0\.0\.1:\d+/$"
        assert FlameOn.Client.Web.stop(binding.url) == :ok

      code =~ "# 7. No call graph" ->
        assert binding.result == @work
        assert binding.summary.type == :call_time
        assert Enum.any?(binding.summary.entries, &(&1.function == "MyApp.work/0"))
        assert "work.csv" |> File.read!() |> String.starts_with?("function,calls,time_us,")

      code =~ "weight: :alloc" ->
        # 100 000 tuples of 2 words in a list (2 words a cell): 400 000
        # words and more, many collections
        assert binding.profile.stats.alloc_words > 100_000

        assert Enum.any?(binding.profile.alloc[self()], fn {stack, _} -> stack =~ "Enum.map/2" end)

        for file <- ~w(flame_on.alloc.folded flame_on.alloc.svg flame_on.alloc.pb.gz),
            do: assert(File.exists?(Path.join("flame_on_out", file)))

      code =~ "FlameOn.Client.diff(before, now)" ->
        assert %FlameOn.Client.Diff{by: :merged, normalize: :median} = binding.diff
        assert Enum.any?(binding.diff.stacks.all, fn {stack, _, _} -> stack =~ "MyApp.work/0" end)

        for file <-
              ~w(work.diff.svg work.diff.folded work.diff.speedscope.json) ++
                ~w(work.base.pb.gz work.new.pb.gz),
            do: assert(File.exists?(Path.join("flame_on_out", file)), file)

      code =~ "Continuous.start()" ->
        # :native where the VM can sample natively (+JPperf true), else :sample
        assert %FlameOn.Client.Profile{mode: mode} = binding.profile
        assert mode in [:native, :sample]
        assert File.exists?(Path.join("flame_on_out", "continuous.svg"))
        refute FlameOn.Client.Continuous.running?()

      code =~ "sample_rate: 1.0, threshold_ms: 250" ->
        # a fast call: traced, its result back, nothing kept
        assert value == {:checked_out, [:book]}

      code =~ "unreachable_nodes" ->
        assert %{nodes: _, unreachable_nodes: _} = binding.profile.graph.stats

      code =~ "profile.graph.edges" ->
        assert Enum.any?(binding.profile.graph.spans, &(&1.kind == :root))
        # the task's work explains part of the root's wait
        assert Enum.any?(binding.profile.graph.spans, &(&1.kind == :work))

      true ->
        flunk("no check for the README block:\n#{code}")
    end
  end
end
