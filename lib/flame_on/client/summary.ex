defmodule FlameOn.Client.Summary do
  @moduledoc """
  Per-function totals of a traced function, tprof-style: how often each
  function was called and how much time (`:call_time`, microseconds) or
  heap memory (`:call_memory`, words) it took, with its share of the total.
  Made by `FlameOn.Client.summary/2`; `table/2` prints it, `csv/1` writes
  it.

      {_, summary} = FlameOn.Client.summary(fn -> MyApp.work() end, type: :call_memory)
      IO.puts(FlameOn.Client.Summary.table(summary, top: 10))
      File.write!("work.csv", FlameOn.Client.Summary.csv(summary))

  The VM counts, not FlameOn: `call_time` and `call_memory` trace
  patterns on every function, read back per function with
  `:trace.info/3` (`:erlang.trace_info/2` before OTP 27), as `tprof`
  does. There are no stacks: a function's time or memory is its own,
  up to the next traced function it calls (every function is traced, so
  that is each function's self time or self allocation). Where the call
  graph is wanted, `FlameOn.Client.profile/2` gives it.

  ## Fields

    * `:type` – `:call_time` or `:call_memory`; `:unit` – `:microsecond`
      or `:word`.
    * `:entries` – one `t:entry/0` per function, over every traced process,
      largest `value` first (then most calls, then name).
    * `:by_process` – `%{pid => [entry]}`, each process's own, its shares of
      its own total.
    * `:total` (sum of `value`), `:calls` (sum of `calls`).
    * `:name`, `:pid` (the process `fun` ran in), `:started_at`
      (`System.monotonic_time(:microsecond)`), `:duration_us` (wall time
      traced).

      iex> entry = %{mfa: {:lists, :seq, 2}, function: "lists:seq/2", calls: 2, value: 30, per_call: 15.0, share: 75.0}
      iex> other = %{entry | mfa: {:lists, :reverse, 1}, function: "lists:reverse/1", calls: 1, value: 10, per_call: 10.0, share: 25.0}
      iex> summary = %FlameOn.Client.Summary{type: :call_memory, unit: :word, entries: [entry, other], total: 40, calls: 3}
      iex> FlameOn.Client.Summary.csv(summary) |> IO.iodata_to_binary()
      "function,calls,words,per_call,percent\\nlists:seq/2,2,30,15.00,75.00\\nlists:reverse/1,1,10,10.00,25.00\\n"
      iex> FlameOn.Client.Summary.table(summary) |> String.split("\\n")
      [
        "FUNCTION         CALLS  WORDS  PER CALL  [     %]",
        "lists:seq/2          2     30     15.00  [ 75.00]",
        "lists:reverse/1      1     10     10.00  [ 25.00]",
        "                     3     40            [100.00]"
      ]
  """

  alias FlameOn.Client.Profile

  defstruct type: :call_time,
            unit: :microsecond,
            name: "flame_on",
            pid: nil,
            started_at: nil,
            duration_us: 0,
            total: 0,
            calls: 0,
            entries: [],
            by_process: %{}

  @typedoc "One function's line: `value` is microseconds or words; `share` is percent."
  @type entry :: %{
          mfa: mfa(),
          function: String.t(),
          calls: non_neg_integer(),
          value: non_neg_integer(),
          per_call: float(),
          share: float()
        }

  @type t :: %__MODULE__{
          type: :call_time | :call_memory,
          unit: :microsecond | :word,
          name: String.t(),
          pid: pid() | nil,
          started_at: integer() | nil,
          duration_us: non_neg_integer(),
          total: non_neg_integer(),
          calls: non_neg_integer(),
          entries: [entry()],
          by_process: %{pid() => [entry()]}
        }

  @labels %{call_time: "TIME (µs)", call_memory: "WORDS"}
  @csv_labels %{call_time: "time_us", call_memory: "words"}

  @doc false
  # The summary of per-process counters `%{pid => %{mfa => {calls, value}}}`.
  @spec build(%{pid() => %{mfa() => {non_neg_integer(), non_neg_integer()}}}, keyword()) :: t()
  def build(counters, fields) do
    type = Keyword.fetch!(fields, :type)

    totals =
      Enum.reduce(counters, %{}, fn {_pid, by_mfa}, acc ->
        Enum.reduce(by_mfa, acc, fn {mfa, {calls, value}}, acc ->
          Map.update(acc, mfa, {calls, value}, fn {c, v} -> {c + calls, v + value} end)
        end)
      end)

    entries = entries(totals)

    struct!(
      __MODULE__,
      Keyword.merge(fields,
        unit: if(type == :call_time, do: :microsecond, else: :word),
        entries: entries,
        total: entries |> Enum.map(& &1.value) |> Enum.sum(),
        calls: entries |> Enum.map(& &1.calls) |> Enum.sum(),
        by_process: Map.new(counters, fn {pid, by_mfa} -> {pid, entries(by_mfa)} end)
      )
    )
  end

  defp entries(by_mfa) do
    total = by_mfa |> Map.values() |> Enum.map(&elem(&1, 1)) |> Enum.sum()

    by_mfa
    |> Enum.map(fn {mfa, {calls, value}} ->
      %{
        mfa: mfa,
        function: Profile.frame_name(mfa),
        calls: calls,
        value: value,
        per_call: ratio(value, calls),
        share: ratio(value * 100, total)
      }
    end)
    |> Enum.sort_by(&{-&1.value, -&1.calls, &1.function})
  end

  defp ratio(_n, 0), do: 0.0
  defp ratio(n, d), do: n / d

  @doc """
  The summary as a table, as `tprof` prints it: function, calls, time (µs)
  or words, per call and share, largest first, then the totals. `top: n`
  keeps the first `n` lines (and says how many more there are).
  """
  @spec table(t(), keyword()) :: String.t()
  def table(%__MODULE__{} = summary, opts \\ []) do
    {shown, rest} =
      case Keyword.get(opts, :top) do
        nil -> {summary.entries, []}
        n when is_integer(n) and n > 0 -> Enum.split(summary.entries, n)
      end

    header = ["FUNCTION", "CALLS", Map.fetch!(@labels, summary.type), "PER CALL", "[     %]"]

    rows =
      for e <- shown do
        [e.function, e.calls, e.value, decimals(e.per_call), "[#{pad(decimals(e.share), 6)}]"]
        |> Enum.map(&to_string/1)
      end

    more =
      case rest do
        [] -> []
        _ -> [["... #{length(rest)} more", "", "", "", ""]]
      end

    footer = ["", to_string(summary.calls), to_string(summary.total), "", "[100.00]"]
    lines = [header | rows] ++ more ++ [footer]
    widths = lines |> Enum.zip() |> Enum.map(fn col -> col |> Tuple.to_list() |> width() end)

    Enum.map_join(lines, "\n", fn cells ->
      cells
      |> Enum.zip(widths)
      |> Enum.with_index()
      |> Enum.map_join("  ", fn
        {{cell, w}, 0} -> String.pad_trailing(cell, w)
        {{cell, w}, _} -> String.pad_leading(cell, w)
      end)
      |> String.trim_trailing()
    end)
  end

  @doc """
  The summary as CSV (RFC 4180; a header line, then one line per function,
  largest first): `function,calls,time_us|words,per_call,percent`.
  """
  @spec csv(t()) :: iodata()
  def csv(%__MODULE__{} = summary) do
    header = ["function,calls,", Map.fetch!(@csv_labels, summary.type), ",per_call,percent\n"]

    rows =
      for e <- summary.entries do
        [
          csv_field(e.function),
          ?,,
          Integer.to_string(e.calls),
          ?,,
          Integer.to_string(e.value),
          ?,,
          decimals(e.per_call),
          ?,,
          decimals(e.share),
          ?\n
        ]
      end

    [header | rows]
  end

  defp csv_field(text) do
    if String.contains?(text, [",", "\"", "\n", "\r"]),
      do: [?", String.replace(text, "\"", "\"\""), ?"],
      else: text
  end

  defp decimals(float), do: :erlang.float_to_binary(float * 1.0, decimals: 2)
  defp pad(text, w), do: String.pad_leading(text, w)
  defp width(cells), do: cells |> Enum.map(&String.length/1) |> Enum.max()
end
