defmodule FlameOn.Client.ExUnit.View do
  @moduledoc false
  # A profiled test as its reader expects it, from what ExUnit.TestRun
  # recorded: the profile with the profiler's and the wrapper's frames
  # taken out and the body's names read as the test's function
  # (test_view/3), its largest stacks for the summary (top_stacks/2), and
  # the stacktrace ExUnit shows (clean_stacktrace/3). TestRun runs the
  # test; this module only rewrites stacks and stacktraces.

  alias FlameOn.Client.Profile

  # The frame of the closure ExUnit.TestRun's trace/4 gives profile/2.
  @closure_frame "FlameOn.Client.ExUnit.TestRun.-trace/4-fun-"
  # Modules whose frames sit between ExUnit's runner and the test's body.
  # (As frame names, not aliases: they call this module, it does not call
  # them.)
  @wrapper_modules [
    :"Elixir.FlameOn.Client",
    :"Elixir.FlameOn.Client.ExUnit",
    :"Elixir.FlameOn.Client.ExUnit.TestRun"
  ]

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
      iex> FlameOn.Client.ExUnit.View.top_stacks(profile, 3)
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
      iex> FlameOn.Client.ExUnit.View.clean_stacktrace(st, MyTest, :"test x")
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
