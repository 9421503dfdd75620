defmodule FlameOn.Client.Tracing do
  @moduledoc """
  Tracing in application code: sampled, thresholded traces of functions and
  of running processes, shipped to `FlameOn.Client.Shipper`s.

  `FlameOn.Client.profile/2` always traces and hands the profile back to the
  caller. The functions here are meant to stay in production code:

      def checkout(cart) do
        FlameOn.Client.Tracing.trace("checkout", fn -> do_checkout(cart) end,
          sample_rate: 0.01,
          threshold_ms: 250
        )
      end

  With these options one call in a hundred is traced, and its profile is
  shipped only if the traced function took at least 250 ms.

  ## Options

  Every function here takes, besides the options of
  `FlameOn.Client.profile/2` (`:mode`, `:cross_process`, limits, ...):

    * `:sample_rate` (`1.0`) – a number from `0.0` to `1.0`, the share of
      calls that are traced. The decision is taken **before** tracing: an
      unsampled call runs without any trace and costs one random number.
      Not used by `start_trace/2`, which always traces.
    * `:threshold_ms` (`0`) – a profile is shipped only if its
      `duration_us` is at least `threshold_ms * 1000`.
    * `:shipper` (none) – `{module, opts}`, `module` or a list of them: where
      profiles go (see `FlameOn.Client.Shipper`). With none, profiles are
      not shipped (a debug log says so). Either way, a profile that passes
      its threshold is kept among the node's recent traces
      (`FlameOn.Client.TraceStore`, what the web UI `FlameOn.Client.Web`
      shows).

  An option left out is read from the application environment, so one
  configuration serves every call site:

      config :flame_on_client,
        sample_rate: 0.01,
        threshold_ms: 250,
        shipper: {FlameOn.Client.Shipper.Directory, dir: "/var/tmp/flame_on"}

  Invalid values of these three options raise `ArgumentError`, sampled or
  not.

  ## Mode and cost

  Traces here default to `mode: :sample` (or the application
  environment's `:mode`): the traced process's stack is sampled every
  `:interval_us` (1 ms) and the `:running` trace flag gives its exact on- and
  off-CPU time, with **no call breakpoints**, so a sampled request costs the
  rest of the node nothing and the traced process a few per cent. Pass
  `mode: :nif` for exact call stacks: then, while the trace runs, the node's
  call patterns are set and **every process pays a breakpoint check per
  call** (1.2x on Enum/Map code, 3-4x on tight recursion, measured); keep
  `sample_rate` low with it. `cross_process: true` works in every mode.
  """

  require Logger

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Owners.Trace
  alias FlameOn.Client.Tracing.Ref

  @trace_keys [:sample_rate, :threshold_ms, :shipper]
  @limit_keys [
    :max_nodes,
    :max_depth,
    :max_processes,
    :max_frames,
    :max_stack_frames,
    :max_stack_bytes
  ]
  # start_trace/2 accepts :sample_rate (shared option lists) and ignores it.
  @start_defaults [
                    name: "flame_on",
                    mode: nil,
                    duration_ms: nil,
                    timeout: 30_000,
                    sample_rate: nil,
                    threshold_ms: nil,
                    shipper: nil
                  ] ++
                    Enum.map(@limit_keys, &{&1, nil}) ++
                    FlameOn.Client.Sampling.Sampler.option_defaults()

  @typedoc "Options of `trace/3`: these and those of `FlameOn.Client.profile/2`."
  @type option ::
          {:sample_rate, number()}
          | {:threshold_ms, non_neg_integer()}
          | {:shipper, Shipper.spec() | [Shipper.spec()] | nil}
          | FlameOn.Client.option()
          | {atom(), term()}

  @typedoc "A running trace of another process, from `start_trace/2`."
  @type ref :: Ref.t()

  @doc """
  Runs `fun` in the calling process, maybe traced, and returns its result.

  Whether to trace is decided first, with `:sample_rate`. A traced call runs
  `fun` inside `FlameOn.Client.profile/2` (with `name: name` and every
  option that is not one of `:sample_rate`, `:threshold_ms` and
  `:shipper`), then ships the profile if it lasted at least
  `:threshold_ms`. See the module documentation for the options.

      iex> FlameOn.Client.Tracing.trace("sum", fn -> Enum.sum(1..10) end, sample_rate: 0.0)
      55

      iex> FlameOn.Client.Tracing.trace("sum", fn -> Enum.sum(1..10) end,
      ...>   shipper: {FlameOn.Client.Shipper.Process, pid: self()})
      55
      iex> receive do
      ...>   {:flame_on_profile, profile} -> profile.name
      ...> end
      "sum"

  Never breaks the caller:

    * if `fun` raises, throws or exits, its profile is still shipped and
      the exception is raised again with its original stacktrace;
    * a call made while the process is already traced (a nested `trace/3`,
      `profile/2`, a telemetry trace or another tool's tracer) runs `fun`
      untraced;
    * if the trace cannot start (for example `cross_process: true` while
      another tool owns the seq_trace system tracer, or a bad option of
      `profile/2`), the error is logged and `fun` runs untraced;
    * shipper failures are logged.
  """
  @spec trace(String.t() | atom(), (() -> result), [option()]) :: result when result: term()
  def trace(name, fun, opts \\ [])

  def trace(name, fun, opts) when is_function(fun, 0) and is_list(opts) do
    name = name!(name)
    {settings, profile_opts} = settings!(opts)

    cond do
      not sampled?(settings.sample_rate) ->
        fun.()

      traced?() ->
        Logger.debug(fn ->
          "FlameOn: #{inspect(name)} runs untraced: the process is already traced"
        end)

        fun.()

      true ->
        profile_opts =
          profile_opts |> Keyword.put(:name, name) |> Keyword.put_new_lazy(:mode, &default_mode/0)

        run_traced(name, fun, settings, profile_opts)
    end
  end

  def trace(_name, fun, opts) when is_function(fun, 0) do
    raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
  end

  def trace(_name, fun, _opts) do
    raise ArgumentError, "expected a function of arity 0, got: #{inspect(fun)}"
  end

  # The wrapper catches fun's exceptions, so profile/2 returns the profile
  # of a failed run too, and notes fun's outcome in the process dictionary:
  # an exception of profile/2 with no outcome noted means the trace never
  # started, and fun has not run.
  defp run_traced(name, fun, settings, profile_opts) do
    key = {__MODULE__, :outcome, make_ref()}

    wrapped = fn ->
      outcome =
        try do
          {:ok, fun.()}
        catch
          kind, reason -> {kind, reason, __STACKTRACE__}
        end

      Process.put(key, outcome)
      outcome
    end

    try do
      FlameOn.Client.profile(wrapped, profile_opts)
    catch
      kind, reason ->
        stacktrace = __STACKTRACE__

        case Process.delete(key) do
          nil ->
            Logger.error(
              "FlameOn: could not trace #{inspect(name)}, running it untraced:\n" <>
                Exception.format(kind, reason, stacktrace)
            )

            fun.()

          outcome ->
            Logger.error(
              "FlameOn: the trace of #{inspect(name)} failed after it ran:\n" <>
                Exception.format(kind, reason, stacktrace)
            )

            return(outcome)
        end
    else
      {outcome, profile} ->
        Process.delete(key)
        maybe_ship(profile, settings)
        return(outcome)
    end
  end

  defp return({:ok, result}), do: result
  defp return({kind, reason, stacktrace}), do: :erlang.raise(kind, reason, stacktrace)

  @doc """
  Starts tracing another (local) process; returns a reference for
  `stop_trace/1`.

      {:ok, ref} = FlameOn.Client.Tracing.start_trace(worker, name: "worker", duration_ms: 5_000)
      # ... five seconds later the trace stops on its own and is shipped ...
      {:ok, profile} = FlameOn.Client.Tracing.stop_trace(ref)

  The trace runs in `mode: :sample` by default (a
  `FlameOn.Client.Owners.Sampled` samples the process; no call breakpoints)
  or, with `mode: :process`, with call tracing (a
  `FlameOn.Client.Owners.Tracer` is the tracer; the node's call patterns are
  set while it runs). The profile is shipped once, when the trace finishes: at
  `stop_trace/1`, after `:duration_ms`, or when the traced process exits.
  A finished trace keeps its profile until `stop_trace/1` asks for it or
  the process that called `start_trace/2` exits.

  Options:

    * `:name` (`"flame_on"`) – the trace's name.
    * `:mode` (`:sample`, or the application environment's `:mode`) –
      `:sample` or `:process` (`:nif` means `:process` here: the NIF tracer
      folds events in the traced process's own context only for
      `profile/2`).
    * `:interval_us`, `:split_status`, `:max_samples` – as for
      `FlameOn.Client.profile/2` in mode `:sample`.
    * `:duration_ms` (none) – stop the trace after this many milliseconds.
    * `:shipper`, `:threshold_ms` – as for `trace/3` (`:sample_rate` does
      not apply: an explicit trace always runs).
    * `:timeout` (`30_000`) – milliseconds the session may spend on queued
      trace messages when the trace stops.
    * `:max_nodes`, `:max_depth`, `:max_processes`, `:max_frames`,
      `:max_stack_frames`, `:max_stack_bytes` – limits, as for
      `FlameOn.Client.profile/2`.

  **Whole node:** `start_trace({:top, n}, opts)` picks the `n` processes
  that did the most reductions during `:window_ms` (default 1000; the call
  waits that long), as flame_prof's auto-select does, and samples them all
  into one profile (one stack set and metrics series per process; mode
  `:sample` only: no call breakpoints, nothing set on untraced code).
  Processes that already have a tracer are skipped
  (`stats.skipped_processes`). Give it a `:duration_ms`.

  `pid` may also be a registered name. Returns `{:error, :noproc}` if the
  process is not alive and `{:error, {:already_traced, tracer}}` if it
  already has a tracer (a process has only one).
  """
  @spec start_trace(pid() | atom() | {:top, pos_integer()}, keyword()) ::
          {:ok, ref()} | {:error, term()}
  def start_trace(target, opts \\ [])

  def start_trace({:top, n}, opts) when is_list(opts) do
    unless is_integer(n) and n > 0, do: invalid!(:top, "a positive integer", n)
    {window_ms, opts} = Keyword.pop(opts, :window_ms, 1_000)

    unless is_integer(window_ms) and window_ms > 0,
      do: invalid!(:window_ms, "a positive integer", window_ms)

    mode = Keyword.get(opts, :mode) || :sample
    if mode != :sample, do: invalid!(:mode, ":sample (whole-node traces only sample)", mode)

    case top_processes(n, window_ms) do
      [] -> {:error, :no_processes}
      pids -> start_trace_of(pids, Keyword.put(opts, :mode, :sample))
    end
  end

  def start_trace(pid, opts) when is_list(opts) do
    with {:ok, pid} <- resolve(pid), do: start_trace_of(pid, opts)
  end

  @doc """
  The `n` processes that did the most reductions during the next
  `window_ms` milliseconds, busiest first (flame_prof's auto-select). The
  caller and this library's own processes are left out.
  """
  @spec top_processes(pos_integer(), pos_integer()) :: [pid()]
  def top_processes(n, window_ms) do
    before = reductions()
    Process.sleep(window_ms)
    after_window = reductions()

    after_window
    |> Enum.flat_map(fn {pid, reds} ->
      case before do
        %{^pid => earlier} -> [{pid, reds - earlier}]
        _ -> [{pid, reds}]
      end
    end)
    |> Enum.reject(fn {pid, _} -> pid == self() or ours?(pid) end)
    |> Enum.sort_by(fn {_pid, delta} -> -delta end)
    |> Enum.take(n)
    |> Enum.map(&elem(&1, 0))
  end

  # No signal: reductions are read from the process structure.
  defp reductions do
    for pid <- Process.list(),
        {:reductions, reds} <- [Process.info(pid, :reductions)],
        into: %{},
        do: {pid, reds}
  end

  defp ours?(pid) do
    case Process.info(pid, :dictionary) do
      {:dictionary, dict} ->
        case dict[:"$initial_call"] do
          {module, _, _} -> String.starts_with?(Atom.to_string(module), "Elixir.FlameOn.Client.")
          _ -> false
        end

      nil ->
        true
    end
  end

  defp start_trace_of(pid, opts) do
    opts = Keyword.validate!(opts, @start_defaults)
    {settings, _rest} = settings!(Keyword.take(opts, [:threshold_ms, :shipper]))

    config = %{
      name: name!(opts[:name]),
      mode: start_mode!(opts[:mode] || default_mode()),
      sampler:
        Sampler.check_options!(Keyword.take(opts, Keyword.keys(Sampler.option_defaults()))),
      duration_ms: duration!(opts[:duration_ms]),
      timeout: timeout!(opts[:timeout]),
      limits: limits(opts),
      settings: settings
    }

    with {:ok, controller} <- Trace.start(self(), pid, config) do
      {:ok, %Ref{controller: controller, pid: pid, name: config.name}}
    end
  end

  @doc """
  Stops a trace started by `start_trace/2` and returns its profile.

  If the trace already finished (`:duration_ms` passed, or the traced
  process exited), returns the profile it kept. Returns `{:error,
  :not_found}` for a trace that was already stopped, and `{:error, reason}`
  if the trace failed.
  """
  @spec stop_trace(ref()) :: {:ok, Profile.t()} | {:error, term()}
  def stop_trace(%Ref{controller: controller}), do: Trace.stop(controller)

  @doc false
  # The trace settings (sample_rate, threshold_ms, shippers) from options
  # with the application environment as fallback, validated; and the other
  # options. Also used by FlameOn.Client.Telemetry.
  @spec settings!(keyword()) :: {map(), keyword()}
  def settings!(opts) do
    {own, rest} = Keyword.split(opts, @trace_keys)

    settings = %{
      sample_rate: sample_rate!(setting(own, :sample_rate, 1.0)),
      threshold_ms: threshold!(setting(own, :threshold_ms, 0)),
      shippers: Shipper.normalize!(setting(own, :shipper, nil))
    }

    {settings, rest}
  end

  defp setting(opts, key, default) do
    case Keyword.get(opts, key) do
      nil -> Application.get_env(:flame_on_client, key, default)
      value -> value
    end
  end

  @doc false
  # The limit options of a process-mode trace (Tracer's `:limits`).
  # Also used by FlameOn.Client.Telemetry.
  @spec limit_keys() :: [atom()]
  def limit_keys, do: @limit_keys

  @doc false
  @spec limits(keyword()) :: map()
  def limits(opts) do
    for {key, value} <- Keyword.take(opts, @limit_keys), value != nil, into: %{}, do: {key, value}
  end

  @doc false
  # Whether this call is sampled.
  @spec sampled?(number()) :: boolean()
  def sampled?(rate) when rate >= 1, do: true
  def sampled?(rate) when rate <= 0, do: false
  def sampled?(rate), do: :rand.uniform() < rate

  @doc false
  # Whether the calling process is traced in a way that keeps FlameOn from
  # tracing it (FlameOn.Client.Node.TraceBackend.check_tracee/1: any tracer in
  # the legacy session, a trace of ours where the VM has trace sessions).
  @spec traced?() :: boolean()
  def traced?, do: FlameOn.Client.Node.TraceBackend.check_tracee(self()) != :ok

  @doc false
  # Ships `profile` if it is long enough, and keeps it in the
  # FlameOn.Client.TraceStore (the web UI's recent traces).
  @spec maybe_ship(Profile.t(), map()) :: :ok
  def maybe_ship(%Profile{} = profile, %{threshold_ms: threshold_ms, shippers: shippers}) do
    if profile.duration_us >= threshold_ms * 1000 do
      FlameOn.Client.TraceStore.put(profile)
      Shipper.ship_all(profile, shippers)
    else
      Logger.debug(fn ->
        "FlameOn: trace #{inspect(profile.name)} (#{profile.trace_id}) took " <>
          "#{profile.duration_us} µs, below threshold_ms #{threshold_ms}: not shipped"
      end)

      :ok
    end
  end

  defp sample_rate!(rate) when is_number(rate) and rate >= 0 and rate <= 1, do: rate

  defp sample_rate!(other),
    do: invalid!(:sample_rate, "a number from 0.0 to 1.0", other)

  defp threshold!(ms) when is_number(ms) and ms >= 0, do: ms
  defp threshold!(other), do: invalid!(:threshold_ms, "a non-negative number", other)

  @doc false
  # The capture mode of app-code traces when none is given: the
  # application environment's `:mode`, else `:sample` (no call breakpoints,
  # so a sampled request does not slow the rest of the node).
  @spec default_mode() :: :nif | :process | :sample
  def default_mode, do: Application.get_env(:flame_on_client, :mode, :sample)

  defp start_mode!(mode) when mode in [:process, :sample], do: mode
  # start_trace/2 traces another process: :nif needs the tracer in that
  # process's own calls, which only works for the calling process.
  defp start_mode!(:nif), do: :process
  defp start_mode!(other), do: invalid!(:mode, ":process or :sample", other)

  defp duration!(nil), do: nil
  defp duration!(ms) when is_integer(ms) and ms > 0, do: ms
  defp duration!(other), do: invalid!(:duration_ms, "a positive integer", other)

  defp timeout!(:infinity), do: :infinity
  defp timeout!(ms) when is_integer(ms) and ms > 0, do: ms
  defp timeout!(other), do: invalid!(:timeout, "a positive integer or :infinity", other)

  defp name!(name) when is_binary(name), do: name
  defp name!(name) when is_atom(name) and name not in [nil, true, false], do: Atom.to_string(name)
  defp name!(other), do: invalid!(:name, "a string", other)

  defp invalid!(key, expected, got) do
    raise ArgumentError, "expected #{inspect(key)} to be #{expected}, got: #{inspect(got)}"
  end

  defp resolve(pid) when is_pid(pid), do: {:ok, pid}

  defp resolve(name) when is_atom(name) do
    case Process.whereis(name) do
      nil -> {:error, :noproc}
      pid -> {:ok, pid}
    end
  end

  defp resolve(other) do
    raise ArgumentError, "expected a pid or a registered name, got: #{inspect(other)}"
  end
end
