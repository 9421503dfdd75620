defmodule FlameOn.Client.ExUnit.Regression do
  @moduledoc false
  # A profiled test against its previous run (FlameOn.Client.ExUnit's
  # `:regression`). Each passing profiled test keeps, next to its files,
  #
  #   <stem>.last.folded   its profile (Profile.folded/1)
  #   <stem>.last.time     its traced wall time: "duration_us 31512"
  #
  # and before they are replaced, the new run is compared with them: when
  # its traced time grew by more than `ratio` and by at least `min_ms`,
  # the diff (absolute values: the time grew, not a share of it) is
  # written as <stem>.diff.svg and <stem>.diff.folded, and the summary
  # lists it. A test that did not grow has its diff files of an earlier run
  # removed: a diff always compares the last two runs.

  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile

  @defaults [ratio: 1.2, min_ms: 5]

  @typedoc "A test that got slower: its traced times and its diff's files."
  @type t :: %{before_us: non_neg_integer(), after_us: non_neg_integer(), paths: [Path.t()]}

  @doc """
  The thresholds in effect, or false: a tag's `:regression` (nil when the
  tag does not say) over `start/1`'s (nil: the defaults), each a boolean
  or a keyword list merged over the defaults.

      iex> FlameOn.Client.ExUnit.Regression.options(nil, nil)
      [ratio: 1.2, min_ms: 5]
      iex> FlameOn.Client.ExUnit.Regression.options([min_ms: 20], [ratio: 2.0])
      [ratio: 2.0, min_ms: 20]
      iex> FlameOn.Client.ExUnit.Regression.options(false, nil)
      false
      iex> FlameOn.Client.ExUnit.Regression.options(true, false)
      [ratio: 1.2, min_ms: 5]
  """
  @spec options(boolean() | keyword() | nil, boolean() | keyword() | nil) :: keyword() | false
  def options(tag, start) do
    case {tag, start} do
      {false, _} -> false
      {nil, false} -> false
      {true, _} -> @defaults
      {nil, start} -> merge(@defaults, start)
      {tag, false} -> merge(@defaults, tag)
      {tag, start} -> @defaults |> merge(start) |> merge(tag)
    end
  end

  defp merge(opts, more) when is_list(more), do: Keyword.merge(opts, more)
  defp merge(opts, _true_or_nil), do: opts

  @doc """
  Compares `profile` (as its files show it) with the previous run's kept
  in `dir` under `stem`, writes the diff when it grew past `opts`, and
  keeps `profile` for the next run. Returns the regression, or nil.
  Raises `File.Error` (or `ArgumentError` for an unreadable kept profile)
  when a file cannot be read or written.
  """
  @spec check(Profile.t(), Path.t(), String.t(), keyword()) :: t() | nil
  def check(%Profile{} = profile, dir, stem, opts) do
    folded = IO.iodata_to_binary(Export.folded(profile))
    last_folded = Path.join(dir, stem <> ".last.folded")
    last_time = Path.join(dir, stem <> ".last.time")

    try do
      compare(last_time, last_folded, profile, dir, stem, opts)
    after
      # kept for the next run, even when this one could not be compared
      File.mkdir_p!(dir)
      File.write!(last_folded, folded)
      File.write!(last_time, "duration_us #{profile.duration_us}\n")
    end
  end

  defp compare(last_time, last_folded, profile, dir, stem, opts) do
    with {:ok, before_us} <- read_time(last_time),
         true <- File.regular?(last_folded),
         true <- slower?(before_us, profile.duration_us, opts) do
      diff = FlameOn.Client.diff(last_folded, profile, normalize: false, name: profile.name)

      paths = Export.write(diff, dir, [:svg, :folded], name: stem)
      %{before_us: before_us, after_us: profile.duration_us, paths: Keyword.values(paths)}
    else
      _ ->
        for ext <- [".diff.svg", ".diff.folded"], do: File.rm(Path.join(dir, stem <> ext))
        nil
    end
  end

  @doc """
  Whether a test that took `before_us` and now `after_us` is slower past
  the thresholds: more than `ratio` times, and by `min_ms` or more.

      iex> FlameOn.Client.ExUnit.Regression.slower?(12_000, 31_500, ratio: 1.2, min_ms: 5)
      true
      iex> FlameOn.Client.ExUnit.Regression.slower?(1_000, 3_000, ratio: 1.2, min_ms: 5)
      false
      iex> FlameOn.Client.ExUnit.Regression.slower?(100_000, 110_000, ratio: 1.2, min_ms: 5)
      false
  """
  @spec slower?(non_neg_integer(), non_neg_integer(), keyword()) :: boolean()
  def slower?(before_us, after_us, opts) do
    after_us > before_us * opts[:ratio] and after_us - before_us >= opts[:min_ms] * 1000
  end

  defp read_time(path) do
    with {:ok, text} <- File.read(path),
         "duration_us " <> number <- String.trim(text),
         {us, ""} when us >= 0 <- Integer.parse(number) do
      {:ok, us}
    else
      _ -> :error
    end
  end
end
