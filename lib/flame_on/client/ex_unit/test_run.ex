defmodule FlameOn.Client.ExUnit.TestRun do
  @moduledoc false
  # One test's body under FlameOn.Client.ExUnit, in the test's process:
  # whether to profile it, the profile, its files and its summary record,
  # and the test's outcome handed back to ExUnit as if nothing had wrapped
  # it (same result, same exception, same stacktrace).

  alias FlameOn.Client.Node.Breaker
  alias FlameOn.Client.Export
  alias FlameOn.Client.Profile
  alias FlameOn.Client.ExUnit.Formatter

  @outcome_key {__MODULE__, :outcome}
  # The frame of the closure trace/4 gives profile/2.
  @closure_frame "FlameOn.Client.ExUnit.TestRun.-trace/4-fun-"
  @top_stacks 3
  @stem_max_bytes 120
  # Modules whose frames sit between ExUnit's runner and the test's body.
  # (As frame names: this module is called by them, it does not call them.)
  @wrapper_modules [:"Elixir.FlameOn.Client", :"Elixir.FlameOn.Client.ExUnit", __MODULE__]

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
      :erlang.raise(kind, reason, clean_stacktrace(__STACKTRACE__, context.module, context.test))
  end

  @doc "Runs a test's body profiled, writes its files and records it for the summary."
  @spec profiled(map(), (() -> term()), keyword()) :: term()
  def profiled(context, body, tag_opts) do
    config =
      FlameOn.Client.ExUnit.Config.config() ||
        raise "FlameOn.Client.ExUnit: #{inspect(context.test)} is to be profiled, but " <>
                "FlameOn.Client.ExUnit.start/1 was not called: add it to test/test_helper.exs"

    {files, capture} = FlameOn.Client.ExUnit.Config.split_options!(tag_opts)
    files = Keyword.merge([dir: config.dir, formats: config.formats], files)
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
        write(context, profile, files)
        finish(outcome, context)

      {outcome, {kind, reason, _stacktrace}} ->
        note(key, "profile lost: " <> Exception.format_banner(kind, reason))
        finish(outcome, context)
    end
  end

  defp finish({:ok, result}, _context), do: result

  defp finish({kind, reason, stacktrace}, context),
    do: :erlang.raise(kind, reason, clean_stacktrace(stacktrace, context.module, context.test))

  defp write(context, profile, files) do
    key = {context.module, context.test}
    profile = test_view(profile, context.module, context.test)
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

    Formatter.update_record(key, fn record ->
      %{
        record
        | status: :profiled,
          duration_us: profile.duration_us,
          top: top_stacks(profile, @top_stacks),
          paths: paths,
          warnings: warnings(profile.stats)
      }
    end)
  end

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
      notes: []
    }
  end

  defp note(key, text) do
    Formatter.update_record(key, fn record -> %{record | notes: record.notes ++ [text]} end)
  end

  defp warnings(stats) do
    for key <- [:dropped_events, :truncated_stacks, :dropped_metrics, :lifetime_exceeded],
        value = Map.get(stats, key),
        value not in [nil, 0, false],
        do: "#{key}: #{value}"
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

  # --- the test's view of the profile ------------------------------------------

  @doc """
  The profile as a test's reader expects it: every stack of the test's
  process starts at the test's function (the profiler's and the wrapper's
  frames above it are gone), and the test's body and its anonymous
  functions read as the test's function (`"MyTest.test_x/1"`), not as the
  body function of arity 2 that `use FlameOn.Client.ExUnit` made of it.
  """
  @spec test_view(Profile.t(), module(), atom()) :: Profile.t()
  def test_view(%Profile{} = profile, module, test) do
    names = frame_names(module, test)

    rewrite = fn pid, stack ->
      frames = if stack == "", do: [], else: String.split(stack, ";")
      frames = if pid == profile.pid, do: rooted(frames, names), else: frames
      frames |> Enum.map(&rename_frame(&1, names)) |> Enum.join(";")
    end

    stacks =
      Map.new(profile.stacks, fn {pid, entries} ->
        {pid, merge(entries, fn {stack, us} -> {rewrite.(pid, stack), us} end)}
      end)

    samples =
      Map.new(profile.samples, fn {pid, entries} ->
        merged = merge(entries, fn {stack, n, reds} -> {rewrite.(pid, stack), {n, reds}} end)
        {pid, Enum.map(merged, fn {stack, {n, reds}} -> {stack, n, reds} end)}
      end)

    # the exporters walk `tree`: rebuilt from the rewritten stacks
    %{profile | stacks: stacks, samples: samples, tree: nil}
  end

  # The texts of the test's frames, as Profile names them.
  defp frame_names(module, test) do
    prefix = fn arity ->
      Profile.frame_name({module, :"-#{test}/#{arity}-fun-0-", 0})
      |> String.replace_suffix("0-/0", "")
    end

    %{
      test: Profile.frame_name({module, test, 1}),
      body: Profile.frame_name({module, test, 2}),
      # the wrapper's closure, and the body's anonymous functions
      wrapper_fun: prefix.(1),
      body_fun: prefix.(2)
    }
  end

  defp rename_frame(frame, %{body: frame, test: test}), do: test

  defp rename_frame(frame, names) do
    if String.starts_with?(frame, names.body_fun),
      do: String.replace_prefix(frame, names.body_fun, names.wrapper_fun),
      else: frame
  end

  defp merge(entries, fun) do
    entries
    |> Enum.map(fun)
    |> Enum.reduce(%{}, fn {stack, value}, acc ->
      Map.update(acc, stack, value, &add(&1, value))
    end)
    |> Enum.sort()
  end

  defp add({n1, r1}, {n2, r2}), do: {n1 + n2, r1 + r2}
  defp add(a, b), do: a + b

  # The body runs under profile/2 and the closure of trace/4: stacks that do
  # not pass through the closure, and the closure's own call storing the
  # outcome, are the profiler's time, kept as the test function's self time.
  # (Frames are still the body's own names here.)
  defp rooted(frames, names) do
    case frames do
      # cut by sample mode's depth limit: the innermost frames
      ["…" | _] ->
        [names.body | frames]

      _ ->
        case Enum.drop_while(frames, &(not String.starts_with?(&1, @closure_frame))) do
          [] -> [names.body]
          [_closure | body] -> body_frames(body, names)
        end
    end
  end

  defp body_frames(frames, names) do
    body = names.body

    case Enum.drop_while(frames, &String.starts_with?(&1, names.wrapper_fun)) do
      [] -> [body]
      ["Process.put/2" | _] -> [body]
      [^body | _] = frames -> frames
      # the body tail-called out of the test's function
      frames -> [body | frames]
    end
  end

  @doc """
  The `n` stacks with the most time, over every process of the profile:
  `[%{pid: pid, stack: stack, us: us}]`, largest first. Stacks that differ
  only in how deep a run of one frame goes (recursion) count as one, and
  read `"Mod.fib/1 ×3..12"`.

      iex> pid = self()
      iex> profile = %FlameOn.Client.Profile{pid: pid, stacks: %{pid => [{"t;f;f", 5}, {"t;f;f;f", 4}, {"t;g", 6}]}}
      iex> FlameOn.Client.ExUnit.TestRun.top_stacks(profile, 3)
      [%{pid: pid, stack: "t;f ×2..3", us: 9}, %{pid: pid, stack: "t;g", us: 6}]
  """
  @spec top_stacks(Profile.t(), pos_integer()) :: [map()]
  def top_stacks(%Profile{stacks: stacks}, n) do
    for({pid, entries} <- stacks, {stack, us} <- entries, do: {pid, runs(stack), us})
    |> Enum.group_by(fn {pid, runs, _us} -> {pid, Enum.map(runs, &elem(&1, 0))} end)
    |> Enum.map(fn {{pid, frames}, group} ->
      depths = Enum.map(group, fn {_pid, runs, _us} -> Enum.map(runs, &elem(&1, 1)) end)
      us = group |> Enum.map(&elem(&1, 2)) |> Enum.sum()
      %{pid: pid, stack: runs_text(frames, depths), us: us}
    end)
    |> Enum.sort_by(&{-&1.us, &1.stack})
    |> Enum.take(n)
  end

  defp runs(""), do: []

  defp runs(stack) do
    stack |> String.split(";") |> Enum.chunk_by(& &1) |> Enum.map(&{hd(&1), length(&1)})
  end

  defp runs_text(frames, depths) do
    frames
    |> Enum.zip(Enum.zip_with(depths, & &1))
    |> Enum.map_join(";", fn {frame, counts} ->
      case Enum.min_max(counts) do
        {1, 1} -> frame
        {same, same} -> "#{frame} ×#{same}"
        {low, high} -> "#{frame} ×#{low}..#{high}"
      end
    end)
  end

  # --- the stacktrace ExUnit sees ------------------------------------------------

  @doc """
  The stacktrace a test's exception would have had without the wrapper:
  the frames of `__run__/2`, `profile/2` and the wrapper between the body
  and ExUnit's runner are taken out, and the body's frames (its function of
  arity 2 and its anonymous functions) read as the test's function.

      iex> st = [
      ...>   {MyTest, :"-test x/2-fun-0-", 1, [file: ~c"t.exs", line: 4]},
      ...>   {MyTest, :"test x", 2, [file: ~c"t.exs", line: 3]},
      ...>   {FlameOn.Client.ExUnit.TestRun, :untraced, 2, []},
      ...>   {ExUnit.Runner, :exec_test, 1, []}
      ...> ]
      iex> FlameOn.Client.ExUnit.TestRun.clean_stacktrace(st, MyTest, :"test x")
      [
        {MyTest, :"-test x/1-fun-0-", 1, [file: ~c"t.exs", line: 4]},
        {MyTest, :"test x", 1, [file: ~c"t.exs", line: 3]},
        {ExUnit.Runner, :exec_test, 1, []}
      ]
  """
  @spec clean_stacktrace(Exception.stacktrace(), module(), atom()) :: Exception.stacktrace()
  def clean_stacktrace(stacktrace, module, test) do
    {body, runner} = Enum.split_while(stacktrace, &(not runner_frame?(&1)))
    wrapper_fun = "-#{test}/1-fun-"

    # Only the block right above the runner is ours (or the tail of a
    # stacktrace cut before the runner): the same modules deeper down are
    # the body's own calls.
    body =
      body
      |> Enum.reverse()
      |> Enum.drop_while(&wrapper_entry?(&1, module, test, wrapper_fun))
      |> Enum.reverse()

    Enum.map(body, &rename_entry(&1, module, test, "-#{test}/2-fun-")) ++ runner
  end

  defp runner_frame?({ExUnit.Runner, _fun, _arity, _location}), do: true
  defp runner_frame?(_entry), do: false

  defp wrapper_entry?({mod, _fun, _arity, _location}, _module, _test, _wrapper_fun)
       when mod in @wrapper_modules,
       do: true

  defp wrapper_entry?({module, test, arity, _location}, module, test, _wrapper_fun),
    do: arity == 1 or (is_list(arity) and length(arity) == 1)

  defp wrapper_entry?({module, fun, _arity, _location}, module, _test, wrapper_fun),
    do: String.starts_with?(Atom.to_string(fun), wrapper_fun)

  defp wrapper_entry?(_entry, _module, _test, _wrapper_fun), do: false

  # The body: "test x"/2, with [context, marker] when the entry has the
  # arguments (a FunctionClauseError).
  defp rename_entry({module, test, 2, location}, module, test, _body_fun),
    do: {module, test, 1, location}

  defp rename_entry({module, test, [context, _marker], location}, module, test, _body_fun),
    do: {module, test, [context], location}

  defp rename_entry({module, fun, arity, location} = entry, module, _test, body_fun) do
    name = Atom.to_string(fun)

    if String.starts_with?(name, body_fun) do
      renamed = String.replace_prefix(name, body_fun, String.replace(body_fun, "/2-", "/1-"))
      {module, String.to_atom(renamed), arity, location}
    else
      entry
    end
  end

  defp rename_entry(entry, _module, _test, _body_fun), do: entry
end
