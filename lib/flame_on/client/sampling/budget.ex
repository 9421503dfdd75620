defmodule FlameOn.Client.Sampling.Budget do
  @moduledoc false
  # The node-wide budget of stack samples per second, shared by every
  # sampler (mode `:sample`).
  #
  # A sample costs the node a few microseconds of CPU (the sampler's work,
  # and the sampled process answering the stack request). One trace at the
  # default `interval_us` of 1 000 takes about 1 000 samples a second; ten
  # concurrent traces would take ten times that, and that CPU is taken from
  # the rest of the node. So the samplers share a budget: each one samples
  # at its own `:interval_us`, or less often when the active samplers
  # together would exceed the budget, each then getting an equal share
  # (interval = active samplers × 1 s / budget). Ticks stretched this way are
  # counted in a profile's `stats.throttled_ticks`.
  #
  #     config :flame_on_client, sample_budget: 2_000   # samples/s, the default
  #
  # `:infinity` turns the budget off. A sampler is active while it samples a
  # process; a cross-process trace's callee sampler between requests is not.
  #
  # This process only owns the table of active samplers and removes a
  # sampler that dies without leaving it; samplers read and write the table
  # themselves, so the budget costs no message per sample.

  use GenServer

  @table :flame_on_active_samplers

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "The budget in samples per second (application env `:sample_budget`)."
  @spec budget() :: pos_integer() | :infinity
  def budget, do: FlameOn.Client.Options.Config.sample_budget()

  @doc "The samplers sampling right now (at least 1 when asked by one of them)."
  @spec active() :: non_neg_integer()
  def active do
    case :ets.info(@table, :size) do
      :undefined -> 0
      n -> n
    end
  end

  @doc """
  The interval (µs) a sampler that wants `interval_us` gets now: its own, or
  its share of the budget when the active samplers would exceed it.

      iex> FlameOn.Client.Sampling.Budget.interval(1_000, 1, 2_000)
      1000
      iex> FlameOn.Client.Sampling.Budget.interval(1_000, 10, 2_000)
      5000
      iex> FlameOn.Client.Sampling.Budget.interval(1_000, 10, :infinity)
      1000
  """
  @spec interval(pos_integer(), non_neg_integer(), pos_integer() | :infinity) :: pos_integer()
  def interval(interval_us, _active, :infinity), do: interval_us
  def interval(interval_us, active, budget), do: max(interval_us, div(active * 1_000_000, budget))

  @doc "The calling sampler starts sampling: it counts against the budget until `leave/0`."
  @spec join() :: :ok
  def join do
    :ets.insert(@table, {self()})
    send(__MODULE__, {:watch, self()})
    :ok
  rescue
    # the table's owner is restarting: sample at the sampler's own interval
    ArgumentError -> :ok
  end

  @doc "The calling sampler stopped sampling (it is idle or stopping)."
  @spec leave() :: :ok
  def leave do
    :ets.delete(@table, self())
    :ok
  rescue
    ArgumentError -> :ok
  end

  @impl GenServer
  def init(:ok) do
    :ets.new(@table, [:set, :public, :named_table, write_concurrency: true])
    {:ok, %{}}
  end

  @impl GenServer
  def handle_info({:watch, pid}, watched) do
    if Map.has_key?(watched, pid),
      do: {:noreply, watched},
      else: {:noreply, Map.put(watched, pid, Process.monitor(pid))}
  end

  def handle_info({:DOWN, _ref, :process, pid, _reason}, watched) do
    :ets.delete(@table, pid)
    {:noreply, Map.delete(watched, pid)}
  end
end
