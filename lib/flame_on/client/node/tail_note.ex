defmodule FlameOn.Client.Node.TailNote do
  @moduledoc false
  # A process's own note of its tail flags (FlameOn.Client.Node.TailHold),
  # and taking lingering tail flags back. Apart from TailHold so that
  # FlameOn.Client.Node.TraceBackend can take them back without depending
  # on the hold, which sets flags through TraceBackend.

  alias FlameOn.Client.Core.Native

  # A tail trace's flags (FlameOn.Client.Tracing.Tail; the hold sets them
  # too): its time slices, its collections (their time exact, as in mode
  # :native) and its messages (a slice after one left a wait: a
  # collection before its first sample is not the wait's).
  @flags [:running, :garbage_collection, :receive]

  @doc "The trace flags of a tail trace (Tail, TailHold and this module set and clear them)."
  @spec flags() :: [atom()]
  def flags, do: @flags

  # The calling process's tail state and its flags (the trace field of
  # Process.info/2) while a tail trace of it runs or lingers: asking the
  # VM for a process's tracer (erlang:trace_info/2) costs about 1 µs, the
  # process dictionary and its own flags 0.06 µs.
  @self_key {__MODULE__, :state}

  @doc """
  Notes that the calling process's tail flags are on with `state` (a
  tail trace of it starts): `lingering_self/0` knows them.
  """
  @spec note_self(tuple()) :: :ok
  def note_self(state) do
    {:trace, mask} = Process.info(self(), :trace)
    Process.put(@self_key, {state, mask})
    :ok
  end

  @doc """
  Notes that a tail trace without flags of the calling process starts
  with `state` (as `note_self/1`, for a process with no flags: one
  process dictionary write).
  """
  @spec note_flagless_self(tuple()) :: :ok
  def note_flagless_self(state) do
    Process.put(@self_key, {state, 0})
    :ok
  end

  @doc "The calling process's tail flags went off."
  @spec forget_self() :: :ok
  def forget_self do
    Process.delete(@self_key)
    :ok
  end

  @doc """
  The tail state of the calling process's flags, if they are those of
  its last tail trace (running or lingering since; the flags the same),
  else nil.
  """
  @spec lingering_self() :: tuple() | nil
  def lingering_self do
    case Process.get(@self_key) do
      {state, mask} -> if Process.info(self(), :trace) == {:trace, mask}, do: state
      nil -> nil
    end
  end

  @doc """
  Takes back the lingering tail flags of `pid` (`state`: its tracer
  state): `:ok` once they are off (or were not there), `{:error, :active}`
  when `pid` traces a request with them, `{:error, :busy}` when another
  process is removing them and has not finished within a second.
  """
  @spec unlinger(pid(), tuple()) :: :ok | {:error, :active | :busy}
  def unlinger(pid, state), do: unlinger(pid, state, 1_000)

  defp unlinger(pid, state, wait_ms) do
    case Native.tail_claim(state) do
      :ok ->
        remove_flags(pid, state)
        Native.tail_release(state)
        if pid == self(), do: forget_self()
        :ok

      :gone ->
        :ok

      :active ->
        {:error, :active}

      :busy ->
        if await(state, wait_ms), do: :ok, else: {:error, :busy}
    end
  end

  @doc """
  Waits up to `wait_ms` while another process removes the lingering
  flags of `state` (`Native.tail_claim/1` answered `:busy`): whether they
  are off.
  """
  @spec await(tuple(), non_neg_integer()) :: boolean()
  def await(state, wait_ms) do
    deadline = System.monotonic_time(:millisecond) + wait_ms
    await_loop(state, deadline, 0)
  end

  defp await_loop(state, deadline, spins) do
    cond do
      Native.tail_state(state) != :claimed ->
        true

      System.monotonic_time(:millisecond) >= deadline ->
        false

      spins < 100 ->
        :erlang.yield()
        await_loop(state, deadline, spins + 1)

      true ->
        Process.sleep(1)
        await_loop(state, deadline, spins)
    end
  end

  @doc """
  Takes off `pid`'s tail flags if they are still those of `state` (a
  claimed entry's).
  """
  @spec remove_flags(pid(), tuple()) :: :ok | non_neg_integer()
  def remove_flags(pid, state) do
    if :erlang.trace_info(pid, :tracer) == {:tracer, {Native, state}},
      do: :erlang.trace(pid, false, @flags)
  rescue
    # it exited meanwhile
    ArgumentError -> :ok
  end
end
