defmodule FlameOn.Client.Export do
  @moduledoc """
  Writes a `FlameOn.Client.Profile` in the formats of common profile viewers.

      {_, profile} = FlameOn.Client.profile(fn -> MyApp.handle(req) end, name: "handle")
      FlameOn.Client.Export.write(profile, "flame_on_out", [:svg, :speedscope, :perfetto])
      #=> [svg: "flame_on_out/handle.svg", speedscope: "flame_on_out/handle.speedscope.json",
      #    perfetto: "flame_on_out/handle.perfetto.json"]

  | format | function | file | open with |
  |---|---|---|---|
  | `:folded` | `folded/2` | `<name>.folded` | flamegraph.pl, inferno, speedscope |
  | `:speedscope` | `speedscope/1` | `<name>.speedscope.json` | https://www.speedscope.app |
  | `:perfetto` | `perfetto/1` | `<name>.perfetto.json` | https://ui.perfetto.dev, `chrome://tracing` |
  | `:svg` | `svg/2` | `<name>.svg` | any browser (self-contained, interactive) |
  | `:pprof` | `pprof/1` | `<name>.pb.gz` | `go tool pprof`, pprof-compatible UIs |

  `write/4` also writes a `FlameOn.Client.Diff`, two profiles compared
  (`FlameOn.Client.diff/3`): a flame graph coloured by change, the
  three-column folded form of `difffolded.pl`, and the two profiles for
  speedscope and `go tool pprof -diff_base`.

  ## Time, stacks and timelines

  A profile's stacks carry the total time spent in each distinct stack, not
  when it ran. The flame-graph formats (folded, speedscope, SVG, pprof) are
  therefore aggregated: speedscope's "Time Order" view shows the stacks in
  alphabetical order, not in the order they ran (use "Left Heavy"). Only the
  Perfetto output has a timeline, drawn from the span graph of a
  `cross_process: true` trace.

  Every format keeps all processes of the profile apart (one speedscope
  profile, Perfetto track, SVG subtree or pprof `pid` label each), with the
  traced process first. Each process is shown by its name, read while the
  trace ran (`FlameOn.Client.ProcessName`: its registered name, process
  label or initial call), with its pid beside it:
  `"MyApp.Inventory <0.178.0>"` (`FlameOn.Client.Profile.process_label/2`),
  or its pid alone when it has none. `SLEEP` (scheduled out) and `WAITING`
  (wait that no traced callee explains) are ordinary frames in all of them;
  the SVG colours them blue and grey, apart from the warm CPU frames.

  ## Allocation

  A profile captured with `alloc: true` has its stacks weighed by the heap
  words allocated too (`profile.alloc`, see `FlameOn.Client.Profile`).
  `write(profile, dir, formats, weight: :alloc)` writes that view, every
  count in **words** (8 bytes each on a 64-bit VM), to `<name>.alloc.*`
  beside the time outputs:

    * `:folded` – `name;<process>;frame;...;frame WORDS`;
    * `:speedscope` – `"unit": "none"` (speedscope has no unit for words),
      each profile named `"... (words allocated)"`;
    * `:svg` – widths and titles in words, titled `"<name>: words
      allocated"`;
    * `:pprof` – sample types `{"alloc_words", "words"}` (the default) and
      `{"alloc_samples", "count"}`, the garbage collections that sampled
      them: `go tool pprof -sample_index=alloc_words -top name.alloc.pb.gz`.

  `:perfetto` has no allocation view (`:all` leaves it out there).

  All JSON is written by a small encoder of ours; nothing here needs a
  dependency.
  """

  alias FlameOn.Client.Diff
  alias FlameOn.Client.Export.Diff, as: DiffFiles
  alias FlameOn.Client.Export.Folded
  alias FlameOn.Client.Export.Perfetto
  alias FlameOn.Client.Export.Pprof
  alias FlameOn.Client.Export.Speedscope
  alias FlameOn.Client.Export.SVG
  alias FlameOn.Client.Export.Util
  alias FlameOn.Client.Profile

  @formats [:folded, :speedscope, :perfetto, :svg, :pprof]
  @extensions %{
    folded: ".folded",
    speedscope: ".speedscope.json",
    perfetto: ".perfetto.json",
    svg: ".svg",
    pprof: ".pb.gz"
  }

  @type format :: :folded | :speedscope | :perfetto | :svg | :pprof

  @doc "The formats `write/4` knows, in the order of the table above."
  @spec formats() :: [format()]
  def formats, do: @formats

  @doc """
  Collapsed stacks, `Profile.folded/1`: one `name;<process>;frame;...;frame µs`
  line per distinct stack; `<process>` is `<0.96.0>`, or
  `MyApp.Inventory_<0.96.0>` for a named process (its label with
  whitespace made `_`, so that the line still splits at its last space).

  Options:

    * `:pids` – `:all` (default) or the list of processes to write.

  ## Examples

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "demo", pid: pid, stacks: %{pid => [{"a;b", 3}]}}
      iex> profile |> FlameOn.Client.Export.folded() |> IO.iodata_to_binary()
      "demo;<0.4242.0>;a;b 3\\n"
  """
  @spec folded(Profile.t(), keyword()) :: iodata()
  def folded(%Profile{} = profile, opts \\ []), do: Folded.encode(profile, opts)

  @doc """
  `folded/2` split by process: `%{pid => iodata}`, one file's worth each.

      iex> [a, b] = [:c.pid(0, 4242, 0), :c.pid(0, 4243, 0)]
      iex> profile = %FlameOn.Client.Profile{name: "x", stacks: %{a => [{"f", 1}], b => [{"g", 2}]}}
      iex> profile |> FlameOn.Client.Export.folded_per_process() |> Map.new(fn {p, io} -> {p, IO.iodata_to_binary(io)} end)
      %{:c.pid(0, 4242, 0) => "x;<0.4242.0>;f 1\\n", :c.pid(0, 4243, 0) => "x;<0.4243.0>;g 2\\n"}
  """
  @spec folded_per_process(Profile.t()) :: %{pid() => iodata()}
  def folded_per_process(%Profile{} = profile), do: Folded.per_process(profile)

  @doc """
  speedscope's JSON file format
  (`"$schema": "https://www.speedscope.app/file-format-schema.json"`).

  `shared.frames` holds each distinct frame name once; `profiles` has one
  `"evented"` profile per process, named `"<name> <process label>"`
  (`"checkout MyApp.Inventory <0.96.0>"`), in microseconds,
  written from the profile's tree (`FlameOn.Client.Profile.Tree`): each
  node opens (`"O"`) where its previous sibling closed and closes (`"C"`)
  after its total time, children in name order, so the file grows with the
  number of distinct stacks, not with their depth (a recursion 10 000
  frames deep is 20 000 events). `startValue` is 0 and `endValue` the
  process's total; the time of the stack `""` (no traced function) is the
  part of the timeline after the last top frame.

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "demo", pid: pid, stacks: %{pid => [{"a", 2}, {"a;b", 3}]}}
      iex> json = profile |> FlameOn.Client.Export.speedscope() |> IO.iodata_to_binary()
      iex> json =~ ~S("frames":[{"name":"a"},{"name":"b"}])
      true
      iex> json =~ ~S("type":"evented") and json =~ ~S("endValue":5)
      true
      iex> # the events in order, as "type frame at" (a map's keys may come in any order)
      iex> for [event] <- Regex.scan(~r/[{][^{}]*"type":"[OC]"[^{}]*[}]/, json) do
      ...>   Enum.map_join(["type", "frame", "at"], " ", fn key ->
      ...>     [_, value] = Regex.run(Regex.compile!(~s(") <> key <> ~S|":"?([A-Z0-9]+)|), event)
      ...>     value
      ...>   end)
      ...> end
      ["O 0 0", "O 1 0", "C 1 3", "C 0 5"]
  """
  @spec speedscope(Profile.t()) :: iodata()
  def speedscope(%Profile{} = profile), do: Speedscope.encode(profile)

  @doc """
  Chrome trace-event JSON (`{"traceEvents": [...], "displayTimeUnit": "ms"}`)
  for https://ui.perfetto.dev and `chrome://tracing`.

  All BEAM processes are threads of one trace-event process (`pid` 1), each
  with its own `tid` (1, 2, ... the traced process first) named by a
  `thread_name` metadata event, the process's label (`"<0.96.0>"`, or
  `"MyApp.Inventory <0.96.0>"` for a named process); `process_name` names
  the trace.
  A trace across nodes has one trace-event process per node instead: the
  origin's is `pid` 1, the other nodes' 2, 3, ... in name order, each named
  `"<trace> on <node>"`; a process of another node is labelled
  `"<0.96.0>@node"` (`FlameOn.Client.Profile.pid_text/1`), and the flows
  between spans cross the groups. `tid`s are unique across them.
  Times are microseconds from the earliest slice drawn.

  With a span graph (`cross_process: true`):

    * one complete slice (`ph: "X"`, `cat: "span"`) per span on its
      process's track, named after the process (the root span after the
      profile), with `self_us`, `gc_us`, `runnable_us`, `wait_us`, `attributed_wait_us`,
      `unattributed_wait_us`, `unattributed_by`, `kind`, `status`,
      `span_id`, ... in `args`;
    * for each request span (a call the parent made), a `"wait"` slice
      (`cat: "wait"`) on the caller's track over the callee span's interval
      (clipped to the caller's span), and a flow arrow from that wait slice
      to the callee's span slice, as flow events v2: both are `ph: "X"` with
      the same `bind_id`, the wait with `flow_out: true` and the span with
      `flow_in: true`;
    * for each other wait edge of the graph (`profile.graph.edges`: a wait
      ended by another span's work, a `Task.await` say), a `"wait"` slice on
      the waiter's track over the explained interval (`args`: `waker`,
      `waker_span_id`, `attributed_us`, `wakes`), and a flow arrow from it
      to the waker's span as flow events v1 (`ph: "s"` and `ph: "f"` with
      `bp: "e"`, `cat: "wake"`, one `id`; a span can end several waits);
    * for each work span a message or a spawn brought in, a flow (`cat:
      "join"`) from its parent's track to its start.

  Without a graph (and for processes with stacks but no span), one slice
  per process over the whole trace, with its total and its ten largest
  stacks in `args`.

  With metrics (mode `:sample`, `profile.metrics`), counter events
  (`ph: "C"`) per sample of each sampled process, on the same clock as the
  slices and with that process's `tid`: `"message_queue_len"`, `"memory"`
  (bytes) and `"reductions/ms"`, a rate: the reductions since the previous
  sample divided by the time since it (so a late tick, or a gap while a
  cross-process trace's callee served others, shows no spike; none at a
  series' first sample). The value is in `args` under the process's label
  (`{"<0.96.0>": 3}`, `{"MyApp.Inventory <0.96.0>": 3}`), which makes
  Perfetto draw one counter track per process and counter, named
  `"memory <0.96.0>"`. Counters describe the
  whole process, not only the trace's work. A sample taken just outside the
  trace (the first one is taken as tracing starts) is drawn at its edge.

  Slices are sorted by timestamp; at equal timestamps an enclosing slice
  comes before the slices it encloses, and a flow's source before its target.

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "demo", pid: pid, started_at: 0, duration_us: 9, stacks: %{pid => [{"a", 9}]}}
      iex> json = profile |> FlameOn.Client.Export.perfetto() |> IO.iodata_to_binary()
      iex> json =~ ~S("args":{"name":"<0.4242.0>"},"name":"thread_name")
      true
      iex> json =~ ~S("cat":"process") and json =~ ~S("dur":9) and json =~ ~S("ph":"X")
      true
  """
  @spec perfetto(Profile.t()) :: iodata()
  def perfetto(%Profile{} = profile), do: Perfetto.encode(profile)

  @doc """
  A self-contained interactive SVG flame graph, root at the bottom.

  Each frame is a `<g>` with a `<title>` (`"name (1,234 µs, 12.34%; self
  56 µs)"`, the share of the whole graph), a `<rect>` as wide as its time and
  a `<text>` label. An embedded script (no external script, style or font)
  shows the hovered frame on the details line, zooms into a clicked frame
  (clicking the root or "Reset Zoom" zooms out), and searches frame names by
  regular expression ("Search", Ctrl-F or `/`; Escape clears): matches turn
  magenta and the bottom right shows their share of the time. `WAITING` is
  blue, `SLEEP` grey, `GC_MINOR` and `GC_MAJOR` purple, `RUNNABLE` green, CPU
  frames warm colours.

  By default the graph merges all processes: the root is the profile, one
  level below it one node per process (traced process first), named by its
  label (`"MyApp.Inventory <0.96.0>"`), then each process's stacks. Frames narrower than `:min_width` pixels are left out
  (their time still counts in their parents).

  Options:

    * `:per_process` – `true` returns `%{pid => iodata}`, one graph per
      process (see `svgs/2`). Default `false`.
    * `:width` – pixels (1200). `:frame_height` – pixels (16).
      `:font_size` – pixels (12). `:min_width` – pixels (0.1).
    * `:title` – defaults to the profile's name (and the process in
      per-process graphs).

  ## Examples

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "demo", pid: pid, stacks: %{pid => [{"run;WAITING", 5}]}}
      iex> svg = profile |> FlameOn.Client.Export.svg() |> IO.iodata_to_binary()
      iex> svg =~ "<title>WAITING (5 µs, 100.00%; self 5 µs)</title>"
      true
  """
  @spec svg(Profile.t(), keyword()) :: iodata() | %{pid() => iodata()}
  def svg(%Profile{} = profile, opts \\ []), do: SVG.encode(profile, opts)

  @doc """
  One SVG flame graph per process: `svg(profile, [per_process: true] ++ opts)`.

      iex> [a, b] = [:c.pid(0, 4242, 0), :c.pid(0, 4243, 0)]
      iex> profile = %FlameOn.Client.Profile{name: "x", stacks: %{a => [{"f", 1}], b => [{"g", 2}]}}
      iex> svgs = FlameOn.Client.Export.svgs(profile)
      iex> svgs |> Map.keys() |> Enum.sort()
      [:c.pid(0, 4242, 0), :c.pid(0, 4243, 0)]
      iex> IO.iodata_to_binary(svgs[b]) =~ "<title>x &lt;0.4243.0&gt; (2 µs, 100.00%; self 0 µs)</title>"
      true
  """
  @spec svgs(Profile.t(), keyword()) :: %{pid() => iodata()}
  def svgs(%Profile{} = profile, opts \\ []) do
    SVG.encode(profile, Keyword.put(opts, :per_process, true))
  end

  @doc """
  A gzipped pprof profile (`perftools.profiles.Profile` of `profile.proto`).

    * `sample_type` and `period_type` are `{"wall", "microseconds"}`, `period` 1;
      a profile with stack samples (mode `:sample`, `profile.samples`) has
      two more sample types, `{"samples", "count"}` and
      `{"reductions", "count"}` (`go tool pprof -sample_index=reductions`);
      `"wall"` stays the default;
    * one sample per distinct stack and process: `location_id`s leaf first
      (pprof's order), the stack's microseconds as its value (then its
      sample count and reductions, 0 for a stack no sample landed on), a
      `"pid"` string label (`"<0.96.0>"`) and, for a process with a name,
      a `"process"` string label (`"MyApp.Inventory"`: `go tool pprof
      -tagfocus=process=Inventory`, `-tagroot=process`);
    * one `Location` and one `Function` per distinct frame name (same id);
    * `string_table[0]` is `""`; `duration_nanos` is the trace's wall time
      and `time_nanos` its start (when `started_at` is set).

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "demo", pid: pid, stacks: %{pid => [{"a;b", 3}]}}
      iex> <<0x1F, 0x8B, _::binary>> = FlameOn.Client.Export.pprof(profile)
      iex> :ok
      :ok
  """
  @spec pprof(Profile.t()) :: binary()
  def pprof(%Profile{} = profile), do: Pprof.encode(profile)

  @doc """
  Writes `profile` to `dir` (created if missing) in each of `formats`
  (`:all` for every format) and returns `[{format, path}]` in that order.

  Files are named `<name><extension>` after the profile's name, with
  characters other than letters, digits, `.`, `-` and `_` replaced by `_`.
  Unknown formats and options raise `ArgumentError` before anything is
  written.

  A `FlameOn.Client.Diff` (`FlameOn.Client.diff/3`) is written the same
  way, in the formats that apply to a diff (`:all` is those four; `:perfetto`
  raises `ArgumentError`: a diff has no timeline):

    * `:folded` – `<name>.diff.folded`, `difffolded.pl`'s three columns,
      `stack base new` (`FlameOn.Client.Diff.folded/1`), which
      `flamegraph.pl` draws as a differential flame graph;
    * `:svg` – `<name>.diff.svg`: frames as wide as the new profile's
      values, red where they grew and blue where they shrank, deeper with
      the change relative to the base (full at 4x or a quarter), grey
      within 0.5%; the title of each frame reads
      `"name (base 1,000 µs, new 4,000 µs, +300.0%, +3,000 µs)"`;
    * `:speedscope` – `<name>.diff.speedscope.json`, the base and the new
      profile (per group with `by: :process`) in one file;
    * `:pprof` – `<name>.base.pb.gz` and `<name>.new.pb.gz`, for
      `go tool pprof -diff_base=<name>.base.pb.gz <name>.new.pb.gz`.

  The new profile's values are the diff's, scaled as its `:normalize`
  says.

  Options:

    * `:per_process` – `true` writes the folded and SVG outputs as one file
      per process (not for a diff), `<name>.<0.96.0>.folded` → `<name>.0.96.0.folded`, and
      returns one `{format, path}` per file.
    * `:name` – the file name stem instead of the profile's name.
    * `:weight` – `:time` (default) or `:alloc`: the allocation view of a
      profile captured with `alloc: true`, in words, written to
      `<name>.alloc.<extension>` (see "Allocation" above).
    * the SVG options of `svg/2` (`:width`, `:min_width`, `:title`, ...).

  ## Examples

      iex> pid = :c.pid(0, 4242, 0)
      iex> profile = %FlameOn.Client.Profile{name: "my trace", pid: pid, stacks: %{pid => [{"a", 1}]}}
      iex> dir = Path.join(System.tmp_dir!(), "flame_on_export_doctest")
      iex> FlameOn.Client.Export.write(profile, dir, [:folded, :pprof])
      [folded: Path.join(dir, "my_trace.folded"), pprof: Path.join(dir, "my_trace.pb.gz")]
      iex> FlameOn.Client.Export.write(profile, dir, [:flamegraph])
      ** (ArgumentError) unknown export format :flamegraph, expected one of [:folded, :speedscope, :perfetto, :svg, :pprof] or :all

  A diff:

      iex> dir = Path.join(System.tmp_dir!(), "flame_on_export_doctest")
      iex> diff = FlameOn.Client.diff("a;b 10\\n", "a;b 40\\n", name: "ab")
      iex> FlameOn.Client.Export.write(diff, dir, [:folded, :pprof])
      [folded: Path.join(dir, "ab.diff.folded"), pprof: Path.join(dir, "ab.base.pb.gz"), pprof: Path.join(dir, "ab.new.pb.gz")]
      iex> File.read!(Path.join(dir, "ab.diff.folded"))
      "ab;a;b 10 10\\n"
      iex> FlameOn.Client.Export.write(diff, dir, [:perfetto])
      ** (ArgumentError) a diff has no timeline: :perfetto does not apply to it (a diff is written as [:folded, :svg, :speedscope, :pprof])
  """
  @spec write(Profile.t() | Diff.t(), Path.t(), [format()] | :all, keyword()) ::
          [{format(), Path.t()}]
  def write(profile_or_diff, dir, formats \\ :all, opts \\ [])

  def write(%Profile{} = profile, dir, formats, opts) do
    opts =
      Keyword.validate!(
        opts,
        [per_process: false, name: nil, weight: :time] ++
          Keyword.delete(SVG.defaults(), :per_process)
      )

    {weight, opts} = Keyword.pop(opts, :weight)
    formats = formats |> validate_formats!() |> for_weight!(weight, formats)
    {per_process, opts} = Keyword.pop(opts, :per_process)
    {name, svg_opts} = Keyword.pop(opts, :name)
    stem = file_stem(name || profile.name)

    unless is_boolean(per_process) do
      raise ArgumentError, "invalid option :per_process: #{inspect(per_process)}"
    end

    {profile, stem, svg_opts} = weighed(profile, stem, svg_opts, weight)

    # Encode everything first so that a bad option writes nothing.
    outputs = Enum.flat_map(formats, &outputs(&1, profile, stem, per_process, svg_opts))
    write_files(dir, outputs)
  end

  def write(%Diff{} = diff, dir, formats, opts) do
    formats =
      case formats do
        :all -> DiffFiles.formats()
        formats -> validate_formats!(formats)
      end

    Enum.each(formats, &DiffFiles.check_format!/1)
    opts = Keyword.validate!(opts, [name: nil] ++ SVG.defaults())
    {name, svg_opts} = Keyword.pop(opts, :name)
    stem = file_stem(name || diff.name)
    outputs = Enum.flat_map(formats, &DiffFiles.outputs(diff, &1, stem, svg_opts))
    write_files(dir, outputs)
  end

  defp write_files(dir, outputs) do
    File.mkdir_p!(dir)

    for {format, file, data} <- outputs do
      path = Path.join(dir, file)
      File.write!(path, data)
      {format, path}
    end
  end

  defp outputs(:folded, profile, stem, true, _svg_opts) do
    for {pid, data} <- Util.order_map(folded_per_process(profile), profile.pid),
        do: {:folded, process_file(stem, pid, :folded), data}
  end

  defp outputs(:svg, profile, stem, true, svg_opts) do
    for {pid, data} <- Util.order_map(svgs(profile, svg_opts), profile.pid),
        do: {:svg, process_file(stem, pid, :svg), data}
  end

  defp outputs(format, profile, stem, _per_process, svg_opts) do
    unit = if svg_opts[:unit] == Profile.alloc_unit(), do: :alloc, else: :time

    data =
      case format do
        :folded -> folded(profile)
        :speedscope -> Speedscope.encode(profile, unit: unit)
        :perfetto -> perfetto(profile)
        :svg -> svg(profile, Keyword.put(svg_opts, :per_process, false))
        :pprof -> Pprof.encode(profile, unit: unit)
      end

    [{format, stem <> Map.fetch!(@extensions, format), data}]
  end

  defp process_file(stem, pid, format) do
    # <0.96.0> is stem.0.96.0.folded, <0.96.0>@node stem.0.96.0@node.folded
    digits = pid |> Util.pid_text() |> String.replace(["<", ">"], "")
    "#{stem}.#{digits}#{Map.fetch!(@extensions, format)}"
  end

  # The allocation view: the profile weighed by words, its own files and
  # unit.
  defp weighed(profile, stem, svg_opts, :time), do: {profile, stem, svg_opts}

  defp weighed(profile, stem, svg_opts, :alloc) do
    svg_opts =
      svg_opts
      |> Keyword.put(:unit, Profile.alloc_unit())
      |> Keyword.update(
        :title,
        "#{profile.name}: words allocated",
        &(&1 || "#{profile.name}: words allocated")
      )

    {Profile.alloc_view(profile), stem <> ".alloc", svg_opts}
  end

  defp for_weight!(formats, :time, _given), do: formats
  defp for_weight!(formats, :alloc, :all), do: formats -- [:perfetto]

  defp for_weight!(formats, :alloc, _given) do
    if :perfetto in formats do
      raise ArgumentError, "the :perfetto format has no allocation view (weight: :alloc)"
    end

    formats
  end

  defp for_weight!(_formats, other, _given) do
    raise ArgumentError, "invalid option :weight: #{inspect(other)}, expected :time or :alloc"
  end

  defp validate_formats!(:all), do: @formats

  defp validate_formats!(formats) when is_list(formats) do
    for format <- formats, format not in @formats do
      raise ArgumentError,
            "unknown export format #{inspect(format)}, expected one of #{inspect(@formats)} or :all"
    end

    Enum.uniq(formats)
  end

  defp validate_formats!(other) do
    raise ArgumentError,
          "export formats must be a list of #{inspect(@formats)} or :all, got: #{inspect(other)}"
  end

  defp file_stem(name) do
    stem =
      name
      |> to_string()
      |> String.replace(~r/[^A-Za-z0-9._-]/u, "_")
      |> String.trim_leading(".")

    if stem == "", do: "flame_on", else: stem
  end
end
