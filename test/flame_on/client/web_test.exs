defmodule FlameOn.Client.WebTest.Work do
  @moduledoc false
  # What the UI's captures wait for.
  def handle(ms), do: {:handled, spin(System.monotonic_time(:microsecond) + ms * 1000, 0)}

  def spin(deadline, acc) do
    if System.monotonic_time(:microsecond) < deadline, do: spin(deadline, acc + 1), else: acc
  end

  def ask(server), do: GenServer.call(server, {:spin, 20})

  # Works, then asks a server to work: a cross-process trace.
  def serve(server) do
    spin(System.monotonic_time(:microsecond) + 15_000, 0)
    {:served, ask(server)}
  end

  def never_called, do: :never
end

defmodule FlameOn.Client.WebTest do
  # The web UI over HTTP: the list, the capture form and its checks
  # (CSRF, bad input, the token off loopback, Host), the trace page and
  # its downloads; and in headless chromium: the form clicked through to
  # the new trace's page, whose flame graph renders and answers hover and
  # search.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Export
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web
  alias FlameOn.Client.Node.Gates
  alias FlameOn.Client.Test.Chromium
  alias FlameOn.Client.Test.Server
  alias FlameOn.Client.WebTest.Work

  doctest FlameOn.Client.Web

  setup do
    ensure_app_started()
    assert_node_clean()
    TraceStore.clear()
    {:ok, url} = Web.start(port: 0)
    on_exit(fn -> Web.stop(url) end)
    %{url: url}
  end

  # --- a small HTTP client: full control over what is sent ----------------------

  import FlameOn.Client.Test.WebClient, only: [request: 3, request: 4, request: 5, get: 2, get: 3]

  defp wait_until(fun, tries \\ 200) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("condition not met in time")
      true -> Process.sleep(10) && wait_until(fun, tries - 1)
    end
  end

  # What a browser gets from the page: the form's CSRF token, and the
  # cookie it is bound to (as a request header).
  defp csrf(url) do
    {200, headers, body} = get(url, "/")
    [_, token] = Regex.run(~r/name="_csrf_token" value="([^"]+)"/, body)
    [_, cookie] = Regex.run(~r/^(flame_on_csrf_\d+=[^;]+);/, headers["set-cookie"])
    {token, {"cookie", cookie}}
  end

  defp post_form(url, path, form, headers \\ []) do
    request(
      url,
      "POST",
      path,
      [{"content-type", "application/x-www-form-urlencoded"} | headers],
      URI.encode_query(form)
    )
  end

  defp traced!(name, fun) do
    {_, profile} = FlameOn.Client.profile(fun, name: name)
    {:ok, _} = TraceStore.put(profile)
    profile
  end

  # --- HTTP -------------------------------------------------------------------------

  test "start/1 on port 0 listens on loopback and lists recent traces, newest first", %{url: url} do
    assert url =~ ~r{^http://127\.0\.0\.1:\d+/$}
    {200, headers, body} = get(url, "/")
    assert headers["content-type"] =~ "text/html"
    assert headers["content-security-policy"] =~ "frame-ancestors 'none'"
    assert body =~ ~s(id="capture-form")
    assert body =~ "No trace yet"

    first = traced!("first <trace>", fn -> Work.handle(2) end)
    second = traced!("second", fn -> Work.handle(2) end)
    {200, _, body} = get(url, "/")
    assert body =~ "first &lt;trace&gt;"
    refute body =~ "first <trace>"
    [a, b] = Regex.scan(~r{href="/traces/(\d+)"}, body, capture: :all_but_first)
    assert [a, b] == [["#{second.trace_id}"], ["#{first.trace_id}"]]
    assert url in Web.urls()
  end

  test "the trace page: the flame graph inline, the process selector, stats and downloads", %{
    url: url
  } do
    {:ok, server} = Server.start()

    {_, profile} =
      FlameOn.Client.profile(fn -> Work.ask(server) end, cross_process: true, name: "asked")

    {:ok, id} = TraceStore.put(profile)
    {200, _, body} = get(url, "/traces/#{id}")
    assert body =~ "<svg"
    refute body =~ "<?xml"
    assert body =~ "FlameOn.Client.Test.Server.handle_call/3"
    # spans as a table: the callee's row links back to its parent
    [root | _] = profile.graph.spans
    assert body =~ ~s(id="spans")
    assert body =~ ~s(<a href="#span-#{root.span_id}">#{root.span_id}</a>)
    # one link per process, and the page of one process shows its stacks only
    server_link = "?pid=" <> FlameOn.Client.Web.Router.pid_text(server)
    assert body =~ server_link
    {200, _, one} = get(url, "/traces/#{id}" <> server_link)
    assert one =~ "Server.handle_call/3"
    refute one =~ "Work.ask/1;"
    assert {404, _, _} = get(url, "/traces/#{id}?pid=0.1.0")

    for {format, type} <- [
          {"folded", "text/plain"},
          {"speedscope", "application/json"},
          {"perfetto", "application/json"},
          {"pprof", "application/octet-stream"},
          {"svg", "image/svg+xml"}
        ] do
      {200, headers, body} = get(url, "/traces/#{id}/download/#{format}")
      assert headers["content-type"] =~ type
      assert headers["content-disposition"] =~ ~s(filename="asked.)
      assert byte_size(body) > 0
    end

    {200, _, folded} = get(url, "/traces/#{id}/download/folded")
    assert folded == IO.iodata_to_binary(Export.folded(profile))
    GenServer.stop(server)
  end

  test "a deep Enum.map's page: a short flame graph; a truncated one names the options", %{
    url: url
  } do
    list = Enum.to_list(1..3_000)
    work = fn -> Enum.map(list, &(&1 * 2)) end
    {_, collapsed} = FlameOn.Client.profile(work, name: "deep")
    {:ok, id} = TraceStore.put(collapsed)
    {200, _, body} = get(url, "/traces/#{id}")
    [_, height] = Regex.run(~r/<svg[^>]*\sheight="(\d+)"/, body)
    assert String.to_integer(height) < 2_000
    refute body =~ ~s(id="truncated")

    {_, exact} =
      FlameOn.Client.profile(work, name: "deep exact", collapse_recursion: false, max_depth: 64)

    {:ok, id} = TraceStore.put(exact)
    {200, _, body} = get(url, "/traces/#{id}")
    assert body =~ ~s(id="truncated")
    assert body =~ "raise :max_depth"
    assert body =~ ":collapse_recursion"
  end

  test "unknown pages, traces and methods get error pages", %{url: url} do
    assert {404, _, body} = get(url, "/traces/12345")
    assert body =~ "no trace 12345"
    assert {404, _, _} = get(url, "/traces/abc")
    assert {404, _, _} = get(url, "/nowhere")
    assert {404, _, _} = get(url, "/traces/1/download/exe")
    assert {405, %{"allow" => "GET, POST"}, _} = request(url, "DELETE", "/")
    assert {413, _, _} = request(url, "POST", "/capture", [{"content-length", "10000000"}])
    assert {404, _, _} = get(url, "/traces/%zz")
    assert {400, _, _} = request(url, "GET", "/", [{"bad header line without colon", ""}])
  end

  test "a capture needs the form's CSRF token, and a same-site request", %{url: url} do
    form = %{"function" => "FlameOn.Client.WebTest.Work.handle/1", "timeout" => "5"}
    assert {403, _, body} = post_form(url, "/capture", form)
    assert body =~ "CSRF"
    assert {403, _, _} = post_form(url, "/capture", Map.put(form, "_csrf_token", "forged"))
    {token, cookie} = csrf(url)
    # the token without its cookie
    assert {403, _, _} = post_form(url, "/capture", Map.put(form, "_csrf_token", token))

    assert {403, _, _} =
             post_form(url, "/capture", Map.put(form, "_csrf_token", token), [
               cookie,
               {"origin", "http://evil.example"}
             ])

    assert {403, _, _} =
             post_form(url, "/capture", Map.put(form, "_csrf_token", token), [
               cookie,
               {"sec-fetch-site", "cross-site"}
             ])

    assert Gates.waiting() == []
    assert_node_clean()
  end

  test "bad input is answered with an error page, and nothing is left on", %{url: url} do
    {token, cookie} = csrf(url)

    for {form, status, message} <- [
          {%{"function" => "No.Such.Module.f/1"}, 400, "no module named No.Such.Module"},
          {%{"function" => "Enum.nope/1"}, 400, "Enum does not define nope/1"},
          {%{"function" => "Enum.map/256"}, 400, "arity must be an integer from 0 to 255"},
          {%{"function" => "not a function"}, 400, "expected Module.fun/arity"},
          {%{"function" => ""}, 400, "give a function"},
          {%{"function" => "Enum.map/2", "timeout" => "100000"}, 400, "timeout must be"},
          {%{"function" => "Enum.map/2", "timeout" => "-1"}, 400, "timeout must be"},
          {%{"function" => "Enum.map/2", "mode" => "fast"}, 400, "mode must be"}
        ] do
      form = Map.merge(%{"timeout" => "5", "_csrf_token" => token}, form)
      assert {^status, _, body} = post_form(url, "/capture", form, [cookie])
      assert body =~ ~s(id="error-message")
      assert body =~ message
    end

    assert {400, _, _} =
             request(url, "POST", "/capture", [{"content-type", "text/plain"}], "function=x")

    # a bad form is answered as such even without the CSRF token: nothing starts
    assert {400, _, body} = post_form(url, "/capture", %{"function" => "No.Such.Module.f/1"})
    assert body =~ "no module named No.Such.Module"

    assert Gates.waiting() == []
    assert_node_clean()
  end

  test "a capture from the form: waiting page, then the trace's page", %{url: url} do
    {token, cookie} = csrf(url)

    form = %{
      "function" => "FlameOn.Client.WebTest.Work.handle/1",
      "timeout" => "30",
      "mode" => "nif",
      "_csrf_token" => token
    }

    assert {303, %{"location" => "/captures/" <> id = location}, _} =
             post_form(url, "/capture", form, [cookie])

    assert {200, _, waiting} = get(url, location)
    assert waiting =~ ~s(id="capture-waiting")
    assert waiting =~ ~s(http-equiv="refresh")
    {200, _, index} = get(url, "/")
    assert index =~ "/captures/#{id}"
    # one capture per function
    assert {409, _, _} = post_form(url, "/capture", form, [cookie])

    wait_until(fn -> match?([{{Work, :handle, 1}, _}], Gates.waiting()) end)
    Work.handle(10)
    trace_location = wait_for_redirect(url, location)
    assert "/traces/" <> trace_id = trace_location
    {200, _, page} = get(url, trace_location)
    assert page =~ "<svg"
    assert page =~ "FlameOn.Client.WebTest.Work.handle/1"
    assert {:ok, profile} = TraceStore.get(String.to_integer(trace_id))
    assert profile.pid == self()
    assert_node_clean()
  end

  defp wait_for_redirect(url, location, tries \\ 100) do
    case get(url, location) do
      {303, %{"location" => to}, _} ->
        to

      {200, _, _} when tries > 0 ->
        Process.sleep(50)
        wait_for_redirect(url, location, tries - 1)
    end
  end

  test "a capture that times out, and one cancelled, say so", %{url: url} do
    {token, cookie} = csrf(url)

    form = %{
      "function" => "FlameOn.Client.WebTest.Work.never_called/0",
      "timeout" => "1",
      "_csrf_token" => token
    }

    {303, %{"location" => location}, _} = post_form(url, "/capture", form, [cookie])
    Process.sleep(1_500)
    {200, _, page} = get(url, location)
    assert page =~ ~s(id="capture-error")
    assert page =~ "No process called FlameOn.Client.WebTest.Work.never_called/0 within 1 s."

    form = %{
      "function" => "FlameOn.Client.WebTest.Work.handle/1",
      "timeout" => "60",
      "_csrf_token" => token
    }

    {303, %{"location" => "/captures/" <> id = location}, _} =
      post_form(url, "/capture", form, [cookie])

    wait_until(fn -> match?([{{Work, :handle, 1}, _}], Gates.waiting()) end)

    assert {303, %{"location" => "/"}, _} =
             post_form(url, "/captures/#{id}/cancel", %{"_csrf_token" => token}, [cookie])

    {200, _, page} = get(url, location)
    assert page =~ "was cancelled"
    assert_node_clean()
    assert Gates.waiting() == []
  end

  test "a capture that cannot start says why, and leaves nothing", %{url: url} do
    # another tool's call tracing: exact captures refuse to replace it
    :erlang.trace_pattern(:on_load, true, [:local])

    try do
      {token, cookie} = csrf(url)

      form = %{
        "function" => "FlameOn.Client.WebTest.Work.handle/1",
        "mode" => "nif",
        "_csrf_token" => token
      }

      {303, %{"location" => location}, _} = post_form(url, "/capture", form, [cookie])

      wait_until(fn ->
        match?({200, _, _}, get(url, location)) and
          not (elem(get(url, location), 2) =~ "capture-waiting")
      end)

      {200, _, page} = get(url, location)
      assert page =~ ~s(id="capture-error")
      assert page =~ "could not start: another tool is call tracing on this node"
    after
      :erlang.trace_pattern(:on_load, false, [:local])
    end

    assert Gates.waiting() == []
    assert_node_clean()
  end

  test "off loopback: refused without a token, and then the token is asked on every request" do
    assert {:error, :token_required} = Web.start(ip: {0, 0, 0, 0}, port: 0)
    assert {:error, :token_required} = Web.start(ip: "0.0.0.0", port: 0)
    assert_raise ArgumentError, fn -> Web.start(ip: "nonsense", port: 0) end

    token = "a-long-random-token-0123456789"
    {:ok, url} = Web.start(ip: {0, 0, 0, 0}, port: 0, token: token)
    port = URI.parse(url).port
    local = "http://127.0.0.1:#{port}/"

    try do
      assert {401, _, body} = get(local, "/")
      assert body =~ "token"
      assert {401, _, _} = get(local, "/", [{"authorization", "Bearer wrong"}])
      assert {200, _, _} = get(local, "/", [{"authorization", "Bearer #{token}"}])

      # ?token= once: a cookie, and the token out of the address bar
      assert {303, headers, _} = get(local, "/?token=#{token}")
      assert headers["location"] == "/"
      assert headers["set-cookie"] =~ "HttpOnly"
      [_, session] = Regex.run(~r/^(flame_on_token_#{port}=[^;]+);/, headers["set-cookie"])
      assert {200, _, _} = get(local, "/", [{"cookie", session}])
      assert {401, _, _} = post_form(local, "/capture", %{"function" => "Enum.map/2"})
    after
      Web.stop(url)
    end
  end

  test "on loopback without a token, another Host is refused (DNS rebinding)", %{url: url} do
    %URI{port: port} = URI.parse(url)
    assert {403, _, _} = get(url, "/", [{"host", "evil.example:#{port}"}])
  end

  # --- headless chromium ------------------------------------------------------------

  test "chromium: the list, the capture form clicked through to the new trace's page, and its flame graph",
       %{url: url} do
    traced!("earlier trace", fn -> Work.handle(3) end)
    browser = Chromium.start!()

    try do
      page = Chromium.open!(browser, url)
      assert Chromium.eval!(page, "document.querySelectorAll('#traces tr').length") == 2

      assert Chromium.eval!(page, "document.querySelector('#traces a').textContent") ==
               "earlier trace"

      # bad input: the error page
      Chromium.eval!(page, "document.getElementById('capture-function').focus()")
      Chromium.type!(page, "No.Such.fun/1")
      Chromium.click!(page, "#capture-submit")
      Chromium.wait_for!(page, "document.getElementById('error-message')")

      assert Chromium.eval!(page, "document.getElementById('error-message').textContent") =~
               "no module named No.Such"

      # a real capture: type, click, the call happens, the trace opens
      Chromium.navigate!(page, url)
      Chromium.eval!(page, "document.getElementById('capture-function').focus()")
      Chromium.type!(page, "FlameOn.Client.WebTest.Work.serve/1")
      Chromium.eval!(page, "document.querySelector('select[name=mode]').value = 'nif'")
      Chromium.click!(page, "input[name=cross_process]")
      Chromium.click!(page, "#capture-submit")
      Chromium.wait_for!(page, "location.pathname.startsWith('/captures/')")
      Chromium.wait_for!(page, "document.getElementById('capture-waiting')")
      {:ok, server} = Server.start()
      caller = spawn(fn -> Work.serve(server) end)

      Chromium.wait_for!(
        page,
        "location.pathname.startsWith('/traces/') && document.getElementById('frames')"
      )

      # the span graph: the root and the server's span, linked
      assert Chromium.eval!(page, "document.querySelectorAll('#spans tr').length") == 3
      assert Chromium.eval!(page, "document.querySelectorAll('#processes a').length") == 3

      # the flame graph rendered, its script alive: hover and search work
      frames = Chromium.eval!(page, "document.querySelectorAll('#frames g').length")
      assert frames >= 3
      assert Chromium.eval!(page, "document.title") =~ "FlameOn.Client.WebTest.Work.serve/1"

      assert Chromium.eval!(page, "document.getElementById('facts').textContent") =~
               to_string(:erlang.pid_to_list(caller))

      %{"x" => x, "y" => y} =
        Chromium.eval!(page, """
        (function () {
          var g = Array.prototype.find.call(document.querySelectorAll('#frames g'),
            function (g) { return g.textContent.indexOf('Work.spin/2') >= 0; });
          g.scrollIntoView({block: "center"});
          var r = g.querySelector('rect').getBoundingClientRect();
          return {x: r.left + r.width / 2, y: r.top + r.height / 2};
        })()
        """)

      Chromium.mouse!(page, "mouseMoved", x, y)

      assert Chromium.eval!(page, "document.getElementById('details').textContent") =~
               "Work.spin/2"

      # under the page's strict Content-Security-Policy (a nonce, no
      # 'unsafe-inline'): the page's stylesheet and the SVG's apply, and
      # the SVG's script ran (hover above, search below)
      assert Chromium.eval!(
               page,
               "getComputedStyle(document.querySelector('header')).backgroundColor"
             ) == "rgb(59, 47, 42)"

      assert Chromium.eval!(page, "getComputedStyle(document.getElementById('unzoom')).display") ==
               "none"

      Chromium.eval!(page, "search('spin')")

      assert Chromium.eval!(page, "document.getElementById('matched').textContent") =~
               ~r/Matched \/spin\/: [\d,]+ µs/

      screenshot =
        Path.join(
          System.tmp_dir!(),
          "flame_on_web_trace_#{System.unique_integer([:positive])}.png"
        )

      Chromium.eval!(page, "search(null); window.scrollTo(0, 0)")
      Chromium.screenshot!(page, screenshot)
      assert File.stat!(screenshot).size > 10_000
      IO.puts("\nweb UI trace page screenshot: #{screenshot}")

      # FLAME_ON_DOCS=1 refreshes the picture the README shows
      if System.get_env("FLAME_ON_DOCS") == "1",
        do: File.cp!(screenshot, Path.expand("../../../docs/web_trace.png", __DIR__))
    after
      Chromium.stop(browser)
    end

    assert_node_clean()
  end
end
