defmodule FlameOn.Client.Capture do
  @moduledoc false
  # The one capture path. Every entry point starts, stops and finishes its
  # trace here, whatever the mode and whoever is traced:
  #
  #   capture = Capture.start(target, opts)    # core session, patterns, ...
  #   capture = Capture.begin(capture, pid)    # pid is (about to be) traced
  #   TraceBackend.set_flags(pid, capture.flags)   (or Capture.attach/2)
  #   ... the traced work ...
  #   end_ts = Capture.stop(capture)           # nothing after this is profiled
  #   Capture.detach(capture)                  # flags off
  #   {:ok, profile} = Capture.finish(capture, started_ts, end_ts)
  #
  # Targets: :self (the calling process traces itself: profile/2, trace/3,
  # ExUnit, mix profile.flame), {:pids, pids} (an owner traces other
  # processes: start_trace/2, and the process that emitted a telemetry
  # :start), :gate (the next caller of a function, whose flags a match spec
  # sets: capture_next/2) and :part (a node's part of a trace across nodes:
  # processes join when the core says so).
  #
  # Scopes: one process or a few, one core session (FlameOn.Client.Capture.Local),
  # or cross_process: true (FlameOn.Client.Capture.CrossProcess: a
  # FlameOn.Client.Owners.CrossProcess follows the processes the work
  # reaches).
  #
  # Modes say how a traced process's stacks are captured; they are the
  # behaviour below, one module each, listed in @modes. Adding a mode is one
  # module under capture/ and one line in @modes (see ARCHITECTURE.md).

  alias FlameOn.Client.Capture.{CrossProcess, Local}
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Profile

  @modes %{
    nif: FlameOn.Client.Capture.Nif,
    process: FlameOn.Client.Capture.Process,
    sample: FlameOn.Client.Capture.Sample
  }

  @typedoc "Who is traced (see the module's comment)."
  @type target :: :self | {:pids, [pid()]} | :gate | :part

  @type t :: %{
          required(:scope) => module(),
          required(:mode) => module(),
          required(:opts) => map(),
          required(:flags) => [{TraceBackend.t(), [atom()]}],
          optional(atom()) => term()
        }

  @typedoc "What a mode's watchers add to the profile."
  @type watched :: %{metrics: %{pid() => list()}, stats: map()}

  # --- the mode behaviour -------------------------------------------------------

  @doc "The trace flags a traced process gets (the tracer is added where it goes)."
  @callback flags() :: [atom()]

  @doc "Whether the mode needs the call patterns on every function while it runs."
  @callback call_patterns?() :: boolean()

  @doc """
  Who takes the traced processes' events: `:core` (the NIF tracer module
  folds them into the core session in the traced process) or `:process` (a
  `FlameOn.Client.Owners.Tracer` process takes trace messages and ingests
  them).
  """
  @callback tracer() :: :core | :process

  @doc """
  Whether `watch/5` must see each process that joins a cross-process trace
  (the trace's owner is then told of each one).
  """
  @callback follows_callees?() :: boolean()

  @doc "Takes what the mode needs of the node besides patterns (raises when it cannot)."
  @callback acquire(opts :: map()) :: :ok

  @doc "Gives back what `acquire/1` took."
  @callback release(opts :: map()) :: :ok

  @doc """
  `pid` is traced from now on (a root, a traced process, a gate's caller,
  a follower): starts what watches it, if anything (a sampler). `root` is
  the function its stacks start at, or nil.
  """
  @callback watch(watchers :: map(), Native.session(), pid(), opts :: map(), root :: mfa() | nil) ::
              map()

  @doc "The trace is over: stops the watchers; what they add to the profile."
  @callback unwatch(watchers :: map()) :: watched()

  # --- the path ------------------------------------------------------------------

  @doc "The mode module of validated options."
  @spec mode(map()) :: module()
  def mode(%{mode: mode}), do: Map.fetch!(@modes, mode)

  @doc "The modes, by name."
  @spec modes() :: %{atom() => module()}
  def modes, do: @modes

  @doc """
  Starts a trace of `target` with validated options (`FlameOn.Client.Options`):
  `{:ok, capture}` or `{:error, reason}` (nothing of it is left set).
  """
  @spec open(target(), map()) :: {:ok, t()} | {:error, term()}
  def open(target, %{} = opts) do
    scope = if opts.cross_process, do: CrossProcess, else: Local

    with :ok <- FlameOn.Client.Node.Breaker.check() do
      scope.open(target, opts, mode(opts))
    end
  end

  @doc "`open/2`, raising `ArgumentError` (or a `RuntimeError`) when it cannot start."
  @spec start(target(), map()) :: t()
  def start(target, opts) do
    case open(target, opts) do
      {:ok, capture} -> capture
      {:error, reason} -> raise_start_error!(reason, "a trace")
    end
  end

  @doc """
  `pid` is about to be traced (its flags go on right after, or already
  did): starts its watchers (a process that traces itself takes its first
  sample here).
  """
  @spec begin(t(), pid()) :: t()
  def begin(%{scope: scope} = capture, pid), do: scope.begin(capture, pid)

  @doc """
  Traces `pid` (another process) now: its flags, then `begin/2`. `:error`
  when it exited meanwhile.
  """
  @spec attach(t(), pid()) :: {:ok, t()} | :error
  def attach(capture, pid) do
    TraceBackend.set_flags(pid, capture.flags)
    pids = if pid in capture.pids, do: capture.pids, else: capture.pids ++ [pid]
    {:ok, begin(%{capture | pids: pids}, pid)}
  rescue
    ArgumentError -> :error
  end

  @doc """
  The traced work is over: nothing after this is profiled. Returns the end
  time (native monotonic). In a process that traces itself, call it right
  before its flags go off.
  """
  @spec stop(t()) :: integer()
  def stop(%{scope: scope} = capture), do: scope.stop(capture)

  @doc "Turns the capture's flags off on every process it began, where they are still ours."
  @spec detach(t()) :: :ok
  def detach(%{flags: flags, pids: pids}) do
    Enum.each(pids, &TraceBackend.clear_flags(&1, flags))
  end

  @doc """
  Turns the stopped, detached capture into a profile, giving back
  everything it held. `started_ts`/`end_ts`: native monotonic times of the
  traced work's start and end (the profile's `started_at` and
  `duration_us`).
  """
  @spec finish(t(), integer(), integer() | nil) :: {:ok, Profile.t()} | {:error, term()}
  def finish(%{scope: scope} = capture, started_ts, end_ts),
    do: scope.finish(capture, started_ts, end_ts)

  @doc """
  Gives back whatever the capture still holds (it failed, or its owner is
  going): flags, watchers, patterns, node state, owner. Safe to call twice,
  and after `finish/3`.
  """
  @spec abort(t()) :: :ok
  def abort(%{scope: scope} = capture) do
    detach(capture)
    scope.abort(capture)
  catch
    _, _ -> :ok
  end

  # --- shared by the scopes ----------------------------------------------------------

  @doc "Two `watched` results as one (the root's and its callees')."
  @spec merge_watched(watched(), watched()) :: watched()
  def merge_watched(a, b) do
    %{
      metrics: Map.merge(a.metrics, b.metrics),
      stats: Map.merge(a.stats, b.stats, fn _key, x, y -> x + y end)
    }
  end

  @doc "A core session with the limits of `opts` (and `extra` keys): `{:ok, core}` or an error."
  @spec new_core(map(), map()) :: {:ok, Native.session()} | {:error, term()}
  def new_core(opts, extra \\ %{}) do
    limits = Map.take(opts, FlameOn.Client.Options.limit_keys())

    {:ok,
     limits
     |> Map.merge(extra)
     |> Map.put(:native_per_second, System.convert_time_unit(1, :second, :native))
     |> Native.new()}
  rescue
    ArgumentError ->
      {:error, {:invalid_limits, Map.take(opts, FlameOn.Client.Options.limit_keys())}}
  end

  @doc """
  Raises unless FlameOn can trace the calling process
  (`TraceBackend.check_tracee/1`). A process that only follows another
  cross-process trace (a message of that trace reached it) leaves it: it
  starts a trace of its own.
  """
  @spec ensure_untraced!() :: :ok
  def ensure_untraced! do
    case check_self() do
      :ok -> :ok
      {:error, reason} -> raise_start_error!(reason, "a trace")
    end
  end

  @doc """
  Whether the calling process is traced in a way that keeps FlameOn from
  tracing it (`TraceBackend.check_tracee/1`).
  """
  @spec traced?() :: boolean()
  def traced?, do: TraceBackend.check_tracee(self()) != :ok

  @doc "Whether a call is traced, at `rate` (0.0 to 1.0): one random number."
  @spec sampled?(number()) :: boolean()
  def sampled?(rate) when rate >= 1, do: true
  def sampled?(rate) when rate <= 0, do: false
  def sampled?(rate), do: :rand.uniform() < rate

  @doc "`ensure_untraced!/0` as a result."
  @spec check_self() :: :ok | {:error, term()}
  def check_self, do: check_self(true)

  defp check_self(leave?) do
    case TraceBackend.check_tracee(self()) do
      :ok ->
        :ok

      {:error, {:already_traced, tracer}} = error ->
        if leave? and follower_only?(tracer) do
          TraceBackend.untrace_graph(self())
          :seq_trace.set_token([])
          check_self(false)
        else
          error
        end
    end
  end

  defp follower_only?(tracer) do
    tracer in [{Native, :graph}, {:trace_session, :flame_on_client_graph}] and
      Native.graph_role(self()) != :root
  end

  @doc "The profile fields of a trace of `pid`."
  @spec fields(map(), pid() | nil, integer(), integer()) :: keyword()
  def fields(opts, pid, started_ts, end_ts) do
    [
      trace_id: System.unique_integer([:positive, :monotonic]),
      name: opts.name,
      mode: opts.mode,
      pid: pid,
      started_at: System.convert_time_unit(started_ts, :native, :microsecond),
      duration_us: System.convert_time_unit(end_ts - started_ts, :native, :microsecond)
    ]
  end

  @doc "A start error raised, in words that say what to do."
  @spec raise_start_error!(term(), String.t()) :: no_return()
  def raise_start_error!({:invalid_limits, limits}, _what) do
    raise ArgumentError,
          "limits out of range: #{inspect(limits)} (the NIF rejected them; " <>
            "each must be a positive integer no larger than its ceiling)"
  end

  def raise_start_error!({:already_traced, tracer}, _what) do
    raise ArgumentError,
          "the calling process is already traced by #{inspect(tracer)}; " <>
            "a process can have only one tracer"
  end

  def raise_start_error!({:call_tracing_in_use, what}, _what) do
    raise ArgumentError,
          "another tool is call tracing on this node (#{what}); FlameOn's call " <>
            "patterns would replace its patterns, so no trace starts until it stops " <>
            "(e.g. :dbg.stop/0), or use mode: :sample, which sets none"
  end

  def raise_start_error!({:tracing_in_use, what}, _what) do
    raise ArgumentError,
          "another tool is tracing on this node (#{what}); in the legacy trace session " <>
            "(OTP 25-26) a process has one tracer, and cross_process: true would take " <>
            "over any process that serves one of our requests, so no cross-process trace " <>
            "starts until it stops (on OTP 27+ our traces run in trace sessions of their own)"
  end

  def raise_start_error!({:system_tracer_taken, tracer}, _what) do
    raise ArgumentError,
          "cross_process: true needs the seq_trace system tracer, but " <>
            "#{inspect(tracer)} owns it (another tracing tool is running)"
  end

  def raise_start_error!({:breaker_open, reason}, _what) do
    raise "FlameOn: the circuit breaker is open (#{inspect(reason)}): no new traces " <>
            "start until memory falls back (see FlameOn.Client.Options, :breaker)"
  end

  def raise_start_error!(reason, what),
    do: raise("FlameOn: could not start #{what}: #{inspect(reason)}")
end
