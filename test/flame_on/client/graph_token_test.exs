defmodule FlameOn.Client.GraphTokenTest do
  # Tracing is node-global (patterns, flags, the seq_trace system tracer).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client
  alias FlameOn.Client.Test.Server

  setup do
    assert_node_clean()
    on_exit(fn -> assert_node_clean() end)
    :ok
  end

  # A process takes the seq_trace token of each message it receives, so a
  # root that gets a plain message from a process of another trace (a
  # notification, a broadcast, another test) holds that trace's label;
  # its next request must still go to its own trace.
  test "a root that received another trace's token still sends its requests in its own trace" do
    {:ok, server} = Server.start()

    for mode <- [:nif, :process] do
      a = self()

      {b_pid, b_ref} =
        spawn_monitor(fn ->
          {b_label, profile} =
            Client.profile(
              fn ->
                receive do: (:go -> :ok)
                label = :seq_trace.get_token(:label)
                send(a, {:from_b, self()})
                receive do: (:done -> :ok)
                label
              end,
              cross_process: true,
              mode: mode
            )

          send(a, {:b_profile, b_label, profile})
        end)

      {a_label, profile_a} =
        Client.profile(
          fn ->
            # A timer message leaves b's own token in place.
            :erlang.send_after(0, b_pid, :go)
            receive do: ({:from_b, ^b_pid} -> :ok)
            a_label = :seq_trace.get_token(:label)
            GenServer.call(server, {:spin, 5})
            a_label
          end,
          cross_process: true,
          mode: mode
        )

      send(b_pid, :done)
      assert_receive {:b_profile, b_label, profile_b}, 5_000
      assert_receive {:DOWN, ^b_ref, :process, ^b_pid, :normal}

      # The premise: b kept its own label, and a took it with b's message.
      assert b_label == {:label, profile_b.trace_id}
      assert a_label == b_label

      assert Enum.any?(profile_a.graph.spans, &(&1.pid == server)),
             "#{mode}: a's call was not followed in a's trace"

      assert Map.has_key?(profile_a.stacks, server)

      refute Enum.any?(profile_b.graph.spans, &(&1.pid == server)),
             "#{mode}: a's call went to b's trace"

      refute Map.has_key?(profile_b.stacks, server)
    end
  end
end
