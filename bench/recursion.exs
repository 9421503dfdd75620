# Deep recursion with collapse_recursion on (the default) and off: what a
# newcomer's Enum.map/2 over a long list and fib/1 give, per mode.
#
# Run from the project root:
#
#     mix run bench/recursion.exs
#
# About 20 s. For each workload, mode and setting: the best wall time of
# profile/2 (trace + finish) over 5 runs, the core's nodes and memory,
# truncated_stacks, collapsed_recursion, the deepest stack (frames) and
# the height of the SVG flame graph (FlameOn.Client.Export.svg/1).

defmodule FlameOn.Bench.RecursionWork do
  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)
  def double(list), do: Enum.map(list, &(&1 * 2))
end

alias FlameOn.Bench.RecursionWork, as: Work

svg_height = fn profile ->
  svg = IO.iodata_to_binary(FlameOn.Client.Export.svg(profile))
  [_, height] = Regex.run(~r/<svg[^>]*\sheight="(\d+)"/, svg)
  String.to_integer(height)
end

deepest = fn profile ->
  profile.stacks
  |> Map.values()
  |> List.flatten()
  |> Enum.map(fn {stack, _us} -> length(String.split(stack, ";")) end)
  |> Enum.max(fn -> 0 end)
end

list_3k = Enum.to_list(1..3_000)
list_30k = Enum.to_list(1..30_000)

workloads = [
  {"Enum.map over 3 000", fn -> Work.double(list_3k) end},
  {"Enum.map over 30 000", fn -> Work.double(list_30k) end},
  {"fib(22)", fn -> Work.fib(22) end}
]

IO.puts("flame_on_client recursion bench, #{DateTime.utc_now() |> DateTime.truncate(:second)}")

IO.puts(
  "load average at start: #{File.read!("/proc/loadavg") |> String.split() |> Enum.take(3) |> Enum.join(" ")}"
)

IO.puts(
  String.pad_trailing("workload", 22) <>
    String.pad_trailing("mode", 9) <>
    String.pad_trailing("collapse", 10) <>
    "best ms   nodes  mem KiB  truncated  collapsed  deepest  svg px"
)

for {name, work} <- workloads, mode <- [:nif, :process], collapse <- [true, false] do
  runs =
    for _ <- 1..5 do
      t0 = System.monotonic_time(:microsecond)
      {_, profile} = FlameOn.Client.profile(work, mode: mode, collapse_recursion: collapse)
      {System.monotonic_time(:microsecond) - t0, profile}
    end

  best = runs |> Enum.map(&elem(&1, 0)) |> Enum.min()
  {_, profile} = hd(runs)
  s = profile.stats

  IO.puts(
    String.pad_trailing(name, 22) <>
      String.pad_trailing(inspect(mode), 9) <>
      String.pad_trailing(inspect(collapse), 10) <>
      String.pad_leading(:erlang.float_to_binary(best / 1000, decimals: 1), 7) <>
      String.pad_leading(Integer.to_string(s.nodes), 8) <>
      String.pad_leading(Integer.to_string(div(s.memory_bytes, 1024)), 9) <>
      String.pad_leading(Integer.to_string(s.truncated_stacks), 11) <>
      String.pad_leading(Integer.to_string(s.collapsed_recursion), 11) <>
      String.pad_leading(Integer.to_string(deepest.(profile)), 9) <>
      String.pad_leading(Integer.to_string(svg_height.(profile)), 8)
  )
end
