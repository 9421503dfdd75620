defmodule FlameOn.Client.Node.Breaker do
  @moduledoc false
  # The circuit breaker in front of every new trace.
  #
  # A profiler must not be what takes a node down. Before a trace starts,
  # `check/0` compares the memory held by all live trace sessions (their C
  # tables, `FlameOn.Client.Core.Native.session_bytes/0`) and, if configured, the
  # whole node's memory (`:erlang.memory(:total)`) with their limits. Past a
  # limit the breaker **opens**: new traces do not start (`profile/2` raises,
  # `trace/3` runs the function untraced) until the figure falls below
  # `resume_ratio` of the limit (hysteresis, so it does not flap). Traces
  # already running are not touched: each is bounded by its own limits.
  #
  # Configuration (`config :flame_on_client, :breaker, [...]`), with defaults:
  #
  #   * `:max_sessions_memory_mb` (`512`) – all live sessions together.
  #   * `:max_node_memory_mb` (`nil`, off) – the node's total memory.
  #   * `:resume_ratio` (`0.8`) – the breaker closes again below this share
  #     of the limit that opened it.
  #
  # The state is visible in `FlameOn.Client.status/0`.
  #
  #     iex> FlameOn.Client.Node.Breaker.check()
  #     :ok

  @key {__MODULE__, :open}

  @type reason ::
          {:sessions_memory | :node_memory, bytes :: non_neg_integer(), limit :: pos_integer()}

  @doc """
  `:ok` when a new trace may start, `{:error, {:breaker_open, reason}}`
  when not. Opens or closes the breaker as the figures say.
  """
  @spec check() :: :ok | {:error, {:breaker_open, reason()}}
  def check do
    config = config()

    readings = [
      {:sessions_memory, FlameOn.Client.Core.Native.session_bytes(),
       mb(config[:max_sessions_memory_mb])},
      # :erlang.memory/1 walks every allocator (hundreds of µs): only when
      # a node limit is set
      {:node_memory, node_memory(config[:max_node_memory_mb]), mb(config[:max_node_memory_mb])}
    ]

    case {state(), over(readings, 1.0)} do
      {nil, nil} ->
        :ok

      {nil, reason} ->
        open(reason)

      {open_reason, _} ->
        # Closes only once every figure is under resume_ratio of its limit.
        case over(readings, config[:resume_ratio]) do
          nil -> close()
          _still_high -> {:error, {:breaker_open, open_reason}}
        end
    end
  end

  @doc """
  `check/0` for work that starts no session (a kept tail request's copy,
  `FlameOn.Client.Tracing.Tail`): an open breaker is checked again (it may
  close now), a closed one is only read. Such work adds nothing to the
  sessions' memory; the node's memory it adds to is bounded by the trace
  store, and the next trace that starts a session reads the figures.
  """
  @spec check_sessionless() :: :ok | {:error, {:breaker_open, reason()}}
  def check_sessionless, do: if(state() == nil, do: :ok, else: check())

  @doc "The breaker's state: `:closed` or `{:open, reason}`."
  @spec state() :: reason() | nil
  def state, do: :persistent_term.get(@key, nil)

  @doc "The breaker's configuration, defaults filled in."
  @spec config() :: keyword()
  def config, do: FlameOn.Client.Options.Config.breaker()

  defp node_memory(nil), do: 0
  defp node_memory(_limit), do: :erlang.memory(:total)

  defp over(readings, ratio) do
    Enum.find_value(readings, fn
      {_what, _bytes, nil} -> nil
      {what, bytes, limit} -> if bytes > limit * ratio, do: {what, bytes, limit}
    end)
  end

  defp open(reason) do
    # persistent_term: read on every trace start, written only when the
    # breaker changes state.
    :persistent_term.put(@key, reason)
    {:error, {:breaker_open, reason}}
  end

  defp close do
    :persistent_term.erase(@key)
    :ok
  end

  defp mb(nil), do: nil
  defp mb(megabytes) when is_number(megabytes) and megabytes > 0, do: trunc(megabytes * 1_048_576)
end
