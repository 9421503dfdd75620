defmodule FlameOn.Client.Web do
  @moduledoc """
  A small web UI, built into the library: the node's recent traces, their
  interactive flame graphs and span graphs, and a form to capture the next
  call of any function. On OTP's `:gen_tcp`, no dependency.

      {:ok, url} = FlameOn.Client.Web.start(port: 4040)
      # => {:ok, "http://127.0.0.1:4040/"}

  Pages:

    * `/` – the recent traces, newest first (from `FlameOn.Client.TraceStore`:
      every trace of `FlameOn.Client.Tracing.trace/3`,
      `FlameOn.Client.Tracing.start_trace/2`, `FlameOn.Client.Telemetry` and
      `FlameOn.Client.capture_next/2` that passed its threshold): name, when,
      duration, processes, spans, mode. And a form: type a function as in
      Elixir (`MyApp.Orders.checkout/2`) or Erlang (`orders:checkout/2`),
      and it waits for the next call of it by any process
      (`FlameOn.Client.capture_next/2`); the page opens the call's trace
      when the call returns. With two traces or more, each row has a
      "base" and a "new" radio button and *Compare* opens their diff.
    * `/traces/ID` – the interactive SVG flame graph (hover, click to zoom,
      Ctrl-F or `/` to search), links to its diff with each other stored
      trace of the same name (the older one the base), a selector for one
      process's stacks, the span graph as a table (parents and the callee
      of the longest wait are links; self, attributed and unattributed
      wait), the stats, and downloads: folded, speedscope, Perfetto, pprof
      and SVG.
    * `/diff?base=ID&new=ID&normalize=median|total|none` – two traces
      compared (`FlameOn.Client.diff/3`): both traces' names, times and
      durations; the normalisation (`median` by default), with links to
      switch; the differential flame graph inline (red grew, blue shrank);
      the functions whose self time grew and shrank most; and downloads:
      the diff's folded and SVG, speedscope with both runs, each run's
      pprof, and the `go tool pprof -diff_base=...` command for them. The
      same trace twice is allowed (the page says nothing changed); a trace
      not in the store is a 404, a missing side or another `normalize`
      a 400.

  ## Security

  Starting a trace is an admin action. By default the UI listens on
  `127.0.0.1` only and answers only requests whose `Host` is a loopback
  name (so a web page cannot reach it through DNS rebinding). On any other
  address it **refuses to start without a `:token`** (and raises
  `ArgumentError` for one shorter than 16 characters), and then every
  request must carry it: as `Authorization: Bearer TOKEN` (the scheme in
  any case), or open `URL?token=TOKEN` once. That link sets the cookie
  `flame_on_token_PORT` (`PORT` the UI's port) and takes the token out of
  the address bar; the cookie holds not the token but an HMAC of it under
  a key random per server start, so a local service on another port of
  the same host (browsers send it cookies of every port) does not learn
  the token, and the cookie is worth nothing once the UI restarts.

  Every form carries a CSRF token bound to the browser (signed
  double-submit): the first page a browser gets sets the cookie
  `flame_on_csrf_PORT` to a random id, the form carries an HMAC of that id,
  and a POST must send both, matching; a token without its cookie, or with
  another browser's, is refused (`403`), and so is a POST whose `Origin`
  is another origin or whose `Sec-Fetch-Site` is `same-site` or
  `cross-site`.

  Both cookies are `Path=/; HttpOnly; SameSite=Strict`, and `Secure` when
  the request says `X-Forwarded-Proto: https` (the UI speaks plain HTTP;
  put a TLS proxy in front of it off loopback, and have the proxy set that
  header).

  Every page is sent with this Content-Security-Policy, `NONCE` a random
  value new in each response:

      default-src 'none'; script-src 'nonce-NONCE'; style-src 'nonce-NONCE';
      form-action 'self'; frame-ancestors 'none'; base-uri 'none'

  so the only scripts and stylesheets that run are the page's own inline
  `<script>` and `<style>` elements, each carrying that nonce (the page's
  stylesheet; on a trace page the flame graph's stylesheet and script, and
  the one line that starts it); no `'unsafe-inline'`, so no `on...=` or
  `style=` attribute runs, and nothing is loaded from anywhere. Redirects
  and downloads are sent with `default-src 'none'; form-action 'self';
  frame-ancestors 'none'; base-uri 'none'`. Pages may not be framed
  (`X-Frame-Options: DENY` too), and are sent with
  `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and
  `Cache-Control: no-store`.

  Bad input (a module that does not exist, an arity out of range, a timeout
  past `:max_timeout_ms`, a malformed request) is answered with an error
  page; it never crashes the server nor leaves a trace on.

  Requests are read within bounds, and one answer each (then the connection
  closes): the request line and each header at most 8 KB (longer: `414` or
  `431`), 64 headers (`431`), a body of at most 64 KB (`413`), one `Host` and
  at most one `Content-Length` (two: `400`). The request line and headers
  must arrive within 3 s of the first read (else `408`; a connection that
  sent nothing is closed), the body within 10 s. A request refused before
  it was read whole is answered, and the connection closed only after what
  the client still sends is read (for at most 1 s), so the client gets the
  answer rather than a reset. When all `:max_connections` are taken, the
  connection that has been sending its request the longest is closed to
  make room: clients that hold a partial request cannot keep one that
  sends its request at once from being served.

  ## Options of `start/1`

    * `:port` (`4040`) – TCP port; `0` picks a free one (see the URL).
    * `:ip` (`{127, 0, 0, 1}`) – the address to listen on, a tuple or a
      string (`"0.0.0.0"`, `"::1"`).
    * `:token` (none) – required unless `:ip` is a loopback address; a
      string of at least 16 characters off loopback (use a long random
      one; on loopback a shorter one is logged as a warning).
    * `:max_timeout_ms` (`600_000`) – the longest wait the capture form
      accepts.
    * `:max_captures` (`8`) – captures waiting at once.
    * `:max_connections` (`32`) – connections served at once. Past it the
      one still sending its request the longest gives way; when every
      connection is past its request, the new one gets a `503`.

  Returns `{:ok, url}`, `{:error, :token_required}` for a non-loopback
  address without a token, or `{:error, reason}` when the port cannot be
  opened (`{:listen, :eaddrinuse}`). Several UIs can run at once.
  """

  require Logger

  alias FlameOn.Client.Web.Server

  @min_token 16

  @doc """
  Starts a web UI under the application's supervisor. See the module
  documentation for the options.

      iex> {:ok, url} = FlameOn.Client.Web.start(port: 0)
      iex> String.starts_with?(url, "http://127.0.0.1:")
      true
      iex> FlameOn.Client.Web.stop(url)
      :ok
      iex> FlameOn.Client.Web.start(ip: {0, 0, 0, 0}, port: 0)
      {:error, :token_required}
  """
  @spec start(keyword()) :: {:ok, String.t()} | {:error, term()}
  def start(opts \\ []) do
    FlameOn.Client.Runtime.ensure_started!()
    opts = FlameOn.Client.Options.web!(opts)
    ip = ip(opts.ip)
    loopback = loopback?(ip)

    cond do
      not loopback and opts.token == nil ->
        {:error, :token_required}

      true ->
        config = %{
          ip: ip,
          port: opts.port,
          loopback: loopback,
          token: token(opts.token, loopback),
          # what the cookies' values and the CSRF tokens are derived from
          secret: :crypto.strong_rand_bytes(32),
          max_timeout_ms: opts.max_timeout_ms,
          max_captures: opts.max_captures,
          max_connections: opts.max_connections,
          url: nil
        }

        with {:ok, pid} <-
               DynamicSupervisor.start_child(FlameOn.Client.Web.Supervisor, {Server, config}) do
          {:ok, Server.config(pid).url}
        end
    end
  end

  @doc "Stops the UI serving `url` (as `start/1` returned it). `:ok` or `{:error, :not_found}`."
  @spec stop(String.t()) :: :ok | {:error, :not_found}
  def stop(url) when is_binary(url) do
    case Enum.find(servers(), fn {_pid, u} -> u == url end) do
      {pid, _} -> DynamicSupervisor.terminate_child(FlameOn.Client.Web.Supervisor, pid)
      nil -> {:error, :not_found}
    end
  end

  @doc "The URLs of the UIs running on this node."
  @spec urls() :: [String.t()]
  def urls, do: Enum.map(servers(), &elem(&1, 1))

  defp servers do
    for {_, pid, _, _} <- DynamicSupervisor.which_children(FlameOn.Client.Web.Supervisor),
        is_pid(pid),
        url = safe_url(pid),
        url != nil,
        do: {pid, url}
  end

  defp safe_url(pid) do
    Server.config(pid).url
  catch
    :exit, _ -> nil
  end

  # checked by FlameOn.Client.Options
  defp ip(ip) when is_tuple(ip), do: ip

  defp ip(text) do
    {:ok, ip} = :inet.parse_address(String.to_charlist(text))
    ip
  end

  defp loopback?({127, _, _, _}), do: true
  defp loopback?({0, 0, 0, 0, 0, 0, 0, 1}), do: true
  defp loopback?(_ip), do: false

  defp token(nil, _loopback), do: nil

  defp token(token, loopback) do
    length = String.length(token)

    cond do
      length >= @min_token ->
        token

      loopback ->
        Logger.warning(
          "FlameOn web UI: a token shorter than #{@min_token} characters is easy to guess"
        )

        token

      true ->
        raise ArgumentError,
              "FlameOn.Client.Web.start/1: off loopback the :token must be at least " <>
                "#{@min_token} characters (got #{length}); a random one: " <>
                "Base.url_encode64(:crypto.strong_rand_bytes(24), padding: false)"
    end
  end
end
