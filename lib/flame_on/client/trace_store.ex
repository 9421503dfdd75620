defmodule FlameOn.Client.TraceStore do
  @moduledoc """
  The last traces of this node, in memory: what the web UI
  (`FlameOn.Client.Web`) lists and shows.

  Every trace that passes its threshold comes here, whatever its shippers
  (and there are none by default): `FlameOn.Client.Tracing.trace/3`,
  `FlameOn.Client.Tracing.start_trace/2`, the `FlameOn.Client.Telemetry`
  handler and `FlameOn.Client.capture_next/2`. `FlameOn.Client.profile/2`
  hands its profile to its caller only.

  Bounded, by configuration:

      config :flame_on_client, trace_store: [max_traces: 50, max_memory_mb: 64]

    * `:max_traces` (`50`) – traces kept; the oldest goes first. `0` keeps
      none (the store is off).
    * `:max_memory_mb` (`64`) – the traces' size (their external term
      size, which counts the stack strings' bytes) kept under it, oldest
      out first; a single trace larger than that is not kept
      (`stats/0`'s `too_large`).

  A tail trace (`trace/3` with `threshold_ms` on its shared path) that
  passes its threshold is kept as a `FlameOn.Client.Profile.Pending`
  when no shipper wants it: its profile is built when `get/1` reads it
  (each time; the store keeps the folded data), so where every request is
  kept, those nobody reads cost no profile. `stats/0`'s `kept` counts
  the traces put since the store started (`traces` is what it holds).

  A trace is copied into an ETS table by the process that finished it;
  trimming happens right after, in the store's process (one trim for all
  the traces put while it waits to run), so for a moment the store may
  hold more than its bounds: the traces put since its last trim.

      iex> FlameOn.Client.TraceStore.max_traces() >= 0
      true
  """

  use GenServer

  require Logger

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Profile.Pending

  @table __MODULE__
  # traces a put takes out itself, over a bound (put/1)
  @writer_drops 4
  # {seq, trace_id, bytes} of every kept trace, oldest first: what a trim
  # takes out, without scanning and sorting the traces
  @order FlameOn.Client.TraceStore.Order
  # the two tables' ids ({table, order}), for writers
  @tables {__MODULE__, :tables}
  # {:counts, bytes kept, traces put since the start, traces kept}
  @no_counts {:counts, 0, 0, 0}

  @typedoc "What the list of recent traces shows of one trace."
  @type summary :: %{
          trace_id: pos_integer(),
          name: String.t(),
          mode: atom(),
          pid: pid() | nil,
          started_at_system_us: integer() | nil,
          duration_us: non_neg_integer(),
          processes: non_neg_integer(),
          spans: non_neg_integer(),
          bytes: non_neg_integer()
        }

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Keeps `profile` (or a `FlameOn.Client.Profile.Pending`, built when
  read). Returns `{:ok, trace_id}` (a profile without a
  `trace_id` gets one), `{:error, :too_large}` for a trace past
  `:max_memory_mb`, and `{:error, :disabled}` when the store keeps nothing
  (`max_traces: 0`, or the application is not running). Never raises.
  """
  @spec put(Profile.t() | Pending.t()) :: {:ok, pos_integer()} | {:error, :too_large | :disabled}
  def put(%kind{} = profile) when kind in [Profile, Pending] do
    {max_traces, max_bytes} = limits()

    tables = tables()

    if max_traces == 0 or tables == nil do
      {:error, :disabled}
    else
      {table, order} = tables
      profile = with_trace_id(profile)
      bytes = bytes(profile)

      if bytes > max_bytes do
        :ets.update_counter(table, :too_large, 1, {:too_large, 0})
        {:error, :too_large}
      else
        id = field(profile, :trace_id)
        seq = System.unique_integer([:positive, :monotonic])
        # a pending trace's summary is made when listed (from its fields,
        # in the entry as well): every kept request puts one, few are listed
        summary = if kind == Pending, do: nil, else: summary(profile, bytes)
        entry = {{:trace, id}, seq, bytes, summary, profile}

        # a trace kept again (its trace_id given) replaces itself
        unless :ets.insert_new(table, entry) do
          replaced = :ets.lookup(table, {:trace, id})
          :ets.insert(table, entry)
          for {_, old_seq, _, _, _} <- replaced, do: forget(tables, old_seq)
        end

        :ets.insert(order, {seq, id, bytes})
        # the bytes kept, the traces put since the start, those kept now
        [total, _kept, count] =
          :ets.update_counter(table, :counts, [{2, bytes}, {3, 1}, {4, 1}], @no_counts)

        # Over a bound: the writer takes the oldest out itself, a few at
        # most (a store kept full by a load of kept requests drops one per
        # put: a message to the server and its wake-up cost more), and
        # asks the server for the rest, one trim asked at a time.
        if (count > max_traces or total > max_bytes) and
             drop(tables, max_traces, max_bytes, @writer_drops, {total, count}) == :more and
             :ets.update_counter(table, :trim_asked, 1, {:trim_asked, 0}) == 1,
           do: GenServer.cast(__MODULE__, :trim)

        {:ok, id}
      end
    end
  rescue
    # a bad :trace_store configuration, or the store stopped (its tables
    # gone) between the check and the insert: the traced code must not
    # fail for it
    error in ArgumentError ->
      if :ets.whereis(@table) != :undefined do
        Logger.warning(
          "FlameOn: a trace was not kept in the trace store: #{Exception.message(error)}"
        )
      end

      {:error, :disabled}
  end

  @doc "The kept traces' summaries, newest first."
  @spec list() :: [summary()]
  def list do
    made =
      select(@table, [
        {{{:trace, :_}, :"$1", :_, :"$2", :_}, [{:"/=", :"$2", nil}], [{{:"$1", :"$2"}}]}
      ])

    pending =
      for {seq, bytes, trace} <-
            select(@table, [
              {{{:trace, :_}, :"$1", :"$2", nil, :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}
            ]),
          do: {seq, summary(trace, bytes)}

    (made ++ pending)
    |> Enum.sort(:desc)
    |> Enum.map(&elem(&1, 1))
  end

  @doc """
  The kept trace `trace_id`: `{:ok, profile}` (a trace kept pending is
  built now) or `:error`.
  """
  @spec get(pos_integer()) :: {:ok, Profile.t()} | :error
  def get(trace_id) do
    case :ets.lookup(@table, {:trace, trace_id}) do
      [{_, _seq, _bytes, _summary, %Pending{} = pending}] -> build(pending)
      [{_, _seq, _bytes, _summary, profile}] -> {:ok, profile}
      [] -> :error
    end
  rescue
    ArgumentError -> :error
  end

  # A profile that cannot be built is logged, and reads as not kept.
  defp build(pending) do
    {:ok, Pending.build(pending)}
  rescue
    error ->
      Logger.error(
        "FlameOn: the kept trace #{Pending.field(pending, :trace_id)} could not be built:\n" <>
          Exception.format(:error, error, __STACKTRACE__)
      )

      :error
  end

  # One of a kept trace's profile fields, whether it is built or pending.
  defp field(%Pending{} = pending, key), do: Pending.field(pending, key)
  defp field(%Profile{} = profile, key), do: Map.fetch!(profile, key)

  defp with_trace_id(trace) do
    if field(trace, :trace_id),
      do: trace,
      else: put_trace_id(trace, System.unique_integer([:positive]))
  end

  defp put_trace_id(%Profile{} = profile, id), do: %{profile | trace_id: id}

  defp put_trace_id(%Pending{} = pending, id),
    do: %{pending | fields: Keyword.put(pending.fields, :trace_id, id)}

  # the tables' ids since the store first ran, else nil (once it stops,
  # a write to them raises: put/1 says :disabled)
  defp tables, do: :persistent_term.get(@tables, nil)

  @doc "Forgets every trace."
  @spec clear() :: :ok
  def clear, do: GenServer.call(__MODULE__, :clear)

  @doc """
  `%{traces: n, bytes: size of the kept traces, kept: traces put since the
  store started, too_large: traces not kept for their size, max_traces:
  ..., max_bytes: ...}`.
  """
  @spec stats() :: map()
  def stats do
    {max_traces, max_bytes} = limits()
    entries = select(@table, [{{{:trace, :_}, :_, :"$1", :_, :_}, [], [:"$1"]}])

    %{
      traces: length(entries),
      bytes: Enum.sum(entries),
      kept: counter(:counts, 3),
      too_large: counter(:too_large, 2),
      max_traces: max_traces,
      max_bytes: max_bytes
    }
  end

  defp counter(key, at) do
    case :ets.whereis(@table) != :undefined and :ets.lookup(@table, key) do
      [entry] -> elem(entry, at - 1)
      _ -> 0
    end
  end

  @doc "The configured `:max_traces`."
  @spec max_traces() :: non_neg_integer()
  def max_traces, do: elem(limits(), 0)

  defp select(table, spec) do
    :ets.select(table, spec)
  rescue
    ArgumentError -> []
  end

  defp limits do
    config = FlameOn.Client.Options.Config.trace_store()
    {config[:max_traces], trunc(config[:max_memory_mb] * 1024 * 1024)}
  end

  defp summary(trace, bytes) do
    started_at = field(trace, :started_at)

    %{
      trace_id: field(trace, :trace_id),
      name: field(trace, :name),
      mode: field(trace, :mode),
      pid: field(trace, :pid),
      started_at_system_us: started_at && started_at + System.time_offset(:microsecond),
      duration_us: field(trace, :duration_us),
      processes: processes(trace),
      spans: spans(trace),
      bytes: bytes
    }
  end

  defp bytes(%Pending{} = pending), do: Pending.bytes(pending)
  defp bytes(%Profile{} = profile), do: :erlang.external_size(profile)

  defp processes(%Pending{} = pending), do: Pending.processes(pending)
  defp processes(%Profile{stacks: stacks}), do: map_size(stacks)

  # a pending trace is a tail trace's: one process, no span graph
  defp spans(%Profile{graph: %{spans: spans}}), do: length(spans)
  defp spans(_trace), do: 0

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(:ok) do
    # every kept trace writes here (a load of kept requests, from many
    # processes): fine-grained locks, not read_concurrency's costlier writes
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    :ets.new(@order, [:named_table, :public, :ordered_set])
    # writers use the tables' ids: a name is looked up under a lock
    # each time (measured under a load of kept requests)
    :persistent_term.put(@tables, {:ets.whereis(@table), :ets.whereis(@order)})
    {:ok, %{}}
  end

  @impl GenServer
  def handle_cast(:trim, state) do
    # before the scan: a trace put from here on asks for a trim of its own
    :ets.insert(@table, {:trim_asked, 0})
    trim()
    {:noreply, state}
  end

  @impl GenServer
  def handle_call(:clear, _from, state) do
    :ets.delete_all_objects(@table)
    :ets.delete_all_objects(@order)
    {:reply, :ok, state}
  end

  # Oldest out until both bounds hold.
  defp trim do
    {max_traces, max_bytes} = limits()
    tables = tables()
    drop(tables, max_traces, max_bytes, :infinity, kept_now(tables))
  end

  # {bytes, traces} kept now
  defp kept_now({table, _order}) do
    case :ets.lookup(table, :counts) do
      [{:counts, total, _kept, count}] -> {total, count}
      [] -> {0, 0}
    end
  end

  # The oldest out until both bounds hold (:done), `budget` of them at most
  # (:more when that was not enough); `now`: the bytes and traces kept.
  defp drop(_tables, _max_traces, _max_bytes, 0, _now), do: :more

  defp drop({table, order} = tables, max_traces, max_bytes, budget, {total, count}) do
    with true <- count > max_traces or total > max_bytes,
         seq when seq != :"$end_of_table" <- :ets.first(order) do
      # (gone already if a put replacing that trace took it out meanwhile)
      now =
        case forget(tables, seq) do
          {:ok, id, now} ->
            # only the entry put with this seq (a trace kept again has a newer one)
            :ets.match_delete(table, {{:trace, id}, seq, :_, :_, :_})
            now

          :gone ->
            kept_now(tables)
        end

      budget = if budget == :infinity, do: budget, else: budget - 1
      drop(tables, max_traces, max_bytes, budget, now)
    else
      _ -> :done
    end
  end

  # The index entry of seq out, its bytes and itself off the counts:
  # {:ok, trace_id, {bytes, traces} kept now}, or :gone when another
  # process took it first (each is taken once).
  defp forget({table, order}, seq) do
    case :ets.take(order, seq) do
      [{^seq, id, bytes}] ->
        [total, count] = :ets.update_counter(table, :counts, [{2, -bytes}, {4, -1}], @no_counts)
        {:ok, id, {total, count}}

      [] ->
        :gone
    end
  end

  @doc false
  # What trace/3, start_trace/2, telemetry do with a finished trace: ship
  # it if it lasted at least the threshold, and keep it in the
  # FlameOn.Client.TraceStore (the web UI's recent traces). A pending one
  # (a tail trace's) is built only to be shipped: without shippers the
  # store keeps it pending.
  @spec keep(Profile.t() | Pending.t(), %{threshold_ms: number(), shippers: list()}) :: :ok
  def keep(trace, %{threshold_ms: threshold_ms, shippers: shippers}) do
    if field(trace, :duration_us) >= threshold_ms * 1000 do
      keep_and_ship(trace, shippers)
    else
      Logger.debug(fn ->
        "FlameOn: trace #{inspect(field(trace, :name))} (#{field(trace, :trace_id)}) took " <>
          "#{field(trace, :duration_us)} µs, below threshold_ms #{threshold_ms}: not shipped"
      end)

      :ok
    end
  end

  defp keep_and_ship(%Pending{} = pending, []) do
    put(pending)
    :ok
  end

  defp keep_and_ship(%Pending{} = pending, shippers) do
    with {:ok, profile} <- build(pending), do: keep_and_ship(profile, shippers)
    :ok
  end

  defp keep_and_ship(%Profile{} = profile, shippers) do
    put(profile)
    FlameOn.Client.Shipper.ship_all(profile, shippers)
  end
end
