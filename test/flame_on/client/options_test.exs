defmodule FlameOn.Client.OptionsTest do
  # Every entry point checks its options in one place
  # (FlameOn.Client.Options): a misspelt key raises ArgumentError naming
  # it, the nearest key it takes and all of them, before anything is traced
  # or started; a value of the wrong kind says what was expected.
  use ExUnit.Case, async: false

  @moduletag :capture_log

  import ExUnit.CaptureLog
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.{Options, Telemetry, Web}

  setup do
    assert_node_clean()
    on_exit(fn -> assert_node_clean() end)
    :ok
  end

  # The message names the key, the entry point, the nearest key and the
  # keys the entry point takes (each of `takes`, and none of `refuses`).
  defp assert_misspelt(fun, key, entry, nearest, takes, refuses \\ []) do
    error = assert_raise ArgumentError, fun
    message = Exception.message(error)
    assert message =~ "unknown keys [#{inspect(key)}] for #{entry}", message
    if nearest, do: assert(message =~ "did you mean #{inspect(nearest)}?", message)
    [_, listed] = String.split(message, "it takes: ")
    listed = String.split(listed, ", ")
    for key <- takes, do: assert(inspect(key) in listed, message)
    for key <- refuses, do: refute(inspect(key) in listed, message)
  end

  test "profile/2" do
    assert_misspelt(
      fn -> FlameOn.Client.profile(fn -> :ok end, max_node: 10) end,
      :max_node,
      "FlameOn.Client.profile/2",
      :max_nodes,
      [:max_nodes, :mode, :cross_process, :interval_us],
      [:threshold_ms, :shipper]
    )
  end

  test "trace/3 raises too, sampled or not, and runs nothing" do
    parent = self()

    for rate <- [0.0, 1.0] do
      assert_misspelt(
        fn ->
          FlameOn.Client.trace("t", fn -> send(parent, :ran) end,
            threshold: 250,
            sample_rate: rate
          )
        end,
        :threshold,
        "FlameOn.Client.trace/3",
        :threshold_ms,
        [:threshold_ms, :sample_rate, :shipper, :mode]
      )
    end

    refute_received :ran

    # a value of the wrong kind of a capture option raises as well
    assert_raise ArgumentError,
                 ~r/expected :mode to be :auto, :native, :nif, :process or :sample, got: :nfi/,
                 fn ->
                   FlameOn.Client.trace("t", fn -> send(parent, :ran) end, mode: :nfi)
                 end

    refute_received :ran
  end

  test "start_trace/2, of a process and of the whole node" do
    pid = spawn(fn -> Process.sleep(:infinity) end)

    assert_misspelt(
      fn -> FlameOn.Client.start_trace(pid, duraton_ms: 10) end,
      :duraton_ms,
      "FlameOn.Client.start_trace/2",
      :duration_ms,
      [:duration_ms, :mode, :shipper],
      [:cross_process, :window_ms]
    )

    assert_misspelt(
      fn -> FlameOn.Client.start_trace({:top, 3}, windw_ms: 10) end,
      :windw_ms,
      "FlameOn.Client.start_trace/2 ({:top, n})",
      :window_ms,
      [:window_ms, :duration_ms]
    )

    Process.exit(pid, :kill)
  end

  test "telemetry: attach/3 raises; a handler attached by hand logs and traces nothing" do
    assert_misspelt(
      fn -> Telemetry.attach("h", [[:app, :req]], sampel_rate: 0.1) end,
      :sampel_rate,
      "the FlameOn.Client.Telemetry handler config",
      :sample_rate,
      [:sample_rate, :max_duration_ms, :mode]
    )

    log =
      capture_log(fn ->
        assert Telemetry.handle_event([:app, :req, :start], %{}, %{}, sampel_rate: 1.0) == :ok
        assert Telemetry.handle_event([:app, :req, :stop], %{}, %{}, sampel_rate: 1.0) == :ok
      end)

    assert log =~ "unknown keys [:sampel_rate]"
    refute FlameOn.Client.Tracing.traced?()
  end

  test "capture_next/2" do
    assert_misspelt(
      fn -> FlameOn.Client.capture_next({Enum, :map, 2}, timout: 10) end,
      :timout,
      "FlameOn.Client.capture_next/2",
      :timeout,
      [:timeout, :store, :shipper, :mode, :cross_process]
    )

    assert FlameOn.Client.status().captures_waiting == []
  end

  test "summary/2" do
    assert_misspelt(
      fn -> FlameOn.Client.summary(fn -> :ok end, typ: :call_time) end,
      :typ,
      "FlameOn.Client.summary/2",
      :type,
      [:type, :set_on_spawn, :name],
      [:mode]
    )
  end

  test "the ExUnit integration: start/1 and a flame: tag" do
    assert_misspelt(
      fn -> FlameOn.Client.ExUnit.start(formts: [:svg]) end,
      :formts,
      "FlameOn.Client.ExUnit.start/1",
      :formats,
      [:formats, :dir, :summary, :mode]
    )

    assert_misspelt(
      fn -> FlameOn.Client.ExUnit.split_options!(mod: :sample) end,
      :mod,
      "a flame: tag",
      :mode,
      [:mode, :dir, :formats],
      [:summary]
    )
  end

  test "the web UI" do
    assert_misspelt(
      fn -> Web.start(prot: 0) end,
      :prot,
      "FlameOn.Client.Web.start/1",
      :port,
      [:port, :ip, :token]
    )

    assert Web.urls() == []
  end

  test "the :cluster option, nested" do
    assert_misspelt(
      fn -> FlameOn.Client.profile(fn -> :ok end, cluster: [node: [:a@b]]) end,
      :node,
      "the :cluster option",
      :nodes,
      [:nodes, :arm_timeout_ms, :max_part_bytes]
    )
  end

  test "mix profile.flame refuses a switch it does not know" do
    assert_raise Mix.Error, ~r/invalid option\(s\): --max-node.*usage: mix profile.flame/s, fn ->
      ExUnit.CaptureIO.capture_io(fn ->
        Mix.Tasks.Profile.Flame.run(["--max-node", "5", "-e", ":ok"])
      end)
    end
  end

  test "values of the wrong kind say what was expected" do
    for {opts, message} <- [
          {[mode: :fast],
           ~r/expected :mode to be :auto, :native, :nif, :process or :sample, got: :fast/},
          {[interval_us: 10], ~r/expected :interval_us to be an integer of at least 1000/},
          {[frequency: 0], ~r/expected :frequency to be an integer from 1 to 10000 \(Hz\)/},
          {[max_nodes: 0], ~r/expected :max_nodes to be a positive integer, got: 0/},
          {[follow: :all], ~r/expected :follow to be :messages or :calls/},
          {[cluster: :yes], ~r/expected :cluster to be false or a keyword list/},
          {:not_a_list, ~r/expected options to be a keyword list/}
        ] do
      assert_raise ArgumentError, message, fn -> FlameOn.Client.profile(fn -> :ok end, opts) end
    end
  end

  test "the entry points' defaults" do
    capture = Options.profile!([])
    assert capture.mode == :nif
    assert capture.cross_process == false
    assert capture.max_nodes == 200_000

    assert {%{sample_rate: 1.0, threshold_ms: 0, shippers: []}, %{mode: :sample}} =
             Options.trace!([])

    assert %{capture: %{mode: :process, cross_process: false}} = Options.start_trace!(mode: :nif)
    next = Options.capture_next!([mode: :process], "Enum.map/2")
    assert {next.capture.mode, next.capture.name, next.wait_ms} == {:nif, "Enum.map/2", 30_000}
    assert Options.web!([]).port == 4040
  end

  test "the application environment's defaults are checked too" do
    Application.put_env(:flame_on_client, :mode, :fast)
    on_exit(fn -> Application.delete_env(:flame_on_client, :mode) end)

    assert_raise ArgumentError, ~r/config :flame_on_client, :mode must be/, fn ->
      Options.trace!([])
    end
  end

  # trace/3 and telemetry keep their checked options (Options.Cache): a
  # call with the same options reads the settings of the application
  # environment they depend on, and the checks run again when one changed.
  test "checked options are kept while the environment they read is the same" do
    on_exit(fn ->
      for key <- [:mode, :sample_rate, :shipper],
          do: Application.delete_env(:flame_on_client, key)
    end)

    opts = [mode: :sample, threshold_ms: 7]
    assert {%{sample_rate: 1.0, threshold_ms: 7}, %{mode: :sample}} = Options.trace!(opts)
    assert Options.trace!(opts) == Options.trace!(opts)

    Application.put_env(:flame_on_client, :sample_rate, 0.25)
    assert {%{sample_rate: 0.25}, _} = Options.trace!(opts)

    # an option given is not read from the environment
    assert {%{threshold_ms: 7}, _} = Options.trace!(opts)

    Application.put_env(:flame_on_client, :shipper, FlameOn.Client.Shipper.Process)
    assert {%{shippers: [{FlameOn.Client.Shipper.Process, []}]}, _} = Options.trace!(opts)

    # a bad value in the environment raises as it did, options kept or not
    Application.put_env(:flame_on_client, :sample_rate, 2)

    assert_raise ArgumentError, ~r/expected :sample_rate to be a number/, fn ->
      Options.trace!(opts)
    end

    Application.put_env(:flame_on_client, :sample_rate, 0.25)
    Application.put_env(:flame_on_client, :mode, :fast)

    assert_raise ArgumentError, ~r/config :flame_on_client, :mode must be/, fn ->
      Options.trace!(opts)
    end

    Application.put_env(:flame_on_client, :mode, :nif)
    assert {_, %{mode: :nif}} = Options.trace!(threshold_ms: 7)

    # options that raise are never kept: they raise every time
    for _ <- 1..2 do
      assert_raise ArgumentError, ~r/expected :threshold_ms to be a non-negative number/, fn ->
        Options.trace!(threshold_ms: -1)
      end
    end

    assert {%{sample_rate: 0.25}, %{name: "a.b", mode: :process}} =
             Options.telemetry!([threshold_ms: 1], [:a, :b])

    assert {%{sample_rate: 0.25}, %{name: "a.b"}} =
             Options.telemetry!(%{threshold_ms: 1}, [:a, :b])

    Application.put_env(:flame_on_client, :sample_rate, 0.5)
    assert {%{sample_rate: 0.5}, _} = Options.telemetry!([threshold_ms: 1], [:a, :b])
    assert {kept, max} = Options.Cache.size()
    assert kept in 1..max
  end

  # trace/3 and the telemetry handler take a process's last checked
  # options again for 100 ms without reading the environment.
  test "a process takes its last checked options of a request again for 100 ms" do
    on_exit(fn -> Application.delete_env(:flame_on_client, :sample_rate) end)
    opts = [mode: :sample, threshold_ms: 3]

    started = System.monotonic_time(:millisecond)
    assert {%{sample_rate: 1.0}, _} = Options.trace_request!(opts)
    Application.put_env(:flame_on_client, :sample_rate, 0.25)
    kept = Options.trace_request!(opts)

    # (on a machine stalled past the 100 ms, the environment is read again)
    if System.monotonic_time(:millisecond) - started < 90,
      do: assert({%{sample_rate: 1.0}, _} = kept)

    # another list is checked at once, and the same list after 100 ms
    assert {%{sample_rate: 0.25}, _} = Options.trace_request!(mode: :sample, threshold_ms: 4)
    Process.sleep(110)
    assert {%{sample_rate: 0.25}, _} = Options.trace_request!(opts)

    # the telemetry handler's the same way
    assert {%{sample_rate: 0.25}, %{name: "a.b"}} =
             Options.telemetry_request!([threshold_ms: 1], [:a, :b])

    Application.put_env(:flame_on_client, :sample_rate, 0.5)
    Process.sleep(110)
    assert {%{sample_rate: 0.5}, _} = Options.telemetry_request!([threshold_ms: 1], [:a, :b])
  end
end
