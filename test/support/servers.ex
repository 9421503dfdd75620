defmodule FlameOn.Client.Test.Server do
  @moduledoc false
  # A GenServer for cross-process tests: each request says what to do, so
  # one module plays every role (leaf, middle hop, crasher, slow replier).
  use GenServer

  def start(opts \\ []), do: GenServer.start(__MODULE__, opts)

  @impl true
  def init(opts), do: {:ok, opts}

  @impl true
  def handle_call({:spin, ms}, _from, state), do: {:reply, spin_until(deadline(ms)), state}

  # Does `request` once this process has trace flags of ours (or after
  # 5 s without): a process called from another node gets its flags from
  # its node's part a moment after it took the request, later on a loaded
  # machine; a test that looks at its work makes it wait for them.
  def handle_call({:when_flagged, request}, from, state) do
    wait_flagged(System.monotonic_time(:millisecond) + 5_000)
    handle_call(request, from, state)
  end

  # Builds a list of n integers (2n heap words) and replies its length.
  def handle_call({:build, n}, _from, state), do: {:reply, length(build(n, [])), state}

  # A recursion (fib(n)), then a sort of m integers: two phases whose
  # frames stay on the stack while they run.
  def handle_call({:recurse_then_sort, n, m}, _from, state),
    do: {:reply, {recurse_phase(n), sort_phase(m)}, state}

  def handle_call({:sleep, ms}, _from, state) do
    Process.sleep(ms)
    {:reply, :slept, state}
  end

  # Waits sleep_ms, then works spin_ms.
  def handle_call({:sleep_spin, sleep_ms, spin_ms}, _from, state) do
    Process.sleep(sleep_ms)
    {:reply, spin_until(deadline(spin_ms)), state}
  end

  # Works ms itself, then forwards `next` to `server` and replies with its answer.
  def handle_call({:forward, ms, server, next}, _from, state) do
    spin_until(deadline(ms))
    {:reply, {:forwarded, GenServer.call(server, next)}, state}
  end

  # Replies without a seq_trace token, as a server whose token was cleared
  # by a tokenless message would: the caller's token is cleared with it.
  def handle_call(:drop_token, _from, state) do
    :seq_trace.set_token([])
    {:reply, :dropped, state}
  end

  def handle_call({:crash, ms}, _from, _state) do
    spin_until(deadline(ms))
    raise "crash on purpose"
  end

  defp recurse_phase(n), do: {:ok, fib(n)}
  defp fib(n) when n < 2, do: n
  defp fib(n), do: fib(n - 1) + fib(n - 2)

  defp sort_phase(m),
    do: {:ok, 1..m |> Enum.map(&rem(&1 * 7919, 10_007)) |> Enum.sort() |> length()}

  defp build(0, acc), do: acc
  defp build(n, acc), do: build(n - 1, [n | acc])

  defp deadline(ms), do: System.monotonic_time(:microsecond) + ms * 1000

  defp wait_flagged(until_ms) do
    if FlameOn.Client.TestHelpers.our_flags(self()) == [] and
         System.monotonic_time(:millisecond) < until_ms do
      Process.sleep(1)
      wait_flagged(until_ms)
    end
  end

  defp spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline), else: :done
  end
end

defmodule FlameOn.Client.Test.Delegator do
  @moduledoc false
  # Replies from another process: handle_call hands `from` to a worker.
  use GenServer

  def start, do: GenServer.start(__MODULE__, nil)

  @impl true
  def init(state), do: {:ok, state}

  @impl true
  def handle_call({:delegate, ms}, from, state) do
    spawn(fn ->
      Process.sleep(ms)
      GenServer.reply(from, :delegated)
    end)

    {:noreply, state}
  end
end
