defmodule FlameOn.Client.Capture.Common do
  @moduledoc false
  # What the capture scopes and owners share: a core session from the
  # options, whether the calling process can be traced, the profile's
  # fields, the watchers' results, and start errors in words that say what
  # to do.

  alias FlameOn.Client.Capture.Mode
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{TailHold, TraceBackend}

  @doc "Two `watched` results as one (the root's and its callees')."
  @spec merge_watched(Mode.watched(), Mode.watched()) :: Mode.watched()
  def merge_watched(a, b) do
    %{
      metrics: Map.merge(a.metrics, b.metrics),
      stats: Map.merge(a.stats, b.stats, fn _key, x, y -> x + y end)
    }
  end

  @doc "A core session with the limits of `opts` (and `extra` keys): `{:ok, core}` or an error."
  @spec new_core(map(), map()) :: {:ok, Native.session()} | {:error, term()}
  def new_core(opts, extra \\ %{}) do
    limits =
      opts |> Map.take(FlameOn.Client.Options.limit_keys()) |> Map.merge(alloc_option(opts))

    {:ok,
     limits
     |> Map.merge(extra)
     |> Map.put(:native_per_second, System.convert_time_unit(1, :second, :native))
     |> Native.new()}
  rescue
    ArgumentError ->
      {:error, {:invalid_limits, Map.take(opts, FlameOn.Client.Options.limit_keys())}}
  end

  @doc """
  The core session option of `alloc: true` (`%{}` without it): the core
  reads each collection's young heap and heap fragments (`alloc: :heap`,
  the young heap alone, is what the core also takes: it would miss the
  large results a BIF builds in a fragment when the heap is full).
  """
  # The modes that trace calls: the VM builds terms of its own on the
  # traced process's heap for each call and return_to event, measured here
  # (OTP 25) at 4 words per event for a one-argument tail call and more for
  # calls with more arguments and body recursion; the core takes 4 words
  # off per event (FlameOn.Client.Core.Native.new/1).
  @alloc_event_words 4
  @spec alloc_option(map()) :: map()
  def alloc_option(%{alloc: true, mode: mode}) when mode in [:nif, :process],
    do: %{alloc: true, alloc_event_words: @alloc_event_words}

  def alloc_option(%{alloc: true}), do: %{alloc: true}
  def alloc_option(_opts), do: %{}

  @doc """
  The core session option `heap_levels` for `alloc: true`: each live
  process's young heap in use now (`heap_size + mbuf_size` of
  `:garbage_collection_info`, what a collection's trace event says), so
  that its first collection in the trace counts from here instead of only
  setting the level (`stats.alloc_unknown`). Read before the flags go on:
  what a process allocates in between is counted too.
  """
  @spec heap_levels([pid()]) :: map()
  def heap_levels(pids) do
    levels =
      for pid <- pids,
          node(pid) == node(),
          {:garbage_collection_info, info} <- [Process.info(pid, :garbage_collection_info)],
          do: {pid, Keyword.get(info, :heap_size, 0) + Keyword.get(info, :mbuf_size, 0)}

    %{heap_levels: levels}
  end

  @doc """
  Raises unless FlameOn can trace the calling process
  (`TraceBackend.check_tracee/1`). A process that only follows another
  cross-process trace (a message of that trace reached it) leaves it: it
  starts a trace of its own.
  """
  @spec ensure_untraced!() :: :ok
  def ensure_untraced! do
    case check_self() do
      :ok -> :ok
      {:error, reason} -> raise_start_error!(reason, "a trace")
    end
  end

  @doc """
  Whether the calling process is traced in a way that keeps FlameOn from
  tracing it (`TraceBackend.check_tracee/1`). The flags a tail trace of
  it left lingering (`FlameOn.Client.Node.TailHold`'s `linger_ms`) do
  not: the next tail trace takes them again, any other trace removes
  them first (`ensure_untraced!/0`).
  """
  @spec traced?() :: boolean()
  def traced?, do: self_state() == :traced

  @doc """
  `traced?/0` with what it read on the way: `:traced`, or `{:untraced,
  lingering}` with the calling process's lingering tail flags' state
  (`TailHold.lingering_self/0`, nil without a note of them), for
  `FlameOn.Client.Tracing.Tail.start/5`, which need not read it again.
  """
  @spec self_state() :: :traced | {:untraced, tuple() | nil}
  def self_state do
    case TailHold.lingering_self() do
      nil ->
        case TraceBackend.check_tracee(self()) do
          :ok ->
            {:untraced, nil}

          {:error, {:already_traced, {Native, {:tail, _, _} = state}}} ->
            untraced_unless_active(state, nil)

          _ ->
            :traced
        end

      # (the process dictionary's note: asking the VM costs 1 µs)
      state ->
        untraced_unless_active(state, state)
    end
  end

  defp untraced_unless_active(state, lingering),
    do: if(tail_active?(state), do: :traced, else: {:untraced, lingering})

  defp tail_active?(state), do: Native.tail_state(state) == :active

  @doc "Whether a call is traced, at `rate` (0.0 to 1.0): one random number."
  @spec sampled?(number()) :: boolean()
  def sampled?(rate) when rate >= 1, do: true
  def sampled?(rate) when rate <= 0, do: false
  def sampled?(rate), do: :rand.uniform() < rate

  @doc "`ensure_untraced!/0` as a result."
  @spec check_self() :: :ok | {:error, term()}
  def check_self, do: check_self(3)

  # Leaving a trace we follow may take more than one try: the trace's namer
  # may turn :garbage_collection on (OTP 27+, FlameOn.Client.Owners.Namer)
  # just as the flags go.
  defp check_self(leaves) do
    case TraceBackend.check_tracee(self()) do
      :ok ->
        :ok

      {:error, {:already_traced, {Native, {:tail, _, _} = state}}} = error ->
        if leaves > 0 and TailHold.unlinger(self(), state) == :ok,
          do: check_self(0),
          else: error

      {:error, {:already_traced, tracer}} = error ->
        if leaves > 0 and follower_only?(tracer) do
          TraceBackend.untrace_graph(self())
          :seq_trace.set_token([])
          check_self(leaves - 1)
        else
          error
        end
    end
  end

  defp follower_only?(tracer) do
    tracer in [{Native, :graph}, {:trace_session, :flame_on_client_graph}] and
      Native.graph_role(self()) != :root
  end

  @doc """
  The profile fields of a trace of `pid`; `given` may give its `:mode` and
  `:name` (nil: `opts`'s).
  """
  @spec fields(map(), pid() | nil, integer(), integer(), keyword()) :: keyword()
  def fields(opts, pid, started_ts, end_ts, given \\ []) do
    [
      trace_id: System.unique_integer([:positive, :monotonic]),
      name: given[:name] || opts.name,
      mode: given[:mode] || opts.mode,
      pid: pid,
      started_at: System.convert_time_unit(started_ts, :native, :microsecond),
      duration_us: System.convert_time_unit(end_ts - started_ts, :native, :microsecond)
    ]
  end

  @doc "A start error raised, in words that say what to do."
  @spec raise_start_error!(term(), String.t()) :: no_return()
  def raise_start_error!({:invalid_limits, limits}, _what) do
    raise ArgumentError,
          "limits out of range: #{inspect(limits)} (the NIF rejected them; " <>
            "each must be a positive integer no larger than its ceiling)"
  end

  def raise_start_error!({:already_traced, tracer}, _what) do
    raise ArgumentError,
          "the calling process is already traced by #{inspect(tracer)}; " <>
            "a process can have only one tracer"
  end

  def raise_start_error!({:call_tracing_in_use, what}, _what) do
    raise ArgumentError,
          "another tool is call tracing on this node (#{what}); FlameOn's call " <>
            "patterns would replace its patterns, so no trace starts until it stops " <>
            "(e.g. :dbg.stop/0), or use mode: :sample, which sets none"
  end

  def raise_start_error!({:tracing_in_use, what}, _what) do
    raise ArgumentError,
          "another tool is tracing on this node (#{what}); in the legacy trace session " <>
            "(OTP 25-26) a process has one tracer, and cross_process: true would take " <>
            "over any process that serves one of our requests, so no cross-process trace " <>
            "starts until it stops (on OTP 27+ our traces run in trace sessions of their own)"
  end

  def raise_start_error!({:system_tracer_taken, tracer}, _what) do
    raise ArgumentError,
          "cross_process: true needs the seq_trace system tracer, but " <>
            "#{inspect(tracer)} owns it (another tracing tool is running)"
  end

  def raise_start_error!({:breaker_open, reason}, _what) do
    raise "FlameOn: the circuit breaker is open (#{inspect(reason)}): no new traces " <>
            "start until memory falls back (see FlameOn.Client.Options, :breaker)"
  end

  def raise_start_error!(reason, what),
    do: raise("FlameOn: could not start #{what}: #{inspect(reason)}")
end
