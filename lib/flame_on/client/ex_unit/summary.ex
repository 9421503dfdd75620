defmodule FlameOn.Client.ExUnit.Summary do
  @moduledoc false
  # The text `FlameOn.Client.ExUnit.Formatter` prints at the end of a run:
  #
  #     FlameOn: 2 profiled tests, slowest first
  #
  #       1) test checkout of a full cart (MyApp.CheckoutTest)  84.2 ms
  #            61.0%   51.4 ms  MyApp.CheckoutTest.test_checkout_of_a_full_cart/1 > MyApp.Cart.total/1 > Enum.reduce/3
  #            22.3%   18.8 ms  MyApp.CheckoutTest.test_checkout_of_a_full_cart/1 > GenServer.call/3 > WAITING
  #             9.1%    7.7 ms  <0.312.0> MyApp.Stock.handle_call/3 > MyApp.Stock.reserve/2
  #            flame_on_out/tests/MyApp.CheckoutTest.test_checkout_of_a_full_cart.folded
  #            ...
  #
  # Each test: its wall time (the profiled body's, traced), whether it
  # failed, its three stacks with the most time (a share of the wall time;
  # stacks of other processes start with their pid; stacks that differ only
  # in the depth of a recursion count as one, `Mod.fib/1 ×3..12`; long stacks
  # keep their root and last frames) and
  # its files. Notes say what went wrong where a test could not be profiled.
  # Then the tests slower than in the last run, if any:
  #
  #     FlameOn: 1 test slower than last run
  #       test checkout of a full cart (MyApp.CheckoutTest)  12.0 ms → 31.5 ms (+163%), diff: flame_on_out/tests/MyApp.CheckoutTest.test_checkout_of_a_full_cart.diff.svg

  @frames_shown 5

  @doc """
  The summary of `records` (see `FlameOn.Client.ExUnit.TestRun`) as iodata,
  `[]` when there is none. `failed` holds the `{module, test}` of the tests
  ExUnit reported as failed. Options: `:limit` (tests shown in full, or
  `:all`; 25), `:colors` (ANSI colours; false).

      iex> FlameOn.Client.ExUnit.Summary.render([], MapSet.new())
      []
  """
  @spec render([map()], MapSet.t(), keyword()) :: iodata()
  def render(records, failed, opts \\ [])

  def render([], _failed, _opts), do: []

  def render(records, failed, opts) do
    limit = Keyword.get(opts, :limit, 25)
    colors = Keyword.get(opts, :colors, false)

    # Slowest first; tests without a profile (killed, not profiled) last.
    sorted =
      Enum.sort_by(records, fn r ->
        {r.status != :profiled, -r.duration_us, inspect(r.module), r.test}
      end)

    {shown, rest} = if limit == :all, do: {sorted, []}, else: Enum.split(sorted, limit)
    n = length(records)

    header =
      color(
        colors,
        [:cyan, :bright],
        "FlameOn: #{n} profiled #{plural(n, "test")}, slowest first"
      )

    entries =
      shown
      |> Enum.with_index(1)
      |> Enum.map(fn {record, i} ->
        entry(record, i, MapSet.member?(failed, key(record)), colors)
      end)

    more =
      case rest do
        [] ->
          []

        _ ->
          dirs = rest |> Enum.flat_map(& &1.paths) |> Enum.map(&Path.dirname/1) |> Enum.uniq()
          where = if dirs == [], do: "", else: ", their files in " <> Enum.join(dirs, ", ")

          "\n  ... and #{length(rest)} more profiled #{plural(length(rest), "test")}#{where}\n"
      end

    IO.iodata_to_binary(["\n", header, "\n", entries, more, slower(records, colors)])
  end

  # The tests slower than in the last run (FlameOn.Client.ExUnit.Regression),
  # most grown first, each with its diff's flame graph.
  defp slower(records, colors) do
    case Enum.filter(records, &Map.get(&1, :regression)) do
      [] ->
        []

      slower ->
        slower = Enum.sort_by(slower, &{-growth(&1.regression), inspect(&1.module), &1.test})
        n = length(slower)

        [
          "\n",
          color(
            colors,
            [:red, :bright],
            "FlameOn: #{n} #{plural(n, "test")} slower than last run"
          ),
          "\n",
          Enum.map(slower, &slower_line(&1, colors))
        ]
    end
  end

  defp growth(%{before_us: b, after_us: a}), do: (a - b) / max(b, 1)

  defp slower_line(%{regression: regression} = record, colors) do
    %{before_us: b, after_us: a, paths: paths} = regression
    svg = Enum.find(paths, hd(paths ++ [nil]), &String.ends_with?(&1, ".svg"))

    [
      "  #{record.test} (#{inspect(record.module)})  ",
      ms(b),
      " → ",
      color(colors, :red, ms(a)),
      " (+#{round(growth(regression) * 100)}%)",
      if(svg, do: [", diff: ", color(colors, :faint, relative(svg))], else: []),
      "\n"
    ]
  end

  defp key(record), do: {record.module, record.test}

  defp entry(record, i, failed?, colors) do
    title = "#{record.test} (#{inspect(record.module)})"

    time =
      case record.status do
        :profiled -> "  " <> color(colors, :yellow, ms(record.duration_us))
        _ -> ""
      end

    failed = if failed?, do: color(colors, :red, ", failed"), else: ""

    [
      "\n  #{i}) ",
      title,
      time,
      failed,
      "\n",
      Enum.map(record.top, &stack_line(&1, record, colors)),
      Enum.map(record.paths, fn path ->
        ["       ", color(colors, :faint, relative(path)), "\n"]
      end),
      Enum.map(record.warnings, fn text ->
        ["       ", color(colors, :yellow, "warning: " <> text), "\n"]
      end),
      Enum.map(notes(record), fn text -> ["       ", color(colors, :yellow, text), "\n"] end)
    ]
  end

  defp notes(%{status: :running, notes: notes}) do
    notes ++
      [
        "no profile: the test's process ended before its body returned (a timeout, or an exit signal)"
      ]
  end

  defp notes(%{notes: notes}), do: notes

  defp stack_line(%{pid: pid, stack: stack, us: us}, record, colors) do
    share = percent(us, record.duration_us)
    process = if pid_of_test?(pid, record), do: "", else: pid_text(pid) <> " "

    [
      "       ",
      String.pad_leading(share, 6),
      "  ",
      String.pad_leading(ms(us), 9),
      "  ",
      color(colors, :cyan, process),
      short_stack(stack),
      "\n"
    ]
  end

  defp pid_text(pid) when is_pid(pid), do: List.to_string(:erlang.pid_to_list(pid))
  defp pid_text(other), do: inspect(other)

  defp pid_of_test?(pid, record), do: Map.get(record, :pid) in [nil, pid]

  @doc """
  A stack of `FlameOn.Client.ExUnit.View.top_stacks/2` as the summary
  shows it: frames joined by `" > "`, long stacks cut in the middle.

      iex> FlameOn.Client.ExUnit.Summary.short_stack("T.test_x/1;W.fib/1 ×3..9;SLEEP")
      "T.test_x/1 > W.fib/1 ×3..9 > SLEEP"
      iex> FlameOn.Client.ExUnit.Summary.short_stack("a/0;b/0;c/0;d/0;e/0;f/0;g/0")
      "a/0 > … > d/0 > e/0 > f/0 > g/0"
  """
  @spec short_stack(String.t()) :: String.t()
  def short_stack(""), do: "(no traced function)"

  def short_stack(stack) do
    frames = String.split(stack, ";")

    shown =
      if length(frames) > @frames_shown do
        [hd(frames), "…" | Enum.take(frames, 1 - @frames_shown)]
      else
        frames
      end

    Enum.join(shown, " > ")
  end

  defp ms(us) when us < 1000, do: "#{us} µs"
  defp ms(us), do: :erlang.float_to_binary(us / 1000, decimals: 1) <> " ms"

  defp percent(_us, 0), do: "-"
  defp percent(us, total), do: :erlang.float_to_binary(us * 100 / total, decimals: 1) <> "%"

  defp relative(path), do: Path.relative_to_cwd(path)

  defp plural(1, word), do: word
  defp plural(_n, word), do: word <> "s"

  defp color(false, _codes, text), do: text
  defp color(true, _codes, ""), do: ""

  defp color(true, codes, text),
    do: IO.iodata_to_binary(IO.ANSI.format([List.wrap(codes), text], true))
end
