defmodule FlameOn.Client.Web.HTTP do
  @moduledoc false
  # One HTTP/1.1 exchange on a socket, with the VM's own HTTP parser
  # (`packet: :http_bin`): a request is read whole within bounds (line and
  # header sizes, header count, body size, time), answered, and the
  # connection closed. Enough for an admin page, no dependency.

  @max_line 8_192
  @max_headers 64
  @max_body 65_536
  @recv_timeout 10_000

  @type request :: %{
          method: String.t(),
          path: String.t(),
          query: %{String.t() => String.t()},
          headers: %{String.t() => String.t()},
          body: binary(),
          peer: :inet.ip_address() | nil
        }

  @type response :: {pos_integer(), [{String.t(), iodata()}], iodata()}

  @doc "Socket options for accepted connections (set on the listening socket)."
  @spec socket_options() :: list()
  def socket_options,
    do: [:binary, packet: :http_bin, active: false, packet_size: @max_line, nodelay: true]

  @doc """
  Reads one request. `{:ok, request}`, or `{:error, {status, message}}` for
  a request that cannot be served (answered with that status), or
  `{:error, :closed}` when the client went away.
  """
  @spec read(:gen_tcp.socket()) ::
          {:ok, request()} | {:error, :closed | {pos_integer(), String.t()}}
  def read(socket) do
    with {:ok, method, target} <- request_line(socket),
         {:ok, headers} <- headers(socket, %{}, 0),
         {:ok, body} <- body(socket, headers),
         {:ok, path, query} <- split_target(target) do
      peer =
        case :inet.peername(socket) do
          {:ok, {ip, _port}} -> ip
          _ -> nil
        end

      {:ok, %{method: method, path: path, query: query, headers: headers, body: body, peer: peer}}
    end
  end

  defp request_line(socket) do
    case :gen_tcp.recv(socket, 0, @recv_timeout) do
      {:ok, {:http_request, method, {:abs_path, target}, {1, _minor}}} ->
        {:ok, to_string(method), target}

      {:ok, {:http_request, _method, _target, {1, _}}} ->
        {:error, {400, "the request target must be a path"}}

      {:ok, {:http_request, _method, _target, _version}} ->
        {:error, {505, "HTTP/1.x only"}}

      {:ok, {:http_error, _line}} ->
        {:error, {400, "malformed request line"}}

      {:error, :emsgsize} ->
        {:error, {414, "request line too long"}}

      {:error, _} ->
        {:error, :closed}
    end
  end

  defp headers(_socket, _acc, n) when n > @max_headers,
    do: {:error, {431, "too many request headers"}}

  defp headers(socket, acc, n) do
    case :gen_tcp.recv(socket, 0, @recv_timeout) do
      {:ok, {:http_header, _, name, _, value}} ->
        key = name |> to_string() |> String.downcase()
        # repeated headers: the first one counts
        headers(socket, Map.put_new(acc, key, value), n + 1)

      {:ok, :http_eoh} ->
        {:ok, acc}

      {:ok, {:http_error, _}} ->
        {:error, {400, "malformed request header"}}

      {:error, :emsgsize} ->
        {:error, {431, "request header too long"}}

      {:error, _} ->
        {:error, :closed}
    end
  end

  defp body(socket, headers) do
    case Map.fetch(headers, "content-length") do
      :error ->
        if Map.has_key?(headers, "transfer-encoding"),
          do: {:error, {411, "a request body needs a Content-Length"}},
          else: {:ok, ""}

      {:ok, text} ->
        case Integer.parse(text) do
          {0, ""} -> {:ok, ""}
          {n, ""} when n > 0 and n <= @max_body -> read_body(socket, n)
          {n, ""} when n > @max_body -> {:error, {413, "request body too large"}}
          _ -> {:error, {400, "bad Content-Length"}}
        end
    end
  end

  defp read_body(socket, n) do
    :ok = :inet.setopts(socket, packet: :raw)

    case :gen_tcp.recv(socket, n, @recv_timeout) do
      {:ok, body} -> {:ok, body}
      {:error, _} -> {:error, :closed}
    end
  end

  defp split_target(target) do
    {path, query} =
      case String.split(target, "?", parts: 2) do
        [path, query] -> {path, query}
        [path] -> {path, ""}
      end

    with {:ok, query} <- decode_query(query) do
      {:ok, URI.decode(path), query}
    end
  rescue
    ArgumentError -> {:error, {400, "malformed percent-encoding"}}
  end

  @doc "Decodes `a=1&b=2` (a query or a form body); `{:error, {400, _}}` when malformed."
  @spec decode_query(String.t()) :: {:ok, map()} | {:error, {400, String.t()}}
  def decode_query(text) do
    {:ok, URI.decode_query(text)}
  rescue
    ArgumentError -> {:error, {400, "malformed form or query"}}
  end

  @doc "Writes `response` and closes the connection."
  @spec send_response(:gen_tcp.socket(), response()) :: :ok
  def send_response(socket, {status, headers, body}) do
    body = IO.iodata_to_binary(body)

    head = [
      "HTTP/1.1 ",
      Integer.to_string(status),
      " ",
      reason(status),
      "\r\n",
      Enum.map(headers, fn {name, value} -> [name, ": ", value, "\r\n"] end),
      "content-length: ",
      Integer.to_string(byte_size(body)),
      "\r\nconnection: close\r\n\r\n"
    ]

    :gen_tcp.send(socket, [head, body])
    :gen_tcp.close(socket)
    :ok
  end

  defp reason(200), do: "OK"
  defp reason(303), do: "See Other"
  defp reason(400), do: "Bad Request"
  defp reason(401), do: "Unauthorized"
  defp reason(403), do: "Forbidden"
  defp reason(404), do: "Not Found"
  defp reason(405), do: "Method Not Allowed"
  defp reason(409), do: "Conflict"
  defp reason(411), do: "Length Required"
  defp reason(413), do: "Content Too Large"
  defp reason(414), do: "URI Too Long"
  defp reason(429), do: "Too Many Requests"
  defp reason(431), do: "Request Header Fields Too Large"
  defp reason(500), do: "Internal Server Error"
  defp reason(503), do: "Service Unavailable"
  defp reason(505), do: "HTTP Version Not Supported"
  defp reason(_), do: "Status"
end
