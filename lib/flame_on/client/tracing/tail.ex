defmodule FlameOn.Client.Tracing.Tail do
  @moduledoc false
  # trace/3 with a threshold (tail-based tracing: trace every request, keep
  # the slow ones). Two paths, `profile.mode` says which ran:
  #
  #   * shared (mode :native where the VM samples natively, one process):
  #     the node's CPU sampler keeps running while tail traces come
  #     (FlameOn.Client.Node.TailHold); a request takes an entry of the
  #     NIF's slice table (c_src/nif/sampling/fo_tail.h) and, by default
  #     (TailHold's `attribution: :samples`, where samples can name
  #     processes), no trace flags: the CPU samples name the process they
  #     caught (c_src/core/fo_identity.h), and a kept request's time slices
  #     are cut from the samples that named it (its waits are the time
  #     between them, hung where reads found it); at half its threshold
  #     TailHold sets its flags (promote/2) and it goes on as below. With
  #     `attribution: :flags` (or where samples cannot name processes) it
  #     gets from the start the `running`, `garbage_collection` and
  #     `receive` flags, whose callbacks note the time slices it runs in,
  #     its collections and whether a message came. A fast request frees
  #     its entry and builds nothing; a slow one is copied as it ends (its
  #     slices, where it waited and the samples of its slices, named:
  #     Native.tail_keep/3, the sampler's buffers wrap) and becomes an
  #     ordinary profile (mode :native_tail) when shipped or read: the copy
  #     replayed into a new CPU-sampled core session (a
  #     FlameOn.Client.Profile.Pending until then; a copy past @eager_bytes
  #     is folded at once). No session, no sampler call, no helper per
  #     request; only past half its threshold are its stops
  #     asked about (the helper reads where it waits, as in mode :native).
  #     Its flags linger after it (TailHold's linger_ms), its entry idle:
  #     the process's next request takes both again, so a process making
  #     many requests pays no erlang:trace/3 call per request (each takes
  #     the node's code modification permission).
  #   * own (every other case, and when the table is full): the steps of
  #     FlameOn.Client.profile/2, deciding on the threshold as soon as the
  #     traced work is over: a fast run gives its capture back
  #     (FlameOn.Client.Capture.discard/1: tables freed, no tree encoded,
  #     no profile built).
  #
  # What a request traced and thrown away costs each way is in
  # bench/tail.exs.

  alias FlameOn.Client.{Capture, ProcessName}
  alias FlameOn.Client.Profile.Pending
  alias FlameOn.Client.Capture.Common
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.{Breaker, PerfSampler, TailHold, TailNote, TraceBackend}

  require Logger

  @flags TailNote.flags()

  # A kept request's copy of at most this many bytes is kept as it is
  # until read (kept/3): about 6 500 time slices, 30 ms of CPU (a
  # CPU-bound process is scheduled out every few µs), against a few
  # kilobytes for its folded tree.
  @eager_bytes 256 * 1024

  # The options replayed/1 makes a core session with (Capture.Common.new_core/2).
  @core_keys [:mode, :alloc, :frequency | FlameOn.Client.Options.limit_keys()]

  # The root of a tail trace's stacks (both paths): call/1's frame.
  @root {__MODULE__, :call, 1}

  @doc """
  Runs `fun` traced as `name` on the shared path where it can run (see
  `start/4`): `{:ran, outcome, pending}` (`outcome` `{:ok, result}` or
  `{kind, reason, stacktrace}`, `fun`'s exception caught; `pending` the
  trace's `FlameOn.Client.Profile.Pending`, or nil under the threshold or
  when its replay failed: logged), else
  `:unavailable` (`fun` has not run). No wrapper, no process dictionary
  entry: what `trace/3` pays per request on this path.
  """
  @spec shared((() -> term()), String.t(), map(), pos_integer(), tuple() | nil | :unknown) ::
          {:ran, {:ok, term()} | {atom(), term(), list()}, Pending.t() | nil}
          | :unavailable
  def shared(fun, name, trace_capture, threshold_ms, lingering \\ :unknown) do
    case start(trace_capture, @root, threshold_ms, name, lingering) do
      {:ok, tail} ->
        outcome = call(fun)

        pending =
          try do
            stop(tail, threshold_ms)
          catch
            kind, reason ->
              Logger.error(
                "FlameOn: the trace of #{inspect(name)} failed after it ran:\n" <>
                  Exception.format(kind, reason, __STACKTRACE__)
              )

              nil
          end

        {:ran, outcome, pending}

      :unavailable ->
        :unavailable
    end
  end

  @doc """
  Runs `fun` with a trace of its own (checked `profile/2` options
  `opts`), its profile built only if it ran `threshold_ms` or more:
  `{result, profile | nil}` (`profile` nil under the threshold). As
  `profile/2`, it raises when the trace cannot start (`fun` has not run
  then), and raises `fun`'s exception again once the trace is given back.
  """
  @spec own((() -> result), map(), pos_integer()) :: {result, FlameOn.Client.Profile.t() | nil}
        when result: term()
  def own(fun, opts, threshold_ms) do
    capture = Capture.start({:self, @root}, opts)
    started_ts = :erlang.monotonic_time()
    capture = Capture.begin(capture, self())
    TraceBackend.set_flags(self(), capture.flags)
    outcome = call(fun)

    end_ts = Capture.stop(capture)
    Capture.detach(capture)

    kept =
      if slow?(started_ts, end_ts, threshold_ms),
        do: Capture.finish(capture, started_ts, end_ts),
        else: Capture.discard(capture)

    Capture.result(capture, outcome, kept)
  end

  @typedoc """
  A running shared tail trace of the calling process (`start/2`); `handle`
  nil: it has no flags (TailHold's `:attribution`).
  """
  @type tail :: %{
          state: tuple(),
          handle: TraceBackend.t() | nil,
          opts: map(),
          name: String.t() | nil,
          root: mfa() | nil
        }

  @doc """
  Starts a shared tail trace of the calling process with checked capture
  options `opts` (their mode resolved; named `name`, or `opts.name`
  when nil) where it can run
  (mode `:native`, one process, native sampling available, an entry free
  in the table): `{:ok, tail}`, its flag on from here; else
  `:unavailable`. `root`: the function its stacks start at, or nil.
  Once it ran half of `threshold_ms` it may be slow: from then on, where
  it stops is asked about (its waits hang where they were, if the stack
  read there reaches `root`: not without a root). `lingering`: what
  `FlameOn.Client.Capture.self_state/0` read of the calling process's
  lingering flags, or `:unknown` (read here).
  """
  @spec start(map(), mfa() | nil, pos_integer(), String.t() | nil, tuple() | nil | :unknown) ::
          {:ok, tail()} | :unavailable
  def start(opts, root, threshold_ms, name \\ nil, lingering \\ :unknown) do
    case route(opts) do
      :flagless -> start_flagless(opts, root, threshold_ms, name, lingering)
      :flags -> start_flags(opts, root, threshold_ms, name, lingering)
      false -> :unavailable
    end
  end

  # Flags from an earlier request with them linger (TailHold took its
  # requests with flags for a while): with them again, at no
  # erlang:trace/3 call, rather than beside them.
  defp start_flagless(opts, root, threshold_ms, name, :unknown),
    do: start_flagless(opts, root, threshold_ms, name, TailHold.lingering_self())

  defp start_flagless(opts, root, threshold_ms, name, last) when is_tuple(last) do
    if Process.info(self(), :trace) == {:trace, 0},
      do: start_without_flags(opts, root, threshold_ms, name, last),
      else: start_flags(opts, root, threshold_ms, name, last)
  end

  defp start_flagless(opts, root, threshold_ms, name, nil),
    do: start_without_flags(opts, root, threshold_ms, name, nil)

  # No flags: an entry of the table, whose process its samples name (the
  # one of its last request again, if free: the note of it stays).
  # From half its threshold on, it may be slow: TailHold sets its flags
  # (from then on its slices are exact, as with flags from the start),
  # and until they are on the thread helpers read where it waits (every
  # 2 ms, c_src/nif/sampling/fo_tail.h).
  defp start_without_flags(opts, root, threshold_ms, name, last) do
    case Native.tail_begin(half_ns(threshold_ms), last, true) do
      {:tail, _, _} = state ->
        # so a trace nested in it sees it (Capture.Common.self_state/0)
        TailHold.note_flagless_self(state)
        {:ok, %{state: state, handle: nil, opts: opts, name: name, root: root}}

      _ ->
        :unavailable
    end
  end

  defp start_flags(opts, root, threshold_ms, name, lingering) do
    with {:ok, hint, noted?} <- own_flags(lingering),
         {:tail, _, _} = state <- begin(ask_after_ns(root, threshold_ms), hint, true) do
      handle = TraceBackend.legacy({Native, state})
      # the same state: its lingering flags are on still
      if state != hint, do: TraceBackend.trace(handle, self(), true, @flags)
      if state != hint or not noted?, do: TailHold.note_self(state)

      {:ok,
       %{
         state: state,
         handle: handle,
         opts: opts,
         name: name,
         root: root
       }}
    else
      _ -> :unavailable
    end
  end

  @doc """
  Ends the calling process's shared tail trace (its flag off, if still
  on): its `FlameOn.Client.Profile.Pending` (the profile's data,
  `FlameOn.Client.TraceStore.keep/2` builds it when it ships it) when it
  lasted at least `threshold_ms`, else nil (nothing built).
  """
  @spec stop(tail(), non_neg_integer()) :: Pending.t() | nil
  def stop(%{state: state} = tail, threshold_ms) do
    # The NIF times the request (from tail_begin): a fast one ends there,
    # no clock read here. Its last slice ends then, while its flag is
    # still on: turning it off may schedule it out, unseen, and others
    # would run in that slice. As TraceStore.keep/2 decides, in whole
    # microseconds.
    case Native.tail_end(state, ceil(threshold_ms * 1000) * 1000) do
      {:slow, took_ns} ->
        end_ts = :erlang.monotonic_time()
        started_ts = end_ts - System.convert_time_unit(took_ns, :nanosecond, :native)
        # kept unless the breaker is open
        if breaker_closed?(tail) do
          keep_or_untrace(tail, started_ts, end_ts)
        else
          ended(tail, Native.tail_end(state, false))
          nil
        end

      fast ->
        ended(tail, fast)
        nil
    end
  end

  # its flags stay for its next tail trace (TailHold's linger_ms), or go;
  # a trace without flags that got them (TailHold's promote/2): they go
  defp ended(_tail, :linger), do: :ok
  defp ended(tail, :ok), do: untrace(tail)

  defp ended(tail, :untrace) do
    TailNote.remove_flags(self(), tail.state)
    :ok
  end

  # A kept trace whose entry lingers once copied: if the copy fails, the
  # flags go (the entry stays taken until the process exits, as without
  # lingering).
  defp keep_or_untrace(tail, started_ts, end_ts) do
    kept(tail, started_ts, end_ts)
  rescue
    error ->
      if Native.tail_state(tail.state) == :active, do: untrace(tail)

      reraise error, __STACKTRACE__
  end

  # (a copy makes no session: FlameOn.Client.Node.Breaker.check_sessionless/0;
  # one past @eager_bytes is folded at once, in a session that lives only
  # as long as the fold)
  defp breaker_closed?(tail) do
    case Breaker.check_sessionless() do
      :ok ->
        true

      {:error, reason} ->
        Logger.warning(fn ->
          "FlameOn: the slow trace #{inspect(tail.name || tail.opts.name)} is not kept: " <>
            inspect(reason)
        end)

        false
    end
  end

  # A stack read where it stops is kept only if it reaches the root (the
  # node's backtrace_depth, 8 by default, may cut it): without a root,
  # nothing is asked.
  defp ask_after_ns(nil, _threshold_ms), do: 0
  defp ask_after_ns(_root, threshold_ms), do: half_ns(threshold_ms)

  # half the threshold, in ns: from then on a request may be slow
  defp half_ns(threshold_ms), do: div(threshold_ms * 1_000_000, 2)

  # (a trace without flags has none to take off; the note of its entry
  # stays, for its next request)
  defp untrace(%{handle: nil}), do: :ok

  defp untrace(tail) do
    TraceBackend.trace(tail.handle, self(), false, @flags)
    TailHold.forget_self()
  end

  # The calling process's flags in the legacy session: {:ok, state,
  # noted?} with those its last tail trace left lingering (the state they
  # were set with; noted?: TailHold.lingering_self/0 knows it), {:ok, nil,
  # true} without any, :error with another tracer's. The VM is asked (1
  # µs) only where the process's own note and flags do not tell: where it
  # has trace sessions (Capture.traced?/0 looks at ours only), or flags
  # without the note (its dictionary erased).
  defp own_flags(:unknown), do: own_flags(TailHold.lingering_self())

  defp own_flags(lingering) do
    case lingering do
      nil ->
        if not TraceBackend.sessions?() and Process.info(self(), :trace) == {:trace, 0} do
          {:ok, nil, true}
        else
          case :erlang.trace_info(self(), :tracer) do
            {:tracer, []} -> {:ok, nil, true}
            {:tracer, {Native, {:tail, _, _} = state}} -> {:ok, state, false}
            _ -> :error
          end
        end

      state ->
        {:ok, state, true}
    end
  end

  # Its lingering flags being removed by another process (TailHold's
  # sweep): once they are off, without them.
  defp begin(ask_after_ns, hint, wait?) do
    case Native.tail_begin(ask_after_ns, hint, false) do
      :busy when wait? ->
        if TailHold.await(hint, 1_000), do: begin(ask_after_ns, nil, false), else: :busy

      other ->
        other
    end
  end

  # (`config :flame_on_client, tail: [shared: false]` keeps the hold off)
  defp route(%{mode: :native, cross_process: false} = opts),
    do: PerfSampler.available?() and TailHold.route(opts.frequency)

  defp route(_opts), do: false

  @doc false
  # The root frame of a tail trace's stacks: `fun` runs in it.
  @spec call((() -> term())) :: {:ok, term()} | {atom(), term(), list()}
  def call(fun) do
    {:ok, fun.()}
  catch
    kind, reason -> {kind, reason, __STACKTRACE__}
  end

  # A slow request's slices, with the samples taken in them, copied
  # (Native.tail_keep/3: the samples are the sampler's until its buffers
  # wrap): a profile's data, replayed into a core session and built only
  # when shipped or read (replayed/1).
  defp kept(%{opts: opts, state: state} = tail, started_ts, end_ts) do
    {ended, kept, slices, dropped, samples_dropped, bytes} =
      Native.tail_keep(state, opts.max_samples, opts.max_stack_frames)

    ended(tail, ended)

    # A tuple, copied into the trace store with the rest: what replayed/1
    # makes its profile from. Its process's name read now (while it runs)
    # and made then.
    copy =
      {kept, core_limits(opts), tail.root, {self(), ProcessName.self_info()},
       {slices, dropped, samples_dropped, if(tail.handle, do: :flags, else: :samples)}}

    fields = Common.fields(opts, self(), started_ts, end_ts, mode: :native_tail, name: tail.name)

    # A copy past @eager_bytes is folded now: its tree holds far less,
    # and such a request is rare.
    if bytes > @eager_bytes do
      {tree, stats, names} = replayed(copy)
      %Pending{tree: tree, stats: stats, fields: fields, names: names}
    else
      %Pending{
        make: {__MODULE__, :replayed, [copy]},
        bytes: bytes,
        tree: nil,
        stats: nil,
        fields: fields,
        names: %{}
      }
    end
  end

  @doc false
  # A kept request's copy (kept/3) as its tree, counters and process
  # name: replayed into a new CPU-sampled core session
  # (FlameOn.Client.Profile.Pending.build/1).
  @spec replayed(tuple()) :: {Native.tree(), map(), ProcessName.names()}
  def replayed({kept, limits, root, {pid, info}, {slices, dropped, samples_dropped, attribution}}) do
    opts = core_opts(limits)
    # waits told from time it could run as in mode :native (the replay
    # gives a receive event where a slice's flags say one came)
    core_options = Capture.Native.core_options(opts, root)
    {:ok, core} = Common.new_core(opts, core_options)
    :ok = Native.tail_replay(core, kept)
    {raw, stats} = Native.finish(core, :stop)

    stats =
      Map.merge(stats, %{
        unprocessed_events: 0,
        tail_slices: slices,
        tail_attribution: attribution,
        tail_dropped_slices: dropped,
        tail_dropped_samples: samples_dropped,
        tail_truncated: dropped > 0 or samples_dropped > 0
      })

    {raw, stats, %{pid => ProcessName.from_info(info)}}
  end

  # What replayed/1 makes its core session with (Capture.Common.new_core/2):
  # the values of @core_keys, a tuple (a kept request's copy is copied
  # into the trace store: a tuple of values is half a map of them).
  defp core_limits(opts), do: @core_keys |> Enum.map(&Map.get(opts, &1)) |> List.to_tuple()

  defp core_opts(limits),
    do:
      @core_keys
      |> Enum.zip(Tuple.to_list(limits))
      |> Enum.reject(&is_nil(elem(&1, 1)))
      |> Map.new()

  # As FlameOn.Client.TraceStore.keep/2 decides (on the profile's
  # duration_us, in whole microseconds).
  defp slow?(started_ts, end_ts, threshold_ms),
    do:
      System.convert_time_unit(end_ts - started_ts, :native, :microsecond) >= threshold_ms * 1000
end
