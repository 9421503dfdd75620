defmodule FlameOn.Client.Diff do
  @moduledoc """
  A differential profile: two profiles of the same code (before and after
  a change, a slow run and a fast one) side by side, stack by stack, to
  draw a flame graph coloured by what changed.

      {_, before} = FlameOn.Client.profile(fn -> MyApp.work() end, name: "work")
      # ... change the code, recompile ...
      {_, now} = FlameOn.Client.profile(fn -> MyApp.work() end, name: "work")
      diff = FlameOn.Client.diff(before, now)
      FlameOn.Client.Export.write(diff, "flame_on_out", [:svg, :folded])
      #=> [svg: "flame_on_out/work.diff.svg", folded: "flame_on_out/work.diff.folded"]

  Each side is a `FlameOn.Client.Profile`, the path of a folded file (an
  earlier run's `Profile.folded/1`, or any tool's `frame;frame;... count`
  lines), or folded text.

  ## Stacks and processes

  The two runs' processes have different pids, so they are matched by
  what they are (`:by`):

    * `:merged` (default) – every process of a profile together: a stack's
      value is its sum over the processes, keyed by the stack alone.
    * `:process` – one group per kind of process: the traced process of
      each run (`profile.pid`; in a folded file, or a profile made by hand
      without one, its process with the most time, as a trace's own
      process is busy for the whole trace) with the
      other's; a named process (`profile.process_names`, see
      `FlameOn.Client.ProcessName`: registered name, label or initial call)
      with the processes of the same name in the other run (several tasks
      of one function form one group); the unnamed others together.

  ## Normalisation

  `:normalize` decides how the new profile's values are scaled before they
  are compared (the factor is the `scale` field):

    * `true` or `:median` (default) – by the median, weighted by the base
      value, of `base / new` over the stacks both runs have: the typical
      stack comes out unchanged. When a function does 4x the work in the
      new run, its stacks show +300% and the others about 0%; when the
      whole new run was 10% slower (a busy machine) that is scaled away.
      Without a common stack, as `:total`.
    * `:total` – so that the new total equals the base's: each stack's
      share of the whole is compared (`difffolded.pl -n`), and when one
      function grows everything else shows as shrunk.
    * `false` – absolute values.

  ## Fields

    * `name` – the new profile's name (or the `:name` option); files are
      named after it.
    * `by`, `normalize`, `scale` – as above (`scale` multiplies new).
    * `measure`, `unit` – `:time` in `"µs"`, or with `alloc: true` `:alloc`
      in `"words"` (each profile's `alloc` field, where it has one).
    * `groups` – `[{group, label}]` in output order: `{:all, nil}`
      (`:merged`), or `:root` (`"[root]"`), `{:name, name}` (the name, as
      folded lines write it) and `:unnamed` (`"[unnamed]"`).
    * `stacks` – `%{group => [{stack, base, new}]}` sorted by stack; `new`
      is scaled and rounded; a stack either run lacks has 0 there.
    * `base_total`, `new_total` – the sums of each run's values, new before
      scaling. `base_name`, `new_name` – where each side came from.

  ## Examples

      iex> base = "run;a 100\\nrun;b 100\\nrun;c 100\\n"
      iex> new = "run;a 110\\nrun;b 110\\nrun;c 440\\n"
      iex> diff = FlameOn.Client.diff(base, new)
      iex> diff.stacks
      %{all: [{"run;a", 100, 100}, {"run;b", 100, 100}, {"run;c", 100, 400}]}
      iex> FlameOn.Client.Diff.inclusive(diff, "c")
      {100, 400}
      iex> FlameOn.Client.Diff.percent(100, 400)
      300.0
      iex> FlameOn.Client.diff(base, new, normalize: false).stacks
      %{all: [{"run;a", 100, 110}, {"run;b", 100, 110}, {"run;c", 100, 440}]}
      iex> FlameOn.Client.diff(base, new, name: "run") |> FlameOn.Client.Diff.folded() |> IO.iodata_to_binary()
      "run;run;a 100 100\\nrun;run;b 100 100\\nrun;run;c 100 400\\n"
  """

  alias FlameOn.Client.Diff.Input
  alias FlameOn.Client.Diff.Scale

  defstruct name: "diff",
            by: :merged,
            normalize: :median,
            scale: 1.0,
            measure: :time,
            unit: "µs",
            groups: [],
            stacks: %{},
            base_total: 0,
            new_total: 0,
            base_name: nil,
            new_name: nil

  @type group :: :all | :root | {:name, String.t()} | :unnamed

  @type t :: %__MODULE__{
          name: String.t(),
          by: :merged | :process,
          normalize: :median | :total | false,
          scale: float(),
          measure: :time | :alloc,
          unit: String.t(),
          groups: [{group(), String.t() | nil}],
          stacks: %{group() => [{String.t(), non_neg_integer(), non_neg_integer()}]},
          base_total: non_neg_integer(),
          new_total: non_neg_integer(),
          base_name: String.t() | nil,
          new_name: String.t() | nil
        }

  @typedoc "A side of a diff: a profile, a folded file's path, or folded text."
  @type side :: FlameOn.Client.Profile.t() | Path.t() | iodata()

  @doc """
  The diff of `new` against `base` (see the module doc).

  Options: `:by` (`:merged` or `:process`), `:normalize` (`true`,
  `:median`, `:total` or `false`), `:alloc` (`false`; `true` compares the
  profiles' `alloc`, words allocated per stack), `:name`. A bad option, a
  missing file or a line that is not a folded stack raises
  `ArgumentError`.
  """
  @spec new(side(), side(), keyword()) :: t()
  def new(base, new, opts \\ []) do
    opts = validate!(opts)
    measure = if opts[:alloc], do: :alloc, else: :time
    base = Input.read!(base, measure)
    new = Input.read!(new, measure)
    by = opts[:by]
    base_groups = Input.group(base, by)
    new_groups = Input.group(new, by)
    scale = Scale.factor(opts[:normalize], base_groups, new_groups)

    keys =
      (Map.keys(base_groups) ++ Map.keys(new_groups))
      |> Enum.uniq()
      |> Enum.sort_by(&order/1)

    stacks =
      Map.new(keys, fn group ->
        {group, rows(Map.get(base_groups, group, %{}), Map.get(new_groups, group, %{}), scale)}
      end)

    %__MODULE__{
      name: opts[:name] || new.name,
      by: by,
      normalize: opts[:normalize],
      scale: scale,
      measure: measure,
      unit: if(measure == :alloc, do: "words", else: "µs"),
      groups: for(group <- keys, do: {group, label(group)}),
      stacks: stacks,
      base_total: total(base_groups),
      new_total: total(new_groups),
      base_name: base.source,
      new_name: new.source
    }
  end

  defp validate!(opts) do
    opts = Keyword.validate!(opts, by: :merged, normalize: true, alloc: false, name: nil)

    for {key, value} <- opts do
      valid? =
        case key do
          :by -> value in [:merged, :process]
          :normalize -> value in [true, false, :median, :total]
          :alloc -> is_boolean(value)
          :name -> is_nil(value) or is_binary(value)
        end

      valid? || raise ArgumentError, "invalid diff option #{inspect(key)}: #{inspect(value)}"
    end

    Keyword.update!(opts, :normalize, &if(&1 == true, do: :median, else: &1))
  end

  defp rows(base, new, scale) do
    (Map.keys(base) ++ Map.keys(new))
    |> Enum.uniq()
    |> Enum.sort()
    |> Enum.flat_map(fn stack ->
      b = Map.get(base, stack, 0)
      n = Map.get(new, stack, 0)
      if b > 0 or n > 0, do: [{stack, round(b), round(n * scale)}], else: []
    end)
  end

  defp total(groups) do
    for {_group, stacks} <- groups, {_stack, v} <- stacks, reduce: 0, do: (acc -> acc + round(v))
  end

  defp order(:all), do: {0, ""}
  defp order(:root), do: {0, ""}
  defp order({:name, name}), do: {1, name}
  defp order(:unnamed), do: {2, ""}

  defp label(:all), do: nil
  defp label(:root), do: "[root]"
  defp label({:name, name}), do: name
  defp label(:unnamed), do: "[unnamed]"

  @doc """
  The diff in the three-column collapsed form of `difffolded.pl`, which
  `flamegraph.pl` draws as a differential flame graph: one
  `name;[group;]frame;...;frame base new` line per stack (the group's
  label with `by: :process`), new scaled as the diff says.
  """
  @spec folded(t()) :: iodata()
  def folded(%__MODULE__{} = diff) do
    name = Input.sanitize(diff.name)

    for {group, label} <- diff.groups,
        prefix = if(label, do: [name, ?; | Input.sanitize(label)], else: name),
        {stack, base, new} <- diff.stacks[group] do
      stack = if stack == "", do: [], else: [?; | stack]
      [prefix, stack, ?\s, Integer.to_string(base), ?\s, Integer.to_string(new), ?\n]
    end
  end

  @doc """
  `{base, new}` of a frame: the sum over the stacks it is on (once per
  stack, however deep it recurses), in every group: the function's
  inclusive value in each run, new scaled.
  """
  @spec inclusive(t(), String.t()) :: {non_neg_integer(), non_neg_integer()}
  def inclusive(%__MODULE__{stacks: stacks}, frame) do
    for {_group, rows} <- stacks,
        {stack, b, n} <- rows,
        frame in :binary.split(stack, ";", [:global]),
        reduce: {0, 0},
        do: ({sb, sn} -> {sb + b, sn + n})
  end

  @doc """
  Each function's self time (or words) in both runs, `[{function, base,
  new}]`, the largest change (either way) first: the sum of the stacks it
  is the last frame of, in every group, new scaled. A stack of no frame
  counts as `"(no traced function)"`.

      iex> diff = FlameOn.Client.diff("run;a 100\\nrun;b 50\\n", "run;a 100\\nrun;b 150\\nrun;b;c 10\\n", normalize: false)
      iex> FlameOn.Client.Diff.self_changes(diff)
      [{"b", 50, 150}, {"c", 0, 10}, {"a", 100, 100}]
  """
  @spec self_changes(t()) :: [{String.t(), non_neg_integer(), non_neg_integer()}]
  def self_changes(%__MODULE__{stacks: stacks}) do
    stacks
    |> Enum.flat_map(fn {_group, rows} -> rows end)
    |> Enum.reduce(%{}, fn {stack, b, n}, acc ->
      Map.update(acc, leaf(stack), {b, n}, fn {sb, sn} -> {sb + b, sn + n} end)
    end)
    |> Enum.map(fn {leaf, {b, n}} -> {leaf, b, n} end)
    |> Enum.sort_by(fn {leaf, b, n} -> {-abs(n - b), leaf} end)
  end

  defp leaf(""), do: "(no traced function)"
  defp leaf(stack), do: stack |> :binary.split(";", [:global]) |> List.last()

  @doc """
  The change from `base` to `new` in percent of `base`; `:new` where base
  is 0 (and new is not).

      iex> FlameOn.Client.Diff.percent(200, 100)
      -50.0
      iex> FlameOn.Client.Diff.percent(0, 5)
      :new
  """
  @spec percent(number(), number()) :: float() | :new
  def percent(0, 0), do: 0.0
  def percent(base, _new) when base == 0, do: :new
  def percent(base, new), do: (new - base) * 100 / base
end
