defmodule FlameOn.Client.Web.HTTP do
  @moduledoc false
  # One HTTP/1.1 exchange on a socket, with the VM's own HTTP parser
  # (`:erlang.decode_packet/3` on a raw socket, so that a line too long is
  # ours to answer, not the socket driver's to drop): a request is read
  # whole within bounds (line and header sizes, header count, body size,
  # time: the head within @head_timeout of the first read, the body
  # within @body_timeout), answered, and the connection closed. A request
  # refused before it was read whole is answered, then the connection
  # half-closed and the rest of what the client sends read and dropped for
  # a while (a "lingering close"): closing a socket with unread data sends
  # a reset, and a reset can destroy the answer before the client read it.
  # Enough for an admin page, no dependency.

  @max_line 8_192
  @max_headers 64
  @max_body 65_536
  @head_timeout 3_000
  @body_timeout 10_000
  @linger_ms 1_000
  @linger_bytes 1_048_576

  @type request :: %{
          method: String.t(),
          path: String.t(),
          query: %{String.t() => String.t()},
          headers: %{String.t() => String.t()},
          body: binary(),
          peer: :inet.ip_address() | nil
        }

  @type response :: {pos_integer(), [{String.t(), iodata()}], iodata()}

  @doc "How long a client has to send a request's line and headers, in ms."
  @spec head_timeout() :: pos_integer()
  def head_timeout, do: @head_timeout

  @doc "The longest request line or header line, in bytes."
  @spec max_line() :: pos_integer()
  def max_line, do: @max_line

  @doc "Socket options for accepted connections (set on the listening socket)."
  @spec socket_options() :: list()
  def socket_options, do: [:binary, packet: :raw, active: false, nodelay: true]

  @doc """
  Reads one request. `{:ok, request}`, or `{:error, {status, message}}` for
  a request that cannot be served (answered with that status, see
  `send_refusal/2`), or `{:error, :closed}` when the client went away or
  sent nothing in time.
  """
  @spec read(:gen_tcp.socket()) ::
          {:ok, request()} | {:error, :closed | {pos_integer(), String.t()}}
  def read(socket) do
    deadline = now() + @head_timeout

    with {:ok, method, target, rest} <- request_line(socket, "", deadline),
         {:ok, headers, rest} <- headers(socket, rest, deadline, %{}, 0),
         {:ok, body} <- body(socket, rest, headers),
         {:ok, path, query} <- split_target(target) do
      peer =
        case :inet.peername(socket) do
          {:ok, {ip, _port}} -> ip
          _ -> nil
        end

      {:ok, %{method: method, path: path, query: query, headers: headers, body: body, peer: peer}}
    end
  end

  defp request_line(socket, buffer, deadline) do
    case packet(socket, :http_bin, buffer, deadline, {414, "request line too long"}) do
      {:ok, {:http_request, method, {:abs_path, target}, {1, _minor}}, rest} ->
        {:ok, to_string(method), target, rest}

      {:ok, {:http_request, _method, _target, {1, _}}, _rest} ->
        {:error, {400, "the request target must be a path"}}

      {:ok, {:http_request, _method, _target, _version}, _rest} ->
        {:error, {505, "HTTP/1.x only"}}

      # empty lines before the request line are allowed (RFC 9112 2.2)
      {:ok, {:http_error, line}, rest} when line in ["\r\n", "\n"] ->
        request_line(socket, rest, deadline)

      {:ok, _other, _rest} ->
        {:error, {400, "malformed request line"}}

      {:error, _} = error ->
        error
    end
  end

  defp headers(_socket, _buffer, _deadline, _acc, n) when n > @max_headers,
    do: {:error, {431, "too many request headers"}}

  defp headers(socket, buffer, deadline, acc, n) do
    case packet(socket, :httph_bin, buffer, deadline, {431, "request header too long"}) do
      {:ok, {:http_header, _, name, _, value}, rest} ->
        key = name |> to_string() |> String.downcase()

        cond do
          # two Hosts or two lengths: which one the server, a proxy in
          # front and the browser each take is anybody's guess (RFC 9112
          # 3.2, 6.3)
          key in ["host", "content-length"] and Map.has_key?(acc, key) ->
            {:error, {400, "more than one #{key} header"}}

          true ->
            # other repeated headers: the first one counts
            headers(socket, rest, deadline, Map.put_new(acc, key, value), n + 1)
        end

      {:ok, :http_eoh, rest} ->
        {:ok, acc, rest}

      {:ok, _other, _rest} ->
        {:error, {400, "malformed request header"}}

      {:error, _} = error ->
        error
    end
  end

  # The next packet of `type` from `buffer` and the socket, at most
  # @max_line bytes (else `too_long`), by `deadline` (else a 408, or
  # :closed when the client sent nothing at all).
  defp packet(socket, type, buffer, deadline, too_long) do
    case :erlang.decode_packet(type, buffer, []) do
      {:ok, packet, rest} ->
        if byte_size(buffer) - byte_size(rest) > @max_line,
          do: {:error, too_long},
          else: {:ok, packet, rest}

      # a whole line would have been decoded
      {:more, _} when byte_size(buffer) > @max_line ->
        {:error, too_long}

      {:more, _} ->
        case :gen_tcp.recv(socket, 0, max(deadline - now(), 0)) do
          {:ok, data} ->
            packet(socket, type, buffer <> data, deadline, too_long)

          {:error, :timeout} when buffer == "" and type == :http_bin ->
            {:error, :closed}

          {:error, :timeout} ->
            {:error, {408, "the request was not sent in time"}}

          {:error, _} ->
            {:error, :closed}
        end

      {:error, _} ->
        {:error, {400, "malformed request"}}
    end
  end

  defp body(socket, buffer, headers) do
    case Map.fetch(headers, "content-length") do
      :error ->
        if Map.has_key?(headers, "transfer-encoding"),
          do: {:error, {411, "a request body needs a Content-Length"}},
          else: {:ok, ""}

      {:ok, text} ->
        case Integer.parse(text) do
          {0, ""} -> {:ok, ""}
          {n, ""} when n > 0 and n <= @max_body -> read_body(socket, buffer, n)
          {n, ""} when n > @max_body -> {:error, {413, "request body too large"}}
          _ -> {:error, {400, "bad Content-Length"}}
        end
    end
  end

  defp read_body(_socket, buffer, n) when byte_size(buffer) >= n,
    do: {:ok, binary_part(buffer, 0, n)}

  defp read_body(socket, buffer, n) do
    case :gen_tcp.recv(socket, n - byte_size(buffer), @body_timeout) do
      {:ok, data} -> {:ok, buffer <> data}
      {:error, :timeout} -> {:error, {408, "the request body was not sent in time"}}
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

  @doc "Writes `response` and closes the connection (the request was read whole)."
  @spec send_response(:gen_tcp.socket(), response()) :: :ok
  def send_response(socket, response) do
    write(socket, response)
    :gen_tcp.close(socket)
    :ok
  end

  @doc """
  Writes `response` to a request that was not read whole, and closes the
  connection without a reset: half-closed first, then what the client
  still sends is read and dropped, for at most #{@linger_ms} ms and
  #{@linger_bytes} bytes, or until the client closes its side.
  """
  @spec send_refusal(:gen_tcp.socket(), response()) :: :ok
  def send_refusal(socket, response) do
    write(socket, response)
    :gen_tcp.shutdown(socket, :write)
    drain(socket, now() + @linger_ms, @linger_bytes)
    :gen_tcp.close(socket)
    :ok
  end

  defp drain(socket, deadline, left) do
    wait = deadline - now()

    if wait > 0 and left > 0 do
      case :gen_tcp.recv(socket, 0, wait) do
        {:ok, data} -> drain(socket, deadline, left - byte_size(data))
        {:error, _} -> :ok
      end
    else
      :ok
    end
  end

  defp write(socket, {status, headers, body}) do
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
  end

  defp now, do: System.monotonic_time(:millisecond)

  defp reason(200), do: "OK"
  defp reason(303), do: "See Other"
  defp reason(400), do: "Bad Request"
  defp reason(401), do: "Unauthorized"
  defp reason(403), do: "Forbidden"
  defp reason(404), do: "Not Found"
  defp reason(405), do: "Method Not Allowed"
  defp reason(408), do: "Request Timeout"
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
