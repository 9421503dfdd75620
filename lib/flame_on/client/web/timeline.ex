defmodule FlameOn.Client.Web.Timeline do
  @moduledoc false
  # /timeline?a_from=&a_to=[&b_from=&b_to=][&normalize=]: the windows of
  # FlameOn.Client.Continuous's ring, and the ranges a query picks (Unix
  # ms, as Continuous.windows/0 gives them): range A alone is its profile
  # (Continuous.profile/1), A and B are B's diff against A (a
  # Web.Compare). Knows no HTML: Web.TimelinePage draws it, Web.Router
  # answers with it.

  alias FlameOn.Client.Continuous
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Web.Compare

  @typedoc "A range picked by the query: its bounds, its windows, its profile."
  @type range :: %{
          from: integer(),
          to: integer(),
          windows: [Continuous.window()],
          profile: Profile.t()
        }

  @typedoc """
  The timeline: whether continuous profiling runs (`status`:
  `Continuous.status/0`, `false` when it does not), its windows oldest
  first, the ranges picked (`nil` when not), and A and B compared when
  both are.
  """
  @type t :: %{
          status: false | map(),
          windows: [Continuous.window()],
          a: range() | nil,
          b: range() | nil,
          compare: Compare.t() | nil,
          normalize: String.t(),
          pid: pid() | nil
        }

  @doc """
  The timeline a query asks for, or `{:error, 400, message, timeline}` (the
  timeline without ranges) for a range that is half given, not two
  integers, empty (`from` not before `to`) or holds no window of the ring,
  for a range B without a range A, for a bad `normalize`, and for a `pid`
  (`0.123.0`: range A's flame graph of that process alone) that is not
  one of range A's processes, or given with a range B.
  """
  @spec resolve(map()) :: {:ok, t()} | {:error, 400, String.t(), t()}
  def resolve(query) do
    status = Continuous.status()
    windows = windows()

    bare = %{
      status: status,
      windows: windows,
      a: nil,
      b: nil,
      compare: nil,
      normalize: "median",
      pid: nil
    }

    result =
      with {:ok, normalize, _} <- Compare.normalize(query["normalize"]),
           {:ok, a} <- range(query, "a", "A", bare),
           {:ok, b} <- range(query, "b", "B", bare),
           :ok <- b_needs_a(a, b),
           {:ok, pid} <- process(query["pid"], a, b),
           {:ok, compare} <- compare(a, b, normalize) do
        {:ok, %{bare | a: a, b: b, compare: compare, normalize: normalize, pid: pid}}
      end

    case result do
      {:ok, timeline} -> {:ok, timeline}
      {:error, 400, message} -> {:error, 400, message, bare}
    end
  end

  defp windows do
    Continuous.windows()
  rescue
    # not running: no ring
    ArgumentError -> []
  end

  defp range(query, prefix, label, timeline) do
    from = query[prefix <> "_from"]
    to = query[prefix <> "_to"]

    case {blank?(from), blank?(to)} do
      {true, true} ->
        {:ok, nil}

      {false, false} ->
        with {:ok, from} <- unix_ms(from, prefix <> "_from"),
             {:ok, to} <- unix_ms(to, prefix <> "_to") do
          load(from, to, label, timeline)
        end

      _ ->
        {:error, 400,
         "range #{label} needs both #{prefix}_from and #{prefix}_to (Unix milliseconds), " <>
           "got: #{inspect(from)} and #{inspect(to)}"}
    end
  end

  defp blank?(text), do: text in [nil, ""]

  defp unix_ms(text, key) do
    case Integer.parse(String.trim(text)) do
      {ms, ""} when ms >= 0 ->
        {:ok, ms}

      _ ->
        {:error, 400, "#{key} must be a time in Unix milliseconds, got: #{inspect(text)}"}
    end
  end

  defp load(from, to, label, _timeline) when from >= to do
    {:error, 400,
     "range #{label} is empty: its start (#{from}) must be before its end (#{to}), " <>
       "in Unix milliseconds"}
  end

  defp load(from, to, label, %{status: status, windows: all}) do
    windows = Enum.filter(all, &(&1.to > from and &1.from < to))

    profile =
      try do
        if windows == [], do: nil, else: Continuous.profile(from: from, to: to)
      rescue
        # stopped since
        ArgumentError -> nil
      end

    cond do
      status == false and all == [] ->
        {:error, 400,
         "range #{label}: continuous profiling is not running, so there is no window to show " <>
           "(start it with FlameOn.Client.Continuous.start/1 or config :flame_on_client, continuous: true)"}

      # the ring may have dropped them since windows/0
      profile == nil or profile.stats.windows == 0 ->
        {:error, 400,
         "range #{label} (#{from} to #{to}, Unix ms) holds no window of the ring, which " <>
           "holds #{held(all)}"}

      true ->
        {:ok, %{from: from, to: to, windows: windows, profile: named(profile, from, to)}}
    end
  end

  defp held([]), do: "none yet"

  defp held(windows),
    do: "#{hd(windows).from} to #{List.last(windows).to} (#{length(windows)} windows)"

  # "continuous 06:20:01.200-06:20:03": the flame graph's title, the
  # downloads' file name
  defp named(profile, from, to), do: %{profile | name: "#{profile.name} #{span(from, to)}"}

  @doc "A range as the page names it: `06:20:01.200-06:20:03` (UTC)."
  @spec span(integer(), integer()) :: String.t()
  def span(from, to), do: clock(from) <> "-" <> clock(to)

  @doc "A Unix ms time of day, UTC: `06:20:01`, or `06:20:01.200` off the second."
  @spec clock(integer()) :: String.t()
  def clock(ms) do
    time = ms |> DateTime.from_unix!(:millisecond) |> Calendar.strftime("%H:%M:%S")

    case rem(ms, 1000) do
      0 -> time
      r -> time <> "." <> String.pad_leading(Integer.to_string(r), 3, "0")
    end
  end

  defp b_needs_a(nil, %{}),
    do:
      {:error, 400,
       "range B is compared with range A: give a_from and a_to too (or pick B as range A)"}

  defp b_needs_a(_a, _b), do: :ok

  defp process(blank, _a, _b) when blank in [nil, ""], do: {:ok, nil}

  defp process(text, nil, _b),
    do: {:error, 400, "pid #{inspect(text)} picks a process of range A: give a_from and a_to"}

  defp process(text, _a, %{}),
    do: {:error, 400, "pid #{inspect(text)} is for range A alone, not for a diff"}

  defp process(text, a, nil) do
    case Enum.find(Map.keys(a.profile.stacks), &(FlameOn.Client.Web.HTML.pid_text(&1) == text)) do
      nil -> {:error, 400, "no process #{inspect(text)} in range A"}
      pid -> {:ok, pid}
    end
  end

  defp compare(_a, nil, _normalize), do: {:ok, nil}

  defp compare(a, b, normalize) do
    Compare.new(a.profile, b.profile, normalize, "/timeline", query_params(a, b),
      name: "#{a.profile.name} vs #{span(b.from, b.to)}"
    )
  end

  @doc "The query that picks ranges `a` and `b` (either `nil`)."
  @spec query_params(range() | nil, range() | nil) :: [{String.t(), integer()}]
  def query_params(a, b) do
    for {prefix, %{from: from, to: to}} <- [{"a", a}, {"b", b}],
        pair <- [{prefix <> "_from", from}, {prefix <> "_to", to}],
        do: pair
  end
end
