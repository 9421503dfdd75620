defmodule Mix.Tasks.FlameOn.Demo do
  @shortdoc "Profiles a built-in workload: flame graph and span graph files"

  @moduledoc """
  Profiles `FlameOn.Client.CLI.Demo.run/0` with cross-process tracing and writes
  the flame graph and the span graph:

    * `DIR/demo.folded` – collapsed stacks (flamegraph.pl, inferno, speedscope);
    * `DIR/demo.svg` – the interactive flame graph, open it in a browser;
    * `DIR/demo.speedscope.json` – for https://www.speedscope.app;
    * `DIR/demo.perfetto.json` – the span graph on a timeline, with flow
      arrows from the caller's wait to the callee's span, for
      https://ui.perfetto.dev.

  It then prints the ten most expensive stacks, the spans and the trace's
  counters.

      mix flame_on.demo [--out DIR]

  `DIR` defaults to `flame_on_out`.
  """

  use Mix.Task

  @switches [out: :string]

  @impl Mix.Task
  def run(args) do
    {opts, rest, invalid} = OptionParser.parse(args, strict: @switches)

    if rest != [] or invalid != [] do
      Mix.raise("usage: mix flame_on.demo [--out DIR]")
    end

    Mix.Task.run("app.start")

    dir = Keyword.get(opts, :out, "flame_on_out")
    shell = Mix.shell()
    shell.info("Profiling FlameOn.Client.CLI.Demo.run/0 (cross-process)...")

    {_result, profile} =
      FlameOn.Client.profile(&FlameOn.Client.CLI.Demo.run/0, name: "demo", cross_process: true)

    File.mkdir_p!(dir)
    written = FlameOn.Client.Export.write(profile, dir, [:folded, :svg, :speedscope, :perfetto])

    for {format, path} <- written do
      shell.info("Wrote #{path} (#{format}, #{profile.duration_us} µs traced)")
    end

    shell.info("\nTop 10 stacks by time:")

    names = FlameOn.Client.Profile.names(profile)

    for {pid, stack, us} <- top_stacks(profile, 10) do
      label = if stack == "", do: "(no traced function)", else: stack
      process = FlameOn.Client.Profile.process_label(pid, names)
      shell.info("  #{String.pad_leading(Integer.to_string(us), 9)} µs  #{process} #{label}")
    end

    shell.info("\nSpans (self / attributed wait / unattributed wait, µs):")

    for span <- profile.graph.spans do
      parent = if span.parent_span_id, do: " <- span #{span.parent_span_id}", else: " (root)"

      shell.info(
        "  span #{span.span_id} #{FlameOn.Client.Profile.process_label(span.pid, names)}#{parent}: " <>
          "#{span.self_us} / " <>
          "#{span.attributed_wait_us} / #{span.unattributed_wait_us} #{inspect(span.status)}"
      )
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
