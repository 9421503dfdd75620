defmodule FlameOn.Client.Node.Gates do
  @moduledoc false
  # Owner of the one-function meta patterns of `FlameOn.Client.capture_next/2`.
  #
  # Captures work in the legacy trace session on every release (set through
  # `FlameOn.Client.Node.TraceBackend.legacy/1`): the gate is the function's meta
  # tracer and the match spec turns tracing on in the caller with the
  # capture's own tracer, which a trace session (one tracer per session)
  # cannot express without the NIF routing the gate's events.
  #
  # A capture waiting for the next call of `{m, f, a}` sets one **meta** call
  # pattern on that function, whose meta tracer is the NIF's gate
  # (`{:meta, FlameOn.Client.Core.Native, {:next, gate}}`, see
  # `FlameOn.Client.Core.Native`). Nothing else on the node gets a pattern, and
  # meta patterns are apart from the local patterns of exact traces
  # (`FlameOn.Client.Node.Patterns`): setting or clearing `{:_, :_, :_}` local
  # patterns leaves a meta pattern as it is, and clearing a meta pattern
  # leaves the function's local pattern as it is, in either order.
  #
  # This server:
  #
  #   * sets the pattern for the calling process (`arm/3`), refusing a
  #     function that another capture waits on, or that another tool
  #     meta-traces (one meta tracer per function);
  #   * clears it when the call fired (`disarm/0`), when the capture ends
  #     (`done/0`), or when the capturing process dies, and then also stops
  #     the capture's core session and turns tracing off in the process whose
  #     call was being captured;
  #   * remembers the armed functions in a persistent term, so
  #     that `sweep/0` finds them even when every process of ours died:
  #     `FlameOn.Client.Node.Sweep` runs it, and so does this server when it
  #     starts and terminates. A pattern is swept only when its meta tracer
  #     is ours.
  #
  # Started by `FlameOn.Client.Application`; captures call it, user code does
  # not.

  use GenServer

  require Logger

  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.TraceBackend

  @armed_key {__MODULE__, :armed}
  @call_timeout 60_000

  @typedoc "What to undo if the capturing process dies."
  @type cleanup :: %{
          required(:native) => Native.session(),
          required(:flags) => list(),
          optional(:graph_owner) => pid() | nil
        }

  @doc false
  @spec start_link(keyword()) :: GenServer.on_start()
  def start_link(_opts \\ []), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Sets the meta pattern with `match_spec` on `mfa`, its meta tracer the
  gate `gate`, for the calling process. Returns `{:error, {:already_waiting,
  pid}}` when another capture waits on `mfa`, `{:error, {:meta_traced,
  tracer}}` when another tool meta-traces it and `{:error, :not_traceable}`
  when the VM sets no pattern (the module is not loaded, or the function
  does not exist).
  """
  @spec arm(mfa(), reference(), list(), cleanup()) :: :ok | {:error, term()}
  def arm({m, f, a} = mfa, gate, match_spec, cleanup)
      when is_atom(m) and is_atom(f) and is_integer(a) and is_list(match_spec) do
    GenServer.call(__MODULE__, {:arm, mfa, gate, match_spec, cleanup}, @call_timeout)
  end

  @doc """
  Clears the calling process's pattern on `mfa` (its call fired); cleanup
  stays armed until `done/0`. The pattern is cleared right here, in the
  caller (a capture raises its priority while it runs): the other callers
  of the function stop paying its breakpoint without waiting for this
  server's turn on a busy node.
  """
  @spec disarm(mfa()) :: :ok
  def disarm(mfa) do
    clear_if_ours(mfa)
    GenServer.call(__MODULE__, :disarm, @call_timeout)
  end

  @doc "The calling process's capture is over: its pattern is cleared and it is forgotten."
  @spec done() :: :ok
  def done, do: GenServer.call(__MODULE__, :done, @call_timeout)

  @doc "The captures waiting now: `[{mfa, pid}]`."
  @spec waiting() :: [{mfa(), pid()}]
  def waiting, do: GenServer.call(__MODULE__, :waiting, @call_timeout)

  @doc """
  Clears every meta pattern of ours that the persistent term says
  may be set, whoever set it. Returns how many it cleared.
  """
  @spec sweep() :: non_neg_integer()
  def sweep do
    # A persistent term, not the application environment: this runs in
    # the application's stop/1 too, where nothing may wait on the
    # application controller.
    case :persistent_term.get(@armed_key, nil) do
      nil ->
        0

      mfas ->
        cleared = Enum.count(mfas, &clear_if_ours/1)
        :persistent_term.erase(@armed_key)
        cleared
    end
  end

  @doc "Whether `mfa`'s meta pattern is one of ours (a capture's gate)."
  @spec ours?(mfa()) :: boolean()
  def ours?(mfa) do
    match?(
      {:meta, {Native, {:next, _gate}}},
      TraceBackend.info(TraceBackend.legacy(), mfa, :meta)
    )
  end

  # --- server ---------------------------------------------------------------

  @impl GenServer
  def init(:ok) do
    Process.flag(:trap_exit, true)

    case sweep() do
      0 -> :ok
      n -> Logger.warning("FlameOn: cleared #{n} capture_next pattern(s) a previous owner left")
    end

    {:ok, %{captures: %{}, by_mfa: %{}}}
  end

  @impl GenServer
  def handle_call({:arm, mfa, gate, match_spec, cleanup}, {pid, _tag}, state) do
    cond do
      Map.has_key?(state.captures, pid) ->
        {:reply, {:error, :already_capturing}, state}

      waiting = state.by_mfa[mfa] ->
        {:reply, {:error, {:already_waiting, waiting}}, state}

      true ->
        case set(mfa, gate, match_spec) do
          :ok ->
            capture = %{
              ref: Process.monitor(pid),
              mfa: mfa,
              gate: gate,
              armed: true,
              cleanup: cleanup
            }

            state = %{
              state
              | captures: Map.put(state.captures, pid, capture),
                by_mfa: Map.put(state.by_mfa, mfa, pid)
            }

            {:reply, :ok, state}

          {:error, _} = error ->
            {:reply, error, state}
        end
    end
  end

  def handle_call(:disarm, {pid, _tag}, state) do
    {:reply, :ok, unarm(state, pid)}
  end

  def handle_call(:done, {pid, _tag}, state) do
    state = unarm(state, pid)

    case Map.pop(state.captures, pid) do
      {nil, _} ->
        {:reply, :ok, state}

      {capture, captures} ->
        Process.demonitor(capture.ref, [:flush])
        {:reply, :ok, %{state | captures: captures}}
    end
  end

  def handle_call(:waiting, _from, state) do
    {:reply, Enum.sort(state.by_mfa), state}
  end

  @impl GenServer
  def handle_info({:DOWN, ref, :process, pid, _reason}, %{captures: captures} = state) do
    case captures do
      %{^pid => %{ref: ^ref} = capture} ->
        state = unarm(state, pid)
        abandon(capture)
        {:noreply, %{state | captures: Map.delete(state.captures, pid)}}

      _ ->
        {:noreply, state}
    end
  end

  def handle_info(_msg, state), do: {:noreply, state}

  @impl GenServer
  def terminate(_reason, state) do
    Enum.each(state.captures, fn {_pid, capture} -> abandon(capture) end)
    sweep()
    :ok
  end

  # --- internals --------------------------------------------------------------

  defp set(mfa, gate, match_spec) do
    case TraceBackend.info(TraceBackend.legacy(), mfa, :meta) do
      {:meta, false} -> put(mfa, gate, match_spec)
      # a function with another kind of breakpoint (a local call pattern)
      {:meta, []} -> put(mfa, gate, match_spec)
      # ours, and nobody's now (this server knows every live capture)
      {:meta, {Native, {:next, _}}} -> put(mfa, gate, match_spec)
      {:meta, tracer} when tracer != :undefined -> {:error, {:meta_traced, tracer}}
      _ -> {:error, :not_traceable}
    end
  end

  # Remembered first: a crash between the two still leaves it findable.
  defp put(mfa, gate, match_spec) do
    remember(mfa)

    case TraceBackend.pattern(TraceBackend.legacy(), mfa, match_spec, [
           {:meta, Native, {:next, gate}}
         ]) do
      0 ->
        forget(mfa)
        {:error, :not_traceable}

      _ ->
        :ok
    end
  end

  defp unarm(%{captures: captures} = state, pid) do
    case captures do
      %{^pid => %{armed: true, mfa: mfa} = capture} ->
        clear_if_ours(mfa)
        forget(mfa)

        %{
          state
          | captures: Map.put(captures, pid, %{capture | armed: false}),
            by_mfa: Map.delete(state.by_mfa, mfa)
        }

      _ ->
        state
    end
  end

  # The capturing process died: nobody will finish its trace. Its core session
  # takes no more events, its cross-process owner stops, and the process whose call
  # it captured (if any) is untraced.
  defp abandon(%{gate: gate, cleanup: cleanup}) do
    Native.next_cancel(gate)
    Native.stop(cleanup.native)

    case Native.next_state(gate) do
      {_phase, winner} -> untrace(winner, cleanup.flags)
      _ -> :ok
    end

    # (An exit signal would not do: the owner traps exits and takes one
    # from any process but its supervisor as a message.) Apart, so this
    # server does not wait for it.
    case cleanup[:graph_owner] do
      nil -> :ok
      owner -> spawn(fn -> stop(owner) end)
    end
  end

  defp stop(owner) do
    GenServer.stop(owner, :shutdown, 5_000)
  catch
    :exit, _ -> :ok
  end

  @doc false
  # Turns the capture's flags off on `pid` if its tracer is still ours.
  @spec untrace(pid(), list()) :: :ok
  def untrace(pid, [{:tracer, Native, tracer_state} | flags]) do
    handle = TraceBackend.legacy({Native, tracer_state})

    # only while its tracer is still the capture's (untrace/3 also takes a
    # process with no live tracer; a capture's process always has one)
    case TraceBackend.tracer(handle, pid) do
      {:ok, {Native, ^tracer_state}} -> TraceBackend.untrace(handle, pid, flags)
      _ -> :ok
    end
  end

  defp clear_if_ours(mfa) do
    if ours?(mfa) do
      TraceBackend.pattern(TraceBackend.legacy(), mfa, false, [:meta])
      true
    else
      false
    end
  end

  defp remember(mfa) do
    mfas = :persistent_term.get(@armed_key, [])
    if mfa not in mfas, do: :persistent_term.put(@armed_key, [mfa | mfas])
  end

  defp forget(mfa) do
    before = :persistent_term.get(@armed_key, [])

    case before -- [mfa] do
      ^before -> :ok
      [] -> :persistent_term.erase(@armed_key)
      mfas -> :persistent_term.put(@armed_key, mfas)
    end
  end
end
