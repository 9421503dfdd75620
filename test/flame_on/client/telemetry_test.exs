defmodule FlameOn.Client.TelemetryTest do
  use ExUnit.Case, async: false

  @moduletag :capture_log

  import ExUnit.CaptureLog
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Telemetry
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.Telemetry

  @fib "FlameOn.Client.Test.Workloads.fib/1"
  @prefix [:my_app, :job]
  # exact stacks, every level of fib a frame (the tests read its depth)
  @config [shipper: {Shipper.Process, pid: :flame_on_telemetry_test}, collapse_recursion: false]

  setup do
    assert_node_clean()
    Process.register(self(), :flame_on_telemetry_test)
    # These tests read exact call stacks; the default mode :sample has its
    # own tests (sample_mode_test.exs).
    Application.put_env(:flame_on_client, :mode, :nif)

    on_exit(fn ->
      Application.delete_env(:flame_on_client, :sample_rate)
      Application.delete_env(:flame_on_client, :mode)
    end)

    :ok
  end

  defp event(kind, config, prefix \\ @prefix) do
    assert Telemetry.handle_event(prefix ++ [kind], %{system_time: 0}, %{}, config) == :ok
  end

  # What :telemetry.span/3 does, without :telemetry.
  defp span(config, fun, prefix \\ @prefix) do
    event(:start, config, prefix)
    result = fun.()
    event(:stop, config, prefix)
    result
  end

  test "a start/stop pair ships a profile of the work between them" do
    assert span(@config, fn -> Workloads.fib(15) end) == 610

    assert_received {:flame_on_profile, %Profile{} = profile}
    assert profile.name == "my_app.job"
    assert profile.pid == self()
    assert max_frame_count(profile, self(), @fib) >= 14
    # Nothing of the stop handler after its first call.
    refute Enum.any?(profile.stacks[self()], fn {stack, _} -> stack =~ "GenServer.call" end)
    refute Process.get({Telemetry, @prefix})
    assert our_flags(self()) == []
    assert_node_clean()
  end

  test "an exception event also finishes the trace" do
    event(:start, Keyword.put(@config, :name, "failing job"))
    Workloads.fib(12)
    event(:exception, @config)

    assert_received {:flame_on_profile, %Profile{name: "failing job"} = profile}
    assert max_frame_count(profile, self(), @fib) >= 11
    assert_node_clean()
  end

  test "a stop without a start is ignored" do
    event(:stop, @config)
    event(:exception, @config)
    event(:stop, @config, [:other])
    refute_received {:flame_on_profile, _}
    assert Telemetry.handle_event([:my_app, :job, :other], %{}, %{}, @config) == :ok
    assert_node_clean()
  end

  test "a stop of another prefix does not end the trace" do
    event(:start, @config)
    event(:stop, @config, [:other])
    assert Tracing.traced?()
    event(:stop, @config)
    assert_received {:flame_on_profile, %Profile{name: "my_app.job"}}
    assert_node_clean()
  end

  test "nested spans: same prefix counts, another prefix is not traced" do
    span(@config, fn ->
      span(@config, fn -> Workloads.fib(10) end)
      # Still traced after the inner stop.
      assert Tracing.traced?()
      span(@config, fn -> Workloads.fib(10) end, [:my_app, :repo, :query])
    end)

    assert_received {:flame_on_profile, %Profile{name: "my_app.job"} = profile}
    refute_received {:flame_on_profile, _}
    assert max_frame_count(profile, self(), @fib) >= 9
    assert_node_clean()
  end

  test "sample_rate and threshold_ms from the config and the environment" do
    span(Keyword.put(@config, :sample_rate, 0.0), fn -> Workloads.fib(10) end)
    refute_received {:flame_on_profile, _}

    Application.put_env(:flame_on_client, :sample_rate, 0.0)
    span(@config, fn -> Workloads.fib(10) end)
    refute_received {:flame_on_profile, _}
    span(Keyword.put(@config, :sample_rate, 1.0), fn -> Workloads.fib(10) end)
    assert_received {:flame_on_profile, _}
    Application.delete_env(:flame_on_client, :sample_rate)

    span(Keyword.put(@config, :threshold_ms, 1_000), fn -> :fast end)
    refute_received {:flame_on_profile, _}
    span(Keyword.put(@config, :threshold_ms, 10), fn -> Process.sleep(30) end)
    assert_received {:flame_on_profile, %Profile{} = profile}
    assert profile.duration_us >= 10_000

    # A map config works too.
    span(Map.new(@config), fn -> :ok end)
    assert_received {:flame_on_profile, _}
    assert_node_clean()
  end

  test "a process already traced is not traced again" do
    {_, profile} =
      FlameOn.Client.profile(fn -> span(@config, fn -> Workloads.fib(10) end) end,
        collapse_recursion: false
      )

    refute_received {:flame_on_profile, _}
    assert max_frame_count(profile, self(), @fib) >= 9
    assert_node_clean()
  end

  test "the traced process dies between start and stop: nothing is left" do
    parent = self()

    pid =
      spawn(fn ->
        event(:start, @config)
        send(parent, :started)
        Process.sleep(:infinity)
      end)

    assert_receive :started
    Process.exit(pid, :kill)
    assert_node_clean()
  end

  test "max_duration_ms finishes a trace whose stop never comes" do
    parent = self()

    pid =
      spawn(fn ->
        event(:start, Keyword.put(@config, :max_duration_ms, 50))
        send(parent, :started)
        Workloads.busy(10)

        receive do
          :stop -> event(:stop, @config)
        end

        send(parent, :stopped)
      end)

    assert_receive :started
    assert_receive {:flame_on_profile, %Profile{pid: ^pid} = profile}, 5_000
    assert max_frame_count(profile, pid, @fib) >= 5
    assert_node_clean()
    send(pid, :stop)
    assert_receive :stopped
    refute_received {:flame_on_profile, _}
  end

  test "bad config is logged, never raised" do
    log =
      capture_log(fn ->
        event(:start, sample_rate: 5)
        event(:start, bogus: 1)
        event(:start, :not_a_config)
      end)

    assert log =~ "sample_rate"
    assert log =~ "bogus"
    refute Tracing.traced?()
    assert_node_clean()
  end

  test "attach/3 without :telemetry" do
    refute Code.ensure_loaded?(:telemetry)
    assert Telemetry.attach("h", [@prefix], @config) == {:error, :telemetry_not_available}
    assert Telemetry.detach("h") == {:error, :telemetry_not_available}
  end
end
