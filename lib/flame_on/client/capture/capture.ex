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
  # Targets: {:self, root} (the calling process traces itself, its stacks
  # starting at the function root: profile/2, trace/3, ExUnit, mix
  # profile.flame), {:pid, pid} and {:pids, pids} (an owner traces other
  # processes: start_trace/2, and the process that emitted a telemetry
  # :start) and {:gate, mfa} (the next caller of mfa, whose flags a match
  # spec sets: capture_next/2). A node's part of a trace across nodes is the
  # cross-process owner in role :part (FlameOn.Client.Cluster.Part).
  #
  # Scopes: one process or a few, one core session
  # (FlameOn.Client.Capture.Local), or cross_process: true
  # (FlameOn.Client.Capture.CrossProcess: a FlameOn.Client.Owners.CrossProcess
  # follows the processes the work reaches).
  #
  # Modes say how a traced process's stacks are captured: the behaviour
  # FlameOn.Client.Capture.Mode, one module each, listed by name in
  # FlameOn.Client.Options. Adding a mode is one module under capture/ and
  # one line there (see ARCHITECTURE.md).

  alias FlameOn.Client.{Options, ProcessName, Profile}
  alias FlameOn.Client.Capture.{Common, CrossProcess, Local}
  alias FlameOn.Client.Node.{Breaker, TraceBackend}

  @typedoc "Who is traced (see the module's comment)."
  @type target :: {:self, mfa()} | {:pid, pid()} | {:pids, [pid()]} | {:gate, mfa()}

  @type t :: %{
          required(:scope) => module(),
          required(:mode) => module(),
          required(:opts) => map(),
          required(:flags) => [{TraceBackend.t(), [atom()]}],
          optional(atom()) => term()
        }

  @doc """
  Starts a trace of `target` with validated options (`FlameOn.Client.Options`):
  `{:ok, capture}` or `{:error, reason}` (nothing of it is left set).
  """
  @spec open(target(), map()) :: {:ok, t()} | {:error, term()}
  def open(target, %{} = opts) do
    FlameOn.Client.Runtime.ensure_started!()
    scope = if opts.cross_process, do: CrossProcess, else: Local

    with :ok <- Breaker.check() do
      scope.open(target, opts, Options.mode_module(opts.mode))
    end
  end

  @doc "`open/2`, raising `ArgumentError` (or a `RuntimeError`) when it cannot start."
  @spec start(target(), map()) :: t()
  def start(target, opts) do
    case open(target, opts) do
      {:ok, capture} -> capture
      {:error, reason} -> Common.raise_start_error!(reason, "a trace")
    end
  end

  @doc """
  `pid` is about to be traced (its flags go on right after, or already
  did): starts its watchers (a process that traces itself takes its first
  sample here) and, for another process, reads its name
  (`FlameOn.Client.ProcessName`) while it surely runs. A process that
  traces itself is named in `finish/3`: it runs then, and its traced work
  has not started yet here (the profile's duration has).
  """
  @spec begin(t(), pid()) :: t()
  def begin(%{scope: scope} = capture, pid) do
    capture = scope.begin(capture, pid)
    names = Map.get(capture, :names, %{})

    if pid == self(),
      do: Map.put(capture, :names, names),
      else: Map.put(capture, :names, ProcessName.complete(names, [pid]))
  end

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
  def finish(%{scope: scope} = capture, started_ts, end_ts) do
    with {:ok, profile} <- scope.finish(capture, started_ts, end_ts) do
      {:ok, ProcessName.name_profile(profile, Map.get(capture, :names, %{}))}
    end
  end

  @doc """
  What a traced call returns once its capture is done: `outcome` is the
  call's `{:ok, result}` or `{kind, reason, stacktrace}`, `finished` what
  `finish/3` (or `discard/1`: no profile, `nil`) answered. The call's own
  exception is raised again as it was; a profile its owner could not give
  back raises.
  """
  @spec result(
          t(),
          {:ok, term()} | {atom(), term(), list()},
          {:ok, Profile.t()} | :ok | {:error, term()}
        ) ::
          {term(), Profile.t() | nil}
  def result(capture, outcome, finished) do
    case {outcome, finished} do
      {{:ok, result}, {:ok, profile}} ->
        {result, profile}

      {{:ok, result}, :ok} ->
        {result, nil}

      {{:ok, _result}, {:error, reason}} ->
        raise "FlameOn: the trace's owner #{inspect(capture[:owner] || capture[:tracer])} " <>
                "ended before returning the profile: #{inspect(reason)}"

      {{kind, reason, stacktrace}, _} ->
        :erlang.raise(kind, reason, stacktrace)
    end
  end

  @doc """
  Gives back a stopped, detached capture without building its profile (a
  tail trace under its threshold, FlameOn.Client.Tracing.Tail): the scope's
  `discard/1` where it has one (it frees what it holds now), else `abort/1`.
  """
  @spec discard(t()) :: :ok
  def discard(%{scope: scope} = capture) do
    if function_exported?(scope, :discard, 1), do: scope.discard(capture), else: abort(capture)
  end

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

  @doc "Whether a call is traced, at `rate` (0.0 to 1.0)."
  @spec sampled?(number()) :: boolean()
  defdelegate sampled?(rate), to: Common

  @doc "Whether the calling process is traced in a way that keeps FlameOn from tracing it."
  @spec traced?() :: boolean()
  defdelegate traced?(), to: Common

  @doc "`traced?/0`, with the lingering tail flags it read (see `Common.self_state/0`)."
  @spec self_state() :: :traced | {:untraced, tuple() | nil}
  defdelegate self_state(), to: Common
end
