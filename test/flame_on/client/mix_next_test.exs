defmodule FlameOn.Client.MixNextTest do
  # mix profile.flame --next: the next call of a function, from a shell,
  # in this VM (with the code that makes the call) and on another node
  # (--node, over :erpc).
  use ExUnit.Case, async: false

  import ExUnit.CaptureIO
  import FlameOn.Client.TestHelpers

  alias Mix.Tasks.Profile.Flame

  setup do
    ensure_app_started()
    assert_node_clean()
    out = Path.join(System.tmp_dir!(), "flame_on_mix_next_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(out) end)
    %{out: out}
  end

  defp run_task(args), do: capture_io(fn -> Flame.run(args) end)

  test "--next with -e: the code runs once the capture waits, and its call is profiled", %{
    out: out
  } do
    output =
      run_task(
        ~w(--next FlameOn.Client.Test.Workloads.busy/1 --mode nif --format folded --out) ++
          [out, "-e", "FlameOn.Client.Test.Workloads.busy(30)"]
      )

    assert output =~
             "Waiting up to 30000 ms for the next call of FlameOn.Client.Test.Workloads.busy/1..."

    assert output =~
             ~r/Captured the call of FlameOn.Client.Test.Workloads.busy\/1 by #PID<[\d.]+> \(\d+ µs\)/

    assert output =~
             ~s|Top 10 functions by self time ("FlameOn.Client.Test.Workloads.busy/1", mode nif)|

    [file] = File.ls!(out)
    lines = out |> Path.join(file) |> File.read!() |> String.split("\n", trim: true)

    assert Enum.all?(
             lines,
             &(&1 =~
                 ~r/^FlameOn\.Client\.Test\.Workloads\.busy\/1;<[\d.]+>;FlameOn\.Client\.Test\.Workloads\.busy\/1/)
           )

    assert_node_clean()
    assert FlameOn.Client.Node.Gates.waiting() == []
  end

  test "--next: a timeout, an unknown function and misplaced options are clear errors", %{
    out: out
  } do
    assert_raise Mix.Error,
                 ~r/no process called FlameOn.Client.Test.Workloads.boom!\/0 within 100 ms/,
                 fn ->
                   run_task(
                     ~w(--next FlameOn.Client.Test.Workloads.boom!/0 --timeout 100 --out) ++ [out]
                   )
                 end

    assert_raise Mix.Error, ~r/--next: no module named Nope.Nothing/, fn ->
      run_task(~w(--next Nope.Nothing.f/1 --out) ++ [out])
    end

    assert_raise Mix.Error, ~r/--timeout goes with --next/, fn ->
      run_task(~w(--timeout 100 -e :ok --out) ++ [out])
    end

    assert_node_clean()
    assert FlameOn.Client.Node.Gates.waiting() == []
  end

  test "--next --node: the call is captured on another node and written here", %{out: out} do
    {_, 0} = System.cmd("epmd", ["-daemon"])
    cookie = :flame_on_mix_next_test

    args =
      Enum.flat_map(:code.get_path(), &[~c"-pa", &1]) ++
        [~c"-setcookie", Atom.to_charlist(cookie)]

    # controlled over its stdio: this VM joins the cluster only in the task
    {:ok, peer, node} =
      :peer.start(%{
        name: :"flame_on_peer_#{System.unique_integer([:positive])}",
        # long names on 127.0.0.1: no host name to resolve (a fresh
        # machine's may not be)
        host: ~c"127.0.0.1",
        longnames: true,
        args: args,
        connection: :standard_io
      })

    try do
      {:ok, _} = :peer.call(peer, Application, :ensure_all_started, [:flame_on_client])

      # a process on the peer that calls the function now and then
      :peer.call(peer, Code, :compile_string, [
        """
        defmodule FlameOn.PeerLoop do
          def start, do: spawn(fn -> loop() end)
          defp loop do
            FlameOn.Client.Test.Workloads.busy(20)
            Process.sleep(20)
            loop()
          end
        end
        """
      ])

      :peer.call(peer, FlameOn.PeerLoop, :start, [])

      output =
        run_task(
          ~w(--next FlameOn.Client.Test.Workloads.busy/1 --timeout 10000 --format folded --out) ++
            [out, "--node", Atom.to_string(node), "--cookie", Atom.to_string(cookie)] ++
            ["--longname", "flame_on_task_#{System.unique_integer([:positive])}@127.0.0.1"]
        )

      assert output =~ "on #{node}..."
      assert output =~ ~r/Captured the call of .* by #PID<\d+\.\d+\.\d+>/
      [file] = File.ls!(out)
      assert File.read!(Path.join(out, file)) =~ "FlameOn.Client.Test.Workloads.busy/1"
      # nothing left on the peer
      assert :peer.call(peer, FlameOn.Client.Node.Gates, :waiting, []) == []

      assert :peer.call(peer, :erlang, :trace_info, [
               {FlameOn.Client.Test.Workloads, :busy, 1},
               :meta
             ]) ==
               {:meta, false}
    after
      :peer.stop(peer)
      Node.stop()
    end
  end
end
