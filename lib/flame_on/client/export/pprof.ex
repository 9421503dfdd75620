defmodule FlameOn.Client.Export.Pprof do
  @moduledoc false
  # pprof's profile.proto (perftools.profiles.Profile), gzipped, with a
  # hand-written protobuf encoder. See FlameOn.Client.Export.pprof/1.
  #
  #   Profile  { sample_type 1, sample 2, location 4, function 5,
  #              string_table 6, time_nanos 9, duration_nanos 10,
  #              period_type 11, period 12, comment 13, default_sample_type 14 }
  #   ValueType{ type 1, unit 2 }            (string table indexes)
  #   Sample   { location_id 1 (packed, leaf first), value 2 (packed), label 3 (repeated) }
  #   Label    { key 1, str 2 }
  #   Location { id 1, line 4 }   Line { function_id 1, line 2 }
  #   Function { id 1, name 2, system_name 3, filename 4 }

  import Bitwise

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Export.Util
  alias FlameOn.Client.Profile.Tree

  # `unit: :alloc` encodes an allocation view (Profile.alloc_view/1): the
  # sample types are `alloc_words` (words, the default) and
  # `alloc_samples` (count: the garbage collections that sampled them),
  # as Go's heap profiles have alloc_space and alloc_objects.
  @spec encode(Profile.t(), keyword()) :: binary()
  def encode(%Profile{} = profile, opts \\ []) do
    alloc? = Keyword.get(opts, :unit, :time) == :alloc
    names = Util.names(profile)

    # a process's labels: "pid" ("<0.96.0>"), and "process" (its name,
    # "MyApp.Inventory") when it has one
    processes =
      for pid <- pids(profile) do
        pid_label = {"pid", Util.pid_text(pid)}

        case names do
          %{^pid => name} -> {pid, [pid_label, {"process", name}]}
          _ -> {pid, [pid_label]}
        end
      end

    encode_tree(
      %{
        comment: "flame_on_client trace #{profile.trace_id}: #{profile.name}",
        duration_us: profile.duration_us,
        started_at: profile.started_at,
        value_type: if(alloc?, do: {"alloc_words", "words"}, else: {"wall", "microseconds"}),
        sampled?: if(alloc?, do: :alloc, else: profile.samples != %{})
      },
      Tree.of(profile),
      processes
    )
  end

  @doc false
  # A profile of the tree's nodes under each key of `processes`
  # (`[{key, [{label, value}]}]`, the labels of that key's samples). `meta`:
  # `:comment`, `:duration_us`, `:started_at` (monotonic µs or nil),
  # `:value_type` (`{type, unit}` of the nodes' time) and `:sampled?` (also
  # the samples and reductions of the nodes; `:alloc`: an allocation tree,
  # its samples the collections). A diff writes its two
  # profiles this way.
  @spec encode_tree(map(), Tree.t(), [{term(), [{String.t(), String.t()}]}]) :: binary()
  def encode_tree(meta, tree, processes) do
    # Strings: "" must be index 0.
    strings = {%{"" => 0}, 1}
    {type, unit} = meta.value_type
    {type, strings} = Util.intern(type, strings)
    {unit, strings} = Util.intern(unit, strings)
    {sample_types, strings} = sample_types(meta.sampled?, {type, unit}, strings)
    {comment, strings} = Util.intern(meta.comment, strings)

    # Frame name => location id (== function id), assigned in order of appearance.
    acc = %{strings: strings, frames: %{}, next_frame: 1}

    {samples, acc} =
      Enum.flat_map_reduce(processes, acc, fn {key, labels}, acc ->
        {labels, strings} = labels(labels, acc.strings)
        rows(tree, key, meta.sampled?, labels, %{acc | strings: strings})
      end)

    frames = Enum.sort_by(acc.frames, fn {_name, {id, _str}} -> id end)

    locations =
      for {_name, {id, _str}} <- frames do
        bytes(4, message([int(1, id), bytes(4, message([int(1, id)]))]))
      end

    functions =
      for {_name, {id, str}} <- frames do
        bytes(5, message([int(1, id), int(2, str), int(3, str)]))
      end

    {table, _next} = acc.strings

    string_table =
      table
      |> Enum.sort_by(fn {_text, i} -> i end)
      |> Enum.map(fn {text, _i} -> bytes(6, text) end)

    value_type = message([int(1, type), int(2, unit)])

    :zlib.gzip([
      Enum.map(sample_types, &bytes(1, &1)),
      Enum.map(samples, &bytes(2, &1)),
      locations,
      functions,
      string_table,
      time_nanos(meta.started_at),
      int(10, meta.duration_us * 1000),
      bytes(11, value_type),
      int(12, 1),
      int(13, comment),
      int(14, type)
    ])
  end

  # The nodes' time always; a sampled profile adds the sample count and the
  # reductions, so `-sample_index=samples` / `reductions` pick them.
  defp sample_types(:alloc, {type, unit}, strings) do
    {count, strings} = Util.intern("count", strings)
    {samples_str, strings} = Util.intern("alloc_samples", strings)

    {[message([int(1, type), int(2, unit)]), message([int(1, samples_str), int(2, count)])],
     strings}
  end

  defp sample_types(sampled?, {type, unit}, strings) do
    value_type = message([int(1, type), int(2, unit)])

    if sampled? do
      {count, strings} = Util.intern("count", strings)
      {samples_str, strings} = Util.intern("samples", strings)
      {reductions, strings} = Util.intern("reductions", strings)

      {[
         value_type,
         message([int(1, samples_str), int(2, count)]),
         message([int(1, reductions), int(2, count)])
       ], strings}
    else
      {[value_type], strings}
    end
  end

  # Labels as encoded Label fields, their strings interned.
  defp labels(labels, strings) do
    Enum.map_reduce(labels, strings, fn {key, value}, strings ->
      {key, strings} = Util.intern(key, strings)
      {value, strings} = Util.intern(value, strings)
      {bytes(3, message([int(1, key), int(2, value)])), strings}
    end)
  end

  # The processes of the stacks, then those that only have samples.
  defp pids(%Profile{} = profile) do
    Util.order(Map.keys(profile.stacks) ++ Map.keys(profile.samples), profile.pid)
  end

  # The samples of key: one per node with time (or samples, when the profile
  # has them), values aligned with the sample types: `[us]`, or `[us,
  # samples, reductions]` (a stack with samples but under 0.5 µs has its own
  # row). The preorder walk keeps each node's location ids, leaf first and
  # already encoded, as one cons onto its parent's.
  defp rows(tree, key, sampled?, label, acc) do
    {rows, _path, acc} =
      Tree.reduce(tree, key, {[], [], acc}, fn {depth, name, us, _total, n, r},
                                               {rows, path, acc} ->
        path = Enum.drop_while(path, fn {d, _ids} -> d >= depth end)
        parent_ids = with [{_d, ids} | _] <- path, do: ids

        {ids, acc} =
          if depth == 0 do
            {[], acc}
          else
            {id, acc} = frame_id(Tree.name(tree, name), acc)
            {[varint(id) | parent_ids], acc}
          end

        rows =
          cond do
            sampled? == :alloc and us == 0 and n == 0 -> rows
            sampled? == :alloc -> [sample(ids, [us, n], label) | rows]
            us == 0 and (not sampled? or n == 0) -> rows
            sampled? -> [sample(ids, [us, n, r], label) | rows]
            true -> [sample(ids, [us], label) | rows]
          end

        {rows, [{depth, ids} | path], acc}
      end)

    {Enum.reverse(rows), acc}
  end

  defp sample(ids, values, label) do
    ids = if ids == [], do: [], else: bytes(1, ids)
    message([ids, packed(2, values), label])
  end

  # Wall-clock start: the monotonic start plus the node's current time offset.
  defp time_nanos(started) when is_integer(started) do
    int(9, (started + System.time_offset(:microsecond)) * 1000)
  end

  defp time_nanos(_started), do: []

  defp frame_id(name, %{frames: frames} = acc) do
    case frames do
      %{^name => {id, _str}} ->
        {id, acc}

      _ ->
        {str, strings} = Util.intern(name, acc.strings)
        id = acc.next_frame

        {id,
         %{acc | strings: strings, frames: Map.put(frames, name, {id, str}), next_frame: id + 1}}
    end
  end

  ## Protobuf wire format

  defp message(fields), do: IO.iodata_to_binary(fields)

  # Varint field (wire type 0); proto3 leaves zero values out.
  defp int(_field, 0), do: []
  defp int(field, value), do: [varint(field <<< 3), varint(value)]

  # Length-delimited field (wire type 2).
  defp bytes(field, data) do
    data = IO.iodata_to_binary(data)
    [varint(field <<< 3 ||| 2), varint(byte_size(data)), data]
  end

  defp packed(_field, []), do: []
  defp packed(field, values), do: bytes(field, Enum.map(values, &varint/1))

  # int64 values below zero are written as their 64-bit two's complement.
  defp varint(n) when n < 0, do: varint(n + (1 <<< 64))
  defp varint(n) when n < 0x80, do: <<n>>
  defp varint(n), do: <<1::1, n &&& 0x7F::7, varint(n >>> 7)::binary>>
end
