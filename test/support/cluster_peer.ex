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

  def parts do
    FlameOn.Client.SessionSupervisor
    |> DynamicSupervisor.which_children()
    |> Enum.count(fn {_, _, _, [mod]} -> mod == FlameOn.Client.Cluster.Part end)
  end
end
