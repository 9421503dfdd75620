defmodule FlameOn.Client.Test.WebClient do
  @moduledoc """
  A small HTTP/1.1 client over a plain socket for the web UI's tests: full
  control over what is sent (headers, bodies, bad requests), the response
  read whole as `{status, headers, body}` (header names in lower case).
  """

  @doc "Sends one request to the UI at `url` and reads its whole response."
  @spec request(String.t(), String.t(), String.t(), [{String.t(), String.t()}], iodata()) ::
          {pos_integer(), %{String.t() => String.t()}, binary()}
  def request(url, method, path, headers \\ [], body \\ "") do
    %URI{host: host, port: port} = URI.parse(url)
    {:ok, socket} = :gen_tcp.connect(String.to_charlist(host), port, [:binary, active: false])
    size = IO.iodata_length(body)

    headers =
      if(List.keymember?(headers, "host", 0), do: [], else: [{"host", "#{host}:#{port}"}]) ++
        headers ++
        if(size > 0, do: [{"content-length", Integer.to_string(size)}], else: [])

    :ok =
      :gen_tcp.send(socket, [
        "#{method} #{path} HTTP/1.1\r\n",
        Enum.map(headers, fn {k, v} -> "#{k}: #{v}\r\n" end),
        "\r\n",
        body
      ])

    response = read_all(socket, "")
    [head, body] = String.split(response, "\r\n\r\n", parts: 2)
    ["HTTP/1.1 " <> status_line | header_lines] = String.split(head, "\r\n")
    {status, _} = Integer.parse(status_line)

    headers =
      Map.new(header_lines, fn line ->
        [k, v] = String.split(line, ": ", parts: 2)
        {String.downcase(k), v}
      end)

    {status, headers, body}
  end

  @doc "A GET of `path`."
  @spec get(String.t(), String.t(), [{String.t(), String.t()}]) ::
          {pos_integer(), %{String.t() => String.t()}, binary()}
  def get(url, path, headers \\ []), do: request(url, "GET", path, headers)

  defp read_all(socket, acc) do
    case :gen_tcp.recv(socket, 0, 30_000) do
      {:ok, data} -> read_all(socket, acc <> data)
      {:error, :closed} -> acc
    end
  end
end
