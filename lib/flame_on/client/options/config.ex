defmodule FlameOn.Client.Options.Config do
  @moduledoc false
  # The application environment's own settings (see FlameOn.Client.Options,
  # "Application environment"): the breaker, the trace store, the sample
  # budget, each with its defaults and checked when read. A leaf: the
  # modules that read them depend on nothing else of the options.

  @breaker [max_sessions_memory_mb: 512, max_node_memory_mb: nil, resume_ratio: 0.8]
  @trace_store [max_traces: 50, max_memory_mb: 64]
  @sample_budget 2_000

  @doc "`config :flame_on_client, :breaker`, with its defaults."
  @spec breaker() :: keyword()
  def breaker do
    config = Keyword.merge(@breaker, Application.get_env(:flame_on_client, :breaker, []))

    unless Keyword.keyword?(config) and Enum.all?(config, &breaker_value?/1) do
      raise ArgumentError,
            "config :flame_on_client, :breaker: expected max_sessions_memory_mb and " <>
              "max_node_memory_mb: positive numbers (or nil), resume_ratio: a number " <>
              "from 0 to 1, got: #{inspect(config)}"
    end

    config
  end

  defp breaker_value?({:resume_ratio, r}), do: is_number(r) and r > 0 and r <= 1

  defp breaker_value?({key, mb}) when key in [:max_sessions_memory_mb, :max_node_memory_mb],
    do: mb == nil or (is_number(mb) and mb > 0)

  defp breaker_value?(_), do: false

  @doc "`config :flame_on_client, :trace_store`, with its defaults."
  @spec trace_store() :: keyword()
  def trace_store do
    config = Keyword.merge(@trace_store, Application.get_env(:flame_on_client, :trace_store, []))
    max_traces = config[:max_traces]
    max_mb = config[:max_memory_mb]

    unless is_integer(max_traces) and max_traces >= 0 and is_number(max_mb) and max_mb > 0 do
      raise ArgumentError,
            "config :flame_on_client, :trace_store: expected max_traces: a non-negative " <>
              "integer and max_memory_mb: a positive number, got: #{inspect(config)}"
    end

    config
  end

  @doc "`config :flame_on_client, :sample_budget` (samples a second, or `:infinity`)."
  @spec sample_budget() :: pos_integer() | :infinity
  def sample_budget do
    case Application.get_env(:flame_on_client, :sample_budget, @sample_budget) do
      n when is_integer(n) and n > 0 ->
        n

      :infinity ->
        :infinity

      other ->
        raise ArgumentError,
              "config :flame_on_client, :sample_budget must be a positive integer " <>
                "(samples per second) or :infinity, got: #{inspect(other)}"
    end
  end
end
