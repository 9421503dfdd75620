defmodule FlameOn.Client.ExUnit.Formatter do
  @moduledoc """
  The ExUnit formatter `FlameOn.Client.ExUnit.start/1` adds: at the end of
  the run it prints the profiled tests, slowest first, with their wall
  time, their three most expensive stacks and the paths of their files,
  then the tests slower than last run and their diffs (see
  `FlameOn.Client.ExUnit.Summary`). It prints nothing when no test was
  profiled.

  It prints after ExUnit's own report (`Finished in ...`, the test counts).
  With `mix test --formatter X` ExUnit runs only the formatters named on the
  command line; name this one too to keep the summary:

      mix test --formatter ExUnit.CLIFormatter --formatter FlameOn.Client.ExUnit.Formatter

  While it runs it owns the table in which each profiled test, in its own
  process, records its profile's summary (and claims its file names); the
  table goes with it at the end of the run.
  """

  use GenServer

  alias FlameOn.Client.ExUnit.Summary

  @table __MODULE__
  @sync_timeout 5_000

  @doc false
  # Called by a profiled test's process; a no-op without a formatter.
  @spec put_record({module(), atom()}, map()) :: :ok
  def put_record(key, record) do
    if table?(), do: :ets.insert(@table, {{:record, key}, record})
    :ok
  end

  @doc false
  @spec update_record({module(), atom()}, (map() -> map())) :: :ok
  def update_record(key, fun) do
    if table?() do
      case :ets.lookup(@table, {:record, key}) do
        [{_, record}] -> :ets.insert(@table, {{:record, key}, fun.(record)})
        [] -> :ok
      end
    end

    :ok
  end

  @doc false
  # `stem`, or `stem-2`, `stem-3`, ... if another test of this run has it
  # in `dir` (or its sanitised name is the same).
  @spec claim_stem(Path.t(), String.t(), term()) :: String.t()
  def claim_stem(dir, stem, owner) do
    if table?(), do: claim(Path.expand(dir), stem, owner, 1), else: stem
  end

  defp claim(dir, stem, owner, n) do
    candidate = if n == 1, do: stem, else: "#{stem}-#{n}"

    case :ets.insert_new(@table, {{:stem, dir, candidate}, owner}) do
      true ->
        candidate

      false ->
        case :ets.lookup(@table, {:stem, dir, candidate}) do
          [{_, ^owner}] -> candidate
          _ -> claim(dir, stem, owner, n + 1)
        end
    end
  end

  defp table?, do: :ets.whereis(@table) != :undefined

  # --- the formatter --------------------------------------------------------------

  @impl GenServer
  def init(opts) do
    if table?(), do: :ets.delete(@table)
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    colors = Keyword.get(opts[:colors] || [], :enabled, IO.ANSI.enabled?())
    {:ok, %{colors: colors, failed: MapSet.new(), finished: false}}
  end

  @impl GenServer
  def handle_cast({:test_finished, %{module: module, name: name, state: {tag, _}}}, state)
      when tag in [:failed, :invalid] do
    {:noreply, %{state | failed: MapSet.put(state.failed, {module, name})}}
  end

  # {:suite_finished, times_us} (Elixir 1.14+) or {:suite_finished, run_us, load_us}
  def handle_cast(event, state) when elem(event, 0) == :suite_finished do
    {:noreply, %{state | finished: true}}
  end

  def handle_cast(_event, state), do: {:noreply, state}

  # ExUnit stops its formatters one after the other once every one has the
  # :suite_finished event: printing here, after the other formatters have
  # handled it, puts the summary after their report.
  @impl GenServer
  def terminate(_reason, %{finished: true} = state) do
    records = for {{:record, _key}, record} <- :ets.tab2list(@table), do: record
    config = FlameOn.Client.ExUnit.Config.config() || %{summary: 25}

    if records != [] do
      sync_siblings()
      IO.write(Summary.render(records, state.failed, limit: config.summary, colors: state.colors))
    end

    :ok
  end

  def terminate(_reason, _state), do: :ok

  # Waits until the other formatters have handled what they were sent (a
  # call is answered after the casts queued before it). ExUnit starts its
  # formatters under a DynamicSupervisor; `:which_children` is asked with a
  # timeout (Supervisor.which_children/1 waits forever), so a parent that
  # is not a supervisor, or is waiting on this process, costs a timeout.
  defp sync_siblings do
    with [supervisor | _] when is_pid(supervisor) <- Process.get(:"$ancestors"),
         children when is_list(children) <-
           safe(fn -> GenServer.call(supervisor, :which_children, @sync_timeout) end) do
      for {_, pid, _, _} <- children, is_pid(pid), pid != self() do
        safe(fn -> :sys.get_state(pid, @sync_timeout) end)
      end
    end

    :ok
  end

  defp safe(fun) do
    fun.()
  catch
    :exit, _ -> nil
  end
end
