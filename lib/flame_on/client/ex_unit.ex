defmodule FlameOn.Client.ExUnit do
  @moduledoc """
  Profiles tests of an app's own ExUnit suite: each tagged test writes its
  flame graphs, and the end of `mix test` lists the profiled tests, slowest
  first, with their top stacks and files.

  Three lines in an app that has `{:flame_on_client, path: ...}` (or `git:`)
  as a dependency:

      # test/test_helper.exs
      ExUnit.start()
      FlameOn.Client.ExUnit.start()

      # test/my_app/checkout_test.exs
      defmodule MyApp.CheckoutTest do
        use ExUnit.Case, async: true
        use FlameOn.Client.ExUnit

        @tag :flame
        test "checkout of a full cart" do
          assert {:ok, _order} = MyApp.checkout(cart())
        end

        @tag flame: [cross_process: true]
        test "checkout waits on the stock server" do
          ...
        end
      end

  ## Which tests are profiled

  Only tests of modules that `use FlameOn.Client.ExUnit`, and of those:

    * `@tag :flame` (or `@tag flame: true`) – this test, with the options
      given to `start/1`;
    * `@tag flame: [cross_process: true, ...]` – this test, with these
      options over those of `start/1` (any option of `start/1`);
    * `@moduletag :flame` (or `@moduletag flame: [...]`) – every test of
      the module; a test's own `@tag flame: ...` wins over it, and
      `@tag flame: false` leaves a test out;
    * every test, when the suite runs with `FLAME_ON=all mix test` (except
      those tagged `flame: false`); `FLAME_ON=off` profiles none.

  A test that is not profiled is not traced at all: its body is called
  directly, and its failures are reported as without this module (but for
  a test killed by its timeout, whose reported stack shows one frame of this
  module below the test's). `mix test --only flame` runs only the tests that have a
  `flame` tag (whatever its value, `false` included).

  ## What a profile covers

  The **test body**, traced with `FlameOn.Client.profile/2` in the test's own
  process: `setup` and `setup_all` callbacks and `on_exit` callbacks are not
  in it (ExUnit runs them before and after the body; to profile a slow
  setup, call `FlameOn.Client.profile/2` in it). Every stack of the test's
  process starts at the test's function (`MyApp.CheckoutTest.test_checkout_of_a_full_cart/1`);
  with `cross_process: true` the processes serving the test's
  `GenServer.call`s are in the profile too, under their own pids.

  A failing test writes its profile and fails exactly as it would
  untraced: the same exception, with the same stacktrace (the frames of the
  profiler are taken out of it), so ExUnit's report is the same. If the test
  process is killed before its body returns (an ExUnit timeout, an exit
  signal from a linked process) no file is written, and the summary says
  so; ExUnit reports a timeout with the stack the process was killed in,
  which then shows the profiler's frames below the test's.

  `use FlameOn.Client.ExUnit` keeps each test's body as a private function
  of the same name and one more argument, and defines the test's function
  (the one ExUnit calls) to run it, profiled or not. ExUnit recognises a
  test's frames by module and name, so its reports read `(test)` and show
  the failing code as before; stacktraces and profiles show the body under
  the test's own function name and arity.

  ## Files

  Each profiled test writes, under `:dir`, one file per format named after
  its module and test: `MyApp.CheckoutTest.test_checkout_of_a_full_cart.svg`
  (characters other than letters, digits, `.`, `-` and `_` become `_`; a name
  two tests would share gets a `-2`, `-3`, ... suffix; long names are cut and
  get a hash). Files of the same name from an earlier run are overwritten.
  The formats are those of `FlameOn.Client.Export`. A passing test also
  keeps `<stem>.last.folded` and `<stem>.last.time` for the next run to
  compare with (below).

  ## Slower than last run

  Before a passing profiled test's files are replaced, its traced wall
  time is compared with the last run's (kept as `<stem>.last.folded`, the
  profile, and `<stem>.last.time`, `"duration_us 12034"`). When it grew by
  more than `:ratio` **and** by at least `:min_ms`, its diff against the
  last run (`FlameOn.Client.diff/3` with `normalize: false`: the times as
  measured, as the growth is of the time itself) is written beside its
  files, `<stem>.diff.svg` (red where it grew, blue where it shrank) and
  `<stem>.diff.folded`, and the summary ends with the tests slower than
  last run, most grown first:

      FlameOn: 1 test slower than last run
        test checkout (MyApp.CheckoutTest)  12.0 ms → 31.5 ms (+163%), diff: flame_on_out/tests/MyApp.CheckoutTest.test_checkout.diff.svg

  Each run is compared with the one before it: run again as slow, a test
  is not listed, and its diff files of the earlier run are removed. A
  failing test is neither compared nor kept (its time says nothing of its
  speed; the last passing run stays the reference). The option:

    * `regression: [ratio: 1.2, min_ms: 5]` (the default) – listed when the
      new time is more than `ratio` times the last and `min_ms` or more
      longer; either key alone is merged over the defaults;
    * `regression: false` – no comparison, nothing kept; `true` – the
      defaults.

  In `start/1` for every test, in a `flame:` tag for one test (merged over
  `start/1`'s): `@tag flame: [regression: [min_ms: 50]]` for a test whose
  time varies, `@tag flame: [regression: false]` to leave one out.

  ## Capture mode: `:nif` by default

  Tests are profiled in `mode: :nif` (exact call stacks, `profile/2`'s
  default), because tests are short: a 3 ms test has every one of its calls
  in the profile, where stack sampling would have three samples. The price,
  while a profiled test runs:

    * call trace patterns are set on every function of the node, so tests
      running **concurrently** (`async: true`) that are not profiled run
      slower (each call takes a breakpoint check; their results do not
      change); concurrent profiled tests share the patterns, and each trace
      holds only its own test's events;
    * the profiled test itself runs slower, most where it makes many small
      calls: its wall time in the summary is the traced time, so compare
      tests with each other, not with an untraced run.

  `mode: :sample` (in `start/1` or a tag) sets no pattern: nothing else on
  the node pays, and the test runs about 1.1x slower, but work shorter than
  the sampling interval (1 ms) may be missed. While sampling, the node's
  `backtrace_depth` is raised to 64, so an exception raised in a test
  running meanwhile can carry more stacktrace frames than the usual 8.

  ## The summary

  `start/1` adds the formatter `FlameOn.Client.ExUnit.Formatter`, which
  prints, after ExUnit's own report, the profiled tests slowest first: their
  wall time, their three most expensive stacks (with their share of the
  wall time) and the paths of their files, then the tests slower than last
  run with their diffs. Nothing is printed when no test was profiled. `mix test --formatter X` replaces the formatters: add
  `--formatter FlameOn.Client.ExUnit.Formatter` to keep the summary (the
  files are written either way).
  """

  alias FlameOn.Client.ExUnit.{Config, Formatter}
  alias FlameOn.Client.ExUnit.TestRun

  # ExUnit is not a dependency: an app's prod build compiles this module
  # without it (newer Mix prunes it from the code path); only tests call it.
  @compile {:no_warn_undefined, ExUnit}

  # The extra argument of a test's body (see __before_compile__/1).
  @body_marker :__flame_on_body__
  @defaults [dir: "flame_on_out/tests", formats: [:folded, :svg, :speedscope], summary: 25]

  @typedoc """
  An option of `start/1` or of a `flame:` tag: `:dir`, `:formats`,
  `:summary` (`start/1` only), `:regression`, or any option of
  `FlameOn.Client.profile/2` but `:name`.
  """
  @type option ::
          {:dir, Path.t()}
          | {:formats, [FlameOn.Client.Export.format()]}
          | {:summary, pos_integer() | :all}
          | {:regression, boolean() | [ratio: number(), min_ms: number()]}
          | FlameOn.Client.option()

  @doc """
  Sets up profiling of tagged tests; call it in `test/test_helper.exs`,
  next to `ExUnit.start()`.

  Options:

    * `:dir` (`"flame_on_out/tests"`) – where the files go, relative to the
      directory `mix test` runs in; created if missing.
    * `:formats` (`[:folded, :svg, :speedscope]`) – the formats to write,
      any of `FlameOn.Client.Export.formats/0`.
    * `:summary` (`25`) – how many of the slowest profiled tests the
      summary shows in full (`:all` for every one); the others are counted.
    * `:regression` (`[ratio: 1.2, min_ms: 5]`) – when a test's traced time
      counts as slower than last run, or `false` (see "Slower than last
      run" above).
    * any option of `FlameOn.Client.profile/2` but `:name` (each profile is
      named after its test): `:mode`, `:cross_process`, `:sleep`,
      `:interval_us`, the limits, ... They apply to every profiled test; a
      `flame:` tag's options are merged over them. Their values are checked
      when the first test is profiled, by `profile/2`.

  It reads `FLAME_ON` from the environment: unset or `tagged` (profile the
  tagged tests), `all` (every test of the modules that use this module) or
  `off` (none). It starts `:flame_on_client` if needed and adds
  `FlameOn.Client.ExUnit.Formatter` to ExUnit's formatters (once, however
  often it is called). Raises `ArgumentError` on a bad option or `FLAME_ON`
  value.

      FlameOn.Client.ExUnit.start(dir: "tmp/flames", formats: [:svg], mode: :sample)

      iex> FlameOn.Client.ExUnit.start(formats: [:png])
      ** (ArgumentError) unknown export format :png, expected one of [:folded, :speedscope, :perfetto, :svg, :pprof]
  """
  @spec start([option()]) :: :ok
  def start(opts \\ []) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError,
            "expected FlameOn.Client.ExUnit.start/1 options to be a keyword list, got: #{inspect(opts)}"
    end

    if Keyword.keyword?(opts) and Keyword.has_key?(opts, :name) do
      raise ArgumentError,
            ":name is not an option of FlameOn.Client.ExUnit.start/1 " <>
              "(each profile is named after its test)"
    end

    {files, capture} = FlameOn.Client.Options.ex_unit!(opts, :ex_unit)
    files = Keyword.merge(@defaults, files)
    summary = files[:summary]

    {:ok, _} = Application.ensure_all_started(:flame_on_client)
    # Its defaults (the formatters) are in its application environment.
    _ = Application.load(:ex_unit)

    config = %{
      dir: files[:dir],
      formats: files[:formats],
      capture: capture,
      select: select!(System.get_env("FLAME_ON")),
      summary: summary,
      regression: files[:regression]
    }

    Config.put(config)

    formatters = ExUnit.configuration()[:formatters] || [ExUnit.CLIFormatter]

    unless Formatter in formatters do
      ExUnit.configure(formatters: formatters ++ [Formatter])
    end

    :ok
  end

  @doc false
  # The configuration `start/1` stored, or nil.
  @spec config() :: map() | nil
  defdelegate config(), to: Config

  @doc false
  @spec split_options!(keyword()) :: {keyword(), keyword()}
  defdelegate split_options!(opts), to: Config

  defp select!(value) when value in [nil, "", "tagged"], do: :tagged
  defp select!("all"), do: :all
  defp select!(value) when value in ["off", "none", "0", "false"], do: :none

  defp select!(other) do
    raise ArgumentError, "FLAME_ON=#{other}: expected all, tagged or off"
  end

  @doc """
  Makes the tests of an ExUnit test module profilable (see the module
  documentation); it sits beside `use ExUnit.Case`, in either order.

  It wraps each test's function so that, when the test is profiled, its
  body runs inside `FlameOn.Client.profile/2`. A test that is not profiled
  calls its body directly.
  """
  defmacro __using__(opts) do
    if opts != [] do
      raise ArgumentError,
            "use FlameOn.Client.ExUnit takes no options (got #{Macro.to_string(opts)}): " <>
              "give them to FlameOn.Client.ExUnit.start/1 or a flame: tag"
    end

    quote do
      unless Module.get_attribute(__MODULE__, :flame_on_client_ex_unit) do
        @flame_on_client_ex_unit true
        @before_compile FlameOn.Client.ExUnit
      end
    end
  end

  @doc false
  defmacro __before_compile__(env) do
    tests = Module.get_attribute(env.module, :ex_unit_tests)

    unless is_list(tests) do
      raise CompileError,
        file: env.file,
        line: env.line,
        description: "use FlameOn.Client.ExUnit needs use ExUnit.Case in #{inspect(env.module)}"
    end

    # Each test's body keeps its name at arity 2 (ExUnit's reports find a
    # test's frame by module and name, whatever the arity: its failures
    # read "(test)" and show the failing code, even from the stack of a
    # test killed by its timeout); the arity-1 function ExUnit calls goes
    # through __run__/2.
    for %{name: name} <- tests, body = body_definition(env.module, name) do
      quote do
        unquote_splicing(body)

        def unquote(name)(context) do
          FlameOn.Client.ExUnit.__run__(context, fn ->
            unquote(name)(context, unquote(@body_marker))
          end)
        end
      end
    end
  end

  # The clauses of a test's function, taken out of the module and given
  # back as a private function of one more argument.
  defp body_definition(module, name) do
    case Module.get_definition(module, {name, 1}) do
      {:v1, :def, _meta, clauses} ->
        Module.delete_definition(module, {name, 1})

        for {meta, args, guards, body} <- clauses do
          head = {name, meta, args ++ [@body_marker]}
          head = Enum.reduce(Enum.reverse(guards), head, &{:when, meta, [&2, &1]})
          {:defp, meta, [head, [do: body]]}
        end

      _ ->
        nil
    end
  end

  @doc false
  # Runs a test's body: profiled if its tags (and FLAME_ON) say so,
  # directly otherwise.
  @spec __run__(map(), (() -> term())) :: term()
  def __run__(context, body) do
    case TestRun.options(context) do
      nil -> TestRun.untraced(context, body)
      opts -> TestRun.profiled(context, body, opts)
    end
  end
end
