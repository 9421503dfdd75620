defmodule FlameOn.Client.Test.Chromium do
  @moduledoc false
  # Drives Debian's headless chromium over the Chrome DevTools Protocol,
  # for tests that click through pages: the protocol runs over a pipe
  # (--remote-debugging-pipe: JSON messages ended by a NUL byte, commands
  # on the browser's fd 3, answers and events on its fd 4), so no
  # WebSocket client is needed. The calling process owns the browser.
  #
  #   browser = Chromium.start!()
  #   page = Chromium.open!(browser, "http://127.0.0.1:4040/")
  #   Chromium.eval!(page, "document.title")
  #   Chromium.stop(browser)

  alias FlameOn.Client.Test.Tools

  defstruct [:port, :os_pid, :dir]

  @timeout 30_000

  def start! do
    chromium = Tools.executable_of!(~w(chromium chromium-browser), "chromium")

    dir = Path.join(System.tmp_dir!(), "flame_on_chromium_#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)

    flags = ~w(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run
         --disable-extensions --disable-background-networking --remote-debugging-pipe
         --window-size=1400,1000) ++ ["--user-data-dir=#{dir}", "about:blank"]

    # fd 3 reads what we write (our stdin), fd 4 writes to our stdout; the
    # browser's own output goes nowhere.
    script =
      "exec #{shell_quote(chromium)} #{Enum.map_join(flags, " ", &shell_quote/1)} " <>
        "3<&0 4>&1 0</dev/null 1>/dev/null 2>/dev/null"

    port =
      Port.open({:spawn_executable, "/bin/sh"}, [:binary, :exit_status, args: ["-c", script]])

    {:os_pid, os_pid} = Port.info(port, :os_pid)
    Process.put({__MODULE__, port}, %{buffer: "", next_id: 1, events: []})
    %__MODULE__{port: port, os_pid: os_pid, dir: dir}
  end

  def stop(%__MODULE__{port: port, os_pid: os_pid, dir: dir} = browser) do
    try do
      command(browser, nil, "Browser.close", %{}, 5_000)
    catch
      _, _ -> :ok
    end

    # our own child, by its id
    System.cmd("kill", ["-9", Integer.to_string(os_pid)], stderr_to_stdout: true)

    try do
      Port.close(port)
    rescue
      ArgumentError -> :ok
    end

    Process.delete({__MODULE__, port})
    File.rm_rf(dir)
    :ok
  end

  defp shell_quote(text), do: "'" <> String.replace(text, "'", "'\\''") <> "'"

  @doc "A new tab showing `url`, once loaded: `%{browser: b, session: id}`."
  def open!(browser, url) do
    %{"targetId" => target} = command(browser, nil, "Target.createTarget", %{url: "about:blank"})

    %{"sessionId" => session} =
      command(browser, nil, "Target.attachToTarget", %{targetId: target, flatten: true})

    page = %{browser: browser, session: session}
    command(browser, session, "Page.enable", %{})
    command(browser, session, "Runtime.enable", %{})
    navigate!(page, url)
    page
  end

  @doc "Navigates and waits for the load event."
  def navigate!(%{browser: browser, session: session} = page, url) do
    drop_events(browser, "Page.loadEventFired")
    command(browser, session, "Page.navigate", %{url: url})
    await_event!(browser, session, "Page.loadEventFired")
    page
  end

  @doc "Evaluates `js` in the page and returns its value (promises awaited)."
  def eval!(%{browser: browser, session: session}, js) do
    result =
      command(browser, session, "Runtime.evaluate", %{
        expression: js,
        returnByValue: true,
        awaitPromise: true
      })

    case result do
      %{"exceptionDetails" => details} -> raise "JS exception: #{inspect(details)}"
      %{"result" => value} -> Map.get(value, "value")
    end
  end

  @doc "Polls `js` until it is truthy (or fails after `timeout`)."
  def wait_for!(page, js, timeout \\ @timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout
    poll(page, js, deadline)
  end

  defp poll(page, js, deadline) do
    value =
      try do
        eval!(page, js)
      rescue
        # the page is navigating: its context is being replaced
        RuntimeError -> nil
      end

    cond do
      value not in [nil, false, 0, ""] ->
        value

      System.monotonic_time(:millisecond) > deadline ->
        raise "timed out waiting for #{js}"

      true ->
        Process.sleep(100)
        poll(page, js, deadline)
    end
  end

  @doc "Types `text` into the focused element, as keystrokes would."
  def type!(%{browser: browser, session: session}, text) do
    command(browser, session, "Input.insertText", %{text: text})
  end

  @doc "A real mouse click at the centre of the element `selector` finds."
  def click!(page, selector) do
    %{"x" => x, "y" => y} =
      eval!(page, """
      (function () {
        var el = document.querySelector(#{FlameOn.Client.Export.JSON.encode!(selector) |> IO.iodata_to_binary()});
        el.scrollIntoView({block: "center"});
        var r = el.getBoundingClientRect();
        return {x: r.left + r.width / 2, y: r.top + r.height / 2};
      })()
      """)

    mouse!(page, "mouseMoved", x, y)
    mouse!(page, "mousePressed", x, y)
    mouse!(page, "mouseReleased", x, y)
  end

  def mouse!(%{browser: browser, session: session}, type, x, y) do
    params = %{type: type, x: x, y: y, button: "left", clickCount: 1}
    params = if type == "mouseMoved", do: Map.drop(params, [:button, :clickCount]), else: params
    command(browser, session, "Input.dispatchMouseEvent", params)
  end

  @doc "Writes a PNG screenshot of the page to `path` (whole page)."
  def screenshot!(%{browser: browser, session: session}, path) do
    %{"data" => data} =
      command(browser, session, "Page.captureScreenshot", %{
        format: "png",
        captureBeyondViewport: true
      })

    File.write!(path, Base.decode64!(data))
    path
  end

  # --- protocol ---------------------------------------------------------------

  defp state(%__MODULE__{port: port}), do: Process.get({__MODULE__, port})
  defp put_state(%__MODULE__{port: port}, state), do: Process.put({__MODULE__, port}, state)

  def command(browser, session, method, params, timeout \\ @timeout) do
    state = state(browser)
    id = state.next_id
    put_state(browser, %{state | next_id: id + 1})
    message = %{id: id, method: method, params: params}
    message = if session, do: Map.put(message, :sessionId, session), else: message
    Port.command(browser.port, [FlameOn.Client.Export.JSON.encode!(message), 0])
    await_reply(browser, id, System.monotonic_time(:millisecond) + timeout, method)
  end

  defp await_reply(browser, id, deadline, method) do
    case take_message(browser, &match?(%{"id" => ^id}, &1), deadline) do
      %{"error" => error} -> raise "CDP #{method} failed: #{inspect(error)}"
      %{"result" => result} -> result
    end
  end

  defp await_event!(browser, session, name) do
    deadline = System.monotonic_time(:millisecond) + @timeout
    take_message(browser, &match?(%{"method" => ^name, "sessionId" => ^session}, &1), deadline)
  end

  defp drop_events(browser, name) do
    state = state(browser)

    put_state(browser, %{
      state
      | events: Enum.reject(state.events, &match?(%{"method" => ^name}, &1))
    })
  end

  # The first message (kept or arriving) that `match?` accepts; the others
  # stay for later.
  defp take_message(browser, match?, deadline) do
    state = state(browser)

    case Enum.split_while(state.events, &(not match?.(&1))) do
      {before, [message | rest]} ->
        put_state(browser, %{state | events: before ++ rest})
        message

      {_, []} ->
        port = browser.port
        left = max(deadline - System.monotonic_time(:millisecond), 0)

        receive do
          {^port, {:data, data}} ->
            {messages, buffer} = split(state.buffer <> data)
            decoded = Enum.map(messages, &FlameOn.Client.Test.ExportHelpers.json_decode!/1)
            put_state(browser, %{state | buffer: buffer, events: state.events ++ decoded})
            take_message(browser, match?, deadline)

          {^port, {:exit_status, status}} ->
            raise "chromium exited with status #{status}"
        after
          left -> raise "no answer from chromium in time"
        end
    end
  end

  defp split(buffer) do
    parts = String.split(buffer, <<0>>)
    {Enum.drop(parts, -1), List.last(parts)}
  end
end
