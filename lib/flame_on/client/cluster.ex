defmodule FlameOn.Client.Cluster do
  @moduledoc """
  Cross-node traces: a `cross_process: true` profile follows the trace into
  the other nodes of a distributed Erlang cluster that run
  `:flame_on_client`, and their spans and stacks land in the same
  `FlameOn.Client.Profile`.

  A seq_trace token travels with messages across nodes by itself, but each
  node's seq_trace events go to that node's own system tracer. So when a
  cross-process trace starts, the origin **arms** every connected node:
  over `:erpc` (one concurrent call per node, `:arm_timeout_ms`, default
  1000), each starts the trace's part there (a process that takes
  cross-process tracing on that node with the trace's label and mode),
  before the traced function runs (no message of
  the trace can reach a node before it is ready). Nodes that do not run the
  application, or do not answer in time, are listed in
  `graph.stats.unreachable_nodes` as `{node, reason}` and the trace goes on
  without them.

  When the trace finishes, the origin **collects** each armed node's part
  (at most `:max_part_bytes`, default 4 MB, in external format: past it, the
  smallest stack entries go and `graph.stats.truncated_stack_entries` counts
  them) and **merges** it: times move to
  the origin's clock by an offset measured per node (the round trip of the
  fastest of a few `:erpc` calls; `graph.stats.nodes[node].clock_uncertainty_us`
  is half that round trip), stacks are keyed by the remote pids, spans carry
  their `node`, and a call, plain message or spawn (`:erpc.call/4`,
  `:rpc.call/4`, `Node.spawn/2`) to another node links the sender's span to
  the receiver's span there as on one node, the sender's wait attributed to
  it. `graph.stats.collect_us` and `merge_us` say what collecting the parts
  and merging them took.

  A process that joins from another node gets its trace flags from that
  node's part when the NIF says so, a little after its span began:
  `graph.stats.flag_lag_us` says how long after, per process (its stacks
  miss at most that much), `late_flags` counts those a millisecond or more
  late and `late_flag_us` adds up their lags.

  A node that disconnects or crashes mid-trace costs its part
  (`graph.stats.lost_parts`), never the trace. Each part monitors the
  origin's trace owner and stops, leaving its node clean, when the owner
  goes or the trace's lifetime (`max_duration_ms`) is over.

  Options (under `:cluster` in `FlameOn.Client.profile/2`'s graph options):
  `false` arms no node; a keyword list with `:nodes` (default
  `Node.list()`), `:arm_timeout_ms` and `:max_part_bytes`.
  """

  alias FlameOn.Client.Cluster.Merge
  alias FlameOn.Client.Cluster.Part
  alias FlameOn.Client.Profile

  @arm_timeout_ms 1_000
  @collect_timeout_ms 5_000
  @max_part_bytes 4_000_000
  # round trips tried for each node's clock offset; the fastest counts
  @clock_samples 5

  @typedoc "The armed nodes of one trace, from `arm/2`."
  @type t :: %{
          parts: %{node() => pid()},
          unreachable: [{node(), term()}],
          max_part_bytes: pos_integer()
        }

  @doc false
  # Arms every node of the :cluster option's :nodes (default: the connected
  # ones) for the trace `label` owned by `origin`, with the trace's
  # validated options. Never fails: what did not arm is listed.
  @spec arm(pos_integer(), pid(), map()) :: t()
  def arm(label, origin, opts) do
    config = opts.cluster
    nodes = if config == false, do: [], else: Keyword.get(config, :nodes, Node.list())

    timeout =
      if config == false, do: 0, else: Keyword.get(config, :arm_timeout_ms, @arm_timeout_ms)

    max_bytes =
      if config == false, do: 0, else: Keyword.get(config, :max_part_bytes, @max_part_bytes)

    part = %{
      label: label,
      origin: origin,
      # the trace's options: the same mode, follow, limits and sampling there
      opts: %{opts | cluster: false},
      # a little longer than the origin's: the origin collects first
      lifetime_ms: opts.max_duration_ms + 5_000
    }

    results = if nodes == [], do: [], else: :erpc.multicall(nodes, Part, :start, [part], timeout)

    {parts, unreachable} =
      nodes
      |> Enum.zip(results)
      |> Enum.reduce({%{}, []}, fn
        {node, {:ok, {:ok, pid}}}, {parts, bad} -> {Map.put(parts, node, pid), bad}
        {node, {:ok, {:error, reason}}}, {parts, bad} -> {parts, [{node, reason} | bad]}
        {node, {:error, reason}}, {parts, bad} -> {parts, [{node, arm_error(reason)} | bad]}
      end)

    %{parts: parts, unreachable: Enum.reverse(unreachable), max_part_bytes: max_bytes}
  end

  defp arm_error({:exception, :undef, _}), do: :not_running
  defp arm_error({:erpc, reason}), do: reason
  defp arm_error({kind, reason}) when kind in [:exit, :throw, :exception], do: reason
  defp arm_error(other), do: other

  @doc false
  # The trace is over: every armed node's part, collected and merged into
  # the origin's profile (a profile of a trace that armed nothing stays as
  # it is, but for the stats).
  @spec finish(t(), Profile.t()) :: Profile.t()
  def finish(%{parts: parts} = cluster, profile) do
    nodes = Map.keys(parts)

    {collect_us, collected} =
      :timer.tc(fn ->
        nodes
        |> Enum.map(fn node -> Task.async(fn -> collect(node, parts[node], cluster) end) end)
        |> Enum.map(&Task.await(&1, :infinity))
      end)

    {merge_us, merged} =
      :timer.tc(fn -> Merge.merge(profile, Enum.zip(nodes, collected), cluster.unreachable) end)

    timed(merged, %{collect_us: collect_us, merge_us: merge_us})
  end

  # what the end of a trace across nodes cost the origin
  defp timed(%Profile{graph: %{stats: stats} = graph} = profile, times) when is_map(stats),
    do: %{profile | graph: %{graph | stats: Map.merge(stats, times)}}

  defp timed(profile, _times), do: profile

  defp collect(node, part, cluster) do
    # the clock first: collecting stops the part
    with {:ok, clock} <- clock(node),
         {:ok, {:ok, data}} <- call(node, Part, :collect, [part, cluster.max_part_bytes]) do
      {:ok, Map.merge(data, clock)}
    else
      {:ok, {:error, reason}} -> {:error, reason}
      {:error, reason} -> {:error, reason}
    end
  end

  @doc """
  The offset of `node`'s monotonic clock from this node's, in microseconds
  (its time minus ours), from the fastest of a few `:erpc` round trips,
  with half that round trip as the uncertainty.
  """
  @spec clock(node()) ::
          {:ok, %{clock_offset_us: integer(), clock_uncertainty_us: non_neg_integer()}}
          | {:error, term()}
  def clock(node) do
    samples =
      for _ <- 1..@clock_samples do
        t0 = System.monotonic_time(:nanosecond)

        case call(node, :erlang, :monotonic_time, [:nanosecond]) do
          {:ok, remote} ->
            t1 = System.monotonic_time(:nanosecond)
            {t1 - t0, remote - div(t0 + t1, 2)}

          {:error, reason} ->
            {:error, reason}
        end
      end

    case Enum.reject(samples, &match?({:error, _}, &1)) do
      [] ->
        hd(samples)

      ok ->
        {rtt, offset} = Enum.min_by(ok, &elem(&1, 0))

        {:ok,
         %{
           clock_offset_us: div(offset, 1000),
           clock_uncertainty_us: div(rtt + 1999, 2000)
         }}
    end
  end

  defp call(node, module, fun, args) do
    {:ok, :erpc.call(node, module, fun, args, @collect_timeout_ms)}
  catch
    :error, {:erpc, reason} -> {:error, reason}
    :error, {:exception, reason, _} -> {:error, reason}
    :exit, {:exception, reason} -> {:error, reason}
    :exit, reason -> {:error, reason}
    :throw, reason -> {:error, reason}
  end
end
