defmodule FlameOn.Client.Core.Native do
  @moduledoc false
  # The C NIF. Internal: use `FlameOn.Client` instead.
  #
  # Every function validates its arguments and raises `ArgumentError` on bad
  # input; a malformed trace message inside an `ingest/2` batch is counted in
  # the session's stats and skipped.
  #
  # ## Functions
  #
  #   * `new(opts)` – a session resource. `opts` is a map with the optional
  #     integer keys `:max_nodes`, `:max_depth`, `:max_processes`,
  #     `:max_frames`, `:max_stack_frames`, `collapse_recursion: true`
  #     (direct recursion as one frame; absent: real depth) and `:native_per_second`
  #     (`System.convert_time_unit(1, :second, :native)`, to turn
  #     `:monotonic_timestamp` values into nanoseconds), `replay: true`
  #     for a session whose `trace/5` calls replay recorded events, and
  #     `:buffer_events` (4096, rounded up to a power of two, at most 2^22):
  #     the most records the tracer callbacks buffer before the core folds
  #     them (56 bytes each; the buffer starts at 1024 and doubles as it
  #     fills up to this size: bigger buffers spare the traced process folds
  #     on a busy machine but cost it cache misses),
  #     and `:max_stack_bytes` (64 MiB, at most 16 GiB): the bytes of stack
  #     texts `render/2` writes at most,
  #     and `:receives` (the traced processes have the `:receive` flag, so
  #     a wait that no message ended is told runnable, a `RUNNABLE` leaf:
  #     `true`, when the process then runs a call (exact modes); `:cpu`,
  #     when the time slice after it has a CPU sample of the process's
  #     code, lasts 100 µs or ends in its exit (native); `:sampled`, when
  #     that slice is not one the sampler's signal woke it for
  #     (`sample_signal/2`), or lasts 100 µs (mode `:sample`)).
  #     `alloc: true` (or `alloc: :heap`,
  #     heap fragments left out) decodes each garbage collection event's
  #     heap sizes: the core charges the words allocated since the
  #     previous collection to the stack it started in (fo_session_gc.c);
  #     `:alloc_event_words` (0..1024) words per call and return_to event
  #     are taken off (the call tracing's own terms on the traced heap);
  #     `heap_levels: [{pid, words}]`, the young heap of processes about to
  #     be traced (their first collection counts from it).
  #   * `ingest(session, messages)` – applies a list of
  #     `{:trace_ts, pid, tag, ..., ts}` messages. Returns `:ok`. A `ts`
  #     (native units, or `{mega, sec, micro}`) whose nanoseconds (moved to
  #     the tracer clock in a cross-process core session) fall outside a signed 64-bit
  #     integer makes its message malformed.
  #   * `stats(session)` – the counters, a map. `:memory_bytes` is what the
  #     core's tables hold; `:buffer_bytes` the most the event buffer of the
  #     tracer callbacks held, and `:producer_folds` the times a traced
  #     process found it full and folded it itself (the drainer thread fell
  #     behind).
  #   * `stop(session)` – the tracer callbacks take no more events (they
  #     discard them); the result waits for `finish/2`. Returns the native
  #     monotonic time at which it stopped. The tracer never folds calls into
  #     this module, so a traced process calling `stop/1` leaves no frame.
  #   * `finish(session, end)` – closes the session. `end` charges each live
  #     process up to it: native monotonic time (sessions fed by `ingest/2`),
  #     `:stop` (when `stop/1` ran, on the tracer's clock: sessions fed by the
  #     tracer callbacks) or `nil` (no closing charge); an integer `end`
  #     whose nanoseconds fall outside a signed 64-bit integer raises
  #     `ArgumentError` and leaves the session open. Returns `{tree, stats}`:
  #     the calling-context tree as the core holds it, whatever its depth in
  #     one compact piece, `{frames, pids, nodes, max_stack_bytes}`. `frames`
  #     is a tuple indexed by frame id: `{module, function, arity}`, or for
  #     the reserved ids 0..8 `:process` (a process root), `:sleep`,
  #     `:depth_cap`, `:node_cap`, `:waiting`, `:gc_minor`, `:attributed`,
  #     `:gc_major`, `:runnable`. `pids` is a tuple indexed by process. `nodes` is a
  #     binary of 36 bytes per node, parents before children:
  #     `<<parent::32-native, frame::32-native, process::32-native,
  #     self_ns::64-native, samples::64-native, weight::64-native>>`
  #     (`parent` is `0xFFFFFFFF` for a process root; `samples` and `weight`
  #     count the `sample/4` samples that landed on the node). A session
  #     that counted allocation returns a fifth element, a binary of 20
  #     bytes per node charged, `<<node::32-native, words::64-native,
  #     collections::64-native>>`. A session of
  #     up to 20 000 nodes finishes on the calling scheduler (well under a
  #     millisecond); bigger ones and graph sessions on a dirty scheduler.
  #   * `render(tree, names)` – the views of a finished tree, built in C in
  #     time linear in what they hold (`FlameOn.Client.Profile.build/4` calls
  #     it). `names` is a tuple as long as `frames`: each frame's text, or
  #     `nil` to drop the time and samples of the stacks that end in it;
  #     frames that read the same are merged. Returns `{stacks, samples,
  #     trees, tree_names, stacks_without_text, alloc, alloc_trees}`
  #     (`alloc` and `alloc_trees`: `profile.alloc` and the nodes of
  #     `profile.alloc_tree`, empty maps without allocation): the `stacks` and `samples`
  #     fields of `FlameOn.Client.Profile` (each text is a slice of the text
  #     of a stack below it, so a chain of frames costs one text), the
  #     per-process tree binaries and names of `FlameOn.Client.Profile.Tree`,
  #     and how many stacks were left out because their texts passed
  #     `max_stack_bytes` (a `new/1` option, default 64 MiB; the trees keep
  #     them). Trees of up to 5 000 nodes with up to 512 KiB of texts render
  #     on the calling scheduler, bigger ones on a dirty scheduler.
  #   * `new(%{label: label, ...})` makes a cross-process (graph) session:
  #     `label` is its seq_trace label (a positive integer), with the span
  #     graph's bounds `:max_spans`, `:max_pending_calls`, `:max_fanout`
  #     (`:max_processes` bounds both parts). `graph_start(session, root)`
  #     registers the session with the router and `graph_begin(session)`
  #     starts the root span, right before tracing starts: the
  #     tracer state `:graph` (`{:tracer, FlameOn.Client.Core.Native, :graph}`,
  #     also the seq_trace system tracer) routes seq_trace events by label
  #     and process events by pid. `finish/2` of a cross-process core session returns a
  #     third element, `%{spans: [span_map], edges: [edge_map], followers:
  #     [pid], stats: map, clock_offset_ns: n}` (`followers`: the processes
  #     still following the trace when it closed, the root aside).
  #     `graph_owner(session, owner, follow_messages)` names the process told
  #     `{:flame_on_left, pid}` when a follower leaves the trace, and whether
  #     the trace follows every message (its processes have receive events)
  #     or GenServer calls only; `graph_role(pid)` says whether `pid` is the
  #     root of a running cross-process trace (`:root`), works for one (`:follower`)
  #     or neither (`nil`).
  #   * `sample(session, pid, stack, weight)` – a stack sample of `pid`, as
  #     `Process.info(pid, :current_stacktrace)` gives it (innermost first,
  #     `{m, f, arity_or_args}` or `{m, f, arity_or_args, location}`; or
  #     `:same`, the stack the process already has, for a process the sampler
  #     knows has not run since; `{:same, n}` counts that as n samples, n in
  #     1..2^32-1), stamped on the tracer clock: the process's
  #     stack is the sampled one
  #     until its next event (`in`/`out` from the tracer callbacks split it
  #     into on- and off-CPU time) or sample. Counted in `stats.samples`, and
  #     on the stack it lands on (the sampled stack, or its `:sleep` /
  #     `:waiting` leaf when the process is scheduled out): one sample plus
  #     `weight`, a non-negative integer below 2^64 (the sampler passes the
  #     reductions since its previous sample). Returns `:stopped` (and
  #     applies nothing) once the session is stopped, and `:idle` (applies
  #     nothing) for a cross-process trace's callee between the trace's
  #     requests. `sample(session, pid, stack, weight, how)` says what the
  #     sampler knows: `:plain` (as `sample/4`), `:waited` (it saw `pid`
  #     waiting when it asked and `pid` ran no code until it answered: the
  #     whole wait it is in, not only the rest of it, goes under the sampled
  #     stack, although answering woke it for a moment) or `:leading` (the
  #     stack was taken just before the traced work starts: the next sample
  #     takes the time since), `:busy` (it saw `pid` running or runnable:
  #     the stack is where it works, even scheduled out) or `:waiting` (it
  #     saw `pid` waiting, not as `:waited`: the stack is where it waits).
  #   * `next_new(session, owner, excluded)` – the gate of
  #     `FlameOn.Client.NextCall`: with the meta pattern
  #     `{:meta, FlameOn.Client.Core.Native, {:next, gate}}` on one function, the
  #     first process to call it (not one of `excluded`, at most 8 pids)
  #     claims the gate in `enabled/3`, before the VM runs the pattern's
  #     match spec, so the match spec turns tracing on in that process only.
  #     The gate then adds the call to `session` and sends `owner`
  #     `{:flame_on_next, gate, :fired, pid, caller, native_ts}`; at the
  #     call's return or exception it stops `session` (as `stop/1`), in the
  #     caller's own context, and sends `{:flame_on_next, gate, :returned,
  #     native_ts, :ok, nil}` or `{:flame_on_next, gate, :raised, native_ts,
  #     {class, reason}, nil}`. `next_cancel(gate)` closes it: `:cancelled`,
  #     or `:fired` when a caller claimed it first; `next_state(gate)` is
  #     `:armed`, `:cancelled`, `{:fired, pid}` or `{:done, pid}`.
  #   * `tracer_state(session)` – the session's tracer state: pass
  #     `{:tracer, FlameOn.Client.Core.Native, tracer_state(session)}` to
  #     `:erlang.trace/3` (or, OTP 27+, make `{FlameOn.Client.Core.Native,
  #     tracer_state(session)}` a trace session's tracer, see
  #     `FlameOn.Client.Node.TraceBackend`). A small integer (the key of the session's slot in
  #     a node-wide table of at most 16384 tracing sessions; raises
  #     `:system_limit` past it), so the callbacks reach the session without a
  #     resource lookup. Once the session is stopped or finished the key
  #     reaches nothing: the callbacks drop the events and the VM removes the
  #     tracer at its next `trace_status` check.
  #   * `enabled/3` and `trace/5` – the `:erl_tracer` behaviour. The VM
  #     calls them in the traced process: `trace/5` stamps the event, decodes
  #     it and appends it to the session's bounded buffer, with no message.
  #     A drainer thread folds the buffer into the session as it fills, off
  #     the traced process; a buffer found full is folded by the process
  #     itself, and whatever reads the session (`stats/1`, `sample/4`,
  #     `finish/2`, ...) folds what is left first, so nothing is lost or
  #     reordered. Events are stamped with the session's clock (nanoseconds
  #     on `CLOCK_MONOTONIC`, read through the CPU's time-stamp counter where
  #     the kernel keeps time with it); in a `replay: true` session an
  #     integer `:timestamp` in `opts` (a recorded event) is used instead.
  #     The session itself (the `new/1` reference) is accepted as the state
  #     too.

  @on_load :load_nif
  @nif_name ~c"flame_on_client_nif"

  @doc false
  def load_nif do
    # The application's priv, else the source tree's: Elixir 1.15+ loads
    # modules while compiling, before Mix links priv into _build.
    source_priv = Path.expand(Path.join([__DIR__, "..", "..", "..", "priv"]))

    path =
      case :code.priv_dir(:flame_on_client) do
        {:error, _} ->
          source_priv

        dir ->
          if File.exists?(Path.join(dir, "#{@nif_name}.so")), do: dir, else: source_priv
      end

    # FLAME_ON_NIF: another build of the library (the sanitizer build the
    # tests also run against), as a path without the .so extension.
    library = System.get_env("FLAME_ON_NIF") || Path.join(path, to_string(@nif_name))

    case :erlang.load_nif(String.to_charlist(library), 0) do
      :ok -> :ok
      {:error, {:reload, _}} -> :ok
      {:error, reason} -> {:error, reason}
    end
  end

  @type session :: reference()
  @type perf_error :: :denied | :no_support | :no_memory | :failed

  @spec new(map()) :: session()
  def new(_opts), do: :erlang.nif_error(:nif_not_loaded)

  @spec tracer_state(session()) :: non_neg_integer()
  def tracer_state(_session), do: :erlang.nif_error(:nif_not_loaded)

  @spec ingest(session(), [tuple()]) :: :ok
  def ingest(_session, _messages), do: :erlang.nif_error(:nif_not_loaded)

  @spec stats(session()) :: map()
  def stats(_session), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Session resources alive in this VM (for leak checks): open ones, and
  those whose trace is over but whose handle the garbage collector has
  not yet freed.
  """
  @spec live_sessions() :: non_neg_integer()
  def live_sessions, do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Sessions whose trace is not over (neither stopped, finished, nor its
  handle freed): the live traces, whenever the garbage collector runs.
  """
  @spec open_sessions() :: non_neg_integer()
  def open_sessions, do: :erlang.nif_error(:nif_not_loaded)

  @doc "Bytes held by the tables of all live sessions in this VM."
  @spec session_bytes() :: non_neg_integer()
  def session_bytes, do: :erlang.nif_error(:nif_not_loaded)

  @spec cpu_here(session()) :: :ok
  def cpu_here(_session), do: :erlang.nif_error(:nif_not_loaded)

  @spec cpu_helper_here() :: :ok
  def cpu_helper_here, do: :erlang.nif_error(:nif_not_loaded)

  @spec cpu_helper_gone(pid()) :: :ok
  def cpu_helper_gone(_helper), do: :erlang.nif_error(:nif_not_loaded)

  @spec cpu_context(tuple(), pid(), mfa() | :flagless, mfa(), list()) ::
          :ok | :moved | :stale | :stopped | :full
  def cpu_context(_session, _pid, _mfa, _current, _stack),
    do: :erlang.nif_error(:nif_not_loaded)

  @spec stop(session()) :: integer()
  def stop(_session), do: :erlang.nif_error(:nif_not_loaded)

  @spec graph_start(session(), pid()) :: :ok
  def graph_start(_session, _root), do: :erlang.nif_error(:nif_not_loaded)

  @spec graph_begin(session()) :: :ok
  def graph_begin(_session), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # From now on `pid` gets `{:flame_on_callee, callee}` each time a callee
  # receives a request of this cross-process trace (sample traces sample callees).
  @spec graph_watch_callees(session(), pid()) :: :ok
  def graph_watch_callees(_session, _pid), do: :erlang.nif_error(:nif_not_loaded)

  @spec graph_owner(session(), pid(), boolean()) :: :ok
  def graph_owner(_session, _owner, _follow_messages), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # No message or spawn of the trace brings `pid` in: a process of ours
  # that the trace's processes tell things (capture_next's waiting
  # process). `:error` when the graph notes no more.
  @spec graph_outsider(session(), pid()) :: :ok | :error
  def graph_outsider(_session, _pid), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # alloc: true: the young heap in use (`heap_size + mbuf_size` of
  # `:garbage_collection_info`) of `pid`, a process that joined the trace,
  # read as it joined: its first collection counts from there, unless one
  # of its collections reached the trace first (then this is ignored).
  @spec graph_heap_level(session(), pid(), non_neg_integer()) :: :ok
  def graph_heap_level(_session, _pid, _words), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # alloc: true, as a cross-process trace ends: the processes that follow
  # it now (not its root) with a known heap level, and (graph_heap_tail)
  # each one's young heap in use then: what it allocated since its last
  # collection goes to the stack its last words went to.
  @spec graph_alloc_followers(session()) :: [pid()]
  def graph_alloc_followers(_session), do: :erlang.nif_error(:nif_not_loaded)

  @spec graph_heap_tail(session(), pid(), non_neg_integer()) :: :ok
  def graph_heap_tail(_session, _pid, _words), do: :erlang.nif_error(:nif_not_loaded)

  @spec graph_role(pid()) :: :root | :follower | nil
  def graph_role(_pid), do: :erlang.nif_error(:nif_not_loaded)

  @spec sample(session(), pid(), list() | :same | {:same, pos_integer()}, non_neg_integer()) ::
          :ok | :stopped | :idle
  def sample(_session, _pid, _stack, _weight), do: :erlang.nif_error(:nif_not_loaded)

  @spec sample(
          session(),
          pid(),
          list() | :same | {:same | :slept, pos_integer()},
          non_neg_integer(),
          :plain | :waited | :leading | :busy | :waiting
        ) ::
          :ok | :stopped | :idle
  def sample(_session, _pid, _stack, _weight, _how), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Arms a wake-up for a sampler that will sleep while `pid` waits: the
  tracer callback of `pid`'s next `in` event (it needs the `:running`
  flag with this session as tracer) sends `sampler` `{:flame_on_in, pid}`
  once. `:full` when the session has no room for another (the sampler
  polls instead), `:stopped` once the session took its last event.
  """
  @spec sample_sleep(session(), pid(), pid()) :: :ok | :full | :stopped
  def sample_sleep(_session, _pid, _sampler), do: :erlang.nif_error(:nif_not_loaded)

  @doc "Disarms `pid`'s wake-up (`sample_sleep/3`), if it is armed."
  @spec sample_wake_cancel(session(), pid()) :: :ok
  def sample_wake_cancel(_session, _pid), do: :erlang.nif_error(:nif_not_loaded)

  @doc """
  Says the sampler is about to ask `pid`, seen waiting, for its stack: the
  signal schedules it in with no message, and the time slice it runs then
  (up to its next `out`) runs none of its code, so it does not make the
  wait before it runnable (a session with `receives: :sampled`). The
  events so far apply first. `:stopped` once the session is stopped.
  """
  @spec sample_signal(session(), pid()) :: :ok | :stopped
  def sample_signal(_session, _pid), do: :erlang.nif_error(:nif_not_loaded)

  @typedoc """
  The finished tree as the core holds it (`finish/2`): `{frames, pids,
  nodes, max_stack_bytes}`, see the module documentation.
  """
  @type tree ::
          {tuple(), tuple(), binary(), pos_integer()}
          | {tuple(), tuple(), binary(), pos_integer(), binary()}

  @spec finish(session(), integer() | :stop | nil) :: {tree(), map()} | {tree(), map(), map()}
  def finish(_session, _end_ts), do: :erlang.nif_error(:nif_not_loaded)

  @spec render(tree(), tuple()) ::
          {%{pid() => [{String.t(), pos_integer()}]},
           %{pid() => [{String.t(), pos_integer(), non_neg_integer()}]}, %{pid() => binary()},
           tuple(), non_neg_integer(), %{pid() => [{String.t(), pos_integer()}]},
           %{pid() => binary()}}
  def render(_tree, _names), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec perf_probe() :: :ok | {:error, perf_error(), integer()}
  def perf_probe, do: :erlang.nif_error(:nif_not_loaded)

  @spec perf_map() :: boolean()
  def perf_map, do: :erlang.nif_error(:nif_not_loaded)

  @spec perf_acquire(pos_integer()) :: {:ok, reference()} | {:error, perf_error(), integer()}
  def perf_acquire(_frequency), do: :erlang.nif_error(:nif_not_loaded)

  @spec perf_release(reference()) :: :ok
  def perf_release(_user), do: :erlang.nif_error(:nif_not_loaded)

  @spec perf_stats() :: map()
  def perf_stats, do: :erlang.nif_error(:nif_not_loaded)

  @spec perf_frequency(pos_integer()) :: :ok
  def perf_frequency(_hz), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # Continuous profiling's node-wide samples (c_src/nif/sampling/fo_nodewide.h):
  # {to_ns, frequency, [{cut, frames innermost first}], thinned, dropped}.
  @spec nodewide_take(integer(), pos_integer(), pos_integer()) ::
          {integer(), non_neg_integer(), [{boolean(), [mfa()]}], non_neg_integer(),
           non_neg_integer()}
  def nodewide_take(_from_ns, _keep_hz, _max_samples), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # Tail-based native traces (c_src/nif/sampling/fo_tail.h,
  # FlameOn.Client.Tracing.Tail): the node-wide table of traced requests'
  # time slices.
  @spec tail_enable(pos_integer(), pos_integer(), pos_integer()) ::
          {:ok, pos_integer(), pos_integer()} | {:error, :memory}
  def tail_enable(_max_processes, _max_slices, _max_bytes),
    do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # hint: nil, or the tail state the calling process's flags have (its
  # lingering entry's: taken again, the same state answered); flagless:
  # the request gets no flags, its samples name it (c_src/core/fo_identity.h)
  @spec tail_begin(non_neg_integer(), tuple() | nil, boolean()) ::
          {:tail, non_neg_integer(), non_neg_integer()}
          | :full
          | :disabled
          | :busy
          | :active
          | :unavailable
  def tail_begin(_ask_after_ns, _hint, _flagless), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # whether the calling process's CPU samples can name it (x86-64, OTP 24
  # to 28): tail traces without flags
  @spec tail_flagless() :: boolean()
  def tail_flagless, do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_end(tuple(), false | non_neg_integer()) ::
          :ok | :linger | :untrace | {:slow, non_neg_integer()}
  def tail_end(_state, _keep), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # who sets the flags of a request without flags once it may be slow
  # ({:flame_on_promote, state, pid} messages), nil: nobody
  @spec tail_promoter(pid() | nil) :: :ok
  def tail_promoter(_pid), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # :begin: the request still runs, its flags' callbacks make its slices
  # from now (the caller sets them); :check: whether it still runs so
  @spec tail_promote(tuple(), :begin | :check) :: :ok | :gone
  def tail_promote(_state, _how), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_linger(non_neg_integer(), non_neg_integer()) :: :ok
  def tail_linger(_linger_ms, _max_lingering), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_state(term()) :: :active | :lingering | :claimed | :gone
  def tail_state(_state), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_claim(term()) :: :ok | :busy | :active | :gone
  def tail_claim(_state), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_release(term()) :: :ok | :gone
  def tail_release(_state), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_idle(non_neg_integer()) :: [{pid(), tuple()}]
  def tail_idle(_idle_ns), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # the calling process's request that ended (tail_end/2 said slow)
  # copied with its samples (at most max_samples, with max_frames
  # frames): {what its flags do as tail_end/2 says,
  # kept, records, dropped records, dropped samples, the copy's bytes};
  # its entry lingers or goes
  @spec tail_keep(tuple(), non_neg_integer(), non_neg_integer()) ::
          {:ok | :linger | :untrace, reference(), non_neg_integer(), non_neg_integer(),
           non_neg_integer(), non_neg_integer()}
  def tail_keep(_state, _max_samples, _max_frames), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  # a kept request's copy (tail_keep/3) into a new CPU-sampled session,
  # which it stops; finish/2 then gives its tree
  @spec tail_replay(session(), reference()) :: :ok
  def tail_replay(_session, _kept), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_owners() :: [{pid(), tuple()}]
  def tail_owners, do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec tail_stats() :: map()
  def tail_stats, do: :erlang.nif_error(:nif_not_loaded)

  @spec next_new(session(), pid(), [pid()]) :: reference()
  def next_new(_session, _owner, _excluded), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec next_cancel(reference()) :: :cancelled | :fired
  def next_cancel(_gate), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec next_state(reference()) :: :armed | :cancelled | {:fired | :done, pid()}
  def next_state(_gate), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec enabled(atom(), session() | non_neg_integer(), pid() | port() | term()) ::
          :trace | :discard | :remove
  def enabled(_tag, _state, _tracee), do: :erlang.nif_error(:nif_not_loaded)

  @doc false
  @spec trace(atom(), session() | non_neg_integer(), term(), term(), map()) :: :ok
  def trace(_tag, _state, _tracee, _term, _opts), do: :erlang.nif_error(:nif_not_loaded)
end
