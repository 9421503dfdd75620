defmodule FlameOn.Client.Options.Cache do
  @moduledoc false
  # Checked options of an entry point called per request (trace/3), kept
  # by the raw option list, so that a call with options checked before
  # pays a :persistent_term read (the list hashed) instead of the checks.
  #
  # A :persistent_term entry is never replaced or erased (either makes the
  # VM scan every process's heap): the cache only grows, up to `@max`
  # entries node-wide, and once full a new option list is checked on every
  # call, as with no cache. Call sites pass the same few lists (a literal
  # each), so a node needs a handful; lists made per call (a pid in a
  # shipper's options) fill it, and are then checked per call.
  #
  # One put at a time (a lock in the counter's atomics; a put that finds
  # it taken gives up: the next call puts), so no key is written twice.
  # The counter is made when the application starts (`init/0`); before,
  # nothing is kept.

  @max 128
  @count_key {__MODULE__, :count}
  # the counter's slots
  @count 1
  @lock 2

  @doc "Makes the cache's counter (the application's start; kept over restarts)."
  @spec init() :: :ok
  def init do
    if :persistent_term.get(@count_key, nil) == nil,
      do: :persistent_term.put(@count_key, :atomics.new(2, signed: false))

    :ok
  end

  @doc "What `put/2` kept under `key`, or nil."
  @spec get(term()) :: term() | nil
  def get(key), do: :persistent_term.get({__MODULE__, key}, nil)

  @doc """
  Keeps `value` (not nil) under `key` unless the cache has it already, is
  full, or another process is putting.
  """
  @spec put(term(), term()) :: :ok
  def put(key, value) when value != nil do
    full_key = {__MODULE__, key}

    with count when count != nil <- :persistent_term.get(@count_key, nil),
         :ok <- :atomics.compare_exchange(count, @lock, 0, 1) do
      try do
        if :persistent_term.get(full_key, nil) == nil and :atomics.get(count, @count) < @max do
          :atomics.add(count, @count, 1)
          :persistent_term.put(full_key, value)
        end
      after
        :atomics.put(count, @lock, 0)
      end
    end

    :ok
  end

  @doc "How many entries the cache holds, and the most it takes."
  @spec size() :: {non_neg_integer(), pos_integer()}
  def size do
    case :persistent_term.get(@count_key, nil) do
      nil -> {0, @max}
      count -> {:atomics.get(count, @count), @max}
    end
  end
end
