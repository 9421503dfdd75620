defmodule Mix.Tasks.FlameOn.Demo do
  @shortdoc "Profiles a built-in workload and writes a folded flame graph"

  @moduledoc """
  Profiles `FlameOn.Client.Demo.run/0` and writes the collapsed stacks to
  `DIR/demo.folded`, then prints the ten most expensive stacks and the
  trace's counters.

      mix flame_on.demo [--out DIR]

  `DIR` defaults to `flame_on_out`. Render the file with `flamegraph.pl
  DIR/demo.folded > demo.svg`, `inferno-flamegraph`, or open it in
  speedscope.
  """

  use Mix.Task

  alias FlameOn.Client.Profile

  @switches [out: :string]

  @impl Mix.Task
  def run(args) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches)

    if rest != [] or invalid != [] do
      Mix.raise("usage: mix flame_on.demo [--out DIR]")
    end

    Mix.Task.run("app.start")

    dir = Keyword.get(opts, :out, "flame_on_out")
    {_result, profile} = FlameOn.Client.profile(&FlameOn.Client.Demo.run/0, name: "demo")

    File.mkdir_p!(dir)
    path = Path.join(dir, "demo.folded")
    File.write!(path, Profile.folded(profile))

    shell = Mix.shell()
    shell.info("Wrote #{path} (#{profile.duration_us} µs traced)")
    shell.info("\nTop 10 stacks by time:")

    for {pid, stack, us} <- top_stacks(profile, 10) do
      label = if stack == "", do: "(no traced function)", else: stack
      shell.info("  #{String.pad_leading(Integer.to_string(us), 9)} µs  #{inspect(pid)} #{label}")
    end

    shell.info("\nStats:")

    for {key, value} <- Enum.sort(profile.stats) do
      shell.info("  #{key}: #{value}")
    end
  end

  defp top_stacks(profile, n) do
    profile.stacks
    |> Enum.flat_map(fn {pid, entries} ->
      Enum.map(entries, fn {stack, us} -> {pid, stack, us} end)
    end)
    |> Enum.sort_by(fn {_pid, _stack, us} -> us end, :desc)
    |> Enum.take(n)
  end
end
