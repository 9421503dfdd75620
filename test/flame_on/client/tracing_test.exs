defmodule FlameOn.Client.TracingTest do
  use ExUnit.Case, async: false

  @moduletag :capture_log

  import ExUnit.CaptureLog
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Tracing
  doctest FlameOn.Client.Shipper

  @fib "FlameOn.Client.Test.Workloads.fib/1"
  @to_me {Shipper.Process, pid: :flame_on_tracing_test}

  setup do
    assert_node_clean()
    Process.register(self(), :flame_on_tracing_test)
    # These tests read exact call stacks; the default mode :sample has its
    # own tests (sample_mode_test.exs).
    Application.put_env(:flame_on_client, :mode, :nif)

    on_exit(fn ->
      for key <- [:sample_rate, :threshold_ms, :shipper, :mode],
          do: Application.delete_env(:flame_on_client, key)
    end)

    :ok
  end

  defp tmp_dir do
    dir = Path.join(System.tmp_dir!(), "flame_on_tracing_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf!(dir) end)
    dir
  end

  defmodule FailingShipper do
    @behaviour FlameOn.Client.Shipper
    def ship(_profile, reply: reply), do: reply
    def ship(_profile, raise: message), do: raise(message)
  end

  describe "trace/3" do
    test "returns the function's result and ships the profile" do
      assert Tracing.trace("fib", fn -> Workloads.fib(15) end,
               shipper: @to_me,
               collapse_recursion: false
             ) == 610

      assert_received {:flame_on_profile, %Profile{} = profile}
      assert profile.name == "fib"
      assert profile.mode == :nif
      assert max_frame_count(profile, self(), @fib) >= 14
      assert profile.stacks |> Map.fetch!(self()) |> hd() |> elem(0) =~ "FlameOn.Client.profile/2"
      assert_node_clean()
    end

    test "passes profile options through (mode: :process, name as an atom)" do
      assert Tracing.trace(:work, fn -> Workloads.fib(12) end,
               shipper: @to_me,
               mode: :process,
               collapse_recursion: false
             ) ==
               144

      assert_received {:flame_on_profile, %Profile{name: "work", mode: :process} = profile}
      assert max_frame_count(profile, self(), @fib) >= 11
      assert_node_clean()
    end

    test "an exception is raised again with its stacktrace, and the profile still shipped" do
      error =
        assert_raise RuntimeError, "boom", fn ->
          Tracing.trace("boom", &Workloads.boom!/0, shipper: @to_me)
        end

      assert error.message == "boom"
      assert_received {:flame_on_profile, %Profile{name: "boom"} = profile}
      assert time_where(profile, self(), &(&1 =~ "Workloads.boom!/0")) > 0

      # The original stacktrace: the frame that raised is on top.
      try do
        Tracing.trace("boom", &Workloads.boom!/0)
      rescue
        RuntimeError -> assert [{Workloads, :boom!, 0, _} | _] = __STACKTRACE__
      end

      assert catch_throw(Tracing.trace("throw", fn -> throw(:ball) end)) == :ball
      assert catch_exit(Tracing.trace("exit", fn -> exit(:bye) end)) == :bye
      assert_node_clean()
    end

    test "sample_rate 0.0 never traces, 1.0 always does" do
      for _ <- 1..20 do
        assert Tracing.trace("never", fn -> Tracing.traced?() end,
                 sample_rate: 0.0,
                 shipper: @to_me
               ) == false
      end

      refute_received {:flame_on_profile, _}

      for _ <- 1..3 do
        assert Tracing.trace("always", fn -> Tracing.traced?() end,
                 sample_rate: 1.0,
                 shipper: @to_me
               ) == true
      end

      for _ <- 1..3, do: assert_received({:flame_on_profile, %Profile{name: "always"}})
      assert_node_clean()
    end

    # traced?/0 asks the calling process's trace flags first (no flags: no
    # tracer in the legacy session) and its tracer only when it has some.
    test "traced?/0 sees any tracer of the calling process, whatever its flags" do
      refute Tracing.traced?()

      unless FlameOn.Client.Node.TraceBackend.sessions?() do
        tool = spawn(fn -> receive(do: (:stop -> :ok)) end)

        for flags <- [[:running], [:set_on_spawn], [:garbage_collection], [:call]] do
          1 = :erlang.trace(self(), true, [{:tracer, tool} | flags])
          assert Tracing.traced?()
          assert Tracing.trace("inner", fn -> Tracing.traced?() end, shipper: @to_me)
          1 = :erlang.trace(self(), false, [:all])
          refute Tracing.traced?()
        end

        send(tool, :stop)
        refute_received {:flame_on_profile, _}
      end

      assert_node_clean()
    end

    test "a sample_rate between 0 and 1 traces some calls" do
      traced =
        Enum.count(1..60, fn _ ->
          Tracing.trace("half", fn -> Tracing.traced?() end, sample_rate: 0.5)
        end)

      assert traced in 10..50
      assert_node_clean()
    end

    test "threshold_ms ships slow traces and drops fast ones" do
      Tracing.trace("fast", fn -> :ok end, threshold_ms: 1_000, shipper: @to_me)
      refute_received {:flame_on_profile, _}

      Tracing.trace("slow", fn -> Process.sleep(30) end, threshold_ms: 10, shipper: @to_me)
      assert_received {:flame_on_profile, %Profile{name: "slow"} = profile}
      assert profile.duration_us >= 10_000
      assert_node_clean()
    end

    test "graph traces: sampling decides before any seq_trace or callee tracing, threshold after" do
      {:ok, server} = FlameOn.Client.Test.Server.start()
      call = fn ms -> GenServer.call(server, {:spin, ms}) end

      # Unsampled: no token, no graph tracer, no profile.
      for _ <- 1..10 do
        assert Tracing.trace("unsampled", fn -> {call.(1), :seq_trace.get_token()} end,
                 cross_process: true,
                 sample_rate: 0.0,
                 shipper: @to_me
               ) == {:done, []}
      end

      refute_received {:flame_on_profile, _}
      assert our_flags(server) == []

      # Sampled and fast: traced (the callee too) but under the threshold.
      Tracing.trace("fast", fn -> call.(1) end,
        cross_process: true,
        threshold_ms: 1_000,
        shipper: @to_me
      )

      refute_received {:flame_on_profile, _}

      # Sampled and slow: shipped with its span graph.
      Tracing.trace("slow", fn -> call.(30) end,
        cross_process: true,
        threshold_ms: 10,
        shipper: @to_me
      )

      assert_received {:flame_on_profile, %Profile{name: "slow", graph: graph}}
      assert [_root, callee] = graph.spans
      assert callee.pid == server
      assert :seq_trace.get_token() == []
      assert_node_clean()
    end

    test "the application environment is the fallback" do
      Application.put_env(:flame_on_client, :shipper, @to_me)
      Application.put_env(:flame_on_client, :sample_rate, 0.0)
      Tracing.trace("configured", fn -> :ok end)
      refute_received {:flame_on_profile, _}

      # Options win over the environment.
      Tracing.trace("configured", fn -> :ok end, sample_rate: 1.0)
      assert_received {:flame_on_profile, %Profile{name: "configured"}}

      Application.put_env(:flame_on_client, :sample_rate, 1.0)
      Application.put_env(:flame_on_client, :threshold_ms, 10_000)
      Tracing.trace("configured", fn -> :ok end)
      refute_received {:flame_on_profile, _}
      Tracing.trace("configured", fn -> :ok end, threshold_ms: 0)
      assert_received {:flame_on_profile, %Profile{name: "configured"}}
      assert_node_clean()
    end

    test "no shipper: the profile is discarded" do
      log =
        capture_log([level: :debug], fn ->
          assert Tracing.trace("nowhere", fn -> 1 end) == 1
        end)

      assert log =~ "no shipper configured"
      assert_node_clean()
    end

    test "a nested trace runs untraced" do
      result =
        Tracing.trace(
          "outer",
          fn -> Tracing.trace("inner", fn -> Workloads.fib(10) end, shipper: @to_me) end,
          shipper: @to_me,
          collapse_recursion: false
        )

      assert result == 55
      assert_received {:flame_on_profile, %Profile{name: "outer"} = profile}
      refute_received {:flame_on_profile, _}
      assert max_frame_count(profile, self(), @fib) >= 9

      # Inside profile/2 too.
      {55, _} =
        FlameOn.Client.profile(fn ->
          Tracing.trace("inner", fn -> Workloads.fib(10) end, shipper: @to_me)
        end)

      refute_received {:flame_on_profile, _}
      assert_node_clean()
    end

    test "a trace that cannot start runs the function untraced" do
      log =
        capture_log(fn ->
          # past the NIF's ceiling: a valid option the trace cannot start with
          assert Tracing.trace("bad", fn -> :ran end, max_nodes: 100_000_000, shipper: @to_me) ==
                   :ran
        end)

      assert log =~ "could not trace"
      refute_received {:flame_on_profile, _}
      assert_node_clean()
    end

    test "shipper failures are logged, never raised" do
      log =
        capture_log(fn ->
          assert Tracing.trace("f", fn -> :a end,
                   shipper: [
                     {FailingShipper, reply: {:error, :disk_full}},
                     {FailingShipper, raise: "kaput"},
                     {FailingShipper, reply: :weird},
                     @to_me
                   ]
                 ) == :a
        end)

      assert log =~ ":disk_full"
      assert log =~ "kaput"
      assert log =~ ":weird"
      # The shippers after a failing one still run.
      assert_received {:flame_on_profile, _}
      assert_node_clean()
    end

    test "invalid options raise ArgumentError, sampled or not" do
      assert_raise ArgumentError, ~r/sample_rate/, fn ->
        Tracing.trace("x", fn -> :ok end, sample_rate: 2)
      end

      assert_raise ArgumentError, ~r/threshold_ms/, fn ->
        Tracing.trace("x", fn -> :ok end, threshold_ms: -1, sample_rate: 0.0)
      end

      assert_raise ArgumentError, ~r/shipper/, fn ->
        Tracing.trace("x", fn -> :ok end, shipper: {String, []}, sample_rate: 0.0)
      end

      assert_raise ArgumentError, ~r/function of arity 0/, fn -> Tracing.trace("x", :nope) end
      assert_node_clean()
    end
  end

  describe "shippers" do
    test "Directory writes a folded file per trace" do
      dir = tmp_dir()
      shipper = {Shipper.Directory, dir: dir}
      assert Tracing.trace("dir test", fn -> Workloads.fib(12) end, shipper: shipper) == 144
      assert Tracing.trace("dir test", fn -> Workloads.fib(12) end, shipper: shipper) == 144

      trace_dirs = dir |> File.ls!() |> Enum.sort()
      assert length(trace_dirs) == 2
      assert Enum.all?(trace_dirs, &String.starts_with?(&1, "dir_test-"))

      for trace_dir <- trace_dirs do
        path = Path.join([dir, trace_dir, "dir_test.folded"])
        lines = path |> File.read!() |> String.split("\n", trim: true)
        assert lines != []
        for line <- lines, do: assert(line =~ ~r/^[^ ]+ \d+$/, line)
        assert Enum.any?(lines, &(&1 =~ @fib))
      end

      assert_node_clean()
    end

    test "Directory writes the other formats with FlameOn.Client.Export" do
      dir = tmp_dir()
      formats = [:folded, :speedscope, :perfetto, :svg, :pprof]
      {_, profile} = FlameOn.Client.profile(fn -> Workloads.fib(10) end, name: "all")

      if Shipper.Directory.export?() do
        assert Shipper.Directory.ship(profile, dir: dir, formats: formats) == :ok
        [trace_dir] = File.ls!(dir)
        assert trace_dir == "all-#{profile.trace_id}"
        files = File.ls!(Path.join(dir, trace_dir))
        assert length(files) == 5
        assert "all.folded" in files and "all.svg" in files
      else
        assert Shipper.Directory.ship(profile, dir: dir, formats: formats) ==
                 {:error, {:export_not_available, formats -- [:folded]}}
      end

      assert_node_clean()
    end

    test "Directory errors" do
      profile = %Profile{name: "p", trace_id: 1}
      assert Shipper.Directory.ship(profile, []) == {:error, :dir_required}

      assert Shipper.Directory.ship(profile, dir: tmp_dir(), formats: [:nope]) ==
               {:error, {:unknown_formats, [:nope]}}

      file = Path.join(tmp_dir(), "a_file")
      File.mkdir_p!(Path.dirname(file))
      File.write!(file, "")
      assert {:error, {:mkdir, _, _}} = Shipper.Directory.ship(profile, dir: file)
    end

    test "Process sends {:flame_on_profile, profile}" do
      profile = %Profile{name: "p", trace_id: 1}
      assert Shipper.Process.ship(profile, pid: self()) == :ok
      assert_received {:flame_on_profile, ^profile}
      assert Shipper.Process.ship(profile, pid: :flame_on_tracing_test) == :ok
      assert_received {:flame_on_profile, ^profile}

      assert Shipper.Process.ship(profile, pid: :not_registered) ==
               {:error, {:noproc, :not_registered}}

      assert Shipper.Process.ship(profile, []) == {:error, :pid_required}
    end
  end

  describe "start_trace/2 and stop_trace/1" do
    # A process that computes fib(n) each time it is told to.
    defp worker do
      parent = self()

      spawn(fn -> worker_loop(parent) end)
    end

    defp worker_loop(parent) do
      receive do
        {:fib, n} ->
          send(parent, {:fib, self(), Workloads.fib(n)})
          worker_loop(parent)

        :stop ->
          :ok
      end
    end

    test "traces another process" do
      pid = worker()

      assert {:ok, ref} =
               Tracing.start_trace(pid, name: "worker", shipper: @to_me, collapse_recursion: false)

      assert ref.pid == pid
      send(pid, {:fib, 15})
      assert_receive {:fib, ^pid, 610}, 5_000

      assert {:ok, %Profile{} = profile} = Tracing.stop_trace(ref)
      assert profile.name == "worker"
      assert profile.pid == pid
      assert profile.mode == :process
      assert max_frame_count(profile, pid, @fib) >= 14
      # Shipped once, when it finished.
      assert_received {:flame_on_profile, ^profile}
      assert Tracing.stop_trace(ref) == {:error, :not_found}

      assert Process.alive?(pid)
      send(pid, :stop)
      assert_node_clean()
    end

    test "duration_ms stops the trace on its own and ships it; stop_trace/1 returns it" do
      pid = worker()

      assert {:ok, ref} =
               Tracing.start_trace(pid,
                 duration_ms: 100,
                 shipper: @to_me,
                 collapse_recursion: false
               )

      send(pid, {:fib, 14})
      assert_receive {:fib, ^pid, 377}, 5_000

      assert_receive {:flame_on_profile, %Profile{} = profile}, 5_000
      assert profile.duration_us >= 90_000
      assert max_frame_count(profile, pid, @fib) >= 13
      # No longer traced, the profile kept for stop_trace/1.
      assert our_flags(pid) == []
      assert Tracing.stop_trace(ref) == {:ok, profile}

      send(pid, :stop)
      assert_node_clean()
    end

    test "the traced process exits: its profile is shipped and kept" do
      pid = worker()
      {:ok, ref} = Tracing.start_trace(pid, shipper: @to_me, collapse_recursion: false)
      send(pid, {:fib, 12})
      assert_receive {:fib, ^pid, 144}, 5_000
      send(pid, :stop)

      assert_receive {:flame_on_profile, %Profile{} = profile}, 5_000
      assert max_frame_count(profile, pid, @fib) >= 11
      assert Tracing.stop_trace(ref) == {:ok, profile}
      assert_node_clean()
    end

    test "the caller exits: the trace is finished and shipped" do
      pid = worker()
      parent = self()

      caller =
        spawn(fn ->
          {:ok, _ref} = Tracing.start_trace(pid, shipper: @to_me)
          send(parent, :started)
        end)

      assert_receive :started
      ref = Process.monitor(caller)
      assert_receive {:DOWN, ^ref, :process, ^caller, _}
      assert_receive {:flame_on_profile, %Profile{pid: ^pid}}, 5_000
      send(pid, :stop)
      assert_node_clean()
    end

    test "threshold_ms applies" do
      pid = worker()
      {:ok, ref} = Tracing.start_trace(pid, threshold_ms: 60_000, shipper: @to_me)
      assert {:ok, _profile} = Tracing.stop_trace(ref)
      refute_received {:flame_on_profile, _}
      send(pid, :stop)
      assert_node_clean()
    end

    test "errors: dead process, already traced, bad options" do
      dead = spawn(fn -> :ok end)
      ref = Process.monitor(dead)
      assert_receive {:DOWN, ^ref, :process, ^dead, _}
      assert Tracing.start_trace(dead) == {:error, :noproc}
      assert Tracing.start_trace(:no_such_name) == {:error, :noproc}

      pid = worker()
      {:ok, trace} = Tracing.start_trace(pid)
      assert {:error, {:already_traced, _by}} = Tracing.start_trace(pid)
      assert {:ok, _} = Tracing.stop_trace(trace)

      assert Tracing.start_trace(pid, max_nodes: 100_000_000) |> elem(0) == :error
      assert_raise ArgumentError, fn -> Tracing.start_trace(pid, duration_ms: 0) end
      assert_raise ArgumentError, fn -> Tracing.start_trace(pid, bogus: 1) end
      send(pid, :stop)
      assert_node_clean()
    end
  end
end
