defmodule FlameOn.Client do
  @moduledoc """
  Profile a function: per-process flame graphs from BEAM call tracing, with
  the event processing in a C NIF.

      {result, profile} = FlameOn.Client.profile(fn -> MyApp.work(42) end, name: "work")
      File.write!("work.folded", FlameOn.Client.Profile.folded(profile))
      # flamegraph.pl work.folded > work.svg  (or open it in speedscope)

  `profile/2` runs the function in the calling process with call,
  `return_to` and scheduling (`:running`) tracing on. Time is charged to the
  stack the process was in; time scheduled out (receive, sleep, I/O waits)
  becomes a `SLEEP` leaf under the stack that waited. The result is a
  `FlameOn.Client.Profile`.

  ## Options

  Every option, with its default (this is the one place they are listed):

    * `:name` (`"flame_on"`) – the trace's name, the first field of each
      folded line.
    * `:max_nodes` (`200_000`) – distinct stacks kept; time of stacks past it
      goes to a `[truncated]` frame.
    * `:max_depth` (`512`) – frames kept per stack, counted after
      `:collapse_recursion`; deeper frames fold into one `…` frame
      (`stats.truncated_stacks` counts them).
    * `:collapse_recursion` (`true`) – a function calling itself directly
      (the same `{module, function, arity}` on top of itself: `lists:map/2`,
      `Enum.map/2`'s list helper, `foldr`, a hand-written body recursion)
      is one frame, and what it calls from every level of the recursion
      merges under it. Time is unchanged (the frame holds what its copies
      held), only the depth goes: a 30 000-deep `Enum.map/2` stays a few
      frames deep, so `max_depth` is not reached, no `…` frame hides the
      work, and the SVG and web views stay readable.
      `stats.collapsed_recursion` counts the calls folded (in modes
      `:sample` and `:native`, the repeated frames of the sampled stacks).
      Mutual recursion (`a` → `b` → `a`) keeps its depth. `false` keeps
      every frame of the real stack (the exact folded stacks, as
      `:erlang.trace` saw them), up to `max_depth`. It applies to every
      mode and every output, as stacks are built in the core.
    * `:max_processes` (`10_000`) – processes one trace follows.
    * `:max_frames` (`100_000`) – distinct `{module, function, arity}`
      frames.
    * `:max_stack_frames` (`100_000`) – real stack depth tracked per process
      to match returns.
    * `:max_stack_bytes` (`67_108_864`, 64 MiB) – bytes of stack texts
      (`"a;b;c"`) in `profile.stacks`. Each text is written once for the
      deepest stack of a chain and shared by the stacks above it, but
      stacks that branch at every level of a deep recursion still add up
      to depth² frames; past the budget stacks are left out of
      `profile.stacks` and `profile.samples` and counted in
      `stats.stacks_without_text` (`profile.tree` and every exporter but
      the folded text keep them).
    * `:cross_process` (`false`, or `config :flame_on_client, cross_process:
      true`) – also follow, with `:seq_trace`, the processes the function's
      work reaches (the servers it calls, the processes it messages or
      spawns, and so on from them), and build `profile.graph`, a
      `FlameOn.Client.Graph` of linked spans and wait edges: every wait of a
      process of the trace is attributed to the process whose message ended
      it (or says what ended it: a port, a timer, a process outside the
      trace), and each followed process's own stacks join the profile under
      its pid. Needs the node's seq_trace system tracer. With `mode:
      :process` the root's attributed wait stays a `WAITING` leaf in its
      stacks (the spans still split it).
    * `:follow` (`:messages`) – cross-process traces: what makes a process
      join the trace and who explains a wait. `:messages`: any message a
      process of the trace sends (tokened), and any process it spawns, brings
      the receiver in; every wait of a process of the trace is attributed to
      the follower whose message ended it (see "Cross-process spans" in the
      README). `:calls`: only `GenServer.call`s are followed (cheaper: no
      receive events), and a wait is explained only by a tokened message.
    * `:sleep` (`:default`) – cross-process traces: by default a caller's
      wait that a traced callee explains leaves the caller's stacks (the
      span graph links it to the callee's span) and the wait nothing
      explains shows as a `WAITING` leaf; `:raw` keeps every scheduled-out
      interval as `SLEEP`, as single-process traces show it.
    * `:max_spans` (`10_000`), `:max_pending_calls` (`4_096`), `:max_fanout`
      (`1_000`) – bounds of the span graph (cross-process traces; callees
      past them are not followed, and `graph.stats` counts them).
    * `:max_duration_ms` (`60_000`) – cross-process traces: the longest a
      trace captures; past it the trace stops following anything (the
      function still runs to its end) and `stats.lifetime_exceeded` is
      `true`.
    * `:cluster` (`[]`) – cross-process traces in a distributed Erlang
      cluster: the connected nodes that run `:flame_on_client` are armed
      and the trace follows calls into them (see `FlameOn.Client.Cluster`).
      `false` arms no node; a keyword list may give `:nodes`,
      `:arm_timeout_ms` (`1_000`) and `:max_part_bytes` (`4_000_000`).
    * `:mode` (`:nif`) – how the profile is captured. `:nif`: the NIF is
      the tracer module, so the VM hands each call event to the NIF inside
      the traced process, which appends it to a bounded buffer (no message,
      copy or mailbox) for a native thread to fold. `:process`: a tracer
      process ingests the trace messages in batches (the portable
      baseline; a burst of events queues in its mailbox). Both give the
      same exact stacks for the same events. `:sample`: **no call
      breakpoints** – the process's stack is sampled every `:interval_us`
      and the `:running` trace flag gives its exact on- and off-CPU time;
      stacks still add up to the traced wall time, and `profile.metrics`
      holds each sample's status, queue length, memory and reductions.
      `:native`: **no call breakpoints** – CPU samples of the scheduler
      threads from Linux perf events (the VM started with `+JPperf true`),
      each charged to the traced process that ran on that thread then;
      on- and off-CPU time exact as in `:sample`, CPU bursts shorter than
      a time slice seen as they happen. `:auto`: `:native` where this VM
      can sample natively, else `:sample` (`profile.mode` says which ran).
      See "Cost" below for when to use which.
    * `:frequency` (`499`) – mode `:native`: CPU samples a second of each
      scheduler thread's CPU time (1..10000; the node's sampler runs at the
      highest frequency its users ask for, continuous profiling included).
    * `:interval_us` (`1_000`) – mode `:sample`: the sampling interval,
      at least 1000 (the VM's timers tick in milliseconds).
    * `:split_status` (`false`) – mode `:sample`: put each sample's
      process status (`"[running]"`, `"[runnable]"`, `"[waiting]"`,
      `"[garbage_collecting]"`, ...) at the root of its stack, so the flame
      graph groups stacks by status (as flame_prof does).
    * `:alloc` (`false`) – any mode: also weigh the stacks by the heap
      words the processes allocated (`profile.alloc`, and
      `FlameOn.Client.Export.write/4` with `weight: :alloc`). Each garbage
      collection of a traced process is a sample at the stack it started
      in (exact in `:nif` and `:process`; in `:sample` and `:native` the
      last stack known), weighing the words allocated since the previous one
      (from the young heap and heap fragments in use at its start, less
      what the previous one left). A sampled estimate: the words between
      two collections all go to the stack the second one starts in. In
      `:nif` and `:process` the VM builds terms for the call tracing on
      the traced heap; 4 words per call or return event are taken off
      (calls with several arguments and body recursion cost more and
      leave some). With `cross_process: true` every process of the trace
      has its own allocation stacks, counted from its own collections
      while it works for the trace; not in mode `:process` on Erlang/OTP
      27+ (`ArgumentError`: the root's collections are not traced
      there). See the README's "Allocation profiles" for its error,
      measured.
    * `:max_samples` (`100_000`) – mode `:sample`: samples whose metrics
      `profile.metrics` keeps per process; later ones still fold their
      stacks, and `stats.dropped_metrics` counts them.
    * `:timeout` (`30_000`) – mode `:process`: milliseconds the tracer
      process may spend, after the function returns, on trace messages
      still queued; what is left is dropped and counted in
      `stats.dropped_events`. A positive integer or `:infinity`.

  Limits are positive integers; the NIF also caps each one (for example
  `:max_nodes` at 50 million) and an out-of-range value raises
  `ArgumentError`. Reaching a limit never fails a trace: it truncates
  visibly and counts in `Profile.stats`.

  ## Cost

  In modes `:nif` and `:process`, while any trace runs, call trace patterns
  are set on every function of the node, so **every process pays a
  breakpoint check on each call**, not only the traced one (measured 1.2x
  on untraced Enum/Map code and 3-4x on untraced tight recursion). Use
  them on a development machine, or where exact call counts and every
  frame matter. On OTP 27+ each trace has its patterns in an OTP trace
  session of its own: other tracing tools are left alone, but concurrent
  exact traces each add their breakpoint check.

  Mode `:native` sets no pattern either: while native traces run each
  scheduler thread takes a kernel interrupt per sample, and the traced
  process pays its `:running` trace events (the VM's own cost, about
  1.05x on a tight loop it switches every few microseconds). It needs
  Linux, the JIT, `+JPperf true` (which itself slows call-heavy code by
  frame pointers: see the README) and `perf_event_open` allowed for the
  VM's threads; otherwise it raises `ArgumentError` saying which is
  missing.

  Mode `:sample` sets no pattern: other processes pay nothing. The traced
  process pays one stack read (a signal it answers at its next safe point,
  a few microseconds) per sample. Its limits: stacks are the VM's stack
  traces, at most 64 frames deep (a deeper stack keeps its innermost 64
  frames under a `"…"` root) and a run of one return address is recorded
  once (direct recursion shows as one frame); work shorter than the
  interval may be missed. `FlameOn.Client.Tracing.trace/3`,
  `FlameOn.Client.Tracing.start_trace/2` and `FlameOn.Client.Telemetry`
  default to it. While sample traces run, the node's `backtrace_depth`
  (default 8) is raised to 64 (`max_depth + 1` if lower) and restored after
  the last one.
  """

  require Logger

  alias FlameOn.Client.{Capture, Options, Profile}
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Tracing

  @typedoc "An option of `profile/2`; see the module documentation."
  @type option ::
          {:name, String.t()}
          | {:max_nodes, pos_integer()}
          | {:max_depth, pos_integer()}
          | {:max_processes, pos_integer()}
          | {:max_frames, pos_integer()}
          | {:max_stack_frames, pos_integer()}
          | {:max_stack_bytes, pos_integer()}
          | {:collapse_recursion, boolean()}
          | {:mode, :nif | :process | :sample | :native | :auto}
          | {:frequency, pos_integer()}
          | {:interval_us, pos_integer()}
          | {:split_status, boolean()}
          | {:alloc, boolean()}
          | {:max_samples, pos_integer()}
          | {:cross_process, boolean()}
          | {:follow, :messages | :calls}
          | {:cluster, false | keyword()}
          | {:timeout, timeout()}

  @doc """
  Runs `fun` in the calling process, traced, and returns `{result, profile}`.

  The trace flags are set on the calling process right before `fun` runs and
  cleared right after it returns, so the profile holds `fun`'s work under a
  root frame `FlameOn.Client.profile/2`. If `fun` raises, throws or exits,
  the trace is still finished and cleaned up, then the exception is raised
  again with its original stacktrace.

      iex> {result, profile} = FlameOn.Client.profile(fn -> Enum.sum(1..100) end)
      iex> result
      5050
      iex> profile.mode
      :nif
      iex> Map.keys(profile.stacks) == [self()]
      true

  Raises `ArgumentError` for invalid options, or if the calling process is
  already traced by another tracer.
  """
  @spec profile((() -> result), [option()]) :: {result, Profile.t()} when result: term()
  def profile(fun, opts \\ [])

  def profile(fun, opts) when is_function(fun, 0) do
    capture = Capture.start({:self, {__MODULE__, :profile, 2}}, Options.profile!(opts))

    # The flags go on and the function runs right here, so every stack
    # starts at this function in every mode. The trace's time starts
    # before begin/2: a sampler takes its first sample there, and the
    # stacks must fit in the trace's wall time.
    started_ts = :erlang.monotonic_time()
    capture = Capture.begin(capture, self())

    outcome =
      try do
        TraceBackend.set_flags(self(), capture.flags)
        {:ok, fun.()}
      catch
        kind, reason -> {kind, reason, __STACKTRACE__}
      end

    # What follows must not show in the profile.
    end_ts = Capture.stop(capture)
    Capture.detach(capture)
    Capture.result(capture, outcome, Capture.finish(capture, started_ts, end_ts))
  end

  def profile(fun, _opts) do
    raise ArgumentError, "expected a function of arity 0, got: #{inspect(fun)}"
  end

  @doc """
  Runs `fun` and returns `{result, summary}`: for every function it called,
  how many calls and how much time or memory, and its share, as `tprof`
  reports it (a `FlameOn.Client.Summary`; print it with
  `FlameOn.Client.Summary.table/2`, write it with
  `FlameOn.Client.Summary.csv/1`).

  As `tprof` does, `fun` runs in a new process (linked to the caller, like
  a `Task`, with the caller in its `:"$callers"`), so the counts do not
  depend on the caller's heap: the time a function spends collecting
  garbage is its own. `summary.pid` is that process.

      iex> {result, summary} = FlameOn.Client.summary(fn -> Enum.sum(1..100) end)
      iex> result
      5050
      iex> summary.type
      :call_time
      iex> Enum.any?(summary.entries, &(&1.function == "Enum.sum/1" and &1.calls == 1))
      true

  The VM counts (`call_time` or `call_memory` trace patterns on every
  function, read back per function): no stacks and no events, so it costs
  less than `profile/2` while it runs, but says nothing of who called
  whom. Each function's time or memory is its own (its callees are
  traced too).

  Options:

    * `:type` (`:call_time`) – `:call_time`: microseconds; `:call_memory`:
      words allocated on the process heap (Erlang/OTP 26 or later; an
      `ArgumentError` on OTP 25).
    * `:set_on_spawn` (`true`) – also count the processes `fun` spawns
      (and theirs), as `tprof` does.
    * `:name` (`"flame_on"`) – the summary's name.

  On OTP 27+ the counters live in a trace session of their own: other
  tools' tracing (`tprof` included) and our other traces are untouched.
  Before OTP 27 they are node-global, so a summary refuses to start
  (`ArgumentError`) while anything else call-traces on the node, ours
  included. If `fun` raises, throws or exits, the counters are cleared and
  the exception is raised again in the caller.
  """
  @spec summary((() -> result), keyword()) :: {result, FlameOn.Client.Summary.t()}
        when result: term()
  def summary(fun, opts \\ [])

  def summary(fun, opts) when is_function(fun, 0) do
    Capture.Counters.run(fun, Options.summary!(opts))
  end

  def summary(fun, _opts) do
    raise ArgumentError, "expected a function of arity 0, got: #{inspect(fun)}"
  end

  @doc """
  Runs `fun` in the calling process, maybe traced, and returns its result;
  see `FlameOn.Client.Tracing.trace/3`: trace app code, sampled, shipped
  above a threshold.
  """
  @spec trace(String.t() | atom(), (() -> result), keyword()) :: result when result: term()
  def trace(name, fun, opts \\ [])

  def trace(name, fun, opts) when is_function(fun, 0) do
    name = name!(name)
    {settings, capture} = Options.trace_request!(opts)

    if Capture.sampled?(settings.sample_rate),
      do: sampled(name, fun, opts, settings, capture, Capture.self_state()),
      else: fun.()
  end

  def trace(_name, fun, _opts) do
    raise ArgumentError, "expected a function of arity 0, got: #{inspect(fun)}"
  end

  defp sampled(name, fun, _opts, _settings, _capture, :traced) do
    Logger.debug(fn ->
      "FlameOn: #{inspect(name)} runs untraced: the process is already traced"
    end)

    fun.()
  end

  # the shared tail path first: no wrapper around fun there
  defp sampled(
         name,
         fun,
         opts,
         %{threshold_ms: threshold_ms} = settings,
         capture,
         {:untraced, lingering}
       )
       when threshold_ms > 0 do
    case Tracing.Tail.shared(fun, name, capture, threshold_ms, lingering) do
      {:ran, outcome, pending} ->
        if pending, do: FlameOn.Client.TraceStore.keep(pending, settings)
        return(outcome)

      :unavailable ->
        traced(name, fun, settings, capture, opts)
    end
  end

  defp sampled(name, fun, opts, settings, capture, {:untraced, _}),
    do: traced(name, fun, settings, capture, opts)

  defp name!(name) when is_binary(name), do: name
  defp name!(name) when is_atom(name) and name not in [nil, true, false], do: Atom.to_string(name)
  defp name!(other), do: Options.invalid!(:name, "a string", other)

  # The wrapper catches fun's exceptions, so profile/2 returns the profile
  # of a failed run too, and notes fun's outcome in the process dictionary:
  # an exception of profile/2 with no outcome noted means the trace never
  # started, and fun has not run.
  defp traced(name, fun, settings, capture, opts) do
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
      case settings.threshold_ms do
        0 ->
          profile(wrapped, profile_opts(name, capture, opts))

        threshold_ms ->
          # (the shared path was not available)
          Tracing.Tail.own(
            wrapped,
            Options.profile!(profile_opts(name, capture, opts)),
            threshold_ms
          )
      end
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
        if profile, do: FlameOn.Client.TraceStore.keep(profile, settings)
        return(outcome)
    end
  end

  # profile/2's options of a traced call: its name and mode, and every
  # option of trace/3's that profile/2 takes (made only where a trace of
  # its own runs: the shared tail path does not need them).
  defp profile_opts(name, capture, opts) do
    [name: name, mode: capture.mode] ++
      for {key, value} <- opts, key in Options.keys(:profile), do: {key, value}
  end

  defp return({:ok, result}), do: result
  defp return({kind, reason, stacktrace}), do: :erlang.raise(kind, reason, stacktrace)

  @doc "See `FlameOn.Client.Tracing.start_trace/2`: trace another process."
  @spec start_trace(pid() | atom() | {:top, pos_integer()}, keyword()) ::
          {:ok, FlameOn.Client.Tracing.Ref.t()} | {:error, term()}
  defdelegate start_trace(pid, opts \\ []), to: FlameOn.Client.Tracing.Start

  @doc "See `FlameOn.Client.Tracing.stop_trace/1`."
  @spec stop_trace(FlameOn.Client.Tracing.Ref.t()) :: {:ok, Profile.t()} | {:error, term()}
  defdelegate stop_trace(ref), to: FlameOn.Client.Tracing.Start

  @doc """
  Waits for the next call of `{module, function, arity}` by any process and
  profiles that one call, from its entry to its return or exception.
  Returns `{:ok, profile}`, or `{:error, :timeout}` when no process called
  it within `:timeout` (30 s). See `FlameOn.Client.NextCall` for how it
  works, its options and its cost.

      task = Task.async(fn -> FlameOn.Client.capture_next({MyApp.Orders, :checkout, 2}) end)
      # ... some process calls MyApp.Orders.checkout/2 ...
      {:ok, profile} = Task.await(task, :infinity)
  """
  @spec capture_next(mfa(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  defdelegate capture_next(mfa, opts \\ []), to: FlameOn.Client.NextCall, as: :capture

  @doc """
  What the profiler holds on this node right now.

      iex> %{breaker: :closed, sessions: sessions} = FlameOn.Client.status()
      iex> is_integer(sessions)
      true

  Keys: `:breaker` (`:closed` or `{:open, reason}`: new traces do not
  start while it is open, see `:breaker` in `FlameOn.Client.Options`),
  `:sessions` (the traces running now: core sessions, the C state of a
  trace, not yet stopped or finished), `:sessions_awaiting_gc` (core
  sessions whose trace is over but whose handle some process holds until
  its next garbage collection; a finished one has freed its tables
  already), `:sessions_memory_bytes` (the tables of the sessions not yet
  finished or collected), `:node_memory_bytes`,
  `:pattern_users` (traces holding the call patterns), `:trace_sessions`
  (OTP trace sessions of ours, OTP 27+), `:sample_traces` (traces holding
  a raised `backtrace_depth`), `:active_samplers` and `:sample_budget`
  (the samplers sampling now, and the node's samples per second they
  share, `:sample_budget` in `FlameOn.Client.Options`), `:owners` (the
  processes that own a running trace or keep a finished one's profile),
  `:captures_waiting` (`capture_next/2` calls waiting for their call:
  `[{mfa, pid}]`), `:trace_store` (the recent traces kept, their size
  and bounds, see `FlameOn.Client.TraceStore`) and `:native`: whether
  `mode: :native` can run in this VM (`%{available: true, sampler:
  counters, tail: counters}`, the CPU sampler's users, threads, frequency,
  samples and losses, and tail tracing's: whether it holds the sampler,
  its calls running, kept, truncated) or why not and what to do
  (`%{available: false, reason: text}`), `:continuous` (`false`, or
  `FlameOn.Client.Continuous.stats/0` while continuous profiling runs).
  """
  @spec status() :: map()
  defdelegate status(), to: FlameOn.Client.Node.Status

  @doc """
  A differential profile of `new` against `base`: per stack, the value in
  each run (`FlameOn.Client.Diff`), to write as a flame graph coloured by
  change with `FlameOn.Client.Export.write/4`. Each side is a
  `FlameOn.Client.Profile`, a folded file's path or folded text.

  Options: `by: :merged` (default: all processes together) or `:process`
  (the traced processes matched with each other, the other processes by
  name); `normalize: true` (default: new scaled so that the typical stack
  is unchanged, the weighted median of the per-stack ratios), `:total`
  (to the base's total) or `false`; `alloc: true` compares allocations
  instead of time; `:name`.

      iex> diff = FlameOn.Client.diff("main;work 100\\n", "main;work 300\\n", normalize: false)
      iex> diff.stacks
      %{all: [{"main;work", 100, 300}]}
  """
  @spec diff(FlameOn.Client.Diff.side(), FlameOn.Client.Diff.side(), keyword()) ::
          FlameOn.Client.Diff.t()
  defdelegate diff(base, new, opts \\ []), to: FlameOn.Client.Diff, as: :new
end
