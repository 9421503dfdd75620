# Differential flame graphs (FlameOn.Client.diff/3): what diffing two
# profiles of 10 000 stacks each costs, and writing the diff.
#
# Run from the project root:
#
#     mix run bench/diff.exs
#     FO_BENCH_REPS=11 mix run bench/diff.exs
#
# About 20 s. The two profiles are made up (seeded, so every run has the
# same): 10 000 distinct stacks, the nodes of a calling-context tree up to
# 40 frames deep over 400 function names, spread over 4 processes (one the root, two named alike in both
# runs, one unnamed); the new run has each stack's time within ±3% of the
# base's, 5% of the stacks at 4x, 2% of them gone and as many new ones.
#
# Rows, each the median of the repetitions (each timing in a fresh
# process, the rows' order rotating from round to round):
#
#   diff merged        FlameOn.Client.diff(base, new): the target, < 200 ms
#   diff by process    FlameOn.Client.diff(base, new, by: :process)
#   diff from folded   both sides as folded text (Profile.folded/1): parsing too
#   folded             Diff.folded/1 of the merged diff, to a binary
#   svg                Export.DiffSVG (the merged diff's flame graph)
#   speedscope         Export.Diff.speedscope/1
#   pprof              both sides' .pb.gz

defmodule FlameOn.Bench.Diff do
  @moduledoc false

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  @reps String.to_integer(System.get_env("FO_BENCH_REPS", "7"))
  @stacks 10_000
  @target_ms 200

  def run do
    :rand.seed(:exsss, {25, 25, 25})
    {base, new} = profiles()
    merged = FlameOn.Client.diff(base, new)
    base_text = IO.iodata_to_binary(Profile.folded(base))
    new_text = IO.iodata_to_binary(Profile.folded(new))

    rows = [
      {"diff merged", fn -> FlameOn.Client.diff(base, new) end},
      {"diff by process", fn -> FlameOn.Client.diff(base, new, by: :process) end},
      {"diff from folded", fn -> FlameOn.Client.diff(base_text, new_text) end},
      {"folded", fn -> IO.iodata_to_binary(Diff.folded(merged)) end},
      {"svg", fn -> IO.iodata_to_binary(Export.DiffSVG.encode(merged, [])) end},
      {"speedscope", fn -> IO.iodata_to_binary(Export.Diff.speedscope(merged)) end},
      {"pprof", fn -> Export.Diff.outputs(merged, :pprof, "x", []) end}
    ]

    IO.puts("flame_on_client diff bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

    IO.puts(
      "OTP #{System.otp_release()}, Elixir #{System.version()}, load #{load()}, " <>
        "#{@reps} runs each, medians"
    )

    IO.puts(
      "base: #{count(base)} stacks, new: #{count(new)} stacks, merged diff: " <>
        "#{length(merged.stacks.all)} rows (scale #{Float.round(merged.scale, 3)})\n"
    )

    times =
      Enum.reduce(0..(@reps - 1), %{}, fn round, acc ->
        rows
        |> rotate(round)
        |> Enum.reduce(acc, fn {name, fun}, acc ->
          Map.update(acc, name, [time_ms(fun)], &[time_ms(fun) | &1])
        end)
      end)

    IO.puts(String.pad_trailing("row", 18) <> "    median ms      best ms")

    for {name, _fun} <- rows do
      IO.puts(
        String.pad_trailing(name, 18) <>
          String.pad_leading(fmt(median(times[name])), 13) <>
          String.pad_leading(fmt(Enum.min(times[name])), 13)
      )
    end

    ms = median(times["diff merged"])
    verdict = if ms < @target_ms, do: "PASS", else: "MISS"

    IO.puts(
      "\n#{verdict}  diff of two #{@stacks}-stack profiles < #{@target_ms} ms: #{fmt(ms)} ms (median)"
    )
  end

  # Two runs of four processes: the root, MyApp.Cart, a task, an unnamed one.
  defp profiles do
    names = for i <- 1..400, do: "Mod#{rem(i, 37)}.fun#{i}/#{rem(i, 4)}"
    names = List.to_tuple(names)
    stacks = distinct_stacks(names, @stacks + div(@stacks, 50))
    {base_stacks, extra} = Enum.split(Enum.shuffle(stacks), @stacks)
    base_values = Enum.map(base_stacks, &{&1, 10 + :rand.uniform(5_000)})

    new_values =
      Enum.flat_map(base_values, fn {stack, us} ->
        case :rand.uniform(100) do
          n when n <= 5 -> [{stack, us * 4}]
          n when n <= 7 -> []
          _ -> [{stack, round(us * (0.97 + :rand.uniform() * 0.06))}]
        end
      end) ++ Enum.map(extra, &{&1, 10 + :rand.uniform(5_000)})

    {profile(base_values, 1), profile(new_values, 101)}
  end

  defp profile(values, first) do
    pids = for i <- first..(first + 3), do: :c.pid(0, 9000 + i, 0)
    [root, cart, task, _other] = pids

    stacks =
      values
      |> Enum.with_index()
      |> Enum.group_by(fn {_, i} -> Enum.at(pids, rem(i, 4)) end, fn {v, _} -> v end)

    %Profile{
      name: "bench",
      pid: root,
      stacks: stacks,
      process_names: %{cart => "MyApp.Cart", task => "Task MyApp.job/1"}
    }
  end

  # A calling-context tree of n nodes, each a stack of its own: a node's
  # parent is one of the nodes made before it (the last 64 more often than
  # not, so that branches grow deep), its name one of the 400.
  defp distinct_stacks(names, n) do
    {stacks, _recent, _all} =
      Enum.reduce(1..n, {[], [], {}}, fn _, {stacks, recent, all} ->
        parent =
          cond do
            tuple_size(all) == 0 -> nil
            recent != [] and :rand.uniform(10) <= 7 -> Enum.random(recent)
            true -> elem(all, :rand.uniform(tuple_size(all)) - 1)
          end

        name = elem(names, :rand.uniform(400) - 1)
        stack = if parent, do: parent <> ";" <> name, else: name

        if Enum.count(:binary.matches(stack, ";")) >= 40 do
          {stacks, recent, all}
        else
          {[stack | stacks], Enum.take([stack | recent], 64), Tuple.append(all, stack)}
        end
      end)

    stacks |> Enum.reverse() |> Enum.uniq()
  end

  defp count(profile), do: profile.stacks |> Map.values() |> Enum.map(&length/1) |> Enum.sum()

  defp time_ms(fun) do
    parent = self()

    spawn_link(fn ->
      {us, _} = :timer.tc(fun)
      send(parent, {:timed, us})
    end)

    receive do
      {:timed, us} -> us / 1000
    end
  end

  defp rotate(list, n) do
    {a, b} = Enum.split(list, rem(n, length(list)))
    b ++ a
  end

  defp median(list) do
    sorted = Enum.sort(list)
    Enum.at(sorted, div(length(sorted), 2))
  end

  defp fmt(ms), do: :erlang.float_to_binary(ms / 1, decimals: 1)

  defp load do
    case File.read("/proc/loadavg") do
      {:ok, text} -> text |> String.split() |> Enum.take(3) |> Enum.join(" ")
      _ -> "?"
    end
  end
end

FlameOn.Bench.Diff.run()
