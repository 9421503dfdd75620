defmodule FlameOn.Client.ProperHelpers do
  @moduledoc false
  # PropEr (Debian's erlang-proper, not a hex dep) driven from ExUnit: its
  # ?LET / ?SIZED macros as functions, a seeded quickcheck and an assertion
  # whose failure message carries the shrunk counterexample.
  import ExUnit.Assertions

  # An .exs that test/test_helper.exs requires, not part of the test build:
  # PropEr is an OTP lib outside the app's dependencies (compiling calls to
  # it warns, and --warnings-as-errors fails) and may be missing, in which
  # case the property tests fail with how to install it.
  @compile {:no_warn_undefined, [:proper, :proper_types]}

  @install_hint "PropEr is not installed: apt-get install erlang-proper"

  @doc """
  Puts PropEr's ebin on the code path if the VM does not already find it.
  Elixir 1.15+ prunes the code path to the project's declared apps, which
  drops OTP libs such as proper, and `:code.lib_dir(:proper)` then fails too,
  so this looks under the OTP lib directory itself. Returns whether PropEr
  loads.
  """
  def add_code_path do
    case :code.ensure_loaded(:proper) do
      {:module, :proper} ->
        true

      _ ->
        [to_string(:code.lib_dir()), "proper-*", "ebin"]
        |> Path.join()
        |> Path.wildcard()
        |> Enum.each(&:code.add_pathz(String.to_charlist(&1)))

        match?({:module, :proper}, :code.ensure_loaded(:proper))
    end
  end

  @doc "Fails the calling test (or its setup) when PropEr cannot be loaded."
  def ensure_proper! do
    add_code_path() || flunk(@install_hint)
    :ok
  end

  # The generator combinators proper.hrl defines as macros.
  def let(raw_type, fun), do: :proper_types.bind(raw_type, fun, false)
  def sized(fun), do: :proper_types.sized(fun)
  def such_that(raw_type, pred), do: :proper_types.add_constraint(raw_type, pred, true)

  @doc """
  Runs `prop` (a one-argument function returning a boolean or raising) on
  values of `gen`. Returns `:passed`, `{:failed, counterexample, report}`
  (shrunk unless `noshrink: true`) or `{:error, reason, report}`, where
  `report` is what PropEr printed.

  Options: `:numtests`, `:seed` (an integer: the same seed generates the
  same cases), `:start_size`, `:max_size`, `:noshrink`.
  """
  def quickcheck(gen, prop, opts) do
    seed = Keyword.fetch!(opts, :seed)
    key = {__MODULE__, :output, make_ref()}
    Process.put(key, [])

    output = fn format, args ->
      Process.put(key, [Process.get(key), :io_lib.format(format, args)])
    end

    proper_opts =
      [
        :long_result,
        :nocolors,
        {:on_output, output},
        {:numtests, Keyword.get(opts, :numtests, 100)}
      ] ++
        for(k <- [:start_size, :max_size], Keyword.has_key?(opts, k), do: {k, opts[k]}) ++
        if(opts[:noshrink], do: [:noshrink], else: [])

    # This PropEr (1.2+git) has no seed option: it seeds itself from the
    # clock unless the process already holds a `rand` state, which it then
    # uses for generating and shrinking. Each run ends by erasing that state,
    # so every run seeds again.
    _ = :rand.seed(:exsss, {seed, 7, 11})
    result = :proper.quickcheck(:proper.forall(gen, &holds?(prop, &1)), proper_opts)
    report = key |> Process.delete() |> IO.iodata_to_binary() |> tidy_report()

    case result do
      true -> :passed
      [counterexample] -> {:failed, counterexample, report}
      {:error, reason} -> {:error, reason, report}
    end
  end

  # Debian's PropEr build calls erlang:get_stacktrace/0 (gone since OTP 23)
  # when a property raises, and crashes itself. So an exception never
  # reaches it: it is a plain `false` to PropEr, which shrinks on it as on
  # any failure, and the failure message replays the shrunk case for the
  # exception.
  defp holds?(prop, value) do
    prop.(value) == true
  catch
    _kind, _reason -> false
  end

  @doc """
  Asserts that `prop` holds for `quickcheck/3`'s cases. On failure the
  message has the shrunk counterexample, what the property does on it (the
  exception it raises, replayed) and `opts[:hint]`, how to rerun the same
  cases.
  """
  def assert_forall(gen, prop, opts) do
    case quickcheck(gen, prop, opts) do
      :passed ->
        :ok

      {:failed, counterexample, report} ->
        flunk(failure_message(counterexample, replay(prop, counterexample), report, opts))

      {:error, reason, report} ->
        flunk("PropEr could not run the property: #{inspect(reason)}\n#{report}")
    end
  end

  @doc "The failure message of `assert_forall/3`."
  def failure_message(counterexample, replayed, report, opts) do
    """
    property failed (seed #{opts[:seed]}#{if hint = opts[:hint], do: "; rerun: #{hint}"})
    shrunk counterexample:
    #{inspect_case(counterexample)}
    on it the property #{replayed}
    PropEr's report:
    #{report}
    """
  end

  @doc "A counterexample as failure messages show it."
  def inspect_case(term), do: inspect(term, pretty: true, limit: 60, printable_limit: 200)

  # The shrunk case again, outside PropEr (which only saw `false`), for the
  # exception it raises.
  defp replay(prop, counterexample) do
    case prop.(counterexample) do
      true -> "passed when replayed (it depends on state left by earlier cases)"
      other -> "returned #{inspect(other)}"
    end
  catch
    kind, reason -> "raised:\n" <> Exception.format(kind, reason, Enum.take(__STACKTRACE__, 8))
  end

  # The progress dots are one character per case: thousands on a long run.
  defp tidy_report(report), do: String.replace(report, ~r/^[.x!]+$\n?/m, "")
end
