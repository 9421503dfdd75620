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

  Traces here default to `mode: :auto` (or the application environment's
  `:mode`): `:native` where this VM can sample natively, else `:sample`.
  In `:sample` the traced process's stack is sampled every
  `:interval_us` (1 ms) and the `:running` trace flag gives its exact on- and
  off-CPU time, with **no call breakpoints**, so a sampled request costs the
  rest of the node nothing and the traced process a few per cent. Pass
  `mode: :nif` for exact call stacks: then, while the trace runs, the node's
  call patterns are set and **every process pays a breakpoint check per
  call** (1.2x on Enum/Map code, 3-4x on tight recursion, measured); keep
  `sample_rate` low with it. `cross_process: true` works in every mode.
  """

  alias FlameOn.Client.Tracing.{Ref, Start}

  @typedoc "Options of `trace/3`: these and those of `FlameOn.Client.profile/2`."
  @type option ::
          {:sample_rate, number()}
          | {:threshold_ms, non_neg_integer()}
          | {:shipper, FlameOn.Client.Shipper.spec() | [FlameOn.Client.Shipper.spec()] | nil}
          | FlameOn.Client.option()

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

  An unknown or misspelt option, or a value of the wrong kind, raises
  `ArgumentError`, sampled or not (see `FlameOn.Client.Options`): it is a
  programming error, and surfaces in development and tests.

  Otherwise it never breaks the caller:

    * if `fun` raises, throws or exits, its profile is still shipped and
      the exception is raised again with its original stacktrace;
    * a call made while the process is already traced (a nested `trace/3`,
      `profile/2`, a telemetry trace or another tool's tracer) runs `fun`
      untraced;
    * if the trace cannot start (for example `cross_process: true` while
      another tool owns the seq_trace system tracer), the error is logged
      and `fun` runs untraced;
    * shipper failures are logged.
  """
  @spec trace(String.t() | atom(), (() -> result), [option()]) :: result when result: term()
  defdelegate trace(name, fun, opts \\ []), to: FlameOn.Client

  @doc """
  Starts tracing another (local) process; returns a reference for
  `stop_trace/1`.

      {:ok, ref} = FlameOn.Client.Tracing.start_trace(worker, name: "worker", duration_ms: 5_000)
      # ... five seconds later the trace stops on its own and is shipped ...
      {:ok, profile} = FlameOn.Client.Tracing.stop_trace(ref)

  The trace runs in `mode: :auto` by default (`:native` where this VM can
  sample natively, else `:sample`: no call breakpoints either way) or, with `mode: :process`, with call
  tracing (a tracer process takes its trace messages; the node's call
  patterns are set while it runs). A process of FlameOn's owns the trace. The profile is shipped once, when the trace finishes: at
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
    * `:timeout` (`30_000`) – milliseconds the tracer process (mode `:process`) may spend on queued
      trace messages when the trace stops.
    * `:max_nodes`, `:max_depth`, `:max_processes`, `:max_frames`,
      `:max_stack_frames`, `:max_stack_bytes` – limits, as for
      `FlameOn.Client.profile/2`.
    * `:collapse_recursion` (`true`) – direct recursion as one frame, as
      for `FlameOn.Client.profile/2`.

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
  defdelegate start_trace(target, opts \\ []), to: Start

  @doc """
  The `n` processes that did the most reductions during the next
  `window_ms` milliseconds, busiest first (flame_prof's auto-select). The
  caller and this library's own processes are left out.
  """
  @spec top_processes(pos_integer(), pos_integer()) :: [pid()]
  defdelegate top_processes(n, window_ms), to: Start

  @doc """
  Stops a trace started by `start_trace/2` and returns its profile.

  If the trace already finished (`:duration_ms` passed, or the traced
  process exited), returns the profile it kept. Returns `{:error,
  :not_found}` for a trace that was already stopped, and `{:error, reason}`
  if the trace failed.
  """
  @spec stop_trace(ref()) :: {:ok, FlameOn.Client.Profile.t()} | {:error, term()}
  defdelegate stop_trace(ref), to: Start

  @doc false
  # Whether the calling process is traced in a way that keeps FlameOn from
  # tracing it (FlameOn.Client.Node.TraceBackend.check_tracee/1: any tracer
  # in the legacy session, a trace of ours where the VM has trace sessions).
  @spec traced?() :: boolean()
  defdelegate traced?(), to: FlameOn.Client.Capture
end
