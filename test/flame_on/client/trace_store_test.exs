defmodule FlameOn.Client.TraceStoreTest do
  # The recent traces the web UI shows: newest first, bounded by count and
  # by size (oldest out first, a trace past the size not kept), off with
  # max_traces: 0, never raising; and every app-code entry point (trace/3,
  # start_trace/2, telemetry) puts the traces that pass their threshold
  # there, with no shipper configured.
  use ExUnit.Case, async: false

  import ExUnit.CaptureLog
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Profile
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Test.Workloads

  doctest FlameOn.Client.TraceStore
  doctest FlameOn.Client.Profile.Pending

  setup do
    ensure_app_started()
    TraceStore.clear()

    on_exit(fn ->
      Application.delete_env(:flame_on_client, :trace_store)
      TraceStore.clear()
    end)

    :ok
  end

  # trimming runs in the store's process, after the put: wait for it
  defp settle, do: :sys.get_state(TraceStore)

  defp profile(name, stack_bytes \\ 10) do
    pid = self()

    %Profile{
      name: name,
      mode: :nif,
      pid: pid,
      started_at: System.monotonic_time(:microsecond),
      duration_us: 1_000,
      stacks: %{pid => [{String.duplicate("a", stack_bytes), 1_000}]}
    }
  end

  test "keeps traces newest first, with their summary" do
    {:ok, a} = TraceStore.put(profile("a"))
    {:ok, b} = TraceStore.put(profile("b"))
    settle()
    assert [%{trace_id: ^b, name: "b"}, %{trace_id: ^a, name: "a"}] = TraceStore.list()
    [summary | _] = TraceStore.list()
    assert summary.processes == 1
    assert summary.spans == 0
    assert summary.duration_us == 1_000
    assert summary.mode == :nif
    assert_in_delta summary.started_at_system_us, System.system_time(:microsecond), 60_000_000
    assert {:ok, %Profile{name: "a", trace_id: ^a}} = TraceStore.get(a)
    assert TraceStore.get(123_456_789) == :error
  end

  test "max_traces: the oldest go first" do
    Application.put_env(:flame_on_client, :trace_store, max_traces: 3)
    ids = for i <- 1..5, do: elem(TraceStore.put(profile("t#{i}")), 1)
    settle()
    assert Enum.map(TraceStore.list(), & &1.name) == ["t5", "t4", "t3"]
    assert TraceStore.get(hd(ids)) == :error
    assert %{traces: 3, max_traces: 3} = TraceStore.stats()
  end

  test "a trace kept again replaces itself: it counts once toward the bounds" do
    Application.put_env(:flame_on_client, :trace_store, max_traces: 2)
    {:ok, a} = TraceStore.put(profile("a"))
    {:ok, ^a} = TraceStore.put(%{profile("a again") | trace_id: a})
    {:ok, b} = TraceStore.put(profile("b"))
    settle()
    assert Enum.map(TraceStore.list(), & &1.name) == ["b", "a again"]
    assert %{traces: 2} = TraceStore.stats()
    {:ok, _} = TraceStore.put(profile("c"))
    settle()
    assert Enum.map(TraceStore.list(), & &1.name) == ["c", "b"]
    assert {:ok, %Profile{name: "b", trace_id: ^b}} = TraceStore.get(b)

    # its bytes count once too: two traces of ~40 KB fit in 0.1 MB
    Application.put_env(:flame_on_client, :trace_store, max_memory_mb: 0.1)
    TraceStore.clear()
    {:ok, big} = TraceStore.put(profile("big", 40_000))
    for _ <- 1..3, do: {:ok, ^big} = TraceStore.put(%{profile("big", 40_000) | trace_id: big})
    {:ok, _} = TraceStore.put(profile("other", 40_000))
    settle()
    assert Enum.map(TraceStore.list(), & &1.name) == ["other", "big"]
  end

  test "max_memory_mb: the oldest go first, and a trace past it is not kept" do
    # 0.1 MB: three traces of ~40 KB do not fit, two do
    Application.put_env(:flame_on_client, :trace_store, max_memory_mb: 0.1)
    for i <- 1..3, do: {:ok, _} = TraceStore.put(profile("m#{i}", 40_000))
    settle()
    assert Enum.map(TraceStore.list(), & &1.name) == ["m3", "m2"]
    assert TraceStore.stats().bytes <= 100 * 1024 * 1.024
    assert {:error, :too_large} = TraceStore.put(profile("huge", 200_000))
    settle()
    assert %{too_large: 1, traces: 2} = TraceStore.stats()
  end

  test "max_traces: 0 keeps nothing; a bad configuration keeps nothing and says so" do
    Application.put_env(:flame_on_client, :trace_store, max_traces: 0)
    assert {:error, :disabled} = TraceStore.put(profile("off"))
    Application.put_env(:flame_on_client, :trace_store, max_traces: -1)

    log = capture_log(fn -> assert {:error, :disabled} = TraceStore.put(profile("bad")) end)

    assert log =~ "max_traces"
    assert TraceStore.list() == []
  end

  # A finished tree as the core hands it over: a process root and one
  # frame under it with `self_us` of its own (Core.Native's module doc).
  defp pending(name, self_us) do
    pid = self()

    frames =
      {:process, :sleep, :depth_cap, :node_cap, :waiting, :gc_minor, :attributed, :gc_major,
       :runnable, {Workloads, :fib, 1}}

    nodes =
      <<0xFFFFFFFF::32-native, 0::32-native, 0::32-native, 0::64-native, 0::64-native,
        0::64-native, 0::32-native, 9::32-native, 0::32-native, self_us * 1000::64-native,
        3::64-native, 3::64-native>>

    %Profile.Pending{
      tree: {frames, {pid}, nodes, 1024 * 1024},
      stats: %{samples: 3},
      fields: [
        trace_id: System.unique_integer([:positive]),
        name: name,
        mode: :native_tail,
        pid: pid,
        started_at: System.monotonic_time(:microsecond),
        duration_us: 5_000
      ],
      names: %{pid => "the request"}
    }
  end

  test "a pending trace is listed at once and built into its profile when read" do
    pending = pending("lazy", 2_000)
    before = TraceStore.stats().kept
    {:ok, id} = TraceStore.put(pending)
    settle()
    assert TraceStore.stats().kept == before + 1

    assert [%{trace_id: ^id, name: "lazy", mode: :native_tail, processes: 1, spans: 0} = summary] =
             TraceStore.list()

    assert summary.duration_us == 5_000
    assert summary.bytes == :erlang.external_size(pending)

    assert {:ok, %Profile{} = profile} = TraceStore.get(id)
    assert profile == Profile.Pending.build(pending)
    assert profile.trace_id == id and profile.name == "lazy"
    assert profile.stacks[self()] == [{"FlameOn.Client.Test.Workloads.fib/1", 2_000}]
    assert profile.process_names[self()] == "the request"
    assert profile.stats.samples == 3
  end

  test "keep/2: a pending trace is stored pending without shippers, built and shipped with them" do
    settings = %{threshold_ms: 1, shippers: []}
    :ok = TraceStore.keep(pending("stored", 1_000), settings)
    :ok = TraceStore.keep(pending("under", 1_000), %{settings | threshold_ms: 10})

    shipped = %{settings | shippers: [{FlameOn.Client.Shipper.Process, pid: self()}]}
    :ok = TraceStore.keep(pending("shipped", 1_000), shipped)
    settle()

    assert_receive {:flame_on_profile, %Profile{name: "shipped", stacks: stacks}}
    assert stacks[self()] == [{"FlameOn.Client.Test.Workloads.fib/1", 1_000}]
    assert Enum.map(TraceStore.list(), & &1.name) == ["shipped", "stored"]
  end

  test "a pending trace that cannot be built reads as not kept, and says why" do
    broken = %{pending("broken", 1_000) | tree: {{}, {}, <<1, 2, 3>>, 0}}
    {:ok, id} = TraceStore.put(broken)

    log = capture_log(fn -> assert TraceStore.get(id) == :error end)
    assert log =~ "the kept trace #{id} could not be built"
  end

  test "trace/3, start_trace/2 and telemetry traces land here when they pass their threshold" do
    FlameOn.Client.trace("over", fn -> Workloads.busy(5) end, threshold_ms: 1)
    FlameOn.Client.trace("under", fn -> :quick end, threshold_ms: 10_000)

    pid = spawn(fn -> Workloads.busy(200) end)
    {:ok, ref} = FlameOn.Client.start_trace(pid, name: "started")
    Process.sleep(30)
    {:ok, _} = FlameOn.Client.stop_trace(ref)

    config = [name: "telemetry span"]
    FlameOn.Client.Telemetry.handle_event([:my_app, :job, :start], %{}, %{}, config)
    Workloads.busy(3)
    FlameOn.Client.Telemetry.handle_event([:my_app, :job, :stop], %{}, %{}, config)
    settle()

    names = Enum.map(TraceStore.list(), & &1.name)
    assert "over" in names
    assert "started" in names
    assert "telemetry span" in names
    refute "under" in names
    assert_node_clean()
  end
end
