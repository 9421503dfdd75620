defmodule FlameOn.Client.NextCall do
  @moduledoc """
  Profile the next call of a function, by whichever process makes it,
  without changing any code: `FlameOn.Client.capture_next/2`.

      # in iex on the running node (or from the web UI, FlameOn.Client.Web,
      # or from a shell: mix profile.flame --next MyApp.Orders.checkout/2)
      {:ok, profile} = FlameOn.Client.capture_next({MyApp.Orders, :checkout, 2}, timeout: 60_000)
      FlameOn.Client.Export.write(profile, "flame_on_out", [:svg])

  It waits (up to `:timeout`) until some process calls the function, then
  profiles that call from its entry to its return or its exception, and
  returns `{:ok, profile}`; `{:error, :timeout}` when nobody called it in
  time. The profile's `pid` is the process that made the call, and its
  stacks start at the function: nothing of what the process did before or
  after the call is in it.

  ## How it works

  While it waits, exactly **one function** has a pattern: a meta call
  pattern on `{module, function, arity}` whose meta tracer is a gate in the
  NIF (a node-wide owner of ours holds it). Processes calling other
  functions pay nothing; callers of this one pay a breakpoint and one
  atomic read.

  The VM asks the meta tracer whether to trace a call *before* it runs the
  pattern's match spec. The first caller claims the gate with one
  compare-and-swap and the match spec then runs for it alone: it turns
  tracing on in that process at the call itself (the capture's tracer and
  flags, and with `cross_process: true` its seq_trace token), and sets an
  exception-trace return. Every other caller, even one calling at the same
  instant on another scheduler, is told `discard`: no flag, token or
  return frame touches it, so exactly one call is captured. The gate adds
  the call itself to the core session (nothing of the process ran yet), and at
  the call's return or exception it stops the core session in the process's own
  context, before the process runs on in its caller. Then the pattern is
  cleared and the process's trace flags are turned off: the node is as it
  was, also on timeout (the gate is closed atomically: a call racing the
  timeout is either captured whole or not at all) and when the waiting
  process dies (the pattern's owner monitors it).

  ## Options

  Every option of `FlameOn.Client.profile/2` (`:mode`, `:cross_process`,
  limits, `:max_duration_ms`, ...), and:

    * `:timeout` (`30_000`) – milliseconds to wait for the call, or
      `:infinity`.
    * `:name` (default `"Module.fun/arity"`) – the trace's name.
    * `:mode` (`:sample`, or the application environment's `:mode`, as
      for the app-code entry points of `FlameOn.Client.Tracing`): `:sample`
      samples the process's stack during the call (no call breakpoints
      anywhere); `:nif` traces its calls exactly (`:process` means `:nif`
      here).
    * `:max_duration_ms` (`60_000`) – the longest the call is followed
      after it started; a call still running then is profiled up to there
      (`stats.lifetime_exceeded` is `true`) and left to run.
    * `:shipper` (none) – shippers the profile goes to (see
      `FlameOn.Client.Shipper`).
    * `:store` (`true`) – also keep the profile in `FlameOn.Client.TraceStore`
      (the recent traces of the web UI).

  Invalid options, a module that cannot be loaded and a function it does
  not define raise `ArgumentError`. `{:error, {:already_waiting, pid}}`: another capture waits for the
  same function; `{:error, {:meta_traced, tracer}}`: another tool
  meta-traces it; `{:error, {:breaker_open, reason}}`: see
  the `:breaker` settings in `FlameOn.Client.Options`.

  ## Cost

  In mode `:sample` (the default) nothing but the one function's pattern
  is set while waiting; during the call only the captured process is
  sampled. In mode `:nif` the exact stacks of the call need call patterns
  on every function **from the call's entry**, so they are set when the
  capture starts waiting (as for `FlameOn.Client.profile/2`, every process
  of the node pays a breakpoint check per call while they are set): use it
  where that is acceptable.

  While a `:sample` capture waits, the node's `backtrace_depth` is raised
  (as while any sample trace runs): the
  first sample comes right at the call.

  **Limitation (one tracer per process).** Captures work in the legacy
  trace session on every release,
  OTP 27 included, unlike FlameOn's other traces there. A process that
  already has a tracer in the legacy session when it makes the call
  (another tool's trace of that process) gets the capture's tracer for the
  call: the other trace loses the call's events.

  With `cross_process: true` the captured process keeps
  its seq_trace token after the call until its next receive of a message
  without one (no process can clear another's token; it costs nothing once
  no cross-process trace runs).
  """

  alias FlameOn.Client.{Options, Profile, Shipper, TraceStore}
  alias FlameOn.Client.NextCall.{Gate, Parse}

  @doc "See `FlameOn.Client.capture_next/2` and the module documentation."
  @spec capture(mfa(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def capture(mfa, opts \\ []) do
    mfa = mfa!(mfa)
    config = Options.capture_next!(opts, Profile.frame_name(mfa))

    with {:ok, profile} <- Gate.run(mfa, config.capture, config.wait_ms) do
      if config.store, do: TraceStore.put(profile)
      if config.shippers != [], do: Shipper.ship_all(profile, config.shippers)
      {:ok, profile}
    end
  end

  defp mfa!(mfa) do
    case check(mfa) do
      :ok -> mfa
      {:error, message} -> raise ArgumentError, message
    end
  end

  @doc """
  Parses a function as typed in Elixir (`MyApp.Mod.fun/2`, `:lists.seq/2`,
  `&Mod.fun/1`) or in Erlang (`lists:seq/2`, `'Elixir.MyApp.Mod':fun/2`)
  into an `{module, function, arity}` that `capture/2` accepts: the module
  must be loaded or loadable and define the function. Creates no atom for
  a module that does not exist. Returns `{:error, message}` otherwise.

      iex> FlameOn.Client.NextCall.parse("Enum.map/2")
      {:ok, {Enum, :map, 2}}
      iex> FlameOn.Client.NextCall.parse("lists:seq/2")
      {:ok, {:lists, :seq, 2}}
      iex> FlameOn.Client.NextCall.parse("Enum.map/300")
      {:error, "the arity must be an integer from 0 to 255, got: 300"}
  """
  @spec parse(String.t()) :: {:ok, mfa()} | {:error, String.t()}
  defdelegate parse(text), to: Parse

  @doc """
  Checks that `mfa` can be captured: `:ok`, or `{:error, message}` saying
  why not (a module that cannot be loaded, a function it does not define,
  an arity out of 0..255).
  """
  @spec check(term()) :: :ok | {:error, String.t()}
  defdelegate check(mfa), to: Parse
end
