defmodule FlameOn.Client.Test.FailureRecap do
  @moduledoc """
  Prints every failed test again at the end of the suite, after the CLI
  formatter's summary.

  The CLI formatter prints a failure where it happens, hundreds of lines up
  in a long run's log; a CI log kept only by its tail then shows that a test
  failed but not which one or why. This ExUnit formatter keeps the failures
  as they come (in a table `start/0` makes), and an `ExUnit.after_suite/1`
  callback, which runs once the formatters have finished, prints each
  one's name, location and formatted failure last.
  """
  use GenServer

  @table :flame_on_failure_recap

  @doc "Makes the table and the printing callback (test_helper.exs, before `ExUnit.start/1`)."
  @spec start() :: :ok
  def start do
    :ets.new(@table, [:named_table, :public, :ordered_set])
    ExUnit.after_suite(fn _result -> print() end)
    :ok
  end

  defp print do
    case :ets.tab2list(@table) do
      [] ->
        :ok

      failed ->
        IO.puts("\n==> recap: #{length(failed)} failed test(s) of this run")

        for {{_at, n}, test, failures} <- failed do
          text =
            ExUnit.Formatter.format_test_failure(test, failures, n, 100, fn _, msg -> msg end)

          IO.puts(String.slice(text, 0, 4_000))
        end

        :ok
    end
  end

  @impl true
  def init(opts), do: {:ok, opts}

  @impl true
  def handle_cast({:test_finished, %ExUnit.Test{state: {:failed, failures}} = test}, state) do
    n = :ets.info(@table, :size) + 1
    :ets.insert(@table, {{System.monotonic_time(), n}, test, failures})
    {:noreply, state}
  end

  def handle_cast(_event, state), do: {:noreply, state}
end
