defmodule FlameOn.Client.Test.ExportHelpers do
  @moduledoc false
  # Independent readers for the exporters' outputs: a strict JSON decoder
  # (RFC 8259), a protobuf wire-format decoder with pprof's schema on top,
  # and SVG helpers over xmerl. They share no code with lib/.

  require Record

  import ExUnit.Assertions

  alias FlameOn.Client.Test.Tools

  # Found under the OTP root too: newer Mix prunes the code path to the
  # project's applications, and `from_lib:` then finds nothing.
  @xmerl_hrl (case Tools.otp_lib(:xmerl) do
                nil ->
                  raise "the OTP library xmerl is not installed: run scripts/setup build test " <>
                          "(or apt-get install erlang-xmerl)"

                dir ->
                  Path.join(dir, "include/xmerl.hrl")
              end)

  Record.defrecord(:xmlElement, Record.extract(:xmlElement, from: @xmerl_hrl))
  Record.defrecord(:xmlAttribute, Record.extract(:xmlAttribute, from: @xmerl_hrl))
  Record.defrecord(:xmlText, Record.extract(:xmlText, from: @xmerl_hrl))

  ## JSON

  @escapes %{
    ?" => ?",
    ?\\ => ?\\,
    ?/ => ?/,
    ?b => ?\b,
    ?f => ?\f,
    ?n => ?\n,
    ?r => ?\r,
    ?t => ?\t
  }

  @doc """
  Decodes a JSON text: objects to maps with string keys (duplicate keys
  raise), arrays to lists, numbers with a fraction or exponent to floats.
  Raises `ArgumentError` on anything RFC 8259 does not allow.
  """
  def json_decode!(iodata) do
    text = IO.iodata_to_binary(iodata)
    {value, rest} = json_value(skip_ws(text))

    case skip_ws(rest) do
      "" ->
        value

      extra ->
        raise ArgumentError,
              "trailing JSON: #{inspect(binary_part(extra, 0, min(20, byte_size(extra))))}"
    end
  end

  defp skip_ws(<<c, rest::binary>>) when c in [?\s, ?\t, ?\n, ?\r], do: skip_ws(rest)
  defp skip_ws(rest), do: rest

  defp json_value("{" <> rest), do: json_object(skip_ws(rest), %{})
  defp json_value("[" <> rest), do: json_array(skip_ws(rest), [])
  defp json_value("\"" <> rest), do: json_string(rest, [])
  defp json_value("true" <> rest), do: {true, rest}
  defp json_value("false" <> rest), do: {false, rest}
  defp json_value("null" <> rest), do: {nil, rest}

  defp json_value(text) do
    case Regex.run(~r/\A-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/, text) do
      [number | parts] ->
        rest = binary_part(text, byte_size(number), byte_size(text) - byte_size(number))

        value =
          if Enum.any?(parts, &(&1 != "")) do
            {f, ""} = Float.parse(number)
            f
          else
            String.to_integer(number)
          end

        {value, rest}

      nil ->
        raise ArgumentError,
              "bad JSON value at #{inspect(binary_part(text, 0, min(20, byte_size(text))))}"
    end
  end

  defp json_object("}" <> rest, acc), do: {acc, rest}

  defp json_object("\"" <> rest, acc) do
    {key, rest} = json_string(rest, [])
    if Map.has_key?(acc, key), do: raise(ArgumentError, "duplicate JSON key #{inspect(key)}")
    ":" <> rest = skip_ws(rest)
    {value, rest} = json_value(skip_ws(rest))
    acc = Map.put(acc, key, value)

    case skip_ws(rest) do
      "," <> rest -> json_object_next(skip_ws(rest), acc)
      "}" <> rest -> {acc, rest}
    end
  end

  defp json_object_next("\"" <> _ = text, acc), do: json_object(text, acc)

  defp json_array("]" <> rest, []), do: {[], rest}

  defp json_array(text, acc) do
    {value, rest} = json_value(text)

    case skip_ws(rest) do
      "," <> rest -> json_array(skip_ws(rest), [value | acc])
      "]" <> rest -> {Enum.reverse([value | acc]), rest}
    end
  end

  defp json_string("\"" <> rest, acc) do
    string = acc |> Enum.reverse() |> IO.iodata_to_binary()
    String.valid?(string) || raise ArgumentError, "invalid UTF-8 in a JSON string"
    {string, rest}
  end

  defp json_string("\\u" <> <<hex::binary-4, rest::binary>>, acc) do
    case {String.to_integer(hex, 16), rest} do
      {hi, "\\u" <> <<lo_hex::binary-4, rest2::binary>>} when hi in 0xD800..0xDBFF ->
        lo = String.to_integer(lo_hex, 16)
        lo in 0xDC00..0xDFFF || raise ArgumentError, "lone surrogate"
        json_string(rest2, [<<0x10000 + (hi - 0xD800) * 0x400 + (lo - 0xDC00)::utf8>> | acc])

      {code, rest} ->
        json_string(rest, [<<code::utf8>> | acc])
    end
  end

  defp json_string(<<?\\, c, rest::binary>>, acc) when is_map_key(@escapes, c) do
    json_string(rest, [@escapes[c] | acc])
  end

  defp json_string(<<c, _::binary>>, _acc) when c < 0x20 or c == ?\\ do
    raise ArgumentError, "unescaped control character or bad escape in a JSON string: #{c}"
  end

  defp json_string(<<c, rest::binary>>, acc), do: json_string(rest, [c | acc])

  ## Protobuf

  @doc "The fields of a protobuf message, in order: `[{field_number, value}]`."
  def pb_fields(<<>>), do: []

  def pb_fields(bin) do
    {key, rest} = varint(bin)
    field = Bitwise.bsr(key, 3)

    {value, rest} =
      case Bitwise.band(key, 7) do
        0 ->
          varint(rest)

        1 ->
          <<v::little-64, rest::binary>> = rest
          {v, rest}

        2 ->
          {len, rest} = varint(rest)
          <<v::binary-size(len), rest::binary>> = rest
          {v, rest}

        5 ->
          <<v::little-32, rest::binary>> = rest
          {v, rest}
      end

    [{field, value} | pb_fields(rest)]
  end

  @doc "A varint and the rest of the binary."
  def varint(bin), do: varint(bin, 0, 0)

  defp varint(<<1::1, low::7, rest::binary>>, shift, acc),
    do: varint(rest, shift + 7, acc + Bitwise.bsl(low, shift))

  defp varint(<<0::1, low::7, rest::binary>>, shift, acc),
    do: {acc + Bitwise.bsl(low, shift), rest}

  @doc "Values of a repeated integer field, packed (binary) or not (integers)."
  def pb_ints(fields, number) do
    for {^number, value} <- fields, v <- unpack(value), do: v
  end

  defp unpack(value) when is_integer(value), do: [value]
  defp unpack(<<>>), do: []

  defp unpack(bin) do
    {v, rest} = varint(bin)
    [v | unpack(rest)]
  end

  defp pb_int(fields, number), do: fields |> pb_ints(number) |> List.last() || 0
  defp pb_all(fields, number), do: for({^number, value} <- fields, do: value)

  @doc """
  Gunzips and decodes a pprof profile into a map: `:strings` (the string
  table), `:sample_type` and `:period_type` ([{type, unit}] as strings),
  `:samples` ([%{locations: [id], values: [int], labels: [{key, str}]}]),
  `:locations` (%{id => [function_id]}), `:functions` (%{id => name}) and
  the scalar fields.
  """
  def pprof_decode!(gzipped) do
    fields = gzipped |> :zlib.gunzip() |> pb_fields()
    strings = pb_all(fields, 6)
    str = fn i -> Enum.fetch!(strings, i) end

    value_type = fn bin ->
      vt = pb_fields(bin)
      {str.(pb_int(vt, 1)), str.(pb_int(vt, 2))}
    end

    samples =
      for bin <- pb_all(fields, 2) do
        s = pb_fields(bin)

        labels =
          for label <- pb_all(s, 3) do
            l = pb_fields(label)
            {str.(pb_int(l, 1)), str.(pb_int(l, 2))}
          end

        %{locations: pb_ints(s, 1), values: pb_ints(s, 2), labels: labels}
      end

    locations =
      Map.new(pb_all(fields, 4), fn bin ->
        l = pb_fields(bin)
        {pb_int(l, 1), for(line <- pb_all(l, 4), do: line |> pb_fields() |> pb_int(1))}
      end)

    functions =
      Map.new(pb_all(fields, 5), fn bin ->
        f = pb_fields(bin)
        {pb_int(f, 1), str.(pb_int(f, 2))}
      end)

    %{
      strings: strings,
      sample_type: Enum.map(pb_all(fields, 1), value_type),
      period_type: Enum.map(pb_all(fields, 11), value_type),
      period: pb_int(fields, 12),
      samples: samples,
      locations: locations,
      functions: functions,
      time_nanos: pb_int(fields, 9),
      duration_nanos: pb_int(fields, 10),
      comments: Enum.map(pb_ints(fields, 13), str),
      default_sample_type: pb_int(fields, 14)
    }
  end

  ## SVG

  @doc "Parses an SVG (iodata, UTF-8) with xmerl; raises unless it is well-formed XML."
  def svg_parse!(iodata) do
    chars = :binary.bin_to_list(IO.iodata_to_binary(iodata))
    {doc, []} = apply(xmerl(:scan), :string, [chars, [quiet: true]])
    doc
  end

  @doc "Elements matching an XPath expression."
  def xpath(doc, path), do: apply(xmerl(:xpath), :string, [String.to_charlist(path), doc])

  # xmerl ships with OTP but is not an application of this project; calling
  # it through a computed module name keeps `mix compile
  # --warnings-as-errors` free of the missing-dependency warning.
  defp xmerl(part) do
    Tools.otp_lib!(:xmerl, "erlang-xmerl")
    :"xmerl_#{part}"
  end

  @doc "An element's attribute as a string, or nil."
  def attr(element, name) do
    name = String.to_atom(name)

    Enum.find_value(xmlElement(element, :attributes), fn attribute ->
      if xmlAttribute(attribute, :name) == name do
        attribute |> xmlAttribute(:value) |> List.to_string()
      end
    end)
  end

  @doc "The text content of an element (its text children, concatenated)."
  def text(element) do
    element
    |> xmlElement(:content)
    |> Enum.map(fn
      node when Record.is_record(node, :xmlText) -> xmlText(node, :value)
      node when Record.is_record(node, :xmlElement) -> text(node)
      _other -> []
    end)
    |> :unicode.characters_to_binary()
  end

  def child(element, name) do
    name = String.to_atom(name)

    element
    |> xmlElement(:content)
    |> Enum.find(&(Record.is_record(&1, :xmlElement) and xmlElement(&1, :name) == name))
  end

  @doc """
  The frames of an exported flame graph: `[%{name, us, x_us, depth, title, fill, x, width}]`
  read from the `<g>` children of `<g id="frames">`.
  """
  def svg_frames(doc) do
    for g <- xpath(doc, "//g[@id='frames']/g") do
      title = g |> child("title") |> text()
      rect = child(g, "rect")
      [_, name] = Regex.run(~r/\A(.*) \([^(]*\)\z/s, title)

      %{
        name: name,
        title: title,
        us: String.to_integer(attr(g, "data-w")),
        x_us: String.to_integer(attr(g, "data-x")),
        depth: String.to_integer(attr(g, "data-d")),
        fill: attr(rect, "fill"),
        x: String.to_float(attr(rect, "x")),
        width: String.to_float(attr(rect, "width"))
      }
    end
  end

  ## Fixtures

  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Graph.Span

  @doc "Three fixed pids (not looked up: the exporters never ask the VM about them)."
  def pids, do: {:c.pid(0, 9001, 0), :c.pid(0, 9002, 0), :c.pid(0, 9003, 0)}

  @doc """
  A pid of process `<0.id.0>` on `node`, a node this one need not know (made
  from the external term format: exporters only print it).
  """
  def remote_pid(node, id) do
    name = Atom.to_string(node)
    # NEW_PID_EXT: node (SMALL_ATOM_UTF8_EXT), id, serial, creation
    :erlang.binary_to_term(<<131, 88, 119, byte_size(name), name::binary, id::32, 0::32, 1::32>>)
  end

  @doc "Frame names that need escaping in JSON and XML."
  def nasty_frames do
    [
      ~S(App."quoted"/1),
      ~S(back\slash/2),
      "line\nbreak/0",
      "tab\tand\u0001ctl/0",
      "<tag> & 'apos'/0",
      "Ünïcødé…/1",
      "emoji🔥/0",
      "…"
    ]
  end

  @doc """
  A hand-built profile of three processes: the traced one (a), a server
  (b, registered as :my_server) called twice by a, and a leaf (c) called by b;
  with SLEEP, WAITING, the empty stack and frames that need escaping.
  """
  def fixture_profile(opts \\ []) do
    {a, b, c} = pids()
    t = 1_000_000
    nasty = Enum.join(nasty_frames(), ";")

    stacks = %{
      a => [
        {"", 5},
        {"App.run/0", 100},
        {"App.run/0;GenServer.call/3;WAITING", 20},
        {"App.run/0;SLEEP", 30},
        {"App.run/0;lists:map/2", 50},
        {"App.run/0;lists:map/2;App.step/1", 40},
        {nasty, 7}
      ],
      b => [
        {"Srv.handle_call/3", 200},
        {"Srv.handle_call/3;GenServer.call/3;WAITING", 10},
        {"Srv.handle_call/3;GC_MINOR", 4}
      ],
      c => [{"Leaf.work/0", 80}, {"Leaf.work/0;SLEEP", 9}]
    }

    spans = [
      span(0, nil, a, t - 10, t + 1000, "#PID<0.9001.0>", children: [1, 3], wait_us: 700),
      span(1, 0, b, t + 100, t + 500, ":my_server", children: [2]),
      span(2, 1, c, t + 200, t + 300, "#PID<0.9003.0>"),
      span(3, 0, b, t + 600, t + 900, ":my_server", status: {:exit, :boom})
    ]

    graph = if Keyword.get(opts, :graph, true), do: %Graph{trace_id: 7, spans: spans}

    %Profile{
      trace_id: 7,
      name: Keyword.get(opts, :name, "fixture"),
      mode: :nif,
      pid: a,
      started_at: t,
      duration_us: 1000,
      stacks: stacks,
      graph: graph
    }
  end

  defp span(id, parent, pid, from, to, name, fields \\ []) do
    struct!(
      %Span{trace_id: 7, span_id: id, parent_span_id: parent, pid: pid},
      [name: name, started_at: from, ended_at: to, self_us: to - from] ++ fields
    )
  end

  @doc "Total microseconds of all stacks of a profile."
  def total_us(%Profile{stacks: stacks}) do
    for {_pid, entries} <- stacks, {_stack, us} <- entries, reduce: 0, do: (acc -> acc + us)
  end

  @doc """
  The stacks an evented speedscope profile draws, `[{stack, self_us}]`:
  its O/C events replayed (a frame's self time is its span less its
  children's), plus the process's own time (`endValue` less the top
  frames) as `""`. Checks the events nest and never go back in time.
  """
  def speedscope_stacks(profile_json, frame_names) do
    {open, done, top, _at} =
      Enum.reduce(profile_json["events"], {[], [], 0, 0}, fn event, {open, done, top, at} ->
        assert event["at"] >= at, "events go back in time"
        name = Enum.at(frame_names, event["frame"])

        case {event["type"], open} do
          {"O", _} ->
            {[{name, event["at"], 0} | open], done, top, event["at"]}

          {"C", [{^name, opened, children} | rest]} ->
            span = event["at"] - opened
            stack = rest |> Enum.map(&elem(&1, 0)) |> Enum.reverse() |> Kernel.++([name])
            done = [{Enum.join(stack, ";"), span - children} | done]

            case rest do
              [{parent, popened, pchildren} | up] ->
                {[{parent, popened, pchildren + span} | up], done, top, event["at"]}

              [] ->
                {[], done, top + span, event["at"]}
            end
        end
      end)

    assert open == [], "frames left open"
    root = profile_json["endValue"] - top
    done = if root > 0, do: [{"", root} | done], else: done
    for {stack, us} <- done, us > 0, do: {stack, us}
  end

  @doc "A stack's frames, root first."
  def split_stack(""), do: []
  def split_stack(stack), do: String.split(stack, ";")
end
