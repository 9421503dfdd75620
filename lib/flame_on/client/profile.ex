defmodule FlameOn.Client.Profile do
  @moduledoc """
  The result of a trace: collapsed stacks per process, plus metadata and
  counters.

  ## Fields

    * `trace_id` – a unique positive integer.
    * `name` – the trace's name (the first field of each folded line).
    * `mode` – how it was captured: `:nif`, `:process` or `:sample`.
    * `pid` – the traced process.
    * `started_at` – when tracing started, `System.monotonic_time(:microsecond)`.
    * `duration_us` – wall time from the start to the end of the trace.
    * `stacks` – `%{pid => [{stack, microseconds}]}`. A stack is its frames'
      names joined by `";"`, root first, without the pid. Each stack occurs
      once per process; stacks that round to 0 µs are left out. The stack
      `""` is time spent in the process with no traced function on its
      stack.
    * `graph` – the cross-process span graph; `nil` for process traces.
    * `samples` – mode `:sample`: `%{pid => [{stack, samples, reductions}]}`,
      how many stack samples landed on each stack and the reductions the
      process did in the intervals those samples closed (each sample weighs
      the reductions since the process's previous sample; the first weighs
      0). Stacks are the strings of `stacks`, merged the same way; a sample
      taken while the process was scheduled out counts on the stack's
      `"SLEEP"` (or `"WAITING"`) leaf. A stack may have samples and no time
      in `stacks` (it rounded to 0 µs); stacks without samples are left out.
      Empty in the other modes.
    * `metrics` – mode `:sample`: per sampled process, one map per sample
      (`:t_us` on `System.monotonic_time(:microsecond)`, `:status`,
      `:message_queue_len`, `:memory` in bytes, `:reductions` so far);
      empty in the other modes.
    * `stats` – the core session's counters (`:events`,
      `:dropped_events`, `:truncated_stacks`, `:collapsed_recursion` (the
      calls direct recursion folded into one frame), ... see
      `FlameOn.Client.Core.Native.stats/1`) plus `:unprocessed_events`, the trace
      messages dropped because the session's finish timeout ran out, and
      `:stacks_without_text`, the stacks left out of `stacks` and `samples`
      because their texts passed `:max_stack_bytes` (see
      `FlameOn.Client.profile/2`; `tree` keeps them).
    * `tree` – the same stacks as a `FlameOn.Client.Profile.Tree`, one
      calling-context tree per process, which the exporters walk; `nil` in
      a profile made by hand (`FlameOn.Client.Profile.Tree.of/1` builds it
      from `stacks`).
    * `time_classes` – `%{pid => classes}`: each process's time by class,
      running, `gc_minor_us`, `gc_major_us`, `runnable_us` and waiting, with
      its collections counted (`gc_count`); the classes add up to its time
      in `stacks`. See `FlameOn.Client.Profile.TimeClasses`. Empty in a
      profile made by hand (`TimeClasses.of/2` derives it from a tree).
    * `alloc` – with `alloc: true` (see `FlameOn.Client.profile/2`):
      `%{pid => [{stack, words}]}`, the heap words each process allocated,
      by the stack it was in when its next garbage collection started
      (the stacks are the strings of `stacks`; each collection is a sample
      weighing the words allocated since the one before: a sampled
      estimate, see the README's "Allocation profiles"). Empty without
      `alloc: true`. `stats` then adds `:alloc_words` and
      `:alloc_samples`, the totals, and `:alloc_unknown`, the collections
      that only set a process's starting level (the first of a process
      whose heap was not read before it: as the trace started, or for a
      process that joins a cross-process trace, as it joined). With
      `cross_process: true` each process of the trace has its own.
    * `alloc_tree` – the same as a `FlameOn.Client.Profile.Tree`, whose
      `self_us` and `total_us` are words and whose `samples` are the
      collections counted on each stack (`weight` its words again); `nil`
      without allocation. `alloc_view/1` gives a profile that exporters
      write in words.
    * `process_names` – `%{pid => name}`, the names of the profile's
      processes, read while the trace ran (`FlameOn.Client.ProcessName`:
      the registered name, else the process label, else the initial call,
      `"Task MyApp.Mailer.deliver/1"`); a process without one is not there.
      Every output shows a process as `process_label/2` does,
      `"MyApp.Inventory <0.178.0>"`.

  ## Frame names

  `{MyApp.Mod, :fun, 2}` is `"MyApp.Mod.fun/2"`, `{:lists, :reverse, 1}` is
  `"lists:reverse/1"`. Synthetic frames: `"SLEEP"` (scheduled out),
  `"WAITING"` (unattributed wait), `"GC_MINOR"` and `"GC_MAJOR"` (a
  garbage collection, where the trace gets its events), `"RUNNABLE"`
  (scheduled out while it could run: preempted, see `time_classes`), `"[running]"`, `"[runnable]"`,
  `"[waiting]"`, ... (the sampled process status at the root of each stack,
  mode `:sample` with `split_status: true`), `"…"` (frames past `max_depth`)
  and `"[truncated]"` (stacks past `max_nodes` / `max_frames`). `";"` and
  whitespace inside names become `"_"` so that the folded format stays
  parseable (an anonymous function in an ExUnit test is named like
  `-test fib/1-fun-0-`).
  """

  alias FlameOn.Client.Profile.{TimeClasses, Tree}

  defstruct trace_id: nil,
            name: "flame_on",
            mode: :process,
            pid: nil,
            started_at: nil,
            duration_us: 0,
            stacks: %{},
            graph: nil,
            samples: %{},
            metrics: %{},
            stats: %{},
            tree: nil,
            time_classes: %{},
            process_names: %{},
            alloc: %{},
            alloc_tree: nil

  @type stack :: String.t()

  @typedoc "One stack sample's metrics (mode `:sample`)."
  @type metric :: %{
          t_us: integer(),
          status: atom(),
          message_queue_len: non_neg_integer(),
          memory: non_neg_integer(),
          reductions: non_neg_integer()
        }

  @type t :: %__MODULE__{
          trace_id: pos_integer() | nil,
          name: String.t(),
          mode: :nif | :process | :sample | :native | :native_tail,
          pid: pid() | nil,
          started_at: integer() | nil,
          duration_us: non_neg_integer(),
          stacks: %{pid() => [{stack(), pos_integer()}]},
          graph: FlameOn.Client.Graph.t() | nil,
          samples: %{pid() => [{stack(), pos_integer(), non_neg_integer()}]},
          metrics: %{pid() => [metric()]},
          stats: %{atom() => non_neg_integer()},
          tree: Tree.t() | nil,
          time_classes: %{pid() => TimeClasses.t()},
          process_names: %{pid() => String.t()},
          alloc: %{pid() => [{stack(), pos_integer()}]},
          alloc_tree: Tree.t() | nil
        }

  @typedoc "A frame as `FlameOn.Client.Core.Native.finish/2` returns it."
  @type frame ::
          {module(), atom(), arity()}
          | :process
          | :sleep
          | :depth_cap
          | :node_cap
          | :waiting
          | :gc_minor
          | :gc_major
          | :attributed
          | :runnable
          | :undefined

  @reserved %{
    sleep: "SLEEP",
    depth_cap: "…",
    node_cap: "[truncated]",
    waiting: "WAITING",
    attributed: "ATTRIBUTED",
    gc_minor: "GC_MINOR",
    gc_major: "GC_MAJOR",
    runnable: "RUNNABLE"
  }

  @doc """
  The profile in the collapsed ("folded") stack format read by
  `flamegraph.pl`, inferno and speedscope: one line per stack,
  `name;<process>;frame;...;frame microseconds`, where `<process>` is
  `process_label/2` with whitespace and `;` made `_`: `<0.42.0>`, or
  `MyApp.Inventory_<0.42.0>` for a process with a name.

      iex> profile = %FlameOn.Client.Profile{
      ...>   name: "demo",
      ...>   stacks: %{:c.pid(0, 42, 0) => [{"Demo.run/0;lists:seq/2", 12}]}
      ...> }
      iex> profile |> FlameOn.Client.Profile.folded() |> IO.iodata_to_binary()
      "demo;<0.42.0>;Demo.run/0;lists:seq/2 12\\n"
      iex> profile = %{profile | process_names: %{:c.pid(0, 42, 0) => "Task Demo.run/0"}}
      iex> profile |> FlameOn.Client.Profile.folded() |> IO.iodata_to_binary()
      "demo;Task_Demo.run/0_<0.42.0>;Demo.run/0;lists:seq/2 12\\n"
  """
  @spec folded(t()) :: iodata()
  def folded(%__MODULE__{name: name, stacks: stacks} = profile) do
    name = sanitize(name)
    names = names(profile)

    for {pid, entries} <- Enum.sort(stacks),
        prefix = [name, ?; | sanitize(process_label(pid, names))],
        {stack, us} <- entries do
      case stack do
        "" -> [prefix, ?\s, Integer.to_string(us), ?\n]
        _ -> [prefix, ?;, stack, ?\s, Integer.to_string(us), ?\n]
      end
    end
  end

  @doc """
  The names of the profile's processes: `process_names`, over those its
  span graph's spans carry (a profile made by hand or by an older
  version may name its processes there only, a registered one as
  `":my_server"`).

      iex> pid = :c.pid(0, 42, 0)
      iex> FlameOn.Client.Profile.names(%FlameOn.Client.Profile{process_names: %{pid => "MyApp.Cart"}})
      %{:c.pid(0, 42, 0) => "MyApp.Cart"}
  """
  @spec names(t()) :: %{pid() => String.t()}
  def names(%__MODULE__{process_names: names, graph: graph}) do
    Map.merge(span_names(graph), names || %{})
  end

  defp span_names(%{spans: spans}) do
    for %{pid: pid, name: name} <- spans,
        is_binary(name),
        not String.starts_with?(name, "#PID<"),
        into: %{},
        do: {pid, String.trim_leading(name, ":")}
  end

  defp span_names(_graph), do: %{}

  @doc """
  How every output shows a process: its name (`names/1`) then its pid
  (`pid_text/1`), or its pid alone.

      iex> pid = :c.pid(0, 178, 0)
      iex> FlameOn.Client.Profile.process_label(pid, %{pid => "MyApp.Inventory"})
      "MyApp.Inventory <0.178.0>"
      iex> FlameOn.Client.Profile.process_label(pid, %{})
      "<0.178.0>"
  """
  @spec process_label(pid() | {atom(), node()}, %{pid() => String.t()}) :: String.t()
  def process_label(pid, names) do
    case names do
      %{^pid => name} when is_binary(name) -> name <> " " <> pid_text(pid)
      _ -> pid_text(pid)
    end
  end

  @doc """
  A process as folded lines and exporters write it: `"<0.42.0>"` for a
  process of this node, and for one on another node (a trace across nodes)
  the pid as that node prints it, then `@` and the node:
  `"<0.42.0>@b@127.0.0.1"`. A `:remote` span's `{name, node}` is inspected.

      iex> FlameOn.Client.Profile.pid_text(:c.pid(0, 42, 0))
      "<0.42.0>"
  """
  @spec pid_text(pid() | {atom(), node()}) :: String.t()
  def pid_text(pid) when is_pid(pid) and node(pid) == node(),
    do: List.to_string(:erlang.pid_to_list(pid))

  def pid_text(pid) when is_pid(pid) do
    # `<N.42.0>` here, N the node's index on this node: `<0.42.0>` there
    [_index, rest] =
      pid |> :erlang.pid_to_list() |> List.to_string() |> String.split(".", parts: 2)

    sanitize("<0.#{rest}@#{node(pid)}")
  end

  # a :remote span's callee as its caller named it (see FlameOn.Client.Graph)
  def pid_text(other), do: inspect(other)

  @doc ~S"""
  What made a profile's stacks truncated (`stats.truncated_stacks`), and the
  option that raises each limit reached: a sentence, or `nil` when nothing
  was truncated. `:options` names them as `FlameOn.Client.profile/2` takes
  them, `:switches` as `mix profile.flame` does.

      iex> FlameOn.Client.Profile.truncation_hint(%{truncated_stacks: 9, depth_truncations: 9})
      "9 calls went past :max_depth into a \"…\" frame: raise :max_depth " <>
        "(direct recursion counts as one frame while :collapse_recursion is true, the default)"
      iex> FlameOn.Client.Profile.truncation_hint(%{truncated_stacks: 0})
      nil
  """
  @spec truncation_hint(map(), :options | :switches) :: String.t() | nil
  def truncation_hint(stats, names \\ :options) do
    name = fn key ->
      case names do
        :options -> inspect(key)
        :switches -> "--" <> String.replace(Atom.to_string(key), "_", "-")
      end
    end

    collapse =
      case names do
        :options -> "while :collapse_recursion is true, the default"
        :switches -> "unless --no-collapse-recursion"
      end

    reasons =
      for {key, limit, text} <- [
            {:depth_truncations, :max_depth, "calls went past"},
            {:node_limit_hits, :max_nodes, "stacks found the tree full at"},
            {:frame_limit_hits, :max_frames, "functions found the frame table full at"},
            {:stack_overflows, :max_stack_frames, "calls went past"}
          ],
          n = Map.get(stats, key, 0),
          is_integer(n) and n > 0 do
        if limit == :max_depth,
          do:
            "#{n} #{text} #{name.(limit)} into a \"…\" frame: raise #{name.(limit)} " <>
              "(direct recursion counts as one frame #{collapse})",
          else: "#{n} #{text} #{name.(limit)}: raise #{name.(limit)}"
      end

    if Map.get(stats, :truncated_stacks, 0) in [nil, 0] and
         Map.get(stats, :stack_overflows, 0) in [nil, 0],
       do: nil,
       else: Enum.join(reasons, "; ")
  end

  @doc """
  Total microseconds in `pid`'s stacks (0 for a process not in the profile).

      iex> pid = :c.pid(0, 42, 0)
      iex> FlameOn.Client.Profile.total_us(%FlameOn.Client.Profile{stacks: %{pid => [{"a", 2}, {"a;b", 3}]}}, pid)
      5
  """
  @spec total_us(t(), pid()) :: non_neg_integer()
  def total_us(%__MODULE__{stacks: stacks}, pid) do
    stacks |> Map.get(pid, []) |> Enum.reduce(0, fn {_stack, us}, acc -> acc + us end)
  end

  @doc """
  The text of one frame in a stack.

      iex> FlameOn.Client.Profile.frame_name({Enum, :map, 2})
      "Enum.map/2"
      iex> FlameOn.Client.Profile.frame_name({:lists, :reverse, 1})
      "lists:reverse/1"
      iex> FlameOn.Client.Profile.frame_name(:sleep)
      "SLEEP"

  Native mode names the runtime's own C code by its symbol, where it has
  one:

      iex> FlameOn.Client.Profile.frame_name({:"$native", :erts_garbage_collect, 0})
      "[native:erts_garbage_collect]"
      iex> FlameOn.Client.Profile.frame_name({:"$native", :"", 0})
      "[native]"
  """
  @spec frame_name(frame()) :: String.t()
  def frame_name({:"$status", status, 0}) when is_atom(status), do: "[#{status}]"
  def frame_name({:"$cut", _, 0}), do: "…"
  def frame_name({:"$native", :"", 0}), do: "[native]"

  def frame_name({:"$native", symbol, 0}),
    do: sanitize("[native:" <> Atom.to_string(symbol) <> "]")

  def frame_name({module, function, arity})
      when is_atom(module) and is_atom(function) and is_integer(arity) do
    text =
      case Atom.to_string(module) do
        "Elixir." <> elixir -> [elixir, ?., Atom.to_string(function)]
        erlang -> [erlang, ?:, Atom.to_string(function)]
      end

    sanitize(IO.iodata_to_binary([text, ?/, Integer.to_string(arity)]))
  end

  def frame_name(frame) when is_map_key(@reserved, frame), do: Map.fetch!(@reserved, frame)
  def frame_name(other), do: sanitize(inspect(other))

  @doc false
  # Builds a profile from `FlameOn.Client.Core.Native.finish/2`'s tree, its
  # stats and the metadata fields in `fields`. Each frame is named once
  # here; the C core does the rest (`FlameOn.Client.Core.Native.render/2`):
  # merging the stacks whose frames read the same (a status frame, a
  # renamed or cut frame), rounding, ordering, and the stack texts, each a
  # slice of the text of a stack below it. `names` overrides the text of
  # some frames; a frame named `nil` drops the time (and the samples) of
  # every stack that ends in it (views of cross-process traces).
  @spec build(FlameOn.Client.Core.Native.tree(), map(), keyword(), map()) :: t()
  def build(tree, stats, fields, names \\ %{}) do
    frames = elem(tree, 0)
    texts = frames |> Tuple.to_list() |> Enum.map(&text_of(&1, names)) |> List.to_tuple()

    {stacks, samples, trees, tree_names, without_text, alloc, alloc_trees} =
      FlameOn.Client.Core.Native.render(tree, texts)

    tree = %Tree{names: tree_names, nodes: trees}
    {gcs, stats} = Map.pop(stats, :process_gcs, %{})

    struct!(
      __MODULE__,
      [
        stacks: stacks,
        samples: samples,
        tree: tree,
        time_classes: TimeClasses.of(tree, gcs),
        alloc: alloc,
        alloc_tree:
          if(alloc_trees == %{}, do: nil, else: %Tree{names: tree_names, nodes: alloc_trees}),
        stats: Map.put(stats, :stacks_without_text, without_text)
      ] ++ fields
    )
  end

  @doc """
  The profile weighed by allocation instead of time, for the exporters
  (`FlameOn.Client.Export.write/3` with `weight: :alloc`): its `stacks`
  are `alloc` (words, where they had microseconds), its `tree` the
  `alloc_tree` (built from `alloc` for a profile made by hand), and its
  `samples` the collections counted on each stack with their words
  (`{stack, collections, words}`). Every folded count, flame graph width
  and pprof value of the result is in words; `Profile.alloc_unit/0` names
  the unit.

      iex> pid = :c.pid(0, 42, 0)
      iex> profile = %FlameOn.Client.Profile{alloc: %{pid => [{"a;b", 2048}]}}
      iex> FlameOn.Client.Profile.alloc_view(profile).stacks
      %{:c.pid(0, 42, 0) => [{"a;b", 2048}]}
  """
  @spec alloc_view(t()) :: t()
  def alloc_view(%__MODULE__{} = profile) do
    tree = profile.alloc_tree || Tree.from_stacks(profile.alloc, %{})

    samples =
      for {pid, _} <- tree.nodes, into: %{} do
        {pid, alloc_samples(tree, pid)}
      end

    %{
      profile
      | stacks: profile.alloc,
        samples: Map.reject(samples, fn {_pid, list} -> list == [] end),
        tree: tree,
        metrics: %{}
    }
  end

  @doc "The unit of an `alloc_view/1` profile's counts: heap words (8 bytes on a 64-bit VM)."
  @spec alloc_unit() :: String.t()
  def alloc_unit, do: "words"

  # {stack, collections, words} of each node collections were counted on
  defp alloc_samples(tree, pid) do
    {entries, _path} =
      Tree.reduce(tree, pid, {[], []}, fn {depth, name, self, _total, samples, _w}, {acc, path} ->
        path = if depth == 0, do: [], else: Enum.take(path, depth - 1) ++ [Tree.name(tree, name)]
        acc = if samples > 0, do: [{Enum.join(path, ";"), samples, self} | acc], else: acc
        {acc, path}
      end)

    Enum.reverse(entries)
  end

  defp text_of(:process, _names), do: ""

  defp text_of(frame, names) do
    case names do
      %{^frame => text} -> text
      _ -> frame_name(frame)
    end
  end

  # Most names need no change, and the regex costs ~10x a byte search: only
  # names with a ';', an ASCII space or the first byte of a multi-byte one
  # (U+0085, U+00A0, U+1680, U+2000-U+205F, U+3000) go through it.
  defp sanitize(text) do
    case :binary.match(text, unsafe_bytes()) do
      :nomatch -> text
      _ -> String.replace(text, ~r/[;\s]/u, "_")
    end
  end

  defp unsafe_bytes do
    case :persistent_term.get({__MODULE__, :unsafe_bytes}, nil) do
      nil ->
        pattern =
          :binary.compile_pattern(
            [";", " ", "\t", "\n", "\v", "\f", "\r"] ++
              for(byte <- [0xC2, 0xE1, 0xE2, 0xE3], do: <<byte>>)
          )

        :persistent_term.put({__MODULE__, :unsafe_bytes}, pattern)
        pattern

      pattern ->
        pattern
    end
  end
end
