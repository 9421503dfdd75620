# Shared by overhead.exs and anatomy.exs (Code.require_file/1): the
# counting floor tracer module, the workloads and their small server.
# Builds bench/build/floor_tracer.so (make -C bench floor) if needed.

defmodule FlameOn.Bench.Make do
  @moduledoc false
  # The tracer modules load .so files built from bench/*.c: build them
  # before their modules are defined.
  def make!(targets) do
    {out, status} = System.cmd("make", ["-s", "-C", __DIR__ | targets], stderr_to_stdout: true)

    if status != 0 do
      IO.puts(out)
      raise "make -C bench #{Enum.join(targets, " ")} failed"
    end
  end
end

FlameOn.Bench.Make.make!(["floor"])

defmodule FlameOn.Bench.FloorTracer do
  @moduledoc false
  # The counting tracer module of bench/floor_tracer.c.
  @on_load :load_nif
  @so Path.join([__DIR__, "build", "floor_tracer"])

  def load_nif, do: :erlang.load_nif(String.to_charlist(@so), 0)
  def enabled(_tag, _state, _tracee), do: :erlang.nif_error(:nif_not_loaded)
  def trace(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:nif_not_loaded)
  def count, do: :erlang.nif_error(:nif_not_loaded)
  def reset, do: :erlang.nif_error(:nif_not_loaded)
end

defmodule FlameOn.Bench.KV do
  @moduledoc false
  # The small server of the realistic workload (not traced itself).
  use GenServer

  def start, do: GenServer.start(__MODULE__, %{})
  def put(server, key, value), do: GenServer.call(server, {:put, key, value})
  def get(server, key), do: GenServer.call(server, {:get, key})

  @impl true
  def init(state), do: {:ok, state}

  @impl true
  def handle_call({:put, key, value}, _from, state), do: {:reply, :ok, Map.put(state, key, value)}
  def handle_call({:get, key}, _from, state), do: {:reply, Map.get(state, key), state}
end

defmodule FlameOn.Bench.Work do
  @moduledoc false

  # (a) call-heavy: non-tail recursion, two events (call, return_to) per call.
  def fib(0), do: 0
  def fib(1), do: 1
  def fib(n), do: fib(n - 1) + fib(n - 2)

  def fibs(n, times), do: for(_ <- 1..times, do: fib(n))

  # (b) realistic: GenServer calls, Enum pipelines over maps, a little file I/O
  # (a file written and read back every 10th round).
  def realistic(server, dir, rounds), do: Enum.map(1..rounds, &realistic_round(server, dir, &1))

  defp realistic_round(server, dir, i) do
    for k <- 1..20, do: FlameOn.Bench.KV.put(server, k, k * i)
    total = Enum.reduce(1..20, 0, fn k, acc -> acc + FlameOn.Bench.KV.get(server, k) end)

    items =
      Map.new(1..100, fn k ->
        {k,
         %{id: k, name: "item-#{k}", score: rem(k * 7919 + i, 101), tags: [rem(k, 3), rem(k, 7)]}}
      end)

    top =
      items
      |> Map.values()
      |> Enum.filter(&(&1.score > 40))
      |> Enum.sort_by(& &1.score, :desc)
      |> Enum.map(&String.upcase(&1.name))
      |> Enum.take(10)

    groups =
      items
      |> Enum.group_by(fn {_k, v} -> rem(v.score, 5) end, fn {_k, v} -> v.score end)
      |> Map.new(fn {g, scores} -> {g, Enum.sum(scores)} end)

    # a little file I/O: every 10th round writes and reads back a file
    lines =
      if rem(i, 10) == 0 do
        path = Path.join(dir, "round-#{rem(i, 4)}.txt")
        File.write!(path, Enum.join(top, "\n"))
        path |> File.read!() |> String.split("\n") |> length()
      else
        length(top)
      end

    {total, map_size(groups), lines}
  end

  # (c) a pipeline: Enum/Map/sort over `keys` keys; the second Enum.map is
  # :lists.map, body recursive, `keys` frames deep.
  def pipeline(keys) do
    Enum.to_list(1..keys)
    |> Enum.map(fn k -> {k, rem(k * 7919, keys)} end)
    |> Map.new()
    |> Enum.sort_by(fn {_k, v} -> v end)
    |> Enum.map(fn {k, v} -> k * v end)
    |> Enum.sum()
  end

  # (d) body recursion n deep: a chain of n frames, and the same with a
  # leaf call at every level (a stack branching off at every depth).
  def deep(0), do: 0
  def deep(n), do: 1 + deep(n - 1)

  def deep_with_leaves(0), do: 0
  def deep_with_leaves(n), do: leaf(n) + deep_with_leaves(n - 1)

  def leaf(n), do: rem(n, 2)

  # Memory workload: few distinct stacks, 9 events per round
  # (call a, call c, return_to a, return_to loop, call b, ..., call loop).
  def loop(0), do: :ok

  def loop(n) do
    a(n)
    b(n)
    loop(n - 1)
  end

  def a(n), do: c(n) + 1
  def b(n), do: c(n) * 2
  def c(n), do: n + 1
end

defmodule FlameOn.Bench.Isolated do
  @moduledoc false
  # A measurement runs in a fresh process, so no variant inherits another's
  # heap; a crash in it fails the bench loudly.
  def run(fun) do
    parent = self()
    {pid, ref} = spawn_monitor(fn -> send(parent, {self(), :result, fun.()}) end)

    receive do
      {^pid, :result, result} ->
        Process.demonitor(ref, [:flush])
        result

      {:DOWN, ^ref, :process, ^pid, reason} ->
        raise "a measurement crashed: #{Exception.format_exit(reason)}"
    end
  end
end
