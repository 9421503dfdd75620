defmodule FlameOn.Client.CLI.Report do
  @moduledoc false
  # What mix profile.flame prints once it wrote the files: the top
  # functions by self time, the span graph and its explained waits, the
  # nodes of a trace across nodes, and the limits that were reached.

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Profile.Tree

  @doc "Prints a summary's top functions (`--summary`)."
  @spec print_counters(FlameOn.Client.Summary.t(), String.t(), map(), atom()) :: :ok
  def print_counters(summary, path, config, type) do
    shell = Mix.shell()
    shell.info("  #{path} (csv, every function)")

    what = if type == :call_time, do: "time", else: "memory"

    shell.info(
      "\nTop #{config.top} functions by #{what} (#{inspect(summary.name)}, #{type}, " <>
        "#{map_size(summary.by_process)} #{plural(map_size(summary.by_process), "process", "processes")}, " <>
        "#{summary.duration_us} µs wall):"
    )

    shell.info(FlameOn.Client.Summary.table(summary, top: config.top))
    :ok
  end

  @doc "Prints where the files went, the top functions by self time, the spans."
  @spec summary(Profile.t(), [{atom(), String.t()}], map()) :: :ok
  def summary(profile, paths, config) do
    shell = Mix.shell()
    Enum.each(paths, fn {format, path} -> shell.info("  #{path} (#{format})") end)

    self_times = self_times(profile)
    total = self_times |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    stacks = profile.stacks |> Map.values() |> Enum.map(&length/1) |> Enum.sum()
    processes = map_size(profile.stacks)

    shell.info(
      "\nTop #{config.top} functions by self time " <>
        "(#{inspect(profile.name)}, mode #{profile.mode}):"
    )

    shell.info("    SELF µs       %  FUNCTION")

    for {frame, us} <- Enum.take(self_times, config.top) do
      shell.info("  #{pad(us, 9)}  #{percent(us, total)}  #{frame}")
    end

    shell.info(
      "Total: #{total} µs in #{stacks} #{plural(stacks, "stack")} of #{processes} " <>
        "#{plural(processes, "process", "processes")} (#{profile.duration_us} µs wall)"
    )

    if profile.graph, do: spans(profile.graph)
    if config[:alloc], do: allocators(profile, config)
    warnings(profile.stats)
    :ok
  end

  # --alloc: the top functions by the words allocated in the stacks they
  # are the leaf of (each garbage collection charges the words since the
  # previous one to the stack it started in).
  defp allocators(profile, config) do
    view = Profile.alloc_view(profile)
    words = self_times(view)
    total = words |> Enum.map(&elem(&1, 1)) |> Enum.sum()
    shell = Mix.shell()

    shell.info(
      "\nTop #{config.top} functions by heap words allocated (sampled at " <>
        "#{Map.get(profile.stats, :alloc_samples, 0)} garbage collections):"
    )

    shell.info("      WORDS       %  FUNCTION")

    for {frame, w} <- Enum.take(words, config.top) do
      shell.info("  #{pad(w, 9)}  #{percent(w, total)}  #{frame}")
    end

    shell.info("Total: #{total} words (#{total * :erlang.system_info(:wordsize)} bytes)")
  end

  @doc false
  # `[{frame, self_us}]`, largest first: the time of the stacks each frame
  # is the leaf of, over every process of the profile.
  @spec self_times(Profile.t()) :: [{String.t(), non_neg_integer()}]
  def self_times(%Profile{stacks: stacks} = profile) do
    tree = Tree.of(profile)

    stacks
    |> Map.keys()
    |> Enum.reduce(%{}, fn pid, acc ->
      Tree.reduce(tree, pid, acc, fn
        {_depth, _name, 0, _total, _s, _w}, acc ->
          acc

        {_depth, name, us, _total, _s, _w}, acc ->
          Map.update(acc, leaf(tree, name), us, &(&1 + us))
      end)
    end)
    |> Enum.sort_by(fn {frame, us} -> {-us, frame} end)
  end

  defp leaf(tree, name), do: Tree.name(tree, name) || "(no traced function)"

  @max_spans_shown 20

  defp spans(graph) do
    shell = Mix.shell()
    depth = span_depths(graph.spans)
    shell.info("\nSpans (#{length(graph.spans)}):")
    shell.info("    SELF µs    GC µs  RUNNABLE µs  ATTRIBUTED µs  UNATTRIBUTED µs  PROCESS")

    # The first spans in trace order (the root and its first callees); a
    # long trace's full list is in the Perfetto file.
    {shown, rest} = Enum.split(graph.spans, @max_spans_shown)

    for span <- shown do
      indent = String.duplicate("  ", Map.get(depth, span.span_id, 0))
      status = if span.status == :ok, do: "", else: "  #{inspect(span.status)}"
      kind = if span.kind == :root, do: "", else: " (#{span.kind})"
      # a span on another node (a trace across nodes) says which
      on = if span.node in [nil, node()], do: "", else: " on #{span.node}"

      shell.info(
        "  #{pad(span.self_us, 9)}  #{pad(span.gc_us, 7)}  #{pad(span.runnable_us, 11)}  " <>
          "#{pad(span.attributed_wait_us, 13)}  " <>
          "#{pad(span.unattributed_wait_us, 15)}  #{indent}#{span_label(span)}#{kind}#{on}" <>
          "#{causes(span)}#{status}"
      )
    end

    if rest != [] do
      shell.info("  ... #{length(rest)} more spans (write --format perfetto to see them all)")
    end

    edges(graph)

    if graph.stats != %{} do
      counters =
        for {key, n} <- Enum.sort(graph.stats), is_integer(n) and n != 0, do: "#{key}: #{n}"

      if counters != [], do: shell.info("Graph: " <> Enum.join(counters, ", "))
      nodes(graph.stats)
    end
  end

  # A trace across nodes: the nodes that took part, and those that could not.
  defp nodes(stats) do
    for {node, n} <- Enum.sort(Map.get(stats, :nodes, %{})) do
      Mix.shell().info(
        "Node #{node}: #{n.spans} spans, clock offset #{n.clock_offset_us} µs " <>
          "± #{n.clock_uncertainty_us} µs, #{n.bytes} bytes"
      )
    end

    for {node, reason} <-
          Map.get(stats, :unreachable_nodes, []) ++ Map.get(stats, :lost_nodes, []) do
      Mix.shell().info("Node #{node}: not in the trace (#{inspect(reason)})")
    end
  end

  # its name (read while tracing) and its pid, as every output shows it
  defp span_label(span), do: Profile.process_label(span.pid, %{span.pid => span.name})

  # What ended the unattributed wait, when there is any.
  defp causes(%{unattributed_by: by}) do
    case for {cause, us} <- Enum.sort_by(by, fn {_, us} -> -us end), us > 0, do: "#{cause} #{us}" do
      [] -> ""
      parts -> "  [" <> Enum.join(parts, ", ") <> "]"
    end
  end

  @max_edges_shown 10

  # The waits other spans explained, largest first.
  defp edges(%{edges: []}), do: :ok

  defp edges(%{edges: edges, spans: spans}) do
    shell = Mix.shell()
    by_id = Map.new(spans, &{&1.span_id, &1})
    shell.info("\nWaits explained by other spans (#{length(edges)}):")
    shell.info("         µs  WAKES  WAITER -> WAKER")

    edges
    |> Enum.sort_by(&{-&1.attributed_us, &1.waiter_span_id})
    |> Enum.take(@max_edges_shown)
    |> Enum.each(fn edge ->
      waiter = by_id[edge.waiter_span_id]
      waker = by_id[edge.waker_span_id]

      shell.info(
        "  #{pad(edge.attributed_us, 9)}  #{pad(edge.wakes, 5)}  " <>
          "#{edge.waiter_span_id} #{span_label(waiter)} -> #{edge.waker_span_id} #{span_label(waker)}"
      )
    end)

    if length(edges) > @max_edges_shown,
      do: shell.info("  ... #{length(edges) - @max_edges_shown} more")
  end

  defp span_depths(spans) do
    parents = Map.new(spans, &{&1.span_id, &1.parent_span_id})
    Map.new(spans, &{&1.span_id, depth_of(&1.span_id, parents, 0)})
  end

  defp depth_of(id, parents, depth) do
    case parents do
      %{^id => parent} when parent != nil and depth < 64 -> depth_of(parent, parents, depth + 1)
      _ -> depth
    end
  end

  defp warnings(stats) do
    for key <- [:dropped_events, :truncated_stacks, :malformed_events],
        n = Map.get(stats, key, 0),
        is_integer(n) and n > 0 do
      hint =
        case key == :truncated_stacks && Profile.truncation_hint(stats, :switches) do
          text when text in [nil, false, ""] ->
            "a limit was reached; see the options of FlameOn.Client"

          text ->
            text
        end

      Mix.shell().info("Warning: #{key}: #{n} (#{hint})")
    end
  end

  defp pad(n, width), do: n |> Integer.to_string() |> String.pad_leading(width)

  defp percent(_us, 0), do: "     -"

  defp percent(us, total),
    do:
      :erlang.float_to_binary(us * 100 / total, decimals: 1)
      |> String.pad_leading(5)
      |> Kernel.<>("%")

  defp plural(1, word), do: word
  defp plural(_n, word), do: word <> "s"
  defp plural(1, word, _plural), do: word
  defp plural(_n, _word, plural), do: plural
end
