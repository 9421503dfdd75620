defmodule FlameOn.Client.RuntimeTest do
  # The public entry points start the :flame_on_client application when it
  # is not running (a release's `bin/app eval`), instead of exiting with
  # `no process` from a call deep inside. The application is stopped here
  # and always started again: every other test needs it.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Test.Workloads

  setup do
    ensure_app_started()

    on_exit(fn ->
      ensure_app_started()
      assert_node_clean()
    end)
  end

  defp stop_app do
    :ok = Application.stop(:flame_on_client)
    refute Process.whereis(FlameOn.Client.Supervisor)
    refute running?()
  end

  defp running? do
    List.keymember?(Application.started_applications(), :flame_on_client, 0)
  end

  test "profile/2 starts the application" do
    stop_app()
    {55, profile} = FlameOn.Client.profile(fn -> Workloads.fib(10) end)
    assert running?()
    assert Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "fib/1" end)
  end

  test "trace/3, start_trace/2, summary/2, status/0 and Web.start/1 start it too" do
    stop_app()
    assert FlameOn.Client.trace("eval", fn -> :done end, mode: :sample) == :done
    assert running?()

    stop_app()
    target = spawn(fn -> Process.sleep(:infinity) end)
    assert {:ok, ref} = FlameOn.Client.start_trace(target, mode: :sample)
    assert {:ok, _profile} = FlameOn.Client.stop_trace(ref)
    Process.exit(target, :kill)

    stop_app()
    assert {6, _summary} = FlameOn.Client.summary(fn -> 1 + 5 end)

    stop_app()
    assert %{sessions: 0} = FlameOn.Client.status()

    stop_app()
    assert {:ok, url} = FlameOn.Client.Web.start(port: 0)
    assert :ok = FlameOn.Client.Web.stop(url)
  end

  # What a release's `bin/app eval` does: a VM with the code on its path
  # and no application started.
  @tag timeout: 60_000
  test "in a fresh VM where nothing is started, profile/2 works" do
    ebin = :code.lib_dir(:flame_on_client, :ebin) |> to_string()

    code = """
    false = List.keymember?(Application.started_applications(), :flame_on_client, 0)
    {3, profile} = FlameOn.Client.profile(fn -> 1 + 2 end)
    IO.puts("stacks: \#{map_size(profile.stacks)}")
    """

    {out, status} = System.cmd("elixir", ["-pa", ebin, "-e", code], stderr_to_stdout: true)
    assert status == 0, out
    assert out =~ "stacks: 1"
  end
end
