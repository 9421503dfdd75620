defmodule FlameOn.Client.Web.Router do
  @moduledoc false
  # Request in, response out: access checks first (token, Host, CSRF on
  # every POST), then the pages. Nothing here raises on bad input: every
  # refusal is an error page with its status.
  #
  # Cookies are named for the server's port (cookies are not scoped by
  # port: two UIs on one host would overwrite each other's), and hold no
  # secret of the user's: values derived from config.secret, which is
  # random per server and never leaves it.
  #
  #   * flame_on_token_PORT: HMAC(secret, token), set by ?token=TOKEN,
  #     accepted in place of the token; a local service on another port
  #     that receives it does not learn the token, and it is worth nothing
  #     once the server restarts.
  #   * flame_on_csrf_PORT: a random id per browser, set by the first
  #     page it gets. A form carries HMAC(secret, id) and a POST must send
  #     both, matching (signed double-submit): the form token of one
  #     browser is worth nothing with another's cookie, or none.

  alias FlameOn.Client.Export
  alias FlameOn.Client.NextCall
  alias FlameOn.Client.Profile
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Web.HTTP
  alias FlameOn.Client.Web.Pages
  alias FlameOn.Client.Web.Captures
  alias FlameOn.Client.Web.Compare

  @doc "The response to `request` on the server with `config`."
  @spec handle(HTTP.request(), map()) :: HTTP.response()
  def handle(request, config) do
    with :ok <- check_host(request, config),
         :ok <- check_token(request, config) do
      {browser, set_cookie} = browser(request, config)
      {status, headers, body} = route(request, Map.put(config, :csrf, csrf(config, browser)))
      {status, set_cookie ++ headers, body}
    end
  end

  @doc "An error page."
  @spec error(pos_integer(), String.t()) :: HTTP.response()
  def error(status, message), do: html(status, &Pages.error(status, message, &1))

  # --- access -------------------------------------------------------------------

  # On loopback without a token, a page reached through another host name
  # is a DNS-rebinding attempt from some web page: refused. (A request with
  # no Host at all comes from a script, not a browser.)
  defp check_host(_request, %{loopback: false}), do: :ok
  defp check_host(_request, %{token: token}) when is_binary(token), do: :ok

  defp check_host(%{headers: headers}, _config) do
    case headers["host"] do
      nil ->
        :ok

      host ->
        name =
          host
          |> String.replace(~r/:\d+$/, "")
          |> String.trim_leading("[")
          |> String.trim_trailing("]")

        if name in ["localhost", "127.0.0.1", "::1"] or name =~ ~r/^127\.\d+\.\d+\.\d+$/,
          do: :ok,
          else: error(403, "this UI only answers to localhost (Host: #{host})")
    end
  end

  defp check_token(_request, %{token: nil}), do: :ok

  defp check_token(%{headers: headers, query: query} = request, %{token: token} = config) do
    cond do
      bearer(headers) |> equal?(token) ->
        :ok

      cookie(headers, token_cookie(config)) |> equal?(session(config)) ->
        :ok

      # the link with ?token=: remembered in a cookie, and the token taken
      # out of the address bar
      request.method == "GET" and equal?(query["token"], token) ->
        rest = query |> Map.delete("token") |> URI.encode_query()
        location = if rest == "", do: request.path, else: request.path <> "?" <> rest

        {303,
         [
           {"location", location},
           {"set-cookie", set_cookie(request, token_cookie(config), session(config))}
           | security_headers()
         ], ""}

      true ->
        error(
          401,
          "a token is needed: open this page with ?token=… or send Authorization: Bearer …"
        )
    end
  end

  # the scheme in any case (RFC 9110 11.1)
  defp bearer(headers) do
    with value when is_binary(value) <- headers["authorization"],
         [scheme, token] <- String.split(String.trim(value), [" ", "\t"], parts: 2),
         "bearer" <- String.downcase(scheme) do
      String.trim(token)
    else
      _ -> nil
    end
  end

  defp token_cookie(config), do: "flame_on_token_#{config.port}"
  defp csrf_cookie(config), do: "flame_on_csrf_#{config.port}"

  # what the token cookie holds: see the top
  defp session(config), do: mac(config, "session:" <> config.token)

  # what a form of the browser with `browser` carries
  defp csrf(config, browser), do: mac(config, "csrf:" <> browser)

  defp mac(config, data),
    do: Base.url_encode64(:crypto.mac(:hmac, :sha256, config.secret, data), padding: false)

  # The browser's id from its CSRF cookie, or a new one and the cookie.
  defp browser(%{headers: headers} = request, config) do
    case cookie(headers, csrf_cookie(config)) do
      id when is_binary(id) and byte_size(id) == 32 ->
        {id, []}

      _ ->
        id = Base.url_encode64(:crypto.strong_rand_bytes(24), padding: false)
        {id, [{"set-cookie", set_cookie(request, csrf_cookie(config), id)}]}
    end
  end

  # Secure when a TLS proxy in front says the browser came over HTTPS (the
  # server itself speaks plain HTTP). A client that lies about it only
  # gets a cookie its browser will not send back over HTTP.
  defp set_cookie(%{headers: headers}, name, value) do
    secure =
      if String.downcase(headers["x-forwarded-proto"] || "") == "https",
        do: "; Secure",
        else: ""

    "#{name}=#{value}; Path=/; HttpOnly; SameSite=Strict" <> secure
  end

  defp cookie(headers, name) do
    (headers["cookie"] || "")
    |> String.split(";")
    |> Enum.find_value(fn pair ->
      case String.split(String.trim(pair), "=", parts: 2) do
        [^name, value] -> value
        _ -> nil
      end
    end)
  end

  @doc "Whether two secrets are equal, in time that says nothing of them (`nil` never equals)."
  @spec equal?(binary() | nil, binary() | nil) :: boolean()
  def equal?(a, b) when is_binary(a) and is_binary(b) do
    # Hashes are compared, not the secrets: how long a comparison takes
    # tells of a prefix of a hash, which says nothing of the secret.
    :erlang.md5(a) == :erlang.md5(b)
  end

  def equal?(_a, _b), do: false

  # A POST must come from our own form: its CSRF token, matching the
  # browser's CSRF cookie, and (when the browser says) from our own origin.
  defp check_csrf(%{headers: headers, method: "POST"}, form, config) do
    browser = cookie(headers, csrf_cookie(config))

    cond do
      headers["sec-fetch-site"] not in [nil, "same-origin", "none"] ->
        error(403, "cross-site request refused")

      (origin = headers["origin"]) not in [nil, "null"] and
          URI.parse(origin).authority != headers["host"] ->
        error(403, "cross-origin request refused")

      not is_binary(browser) or not equal?(form["_csrf_token"], csrf(config, browser)) ->
        error(
          403,
          "missing or wrong CSRF token, or no CSRF cookie: reload the page " <>
            "(with cookies on) and submit its form again"
        )

      true ->
        :ok
    end
  end

  # --- routes ---------------------------------------------------------------------

  defp route(%{method: method, path: path} = request, config) do
    case {method, String.split(path, "/", trim: true)} do
      {"GET", []} ->
        traces = TraceStore.list()
        waiting = Captures.waiting(config.server)
        html(200, &Pages.index(config, traces, waiting, &1))

      {"POST", ["capture"]} ->
        with {:ok, form} <- form(request) do
          start_capture(request, form, config)
        end

      {"GET", ["captures", id]} ->
        capture_page(id, config)

      {"POST", ["captures", id, "cancel"]} ->
        with {:ok, form} <- form(request),
             :ok <- check_csrf(request, form, config) do
          Captures.cancel(config.server, id)
          redirect("/")
        end

      {"GET", ["traces", id]} ->
        with {:ok, profile} <- stored(id) do
          trace_page(profile, request.query["pid"], config)
        end

      {"GET", ["traces", id, "download", format]} ->
        with {:ok, profile} <- stored(id) do
          download(profile, format)
        end

      {"GET", ["diff"]} ->
        with {:ok, compare} <- compare(request) do
          html(200, &Pages.diff(compare, &1))
        end

      {"GET", ["diff", "download", name]} ->
        with {:ok, compare} <- compare(request) do
          case Compare.download(compare, name) do
            {:ok, file, type, body} -> attachment(file, type, body)
            :error -> error(404, "no download #{name}: #{Enum.join(Compare.downloads(), ", ")}")
          end
        end

      {method, _} when method in ["GET", "POST"] ->
        error(404, "no page at #{path}")

      _ ->
        {status, headers, body} = error(405, "only GET and POST")
        {status, [{"allow", "GET, POST"} | headers], body}
    end
  end

  defp form(%{headers: headers, body: body}) do
    case headers["content-type"] do
      "application/x-www-form-urlencoded" <> _ ->
        case HTTP.decode_query(body) do
          {:ok, form} -> {:ok, form}
          {:error, {status, message}} -> error(status, message)
        end

      _ ->
        error(400, "expected a form (application/x-www-form-urlencoded)")
    end
  end

  # Input first (a bad form is a 400 whoever sent it: nothing starts, and
  # a cross-site sender cannot read the answer), then the CSRF check before
  # anything starts.
  defp start_capture(request, form, config) do
    with {:ok, mfa} <- field(NextCall.parse(form["function"] || "")),
         {:ok, timeout_ms} <- timeout(form["timeout"], config),
         {:ok, mode} <- mode(form["mode"]),
         :ok <- check_csrf(request, form, config) do
      opts = [
        timeout: timeout_ms,
        mode: mode,
        cross_process: form["cross_process"] in ["on", "true"]
      ]

      case Captures.start_capture(config.server, mfa, opts) do
        {:ok, id} ->
          await_armed(config.server, id, mfa, 50)
          redirect("/captures/#{id}")

        {:error, :too_many_captures} ->
          error(429, "#{config.max_captures} captures are waiting already: cancel one first")

        {:error, {:already_waiting, pid}} ->
          error(
            409,
            "a capture of #{Profile.frame_name(mfa)} is waiting already (#{inspect(pid)})"
          )
      end
    end
  end

  # The waiting page says nobody called the function yet: true once its
  # pattern is set (or the capture already ended, with an error to show).
  defp await_armed(server, id, mfa, tries) do
    armed? = fn runner -> {mfa, runner} in FlameOn.Client.Node.Gates.waiting() end

    case Captures.capture(server, id) do
      {:ok, %{status: :waiting, runner: runner}} when tries > 0 ->
        unless armed?.(runner) do
          Process.sleep(20)
          await_armed(server, id, mfa, tries - 1)
        end

      _ ->
        :ok
    end
  end

  defp field({:ok, value}), do: {:ok, value}
  defp field({:error, message}), do: error(400, message)

  # left out: the form's default
  defp timeout(blank, config) when blank in [nil, ""], do: timeout("30", config)

  defp timeout(text, config) do
    max_s = div(config.max_timeout_ms, 1000)

    case Integer.parse(String.trim(text || "")) do
      {s, ""} when s >= 1 and s <= max_s ->
        {:ok, s * 1000}

      _ ->
        error(
          400,
          "the timeout must be a whole number of seconds from 1 to #{max_s}, got: #{inspect(text)}"
        )
    end
  end

  # the modes capture_next/2 takes (FlameOn.Client.Options); none given:
  # its default
  defp mode(blank) when blank in [nil, ""], do: {:ok, FlameOn.Client.Options.default_mode()}

  defp mode(text) do
    names = for {name, _} <- FlameOn.Client.Options.modes(:capture_next), do: name

    case Enum.find(names, &(Atom.to_string(&1) == text)) do
      nil ->
        error(400, "the mode must be one of #{Enum.join(names, ", ")}, got: #{inspect(text)}")

      mode ->
        {:ok, mode}
    end
  end

  defp capture_page(id, config) do
    case Captures.capture(config.server, id) do
      {:ok, %{status: :waiting} = capture} ->
        html(200, &Pages.waiting(capture, config, &1))

      {:ok, %{status: {:ok, trace_id}}} ->
        redirect("/traces/#{trace_id}")

      {:ok, %{status: {:error, reason}} = capture} ->
        html(200, &Pages.capture_failed(capture, reason, &1))

      :error ->
        error(404, "no capture #{id} (finished captures are kept a while, then forgotten)")
    end
  end

  defp stored(id) do
    with {n, ""} when n > 0 <- Integer.parse(id),
         {:ok, profile} <- TraceStore.get(n) do
      {:ok, profile}
    else
      _ ->
        error(404, "no trace #{id} in the store (it keeps the last #{TraceStore.max_traces()})")
    end
  end

  defp trace_page(profile, nil, _config),
    do: html(200, &Pages.trace(profile, nil, &1, same_name(profile)))

  defp trace_page(profile, text, _config) do
    case Enum.find(Map.keys(profile.stacks), &(pid_text(&1) == text)) do
      nil -> error(404, "no process #{text} in trace #{profile.trace_id}")
      pid -> html(200, &Pages.trace(profile, pid, &1, same_name(profile)))
    end
  end

  # The other stored traces of the profile's name, newest first, each
  # :newer or :older than it (by the store's order).
  defp same_name(profile) do
    {newer, older} =
      TraceStore.list()
      |> Enum.split_while(&(&1.trace_id != profile.trace_id))

    for(
      {t, age} <- Enum.map(newer, &{&1, :newer}) ++ Enum.map(older, &{&1, :older}),
      t.trace_id != profile.trace_id,
      t.name == profile.name,
      do: {t, age}
    )
  end

  defp compare(request) do
    case Compare.resolve(request.query) do
      {:ok, compare} -> {:ok, compare}
      {:error, status, message} -> error(status, message)
    end
  end

  @doc "A pid as the UI writes it in links: `0.123.0`."
  @spec pid_text(pid()) :: String.t()
  defdelegate pid_text(pid), to: Pages

  @downloads %{
    "folded" => {".folded", "text/plain; charset=utf-8"},
    "speedscope" => {".speedscope.json", "application/json"},
    "perfetto" => {".perfetto.json", "application/json"},
    "pprof" => {".pb.gz", "application/octet-stream"},
    "svg" => {".svg", "image/svg+xml"}
  }

  @doc "The download formats, in the order the page lists them."
  @spec downloads() :: [String.t()]
  defdelegate downloads(), to: Pages

  defp download(profile, format) do
    case Map.fetch(@downloads, format) do
      {:ok, {extension, type}} ->
        body =
          case format do
            "folded" -> Export.folded(profile)
            "speedscope" -> Export.speedscope(profile)
            "perfetto" -> Export.perfetto(profile)
            "pprof" -> Export.pprof(profile)
            "svg" -> Export.svg(profile)
          end

        file = String.replace(profile.name, ~r/[^A-Za-z0-9._-]+/, "_") <> extension
        attachment(file, type, body)

      :error ->
        error(404, "no format #{format}: #{Enum.join(downloads(), ", ")}")
    end
  end

  # `file` is made of letters, digits, `.`, `-` and `_` only.
  defp attachment(file, type, body) do
    {200,
     [
       {"content-type", type},
       {"content-disposition", ~s(attachment; filename="#{file}")}
       | security_headers()
     ], body}
  end

  defp redirect(location), do: {303, [{"location", location} | security_headers()], ""}

  # A page: built with a nonce of its own, the one its
  # Content-Security-Policy allows (see security_headers/1).
  defp html(status, page) do
    nonce = Base.url_encode64(:crypto.strong_rand_bytes(18), padding: false)

    {status, [{"content-type", "text/html; charset=utf-8"} | security_headers(nonce)],
     page.(nonce)}
  end

  # Nothing is loaded from elsewhere, nothing may frame the page, and the
  # only scripts and stylesheets that run are the page's own inline ones,
  # each carrying the response's nonce (no 'unsafe-inline': an attribute
  # like onclick= or style= does nothing). Redirects and downloads run
  # nothing at all.
  defp security_headers(nonce \\ nil) do
    inline =
      if nonce,
        do: "script-src 'nonce-#{nonce}'; style-src 'nonce-#{nonce}'; ",
        else: ""

    [
      {"content-security-policy",
       "default-src 'none'; " <>
         inline <> "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"},
      {"x-content-type-options", "nosniff"},
      {"x-frame-options", "DENY"},
      {"referrer-policy", "no-referrer"},
      {"cache-control", "no-store"}
    ]
  end
end
