defmodule FlameOn.Client.ExUnit.TestRun do
  @moduledoc false
  # One test's body under FlameOn.Client.ExUnit, in the test's process:
  # whether to profile it, the profile, its files and its summary record,
  # and the test's outcome handed back to ExUnit as if nothing had wrapped
  # it (same result, same exception, same stacktrace). What the profile
  # and the stacktrace look like to the test's reader is ExUnit.View's.

  alias FlameOn.Client.Node.Breaker
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.ExUnit.View
  alias FlameOn.Client.ExUnit.Formatter
  alias FlameOn.Client.ExUnit.Regression

  @outcome_key {__MODULE__, :outcome}
  @top_stacks 3
  @stem_max_bytes 120

  @doc """
  The profile options a test's context asks for (`[]` for the defaults), or
  nil when the test is not to be profiled.
  """
  @spec options(map()) :: keyword() | nil
  def options(context) do
    select =
      case FlameOn.Client.ExUnit.Config.config() do
        nil -> :tagged
        config -> config.select
      end

    case {Map.get(context, :flame), select} do
      {_, :none} -> nil
      {false, _} -> nil
      {nil, :all} -> []
      {nil, :tagged} -> nil
      {true, _} -> []
      {opts, _} when is_list(opts) -> tag_options!(opts)
      {other, _} -> raise ArgumentError, bad_tag(other)
    end
  end

  defp tag_options!(opts) do
    if Keyword.keyword?(opts), do: opts, else: raise(ArgumentError, bad_tag(opts))
  end

  defp bad_tag(value) do
    "FlameOn.Client.ExUnit: expected the :flame tag to be true, false or a keyword list " <>
      "of options, got: #{inspect(value)}"
  end

  @doc "Runs a test's body unprofiled: what ExUnit sees is what the body did."
  @spec untraced(map(), (() -> term())) :: term()
  def untraced(context, body) do
    body.()
  catch
    kind, reason ->
      :erlang.raise(
        kind,
        reason,
        View.clean_stacktrace(__STACKTRACE__, context.module, context.test)
      )
  end

  @doc "Runs a test's body profiled, writes its files and records it for the summary."
  @spec profiled(map(), (() -> term()), keyword()) :: term()
  def profiled(context, body, tag_opts) do
    config =
      FlameOn.Client.ExUnit.Config.config() ||
        raise "FlameOn.Client.ExUnit: #{inspect(context.test)} is to be profiled, but " <>
                "FlameOn.Client.ExUnit.start/1 was not called: add it to test/test_helper.exs"

    {files, capture} = FlameOn.Client.ExUnit.Config.split_options!(tag_opts)

    files =
      [dir: config.dir, formats: config.formats]
      |> Keyword.merge(files)
      |> Keyword.put(
        :regression,
        Regression.options(files[:regression], Map.get(config, :regression))
      )

    capture = Keyword.merge(config.capture, capture)

    key = {context.module, context.test}
    Formatter.put_record(key, base_record(context))

    case Breaker.check() do
      :ok ->
        trace(context, body, files, capture)

      {:error, {:breaker_open, reason}} ->
        note(key, "not profiled: the circuit breaker is open (#{inspect(reason)})")
        untraced(context, body)
    end
  end

  defp trace(context, body, files, capture) do
    key = {context.module, context.test}
    Process.delete(@outcome_key)

    # The body's outcome goes around profile/2 (which would raise it again
    # and drop the profile), through the process dictionary, so that it is
    # still known if profile/2 itself fails after the body ran.
    traced_body = fn ->
      outcome =
        try do
          {:ok, body.()}
        catch
          kind, reason -> {kind, reason, __STACKTRACE__}
        end

      Process.put(@outcome_key, outcome)
      :ok
    end

    traced =
      try do
        {:ok, _profile} =
          FlameOn.Client.profile(traced_body, [name: profile_name(key)] ++ capture)
      catch
        kind, reason -> {kind, reason, __STACKTRACE__}
      end

    case {Process.delete(@outcome_key), traced} do
      {nil, {:error, %ArgumentError{} = error, stacktrace}} ->
        reraise ArgumentError,
                [
                  message:
                    "FlameOn.Client.ExUnit could not profile this test: " <>
                      Exception.message(error)
                ],
                stacktrace

      {nil, {kind, reason, _stacktrace}} ->
        note(key, "not profiled: " <> Exception.format_banner(kind, reason))
        untraced(context, body)

      {outcome, {:ok, profile}} ->
        write(context, profile, files, outcome)
        finish(outcome, context)

      {outcome, {kind, reason, _stacktrace}} ->
        note(key, "profile lost: " <> Exception.format_banner(kind, reason))
        finish(outcome, context)
    end
  end

  defp finish({:ok, result}, _context), do: result

  defp finish({kind, reason, stacktrace}, context),
    do:
      :erlang.raise(kind, reason, View.clean_stacktrace(stacktrace, context.module, context.test))

  defp write(context, profile, files, outcome) do
    key = {context.module, context.test}
    profile = View.test_view(profile, context.module, context.test)
    dir = files[:dir]
    stem = Formatter.claim_stem(dir, file_stem(context.module, context.test), key)

    paths =
      try do
        profile |> Export.write(dir, files[:formats], name: stem) |> Enum.map(&elem(&1, 1))
      rescue
        error ->
          note(key, "files not written: " <> Exception.message(error))
          []
      end

    regression = regression(key, profile, dir, stem, files[:regression], outcome)

    Formatter.update_record(key, fn record ->
      %{
        record
        | status: :profiled,
          regression: regression,
          duration_us: profile.duration_us,
          top: View.top_stacks(profile, @top_stacks),
          paths: paths,
          warnings: warnings(profile.stats)
      }
    end)
  end

  # Only a passing test is compared with its last run, and kept as the
  # next run's: a failure's time says nothing of its speed.
  defp regression(key, profile, dir, stem, opts, {:ok, _result}) when is_list(opts) do
    Regression.check(profile, dir, stem, opts)
  rescue
    error ->
      note(key, "not compared with the last run: " <> Exception.message(error))
      nil
  end

  defp regression(_key, _profile, _dir, _stem, _opts, _outcome), do: nil

  defp base_record(context) do
    %{
      module: context.module,
      test: context.test,
      pid: self(),
      status: :running,
      duration_us: 0,
      top: [],
      paths: [],
      warnings: [],
      notes: [],
      regression: nil
    }
  end

  defp note(key, text) do
    Formatter.update_record(key, fn record -> %{record | notes: record.notes ++ [text]} end)
  end

  defp warnings(stats) do
    for key <- [:dropped_events, :truncated_stacks, :dropped_metrics, :lifetime_exceeded],
        value = Map.get(stats, key),
        value not in [nil, 0, false] do
      case key == :truncated_stacks && FlameOn.Client.Profile.truncation_hint(stats) do
        text when text in [nil, false, ""] -> "#{key}: #{value}"
        text -> "#{key}: #{value} (#{text})"
      end
    end
  end

  @doc """
  The profile's name: `"MyApp.CheckoutTest test checkout"`.
  """
  @spec profile_name({module(), atom()}) :: String.t()
  def profile_name({module, test}), do: "#{inspect(module)} #{test}"

  @doc """
  The file name stem of a test's profile: module and test, with characters
  other than letters, digits, `.`, `-` and `_` turned into `_` (runs of
  them into one), cut with a hash when long.

      iex> FlameOn.Client.ExUnit.TestRun.file_stem(MyApp.CartTest, :"test adds 1 + 2")
      "MyApp.CartTest.test_adds_1_2"
  """
  @spec file_stem(module(), atom()) :: String.t()
  def file_stem(module, test) do
    stem =
      "#{inspect(module)}.#{test}"
      |> String.replace(~r/[^A-Za-z0-9._-]+/, "_")
      |> String.trim_leading(".")
      |> String.trim_trailing("_")

    if byte_size(stem) > @stem_max_bytes do
      hash = :erlang.phash2(stem, 0xFFFFFFFF) |> Integer.to_string(16) |> String.downcase()
      binary_part(stem, 0, @stem_max_bytes - 9) <> "-" <> hash
    else
      stem
    end
  end

  # By their old names, for the tests that call them here.
  @doc false
  @spec test_view(Profile.t(), module(), atom()) :: Profile.t()
  defdelegate test_view(profile, module, test), to: View
  @doc false
  @spec top_stacks(Profile.t(), pos_integer()) :: [map()]
  defdelegate top_stacks(profile, n), to: View
  @doc false
  @spec clean_stacktrace(Exception.stacktrace(), module(), atom()) :: Exception.stacktrace()
  defdelegate clean_stacktrace(stacktrace, module, test), to: View
end
