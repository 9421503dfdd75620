defmodule FlameOn.Client.WebEdgesTest do
  # The web UI's edges (issue #27), probed with a raw TCP client that
  # sends exactly what it is told: lines and headers too long (answered,
  # not reset), two Hosts, clients that hold a partial request (a normal
  # client is still served), the CSRF token bound to the browser, the
  # token cookie, auth schemes in any case, and the Content-Security-Policy
  # with a nonce per response.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web

  # generous: the machine may be loaded; no test asserts a speed
  @recv_timeout 30_000

  setup do
    ensure_app_started()
    TraceStore.clear()
    :ok
  end

  defp start!(opts \\ []) do
    {:ok, url} = Web.start([port: 0] ++ opts)
    on_exit(fn -> Web.stop(url) end)
    url
  end

  defp port(url), do: URI.parse(url).port

  defp connect(url) do
    {:ok, socket} =
      :gen_tcp.connect(~c"127.0.0.1", port(url), [:binary, active: false, nodelay: true])

    socket
  end

  # Sends `data` as is, then reads until the server closes: the raw answer,
  # and how the connection ended (:closed, or :econnreset when reset).
  defp exchange(url, data) do
    socket = connect(url)
    :ok = :gen_tcp.send(socket, data)
    read_all(socket, "")
  end

  defp read_all(socket, acc) do
    case :gen_tcp.recv(socket, 0, @recv_timeout) do
      {:ok, data} ->
        read_all(socket, acc <> data)

      {:error, reason} ->
        :gen_tcp.close(socket)
        {acc, reason}
    end
  end

  defp status(raw) do
    case raw do
      "HTTP/1.1 " <> <<code::binary-size(3), _::binary>> -> String.to_integer(code)
      _ -> nil
    end
  end

  # A well-formed request: {status, headers (lists, for repeated names), body}.
  defp request(url, method, path, headers, body) do
    headers =
      if(List.keymember?(headers, "host", 0), do: [], else: [{"host", "127.0.0.1:#{port(url)}"}]) ++
        headers ++
        if(body != "", do: [{"content-length", Integer.to_string(byte_size(body))}], else: [])

    {raw, :closed} =
      exchange(url, [
        "#{method} #{path} HTTP/1.1\r\n",
        Enum.map(headers, fn {k, v} -> "#{k}: #{v}\r\n" end),
        "\r\n",
        body
      ])

    parse(raw)
  end

  defp parse(raw) do
    [head, body] = String.split(raw, "\r\n\r\n", parts: 2)
    ["HTTP/1.1 " <> status_line | lines] = String.split(head, "\r\n")
    {status, _} = Integer.parse(status_line)

    headers =
      Enum.group_by(
        lines,
        fn line -> line |> String.split(": ", parts: 2) |> hd() |> String.downcase() end,
        fn line -> line |> String.split(": ", parts: 2) |> List.last() end
      )

    {status, headers, body}
  end

  defp get(url, path, headers \\ []), do: request(url, "GET", path, headers, "")

  defp header(headers, name) do
    case headers[name] do
      [value] -> value
      nil -> nil
    end
  end

  # A browser's first page: the form's CSRF token and the cookie it is bound
  # to (as a request header).
  defp browser(url, headers \\ []) do
    {200, response, body} = get(url, "/", headers)
    [_, token] = Regex.run(~r/name="_csrf_token" value="([^"]+)"/, body)
    [_, cookie] = Regex.run(~r/^(flame_on_csrf_\d+=[^;]+);/, header(response, "set-cookie"))
    {token, {"cookie", cookie}}
  end

  # A POST without side effects: cancelling a capture that does not exist
  # (303 once past the CSRF check).
  defp cancel(url, token, headers) do
    request(
      url,
      "POST",
      "/captures/none/cancel",
      [{"content-type", "application/x-www-form-urlencoded"} | headers],
      URI.encode_query(%{"_csrf_token" => token})
    )
  end

  # --- lines and headers too long -------------------------------------------------

  test "a request line over the limit is answered 414 and the connection closed, not reset" do
    url = start!()

    for size <- [9_000, 10_240] do
      line = "GET /" <> String.duplicate("a", size) <> " HTTP/1.1\r\n"
      {raw, ending} = exchange(url, [line, "host: 127.0.0.1\r\n\r\n"])

      assert status(raw) == 414,
             "#{size} bytes: #{inspect(binary_part(raw, 0, min(80, byte_size(raw))))}"

      assert raw =~ "request line too long"
      assert ending == :closed
    end

    # the server still serves
    assert {200, _, _} = get(url, "/")
  end

  test "a header over the limit, or too many, is answered 431 and the connection closed" do
    url = start!()

    for size <- [9_000, 10_240] do
      {raw, ending} =
        exchange(url, [
          "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ",
          String.duplicate("b", size),
          "\r\n\r\n"
        ])

      assert status(raw) == 431, "#{size} bytes"
      assert raw =~ "request header too long"
      assert ending == :closed
    end

    many = for i <- 1..70, do: "x-h#{i}: #{i}\r\n"
    {raw, :closed} = exchange(url, ["GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n", many, "\r\n"])
    assert status(raw) == 431
    assert raw =~ "too many request headers"

    # just under the limit is served
    {raw, :closed} =
      exchange(url, [
        "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ",
        String.duplicate("b", 8_000),
        "\r\n\r\n"
      ])

    assert status(raw) == 200
  end

  test "two Host headers, or two Content-Lengths, are a 400" do
    url = start!()

    assert {400, _, body} =
             get(url, "/", [{"host", "127.0.0.1:#{port(url)}"}, {"host", "127.0.0.1"}])

    assert body =~ "more than one host header"

    assert {400, _, _} =
             get(url, "/", [{"host", "evil.example"}, {"host", "127.0.0.1:#{port(url)}"}])

    assert {400, _, body} = get(url, "/", [{"content-length", "0"}, {"Content-Length", "0"}])

    assert body =~ "more than one content-length header"
  end

  # --- slow and idle clients ---------------------------------------------------------

  test "a partial request is answered 408 once the head's time is up; an idle connection is closed" do
    url = start!()
    partial = connect(url)
    :ok = :gen_tcp.send(partial, "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n")
    idle = connect(url)

    {raw, :closed} = read_all(partial, "")
    assert status(raw) == 408
    assert {"", :closed} = read_all(idle, "")
  end

  test "connections that hold a partial request do not keep a normal client from being served" do
    max = 4
    url = start!(max_connections: max)

    slow =
      for _ <- 1..(2 * max) do
        socket = connect(url)
        :ok = :gen_tcp.send(socket, "GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        socket
      end

    # with every connection taken by the slow ones: served, not a 503
    assert {200, _, body} = get(url, "/")
    assert body =~ ~s(id="capture-form")

    # each slow one ends: given way to a newer one (closed), or timed out (408)
    endings = for socket <- slow, do: read_all(socket, "")
    assert Enum.all?(endings, fn {raw, _} -> raw == "" or status(raw) == 408 end)
    assert Enum.any?(endings, fn {raw, _} -> status(raw) == 408 end)
    assert {200, _, _} = get(url, "/")
  end

  # --- CSRF, token, cookies, auth -------------------------------------------------

  test "the CSRF token is bound to the browser's cookie: without it, or with another's, refused" do
    url = start!()
    port = port(url)
    {token_a, cookie_a} = browser(url)
    {token_b, cookie_b} = browser(url)
    assert token_a != token_b
    assert String.starts_with?(elem(cookie_a, 1), "flame_on_csrf_#{port}=")

    assert {303, _, _} = cancel(url, token_a, [cookie_a])
    assert {303, _, _} = cancel(url, token_b, [cookie_b])
    # the token alone (what one constant token per server allowed), or with
    # another browser's cookie
    assert {403, _, body} = cancel(url, token_a, [])
    assert body =~ "CSRF"
    assert {403, _, _} = cancel(url, token_a, [cookie_b])
    assert {403, _, _} = cancel(url, "", [cookie_a])
    assert {403, _, _} = cancel(url, token_a, [{"cookie", "flame_on_csrf_#{port}=forged"}])

    # a browser keeps its id: its next page sets no cookie and carries the same token
    {200, headers, body} = get(url, "/", [cookie_a])
    assert header(headers, "set-cookie") == nil
    assert body =~ ~s(name="_csrf_token" value="#{token_a}")

    # the cookie's attributes; Secure behind a TLS proxy
    {200, headers, _} = get(url, "/")
    set_cookie = header(headers, "set-cookie")
    assert set_cookie =~ "; Path=/; HttpOnly; SameSite=Strict"
    refute set_cookie =~ "Secure"
    {200, headers, _} = get(url, "/", [{"x-forwarded-proto", "https"}])
    assert header(headers, "set-cookie") =~ "; Path=/; HttpOnly; SameSite=Strict; Secure"
  end

  test "?token= sets a cookie named for the port that does not hold the token" do
    token = "a-long-random-token-0123456789"
    url = start!(ip: {0, 0, 0, 0}, token: token)
    port = port(url)
    local = "http://127.0.0.1:#{port}/"

    assert {303, headers, _} = get(local, "/traces?token=#{token}&x=1")
    assert header(headers, "location") == "/traces?x=1"
    set_cookie = header(headers, "set-cookie")

    assert [_, name, value, attributes] =
             Regex.run(~r/^(flame_on_token_\d+)=([^;]+)(;.*)$/, set_cookie)

    assert name == "flame_on_token_#{port}"
    refute value =~ token
    assert attributes == "; Path=/; HttpOnly; SameSite=Strict"

    assert {200, _, _} = get(local, "/", [{"cookie", "other=1; #{name}=#{value}"}])
    # the raw token as a cookie, under either name, is not a session
    assert {401, _, _} = get(local, "/", [{"cookie", "#{name}=#{token}"}])
    assert {401, _, _} = get(local, "/", [{"cookie", "flame_on_token=#{token}"}])
    assert {401, _, _} = get(local, "/", [{"cookie", "#{name}=#{value}x"}])

    {303, headers, _} = get(local, "/?token=#{token}", [{"x-forwarded-proto", "HTTPS"}])
    assert header(headers, "set-cookie") =~ "; SameSite=Strict; Secure"
  end

  test "off loopback a token shorter than 16 characters is refused; on loopback it is a warning" do
    error =
      assert_raise ArgumentError, fn ->
        Web.start(ip: {0, 0, 0, 0}, port: 0, token: "short-token")
      end

    assert error.message =~ "the :token must be at least 16 characters (got 11)"

    assert_raise ArgumentError, fn ->
      Web.start(ip: "0.0.0.0", port: 0, token: String.duplicate("x", 15))
    end

    assert Web.urls() == []

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {:ok, url} = Web.start(port: 0, token: "short")
        Web.stop(url)
      end)

    assert log =~ "shorter than 16 characters"
  end

  test "the Authorization scheme is matched in any case" do
    token = "a-long-random-token-0123456789"
    url = start!(ip: {0, 0, 0, 0}, token: token)
    local = "http://127.0.0.1:#{port(url)}/"

    for value <- ["Bearer #{token}", "bearer #{token}", "BEARER #{token}", "bEaReR  #{token} "] do
      assert {200, _, _} = get(local, "/", [{"authorization", value}]), value
    end

    for value <- ["Basic #{token}", "Bearer", "bearer wrong", token] do
      assert {401, _, _} = get(local, "/", [{"authorization", value}]), value
    end
  end

  # --- Content-Security-Policy --------------------------------------------------------

  # The policy's nonce, after checking the policy allows nothing inline
  # without it, and that every inline script and stylesheet of the page
  # carries it.
  defp strict_nonce!(headers, body) do
    policy = header(headers, "content-security-policy")
    refute policy =~ "unsafe"

    assert [_, nonce] =
             Regex.run(~r/script-src 'nonce-([A-Za-z0-9_-]{16,})'; style-src 'nonce-\1';/, policy)

    assert policy =~ "default-src 'none';"
    assert policy =~ "frame-ancestors 'none'"
    tags = Regex.scan(~r/<(?:script|style)\b[^>]*>/i, body) |> Enum.map(&hd/1)
    assert tags != []
    assert Enum.all?(tags, &(&1 =~ ~s( nonce="#{nonce}"))), inspect(tags)
    # attributes the policy would not run
    assert Regex.scan(~r/<[^>]*\s(?:on[a-z]+|style)=/i, body) == []
    nonce
  end

  test "every page's Content-Security-Policy allows its inline scripts and styles by a nonce of its own" do
    url = start!()
    {_, profile} = FlameOn.Client.profile(fn -> Enum.sum(1..50_000) end, name: "csp")
    {:ok, id} = TraceStore.put(profile)

    {200, headers, body} = get(url, "/traces/#{id}")
    trace_nonce = strict_nonce!(headers, body)
    assert body =~ "<svg"
    # the SVG's own script, and the call of its init (its onload= is not run)
    assert length(Regex.scan(~r/<script\b/, body)) == 2
    assert body =~ ~s[<script nonce="#{trace_nonce}">init(null);</script>]

    {200, headers, body} = get(url, "/")
    index_nonce = strict_nonce!(headers, body)
    {404, headers, body} = get(url, "/nowhere")
    error_nonce = strict_nonce!(headers, body)
    assert Enum.uniq([trace_nonce, index_nonce, error_nonce]) |> length() == 3

    # the waiting page: its Cancel form had a style= attribute
    {token, cookie} = browser(url)

    {303, headers, _} =
      request(
        url,
        "POST",
        "/capture",
        [{"content-type", "application/x-www-form-urlencoded"}, cookie],
        URI.encode_query(%{
          "function" => "FlameOn.Client.WebEdgesTest.never_called/0",
          "timeout" => "30",
          "_csrf_token" => token
        })
      )

    location = header(headers, "location")
    {200, headers, body} = get(url, location)
    assert body =~ ~s(id="capture-waiting")
    strict_nonce!(headers, body)

    {303, _, _} =
      request(
        url,
        "POST",
        location <> "/cancel",
        [{"content-type", "application/x-www-form-urlencoded"}, cookie],
        URI.encode_query(%{"_csrf_token" => token})
      )

    # a download runs nothing, even opened in place
    {200, headers, _} = get(url, "/traces/#{id}/download/svg")
    policy = header(headers, "content-security-policy")
    assert policy =~ "default-src 'none';"
    refute policy =~ "script-src"
    assert_node_clean()
  end

  def never_called, do: :never
end
