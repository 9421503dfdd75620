defmodule FlameOn.Client.Test.CrashWatch do
  @moduledoc """
  Makes the suite fail when a process crashes in our code.

  A `:logger` handler keeps every error report of a crash (a plain
  process's uncaught exception, a proc_lib crash report, a gen_server's or
  a task's) whose reason's stacktrace names a module of the library (not
  one of the tests' own). Tests that kill or break our processes on purpose
  do so with exits (`:killed`, `:shutdown`), which carry no stacktrace and
  are not kept. At the end of the suite the kept ones are printed and the
  run exits non-zero.
  """

  @handler :flame_on_crash_watch
  @table :flame_on_crash_watch

  @doc "Starts watching (test_helper.exs, before `ExUnit.start/1`)."
  @spec start() :: :ok
  def start do
    :ets.new(@table, [:named_table, :public, :duplicate_bag])
    :ok = :logger.add_handler(@handler, __MODULE__, %{level: :error})

    ExUnit.after_suite(fn _result ->
      case crashes() do
        [] ->
          :ok

        crashes ->
          IO.puts(
            :stderr,
            "\n#{length(crashes)} crash(es) in the library's code during the suite:"
          )

          Enum.each(crashes, &IO.puts(:stderr, ["  ", &1]))
          System.at_exit(fn _ -> exit({:shutdown, 1}) end)
      end
    end)

    :ok
  end

  @doc "The crashes kept so far, as printable text."
  @spec crashes() :: [String.t()]
  def crashes, do: for({_at, text} <- :ets.tab2list(@table), do: text)

  # :logger handler callback
  @doc false
  def log(%{level: level, msg: msg}, _config)
      when level in [:error, :critical, :alert, :emergency] do
    if ours?(reason(msg)) do
      text = msg |> inspect(limit: 30, printable_limit: 400) |> String.slice(0, 1_500)
      :ets.insert(@table, {System.monotonic_time(), text})
    end

    :ok
  catch
    _, _ -> :ok
  end

  def log(_event, _config), do: :ok

  # The crash's own reason, not the rest of the report (a gen_server's
  # report names its caller's stack, which may pass through our code).
  defp reason({:report, %{label: {:proc_lib, :crash}, report: [info | _]}}) when is_list(info),
    do: Keyword.get(info, :error_info)

  defp reason({:report, %{label: {:supervisor, _}}}), do: nil
  defp reason({:report, %{reason: reason}}), do: reason
  defp reason({:report, %{report: %{reason: reason}}}), do: reason
  # a plain process's uncaught exception (the emulator's report)
  defp reason({:format, _format, args}), do: args
  defp reason({:string, _text}), do: nil
  defp reason(_msg), do: nil

  # a stacktrace entry of a library module anywhere in the reason
  defp ours?(term) when is_tuple(term) do
    case term do
      {module, fun, arity, location}
      when is_atom(module) and is_atom(fun) and is_list(location) ->
        library?(module) and (is_integer(arity) or is_list(arity))

      _ ->
        term |> Tuple.to_list() |> Enum.any?(&ours?/1)
    end
  end

  defp ours?(term) when is_list(term), do: list_any?(term)
  defp ours?(term) when is_map(term), do: term |> Map.values() |> Enum.any?(&ours?/1)
  defp ours?(_term), do: false

  # lists may be improper (iodata in a report)
  defp list_any?([head | tail]), do: ours?(head) or list_any?(tail)
  defp list_any?(_), do: false

  defp library?(module) do
    case Atom.to_string(module) do
      "Elixir.FlameOn.Client.Test" <> _ -> false
      "Elixir.FlameOn.Client." <> rest -> not String.ends_with?(rest, "Test")
      "Elixir.FlameOn.Client" -> true
      "Elixir.Mix.Tasks.Profile.Flame" -> true
      _ -> false
    end
  end
end
