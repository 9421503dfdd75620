defmodule FlameOn.Client.AllocTest do
  # Real traces: node-global trace patterns and flags.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers
  import FlameOn.Client.TestHelpers, only: [assert_node_clean: 0]

  alias FlameOn.Client
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  # One function allocates (tuples of @words words, one BIF call each: the
  # exact modes' tracer adds a few words per traced call, see the README),
  # the other only recurses (small integers: no heap).
  defmodule Work do
    @moduledoc false
    @size 50_000

    def words_per_tuple, do: @size + 1

    def allocate(0), do: :ok

    def allocate(n) do
      _ = :erlang.make_tuple(@size, n)
      allocate(n - 1)
    end

    def fib(n) when n < 2, do: n
    def fib(n), do: fib(n - 1) + fib(n - 2)

    def run(rounds, tuples, fib) do
      for _ <- 1..rounds do
        allocate(tuples)
        fib(fib)
      end

      :ok
    end
  end

  # {rounds, tuples a round, fib's n}. The exact modes: the tracer's own
  # words on fib's calls (4 of them per event are taken off) must stay
  # small against the tuples. Mode :sample: a collection goes to the stack
  # last known, so after each switch from fib to allocate/1 the words of
  # up to a sampling interval or two go to fib until a sample sees
  # allocate/1 (on this loaded machine up to 12% of a workload of 2
  # rounds of 150 tuples): one round, fib after the tuples.
  @workload %{
    nif: {5, 60, 21},
    process: {5, 60, 21},
    sample: {1, 400, 24},
    native: {1, 400, 24}
  }

  setup do
    dir = Path.join(System.tmp_dir!(), "flame_on_alloc_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)
    %{dir: dir}
  end

  defp words(profile, fun) do
    for {_pid, entries} <- profile.alloc, {stack, w} <- entries, fun.(stack), reduce: 0 do
      acc -> acc + w
    end
  end

  for mode <- [:nif, :process, :sample, :native] do
    # mode :native needs a VM started with +JPperf true (scripts/test-native)
    if mode == :native, do: @tag(:native)

    test "mode #{mode}: the allocating function gets the words, the recursion almost none" do
      {rounds, tuples, fib} = @workload[unquote(mode)]

      {_, profile} =
        Client.profile(fn -> Work.run(rounds, tuples, fib) end,
          mode: unquote(mode),
          alloc: true
        )

      check(profile, unquote(mode), rounds * tuples * Work.words_per_tuple())
      assert_node_clean()
    end
  end

  defp check(profile, mode, expected) do
    total = words(profile, fn _ -> true end)
    allocating = words(profile, &(&1 =~ "AllocTest.Work.allocate/1" and not (&1 =~ "fib/1")))
    recursion = words(profile, &(&1 =~ "AllocTest.Work.fib/1"))

    IO.puts(
      "alloc #{mode}: total #{total} words (#{Float.round(100 * total / expected, 1)}% of " <>
        "#{expected} allocated), allocate/1 #{Float.round(100 * allocating / total, 1)}%, " <>
        "fib/1 #{Float.round(100 * recursion / total, 1)}%, #{profile.stats.alloc_samples} collections"
    )

    assert profile.stats.alloc_words == total
    assert profile.stats.alloc_samples > 0
    # the traced process's heap was read as the trace started
    assert profile.stats.alloc_unknown == 0
    assert allocating >= 0.8 * total
    assert recursion <= 0.05 * total
    assert abs(total - expected) <= 0.2 * expected
  end

  # cross_process: true: a server builds a list of @list_length integers
  # (a cons cell each, 2 words: @list_length * 2 words) on each request,
  # the root recurses between requests.
  defmodule Builder do
    @moduledoc false
    use GenServer

    @list_length 100_000
    def words_per_request, do: 2 * @list_length

    @impl true
    def init(_), do: {:ok, nil}

    # The reply is the list's head: a length/1 over it traps in C, and in
    # mode :native a sample there once drew the request's collections
    # before its first sample (the build's: they go where the process's
    # collections of a known place went) under
    # `[native:erts_trapping_length_1]`, in a fresh root's run.
    @impl true
    def handle_call(:build, _from, state), do: {:reply, hd(build(@list_length, [])), state}

    def build(0, acc), do: acc
    def build(n, acc), do: build(n - 1, [n | acc])
  end

  @requests 10

  for mode <- [:nif, :process, :sample, :native] do
    if mode == :native, do: @tag(:native)

    test "cross_process: true, mode #{mode}: each process its own words, the server's at its building function" do
      {:ok, server} = GenServer.start(Builder, nil)
      root = self()

      {_, profile} =
        Client.profile(
          fn ->
            for _ <- 1..@requests do
              GenServer.call(server, :build)
              Work.fib(18)
              # a few thousand words of its own: the root collects at
              # least once (fib/1 alone allocates too little for that,
              # and a trace with no collection of the root counts none)
              length(Enum.to_list(1..2_000))
            end
          end,
          mode: unquote(mode),
          alloc: true,
          cross_process: true
        )

      GenServer.stop(server)
      expected = @requests * Builder.words_per_request()
      server_words = Enum.sum(for {_, w} <- Map.get(profile.alloc, server, []), do: w)

      building =
        Enum.sum(
          for {stack, w} <- Map.get(profile.alloc, server, []), stack =~ "Builder.build/2", do: w
        )

      recursion = words(profile, &(&1 =~ "AllocTest.Work.fib/1"))
      total = words(profile, fn _ -> true end)

      IO.puts(
        "alloc cross_process #{unquote(mode)}: server #{server_words} words " <>
          "(#{Float.round(100 * server_words / expected, 1)}% of #{expected}), " <>
          "build/2 #{Float.round(100 * building / max(server_words, 1), 1)}%, " <>
          "root #{Enum.sum(for {_, w} <- Map.get(profile.alloc, root, []), do: w)}, " <>
          "fib/1 #{Float.round(100 * recursion / total, 1)}% of #{total}, " <>
          "#{profile.stats.alloc_samples} collections, #{profile.stats.alloc_unknown} unknown"
      )

      if building < 0.8 * expected,
        do: IO.inspect(Map.get(profile.alloc, server), label: "the server's words")

      assert profile.stats.alloc_words == total
      # the root's and the server's
      assert Map.has_key?(profile.alloc, root)
      # (the sampled modes: a request's collections before the first
      # sample of the burst that serves it count at the stack known then,
      # the server's wait in its loop in :sample: 65.7% in 2 runs of 15;
      # :native on OTP 27, whose collection flag comes late: 78.7% once)
      assert building >= if(unquote(mode) in [:sample, :native], do: 0.6, else: 0.8) * expected
      assert recursion <= 0.05 * total
      assert abs(total - expected) <= 0.2 * expected
      # the root's heap is read as the trace starts; the server's first
      # collection may come before its level is read as it joins
      assert profile.stats.alloc_unknown <= 1

      # the allocation view of the trace exports as a single-process one
      assert [{server, server_words}] ==
               for(
                 {pid, entries} <- Profile.alloc_view(profile).stacks,
                 pid == server,
                 do: {pid, Enum.sum(for {_, w} <- entries, do: w)}
               )

      assert_node_clean()
    end
  end

  test "cross_process: true exports in words, the server's stacks among them", %{dir: dir} do
    {:ok, server} = GenServer.start(Builder, nil)

    {_, profile} =
      Client.profile(fn -> for _ <- 1..3, do: GenServer.call(server, :build) end,
        alloc: true,
        cross_process: true,
        name: "xalloc"
      )

    GenServer.stop(server)
    written = Export.write(profile, dir, [:folded, :pprof, :svg], weight: :alloc)
    folded = File.read!(written[:folded])
    assert folded =~ "Builder.build/2"

    assert folded
           |> String.split("\n", trim: true)
           |> Enum.map(&(&1 |> String.split(" ") |> List.last() |> String.to_integer()))
           |> Enum.sum() == profile.stats.alloc_words

    pprof = pprof_decode!(File.read!(written[:pprof]))
    assert Enum.sum(for s <- pprof.samples, do: hd(s.values)) == profile.stats.alloc_words
    svg_parse!(File.read!(written[:svg]))
    assert_node_clean()
  end

  test "start_trace/2 of another process, mode :sample: its allocation by stack" do
    parent = self()

    pid =
      spawn(fn ->
        receive do
          :go -> Work.run(1, 200, 18)
        end

        send(parent, :done)

        receive do
          :stop -> :ok
        end
      end)

    {:ok, ref} = Client.start_trace(pid, mode: :sample, alloc: true)
    send(pid, :go)
    assert_receive :done, 10_000
    {:ok, profile} = Client.stop_trace(ref)
    send(pid, :stop)

    expected = 200 * Work.words_per_tuple()
    total = words(profile, fn _ -> true end)
    allocating = words(profile, &(&1 =~ "AllocTest.Work.allocate/1"))
    # (collections before the first sample of the burst count at the stack
    # it waited in: 79.0% in one run of five on OTP 27)
    assert allocating >= 0.7 * total
    assert abs(total - expected) <= 0.2 * expected
    assert_node_clean()
  end

  test "without alloc: true a profile has no allocation" do
    {_, profile} = Client.profile(fn -> Work.run(1, 5, 10) end)
    assert profile.alloc == %{}
    assert profile.alloc_tree == nil
    refute Map.has_key?(profile.stats, :alloc_words)
    assert_node_clean()
  end

  test "alloc: true is refused when not a boolean" do
    assert_raise ArgumentError, ~r/:alloc to be a boolean/, fn ->
      Client.profile(fn -> :ok end, alloc: :yes)
    end
  end

  test "exports in words: folded, speedscope, pprof (alloc_words), SVG", %{dir: dir} do
    {_, profile} = Client.profile(fn -> Work.run(2, 20, 15) end, alloc: true, name: "alloc")
    written = Export.write(profile, dir, :all, weight: :alloc)
    assert Keyword.keys(written) == [:folded, :speedscope, :svg, :pprof]

    folded = File.read!(Path.join(dir, "alloc.alloc.folded"))
    lines = String.split(folded, "\n", trim: true)

    sum =
      lines
      |> Enum.map(&(&1 |> String.split(" ") |> List.last() |> String.to_integer()))
      |> Enum.sum()

    assert sum == profile.stats.alloc_words
    assert folded =~ "AllocTest.Work.allocate/1"

    json = json_decode!(File.read!(Path.join(dir, "alloc.alloc.speedscope.json")))
    [first | _] = json["profiles"]
    assert first["unit"] == "none"
    assert first["name"] =~ "(words allocated)"

    pprof = pprof_decode!(File.read!(Path.join(dir, "alloc.alloc.pb.gz")))
    assert pprof.sample_type == [{"alloc_words", "words"}, {"alloc_samples", "count"}]
    assert Enum.sum(for s <- pprof.samples, do: hd(s.values)) == profile.stats.alloc_words

    assert Enum.sum(for s <- pprof.samples, do: List.last(s.values)) ==
             profile.stats.alloc_samples

    svg = File.read!(Path.join(dir, "alloc.alloc.svg"))
    svg_parse!(svg)
    assert svg =~ "<title>alloc: words allocated</title>"
    assert svg =~ " words, "

    assert_raise ArgumentError, ~r/perfetto/, fn ->
      Export.write(profile, dir, [:perfetto], weight: :alloc)
    end

    # the time outputs are untouched
    assert [folded: time_path] = Export.write(profile, dir, [:folded])
    assert File.read!(time_path) == IO.iodata_to_binary(Profile.folded(profile))
    assert_node_clean()
  end

  test "alloc_view/1 of a profile made by hand" do
    pid = :c.pid(0, 42, 0)
    profile = %Profile{name: "x", pid: pid, alloc: %{pid => [{"a", 10}, {"a;b", 30}]}}
    view = Profile.alloc_view(profile)
    assert view.stacks == profile.alloc
    text = view |> Export.folded() |> IO.iodata_to_binary()
    assert text == "x;<0.42.0>;a 10\nx;<0.42.0>;a;b 30\n"
  end
end
