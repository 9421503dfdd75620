defmodule FlameOn.Client.Export.JSON do
  @moduledoc false
  # A small JSON encoder (RFC 8259), enough for the exporters and without
  # dependencies.
  #
  # | Elixir | JSON |
  # |---|---|
  # | `nil`, `true`, `false` | `null`, `true`, `false` |
  # | other atoms | strings (`:ok` is `"ok"`) |
  # | integers, floats | numbers (floats in their shortest round-trip form) |
  # | binaries (UTF-8) | strings |
  # | lists | arrays |
  # | maps with atom or string keys | objects |
  #
  # Strings are escaped as RFC 8259 requires: `"` and `\` with a backslash,
  # the control characters U+0000..U+001F as `\b \f \n \r \t` or `\u00XX`;
  # every other character, non-ASCII included, is passed through as UTF-8.
  # A binary that is not valid UTF-8, a map key that is not an atom or a string,
  # and any other term (tuples, pids, ...) raise `ArgumentError`.
  #
  # Map keys come out in the map's own order; two keys that encode to the same
  # text (`:a` and `"a"`) raise `ArgumentError`.

  @doc """
  Encodes `term` as JSON iodata. Raises `ArgumentError` for terms JSON has no
  form for, invalid UTF-8 and duplicate object keys.

      iex> FlameOn.Client.Export.JSON.encode!([true, false, :ok, -3]) |> IO.iodata_to_binary()
      ~S([true,false,"ok",-3])

      iex> FlameOn.Client.Export.JSON.encode!(%{name: "a \\"quoted\\" frame", us: [1, 2.5, nil]})
      ...> |> IO.iodata_to_binary()
      ~S({"name":"a \\"quoted\\" frame","us":[1,2.5,null]})

      iex> FlameOn.Client.Export.JSON.encode!("line\\nbreak…") |> IO.iodata_to_binary()
      ~S("line\\nbreak…")
  """
  @spec encode!(term()) :: iodata()
  def encode!(term), do: value(term)

  @doc """
  Encodes `string` as a JSON string literal, quotes included.

      iex> FlameOn.Client.Export.JSON.encode_string!("tab\\there") |> IO.iodata_to_binary()
      ~S("tab\\there")
  """
  @spec encode_string!(String.t()) :: iodata()
  def encode_string!(string) when is_binary(string), do: [?", escape(string), ?"]

  defp value(nil), do: "null"
  defp value(true), do: "true"
  defp value(false), do: "false"
  defp value(atom) when is_atom(atom), do: encode_string!(Atom.to_string(atom))
  defp value(string) when is_binary(string), do: encode_string!(string)
  defp value(int) when is_integer(int), do: Integer.to_string(int)
  defp value(float) when is_float(float), do: :erlang.float_to_binary(float, [:short])
  defp value([]), do: "[]"
  defp value(list) when is_list(list), do: [?[, list_items(list) | "]"]
  defp value(map) when map_size(map) == 0 and not is_struct(map), do: "{}"
  defp value(map) when is_map(map) and not is_struct(map), do: object(map)

  defp value(other) do
    raise ArgumentError, "cannot encode #{inspect(other)} as JSON"
  end

  defp list_items([last]), do: [value(last)]
  defp list_items([head | tail]) when is_list(tail), do: [value(head), ?, | list_items(tail)]

  defp list_items(improper) do
    raise ArgumentError, "cannot encode the improper list #{inspect(improper)} as JSON"
  end

  defp object(map) do
    {pairs, _seen} =
      Enum.map_reduce(map, %{}, fn {key, val}, seen ->
        text = key_text(key)

        if is_map_key(seen, text) do
          raise ArgumentError, "duplicate JSON object key #{inspect(text)}"
        end

        {[encode_string!(text), ?: | value(val)], Map.put(seen, text, true)}
      end)

    [?{, Enum.intersperse(pairs, ?,), ?}]
  end

  defp key_text(key) when is_binary(key), do: key
  defp key_text(key) when is_atom(key) and key not in [nil, true, false], do: Atom.to_string(key)

  defp key_text(key) do
    raise ArgumentError, "JSON object keys must be atoms or strings, got: #{inspect(key)}"
  end

  # Copies runs of characters that need no escape as sub-binaries of the input
  # and validates UTF-8 on the way.
  defp escape(string), do: escape(string, string, 0, 0, [])

  defp escape(<<>>, orig, start, len, acc), do: finish(acc, orig, start, len)

  defp escape(<<byte, rest::binary>>, orig, start, len, acc)
       when byte < 0x20 or byte == ?" or byte == ?\\ do
    acc = [acc, part(orig, start, len) | escape_byte(byte)]
    escape(rest, orig, start + len + 1, 0, acc)
  end

  defp escape(<<byte, rest::binary>>, orig, start, len, acc) when byte < 0x80 do
    escape(rest, orig, start, len + 1, acc)
  end

  defp escape(<<char::utf8, rest::binary>>, orig, start, len, acc) do
    escape(rest, orig, start, len + byte_size(<<char::utf8>>), acc)
  end

  defp escape(<<_invalid, _::binary>>, orig, start, len, _acc) do
    raise ArgumentError,
          "invalid UTF-8 at byte #{start + len} of #{inspect(orig, limit: 50)}, cannot encode it as JSON"
  end

  defp finish(acc, orig, 0, len) when len == byte_size(orig) and acc == [], do: orig
  defp finish(acc, orig, start, len), do: [acc | part(orig, start, len)]

  defp part(_orig, _start, 0), do: []
  defp part(orig, start, len), do: binary_part(orig, start, len)

  defp escape_byte(?"), do: "\\\""
  defp escape_byte(?\\), do: "\\\\"
  defp escape_byte(?\n), do: "\\n"
  defp escape_byte(?\r), do: "\\r"
  defp escape_byte(?\t), do: "\\t"
  defp escape_byte(?\b), do: "\\b"
  defp escape_byte(?\f), do: "\\f"

  defp escape_byte(byte) do
    hex = Integer.to_string(byte, 16)
    ["\\u00", String.duplicate("0", 2 - byte_size(hex)), hex]
  end
end
