defmodule FlameOn.Client.NextCallStacksTest do
  # How a captured process's stacks come to start at the captured
  # function: the session's "caller;function" start, sampled stacks that
  # hold the frames outside the call, stacks the sampler already trimmed or
  # that the VM cut, status roots, and the samples beside the times.
  use ExUnit.Case, async: true

  alias FlameOn.Client.NextCall.Stacks
  alias FlameOn.Client.Profile

  @root {MyApp.Orders, :checkout, 2}
  @caller {MyApp.Web, :handle, 1}

  defp pid, do: :c.pid(0, 4242, 0)
  defp other, do: :c.pid(0, 4243, 0)

  defp profile(stacks, samples \\ []) do
    %Profile{stacks: %{pid() => stacks, other() => [{"x;y", 5}]}, samples: %{pid() => samples}}
  end

  defp rewrite(profile, caller \\ @caller), do: Stacks.rewrite(profile, pid(), @root, caller)

  test "exact stacks: the caller the session started from goes, the function is the root" do
    p =
      rewrite(
        profile([
          {"MyApp.Web.handle/1;MyApp.Orders.checkout/2", 10},
          {"MyApp.Web.handle/1;MyApp.Orders.checkout/2;Repo.insert/1", 30},
          # after a tail call from checkout/2 to finish/1
          {"MyApp.Web.handle/1;MyApp.Orders.finish/1", 20},
          # the instant between the return and the stop
          {"MyApp.Web.handle/1", 1}
        ])
      )

    assert p.stacks[pid()] == [
             {"MyApp.Orders.checkout/2", 11},
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1", 20},
             {"MyApp.Orders.checkout/2;Repo.insert/1", 30}
           ]

    # other processes are not the capture's
    assert p.stacks[other()] == [{"x;y", 5}]
  end

  test "sampled stacks: the frames outside the call go, up to the caller's innermost frame on them all" do
    # the caller is itself recursive below the call: the boundary is the
    # innermost handle/1 the samples share, not the first one
    outer = "proc_lib:init_p/3;MyApp.Web.handle/1;MyApp.Web.handle/1"

    p =
      rewrite(
        profile(
          [
            {"MyApp.Web.handle/1;MyApp.Orders.checkout/2", 3},
            {outer <> ";MyApp.Orders.finish/1;Repo.insert/1", 40},
            {outer <> ";MyApp.Orders.finish/1;Repo.insert/1;SLEEP", 15},
            {outer <> ";MyApp.Orders.finish/1", 20}
          ],
          [
            {outer <> ";MyApp.Orders.finish/1;Repo.insert/1", 4, 100},
            {outer <> ";MyApp.Orders.finish/1", 2, 50}
          ]
        )
      )

    assert p.stacks[pid()] == [
             {"MyApp.Orders.checkout/2", 3},
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1", 20},
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1;Repo.insert/1", 40},
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1;Repo.insert/1;SLEEP", 15}
           ]

    assert p.samples[pid()] == [
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1", 2, 50},
             {"MyApp.Orders.checkout/2;MyApp.Orders.finish/1;Repo.insert/1", 4, 100}
           ]
  end

  test "stacks the sampler trimmed at the function stay; a stack the VM cut gets the function as root" do
    p =
      rewrite(
        profile([
          {"MyApp.Orders.checkout/2;Repo.insert/1", 7},
          {"…;deep/1;deeper/1", 9}
        ])
      )

    assert p.stacks[pid()] == [
             {"MyApp.Orders.checkout/2;Repo.insert/1", 7},
             {"MyApp.Orders.checkout/2;…;deep/1;deeper/1", 9}
           ]
  end

  test "status roots (split_status) stay first; the same stack from two paths is merged" do
    p =
      rewrite(
        profile([
          {"[running];proc_lib:init_p/3;MyApp.Web.handle/1;Repo.insert/1", 5},
          {"[waiting];proc_lib:init_p/3;MyApp.Web.handle/1;Repo.insert/1;SLEEP", 6},
          {"[running];MyApp.Orders.checkout/2;Repo.insert/1", 2}
        ])
      )

    assert p.stacks[pid()] == [
             {"[running];MyApp.Orders.checkout/2;Repo.insert/1", 7},
             {"[waiting];MyApp.Orders.checkout/2;Repo.insert/1;SLEEP", 6}
           ]
  end

  test "an unknown caller cuts nothing it cannot place" do
    full = "proc_lib:init_p/3;MyApp.Orders.finish/1"
    p = rewrite(profile([{full, 4}, {"", 1}]), nil)
    assert p.stacks[pid()] == [{"", 1}, {full, 4}]
  end
end
