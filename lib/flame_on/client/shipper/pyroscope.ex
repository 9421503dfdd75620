defmodule FlameOn.Client.Shipper.Pyroscope do
  @moduledoc """
  A `FlameOn.Client.Shipper` that POSTs each profile to a Pyroscope (or
  Grafana Pyroscope) server's ingest API, as pprof
  (`FlameOn.Client.Export.pprof/1`).

  With continuous profiling, every closed window is one upload:

      FlameOn.Client.Continuous.start(
        shipper: {FlameOn.Client.Shipper.Pyroscope,
                  url: "http://pyroscope:4040", app: "my_app", labels: %{env: "prod"}}
      )

  and it ships ordinary profiles like any shipper:

      config :flame_on_client,
        shipper: {FlameOn.Client.Shipper.Pyroscope, url: "http://pyroscope:4040", app: "my_app"}

  The request is

      POST <url>/ingest?name=<app>.cpu{node=<node>,k=v,...}&from=<unix s>&until=<unix s>
                       &format=pprof&sampleRate=<hz>&spyName=flame_on_client

  with the name URL-encoded, `from`/`until` the profile's start and end
  (`started_at`, `duration_us`), and the body the gzipped pprof. Each
  sample carries a `pid` label and, for a named process, a `process` label
  (`go tool pprof -tagfocus=process=...`). In a continuous profile the
  pprof's `wall` values (µs) are on-CPU time, samples × the sampling
  interval; its `samples` and `reductions` sample types are there too.

  Options:

    * `:url` (required) – the server, `"http://host:4040"` (https needs
      the `:ssl` application).
    * `:app` (required) – the application name.
    * `:labels` – `%{key => value}` added to the name's labels (`node` is
      always there: `node()`); characters Pyroscope does not take in a
      label name, and `,` `=` `{` `}` in a value, become `_`.
    * `:profile_type` – the name's suffix, `"cpu"` (`<app>.cpu{...}`).
    * `:tenant_id` – sent as `X-Scope-OrgID` (multi-tenant Grafana Pyroscope).
    * `:basic_auth` – `{user, password}`; or `:token` – a bearer token.
    * `:sample_rate` – the `sampleRate` parameter; by default the
      profile's `stats.sample_hz` (continuous profiles) or 100.
    * `:timeout` – ms per attempt (5 000).
    * `:retries` – attempts after the first (2), each after a backoff that
      doubles from `:backoff_ms` (500), for connection errors, timeouts,
      `429` and `5xx` answers; other answers fail at once.

  Returns `:ok` on a `2xx` answer, else `{:error, reason}`. It runs in the
  caller: `FlameOn.Client.Continuous` calls it from its own shipping
  process, so a slow or dead server never delays sampling.

  Uses OTP's `:httpc` (the `:inets` application, started on first use;
  `:ssl` too for `https://`). Add them to your app's `extra_applications`:
  a release must include them, and Elixir 1.15+ keeps OTP applications
  that no `mix.exs` lists off the code path (the shipper then answers
  `{:error, {:not_started, :inets, _}}`).
  """

  @behaviour FlameOn.Client.Shipper

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  @defaults [
    url: nil,
    app: nil,
    labels: %{},
    tenant_id: nil,
    basic_auth: nil,
    token: nil,
    sample_rate: nil,
    profile_type: "cpu",
    timeout: 5_000,
    retries: 2,
    backoff_ms: 500
  ]

  @impl FlameOn.Client.Shipper
  @spec ship(Profile.t(), keyword()) :: :ok | {:error, term()}
  def ship(%Profile{} = profile, opts) do
    with {:ok, opts} <- validate(opts),
         :ok <- ensure_started(opts[:url]) do
      url = ingest_url(profile, opts)
      body = Export.pprof(profile)
      attempt(url, headers(opts), body, opts, 0)
    end
  end

  @doc """
  The ingest URL for `profile` (see the module documentation).

      iex> profile = %FlameOn.Client.Profile{started_at: 0, duration_us: 10_000_000, stats: %{sample_hz: 19}}
      iex> url = FlameOn.Client.Shipper.Pyroscope.ingest_url(profile, url: "http://h:4040/", app: "shop", labels: %{env: "prod"})
      iex> url =~ "http://h:4040/ingest?name=shop.cpu%7Bnode%3D"
      true
      iex> url =~ "%2Cenv%3Dprod%7D&from=" and url =~ "&format=pprof&sampleRate=19&spyName=flame_on_client"
      true
      iex> url = FlameOn.Client.Shipper.Pyroscope.ingest_url(profile, url: "http://h", app: "a", labels: %{"my key" => "a,b"})
      iex> URI.decode_query(URI.parse(url).query)["name"] =~ ",my_key=a_b}"
      true
  """
  @spec ingest_url(Profile.t(), keyword()) :: String.t()
  def ingest_url(%Profile{} = profile, opts) do
    labels =
      [{"node", Atom.to_string(node())}] ++
        (opts
         |> Keyword.get(:labels, %{})
         |> Enum.map(fn {k, v} -> {label_key(k), label_value(v)} end)
         |> Enum.sort())

    type = Keyword.get(opts, :profile_type) || "cpu"

    name =
      "#{opts[:app]}.#{type}{" <>
        Enum.map_join(labels, ",", fn {k, v} -> "#{k}=#{v}" end) <> "}"

    {from, until} = span(profile)

    rate =
      opts[:sample_rate] ||
        case profile.stats do
          %{sample_hz: hz} when is_integer(hz) and hz > 0 -> hz
          _ -> 100
        end

    query =
      Enum.map_join(
        [
          name: name,
          from: from,
          until: until,
          format: "pprof",
          sampleRate: rate,
          spyName: "flame_on_client"
        ],
        "&",
        fn {k, v} -> "#{k}=" <> URI.encode(to_string(v), &URI.char_unreserved?/1) end
      )

    String.trim_trailing(opts[:url], "/") <> "/ingest?" <> query
  end

  # Pyroscope's label names are [A-Za-z_][A-Za-z0-9_.]*; a value cannot
  # hold the name's own syntax (`,`, `=`, `{`, `}`).
  defp label_key(key) do
    key = key |> to_string() |> String.replace(~r/[^A-Za-z0-9_.]/, "_")
    if key =~ ~r/^[A-Za-z_]/, do: key, else: "_" <> key
  end

  defp label_value(value), do: value |> to_string() |> String.replace(~r/[,={}]/, "_")

  # Unix seconds: the profile's start and end, at least one second apart.
  defp span(%Profile{started_at: started, duration_us: duration}) when is_integer(started) do
    from_us = started + System.time_offset(:microsecond)
    from = div(from_us, 1_000_000)
    {from, max(div(from_us + duration + 999_999, 1_000_000), from + 1)}
  end

  defp span(%Profile{duration_us: duration}) do
    until = System.os_time(:second)
    {until - max(div(duration + 999_999, 1_000_000), 1), until}
  end

  defp headers(opts) do
    tenant = if t = opts[:tenant_id], do: [{~c"x-scope-orgid", to_charlist(t)}], else: []

    auth =
      case {opts[:basic_auth], opts[:token]} do
        {{user, pass}, _} ->
          [{~c"authorization", ~c"Basic " ++ to_charlist(Base.encode64("#{user}:#{pass}"))}]

        {nil, token} when is_binary(token) ->
          [{~c"authorization", to_charlist("Bearer " <> token)}]

        _ ->
          []
      end

    tenant ++ auth
  end

  defp attempt(url, headers, body, opts, n) do
    request = {to_charlist(url), headers, ~c"application/octet-stream", body}
    http_opts = [timeout: opts[:timeout], connect_timeout: opts[:timeout]] ++ tls(url)

    result =
      case :httpc.request(:post, request, http_opts, body_format: :binary) do
        {:ok, {{_, status, _}, _headers, _body}} when status in 200..299 -> :ok
        {:ok, {{_, status, _}, _headers, body}} -> {:error, {:http, status, body}}
        {:error, reason} -> {:error, reason}
      end

    retry? =
      case result do
        :ok -> false
        {:error, {:http, status, _}} -> status == 429 or status >= 500
        {:error, _transport} -> true
      end

    if retry? and n < opts[:retries] do
      Process.sleep(opts[:backoff_ms] * Integer.pow(2, n))
      attempt(url, headers, body, opts, n + 1)
    else
      result
    end
  end

  defp validate(opts) do
    case Keyword.validate(opts, @defaults) do
      {:ok, opts} ->
        cond do
          not (is_binary(opts[:url]) and String.starts_with?(opts[:url], ["http://", "https://"])) ->
            {:error, {:invalid_url, opts[:url]}}

          not (is_binary(opts[:app]) and opts[:app] != "") ->
            {:error, {:invalid_app, opts[:app]}}

          not is_map(opts[:labels]) ->
            {:error, {:invalid_labels, opts[:labels]}}

          true ->
            {:ok, opts}
        end

      {:error, unknown} ->
        {:error, {:unknown_options, unknown}}
    end
  end

  # Plain HTTP uses no TLS, but OTP 26+'s httpc builds its default TLS
  # options (a hostname check from :public_key) for every request unless
  # given some: an app without :ssl on its code path could not post at all.
  defp tls("https://" <> _), do: []
  defp tls(_url), do: [ssl: []]

  defp ensure_started(url) do
    apps = if String.starts_with?(url, "https://"), do: [:inets, :ssl], else: [:inets]

    Enum.reduce_while(apps, :ok, fn app, :ok ->
      case Application.ensure_all_started(app) do
        {:ok, _} -> {:cont, :ok}
        {:error, reason} -> {:halt, {:error, {:not_started, app, reason}}}
      end
    end)
  end
end
