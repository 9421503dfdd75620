defmodule FlameOn.Client.CLI.Demo do
  @moduledoc """
  A small built-in workload to try the profiler on, used by
  `mix flame_on.demo`: deep recursion, an `Enum`/`Map` pipeline, a
  `GenServer` round trip, a short sleep and a little file I/O.

      {_result, profile} = FlameOn.Client.profile(&FlameOn.Client.CLI.Demo.run/0, name: "demo")
  """

  @doc """
  Runs every part of the workload once and returns a summary of the results.

      iex> FlameOn.Client.CLI.Demo.run().fib
      6765
  """
  @spec run() :: %{
          fib: non_neg_integer(),
          words: non_neg_integer(),
          echo: term(),
          bytes: non_neg_integer()
        }
  def run do
    fib = fib(20)
    words = word_counts()
    echo = round_trip(:ping)
    Process.sleep(5)
    bytes = file_io()
    %{fib: fib, words: words, echo: echo, bytes: bytes}
  end

  @doc "Naive, non-tail-recursive Fibonacci: deep and wide call trees."
  @spec fib(non_neg_integer()) :: non_neg_integer()
  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  @doc "An `Enum`/`Map` pipeline: counts words of generated text, returns the distinct count."
  @spec word_counts() :: non_neg_integer()
  def word_counts do
    1..2_000
    |> Enum.map(fn i -> "word#{rem(i * 7919, 97)}" end)
    |> Enum.frequencies()
    |> Map.new(fn {word, count} -> {String.upcase(word), count} end)
    |> Enum.sort_by(fn {_word, count} -> -count end)
    |> length()
  end

  @doc "Starts a throwaway `GenServer`, calls it once and stops it."
  @spec round_trip(term()) :: term()
  def round_trip(message) do
    {:ok, server} = GenServer.start_link(__MODULE__.Echo, nil)

    try do
      GenServer.call(server, {:echo, message})
    after
      GenServer.stop(server)
    end
  end

  @doc "Writes, reads back and deletes a small file in a temporary directory."
  @spec file_io() :: non_neg_integer()
  def file_io do
    dir = Path.join(System.tmp_dir!(), "flame_on_demo_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)

    try do
      path = Path.join(dir, "data.txt")
      File.write!(path, Enum.map_join(1..500, "\n", &Integer.to_string/1))
      path |> File.read!() |> byte_size()
    after
      File.rm_rf!(dir)
    end
  end

  defmodule Echo do
    @moduledoc false
    use GenServer

    @impl GenServer
    def init(state), do: {:ok, state}

    @impl GenServer
    def handle_call({:echo, message}, _from, state), do: {:reply, message, state}
  end
end
