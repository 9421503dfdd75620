defmodule FlameOn.Client.Test.ClusterPeer do
  @moduledoc false
  # Helpers that cluster_test.exs runs on its peers over :erpc (test/support
  # is compiled, so the peers have it on their code paths).

  def leftovers(timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout
    wait(deadline)
  end

  defp wait(deadline) do
    case FlameOn.Client.TestHelpers.leftovers() do
      [] ->
        []

      problems ->
        if System.monotonic_time(:millisecond) >= deadline,
          do: problems,
          else: (Process.sleep(10) && false) || wait(deadline)
    end
  end

  # This node's backtrace_depth, read without setting it: the frames a
  # stack trace 100 calls deep keeps (two call sites alternate: the VM
  # records a run of one return address once).
  def backtrace_depth do
    deep(100)
    receive do: ({:frames, n} -> n)
  end

  defp deep(0) do
    {:current_stacktrace, frames} = Process.info(self(), :current_stacktrace)
    send(self(), {:frames, length(frames)})
    0
  end

  defp deep(n) when rem(n, 2) == 0, do: 1 + deep(n - 1)
  defp deep(n), do: 2 + deep(n - 1)

  def parts do
    FlameOn.Client.OwnerSupervisor
    |> DynamicSupervisor.which_children()
    |> Enum.count(fn {_, _, _, [mod]} -> mod == FlameOn.Client.Owners.CrossProcess end)
  end
end

defmodule FlameOn.Client.Test.RemoteWorker do
  @moduledoc false
  # A process outside any OTP behaviour, for plain messages (on this node
  # in wake_test, across nodes in cluster_test): {:job, from, ms} makes it
  # spin ms and answer {:done, self()}.

  def start, do: spawn(fn -> loop() end)

  defp loop do
    receive do
      {:job, from, ms} ->
        spin(ms)
        send(from, {:done, self()})

      :stop ->
        exit(:normal)

      _other ->
        :ok
    end

    loop()
  end

  # A fun for Node.spawn/2: ms of work, then :done to `to`.
  def teller(to, ms) do
    fn ->
      spin(ms)
      send(to, :done)
    end
  end

  # A process that works ms and exits (started outside any trace).
  def start_ending(ms), do: spawn(fn -> spin(ms) end)

  # ms of work on a CPU, then :done
  def spin(ms), do: spin_until(System.monotonic_time(:microsecond) + ms * 1000)

  defp spin_until(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin_until(deadline), else: :done
  end
end
