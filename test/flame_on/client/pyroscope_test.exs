defmodule FlameOn.Client.PyroscopeTest do
  # starts continuous profiling (one per node)
  use ExUnit.Case, async: false

  @moduletag :capture_log

  import FlameOn.Client.Test.ExportHelpers, only: [pprof_decode!: 1]

  alias FlameOn.Client.Continuous
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Shipper.Pyroscope

  doctest Pyroscope

  defmodule Spin do
    @moduledoc false
    def spin(0), do: :ok

    def spin(n),
      do:
        (
          _ = :erlang.phash2(n)
          spin(n - 1)
        )
  end

  setup do
    # the app's mix.exs does not list :inets (only this shipper needs it):
    # Elixir 1.15+ leaves it off the code path until asked
    FlameOn.Client.Test.Tools.otp_lib!(:inets, "erlang-inets")
    Continuous.stop()
    on_exit(&Continuous.stop/0)
  end

  # A one-request-per-connection HTTP/1.1 receiver: each request goes to
  # `test` as {:request, method, path, headers, body}; `how` is `:ok`
  # (answers 200), `{:status, n}`, or `:hang` (never answers).
  defp receiver(how) do
    test = self()
    {:ok, listen} = :gen_tcp.listen(0, [:binary, active: false, packet: :raw, reuseaddr: true])
    {:ok, port} = :inet.port(listen)
    pid = spawn_link(fn -> accept(listen, test, how) end)
    :ok = :gen_tcp.controlling_process(listen, pid)
    {"http://127.0.0.1:#{port}", pid}
  end

  defp accept(listen, test, how) do
    {:ok, socket} = :gen_tcp.accept(listen)
    spawn_link(fn -> serve(socket, test, how) end)
    accept(listen, test, how)
  end

  defp serve(socket, test, how) do
    {head, rest} = read_head(socket, "")
    [request_line | header_lines] = String.split(head, "\r\n")
    [method, path, _version] = String.split(request_line, " ")

    headers =
      Map.new(header_lines, fn line ->
        [k, v] = String.split(line, ":", parts: 2)
        {String.downcase(k), String.trim(v)}
      end)

    length = String.to_integer(Map.get(headers, "content-length", "0"))
    body = read_body(socket, rest, length)
    send(test, {:request, method, path, headers, body})

    case how do
      :hang ->
        Process.sleep(:infinity)

      other ->
        status = with :ok <- other, do: {:status, 200}
        {:status, code} = status

        :gen_tcp.send(
          socket,
          "HTTP/1.1 #{code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )

        :gen_tcp.close(socket)
    end
  end

  defp read_head(socket, acc) do
    case :binary.split(acc, "\r\n\r\n") do
      [head, rest] ->
        {head, rest}

      [_] ->
        {:ok, data} = :gen_tcp.recv(socket, 0, 5_000)
        read_head(socket, acc <> data)
    end
  end

  defp read_body(_socket, acc, length) when byte_size(acc) >= length, do: acc

  defp read_body(socket, acc, length) do
    {:ok, data} = :gen_tcp.recv(socket, 0, 5_000)
    read_body(socket, acc <> data, length)
  end

  defp query(path) do
    ["/ingest", query] = String.split(path, "?", parts: 2)
    URI.decode_query(query)
  end

  defp profile do
    pid = self()

    %Profile{
      trace_id: 7,
      name: "checkout",
      pid: pid,
      mode: :sample,
      started_at: System.monotonic_time(:microsecond) - 2_000_000,
      duration_us: 2_000_000,
      stacks: %{pid => [{"Shop.checkout/1;Shop.Tax.total/2", 1_500}]},
      process_names: %{pid => "Shop.Checkout"}
    }
  end

  test "ships a profile: query parameters, auth headers, gzipped pprof body" do
    {url, _} = receiver(:ok)

    assert :ok =
             Pyroscope.ship(profile(),
               url: url,
               app: "shop",
               labels: %{env: "test", region: "eu west"},
               tenant_id: "team-a",
               basic_auth: {"user", "s3cret"}
             )

    assert_receive {:request, "POST", path, headers, body}
    q = query(path)
    assert q["name"] == "shop.cpu{node=#{node()},env=test,region=eu west}"
    assert q["format"] == "pprof"
    assert q["spyName"] == "flame_on_client"
    assert q["sampleRate"] == "100"
    from = String.to_integer(q["from"])
    until = String.to_integer(q["until"])
    assert (until - from) in 2..3
    assert abs(until - System.os_time(:second)) <= 2

    assert headers["authorization"] == "Basic " <> Base.encode64("user:s3cret")
    assert headers["x-scope-orgid"] == "team-a"

    assert <<0x1F, 0x8B, _::binary>> = body
    pprof = pprof_decode!(body)
    names = Map.values(pprof.functions)
    assert "Shop.checkout/1" in names and "Shop.Tax.total/2" in names
    assert {"process", "Shop.Checkout"} in hd(pprof.samples).labels
  end

  test "a bearer token; an error answer is an error" do
    {url, _} = receiver({:status, 400})
    assert {:error, {:http, 400, _}} = Pyroscope.ship(profile(), url: url, app: "a", token: "tok")
    assert_receive {:request, "POST", _path, %{"authorization" => "Bearer tok"}, _body}
    # 4xx is not retried
    refute_receive {:request, _, _, _, _}, 200
  end

  test "5xx answers are retried, a bounded number of times" do
    {url, _} = receiver({:status, 503})

    assert {:error, {:http, 503, _}} =
             Pyroscope.ship(profile(), url: url, app: "a", retries: 2, backoff_ms: 10)

    for _ <- 1..3, do: assert_receive({:request, "POST", _, _, _})
    refute_receive {:request, _, _, _, _}, 200
  end

  test "bad options are errors, not crashes" do
    assert {:error, {:invalid_url, nil}} = Pyroscope.ship(profile(), app: "a")
    assert {:error, {:invalid_app, nil}} = Pyroscope.ship(profile(), url: "http://x")

    assert {:error, {:unknown_options, [:bogus]}} =
             Pyroscope.ship(profile(), url: "http://x", app: "a", bogus: 1)
  end

  test "continuous profiling ships each closed window" do
    {url, _} = receiver(:ok)
    worker = spawn_link(fn -> spin_forever() end)

    {:ok, _} =
      Continuous.start(
        window_ms: 200,
        hz: 100,
        shipper: {Pyroscope, url: url, app: "node_app", token: "t0k", labels: %{k: "v"}}
      )

    bodies =
      for _ <- 1..4 do
        assert_receive {:request, "POST", path, headers, body}
        q = query(path)
        assert q["name"] == "node_app.cpu{node=#{node()},k=v}"
        assert q["sampleRate"] == "100"
        assert headers["authorization"] == "Bearer t0k"
        assert String.to_integer(q["until"]) > String.to_integer(q["from"])
        body
      end

    Process.unlink(worker)
    Process.exit(worker, :kill)

    assert Enum.any?(bodies, fn body ->
             "FlameOn.Client.PyroscopeTest.Spin.spin/1" in Map.values(
               pprof_decode!(body).functions
             )
           end)

    # (the receiver reports a request before it answers it)
    assert Continuous.stats().shipped >= 3
  end

  defp spin_forever do
    Spin.spin(10_000)
    spin_forever()
  end

  test "a dead server does not block sampling; failures counted" do
    {:ok, listen} = :gen_tcp.listen(0, [])
    {:ok, port} = :inet.port(listen)
    :gen_tcp.close(listen)

    {:ok, _} =
      Continuous.start(
        window_ms: 100,
        hz: 100,
        max_queue: 1,
        shipper:
          {Pyroscope, url: "http://127.0.0.1:#{port}", app: "a", retries: 2, backoff_ms: 100}
      )

    Process.sleep(1_200)
    {us, stats} = :timer.tc(&Continuous.stats/0)
    assert us < 200_000
    # a sampler that waited for the shipper (three tries 100 ms apart each
    # window) would close 4 windows at most; ticks of 10 ms slip on a
    # loaded machine (57 of 120 seen), so they only show it kept ticking
    assert stats.windows >= 8
    assert stats.ticks >= 40
    assert stats.ship_failed >= 1
    assert stats.ship_dropped >= 1
    assert stats.shipped == 0
  end

  test "a slow server does not block sampling; queued windows dropped and counted" do
    {url, _} = receiver(:hang)
    worker = spawn_link(fn -> spin_forever() end)

    {:ok, _} =
      Continuous.start(
        window_ms: 100,
        hz: 100,
        max_queue: 2,
        shipper: {Pyroscope, url: url, app: "a", timeout: 10_000, retries: 0}
      )

    assert_receive {:request, "POST", _, _, _}
    Process.sleep(1_000)
    {us, stats} = :timer.tc(&Continuous.stats/0)
    Process.unlink(worker)
    Process.exit(worker, :kill)

    assert us < 200_000
    assert stats.windows >= 8
    assert stats.samples > 0
    assert stats.ship_queued == 2
    assert stats.ship_dropped >= 4
    assert stats.shipped == 0

    # stop does not wait for the hung request either
    {us, :ok} = :timer.tc(&Continuous.stop/0)
    assert us < 2_000_000
  end
end
