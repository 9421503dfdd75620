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
  NIF (`FlameOn.Client.Node.Gates` owns it). Processes calling other
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
  the call itself to the session (nothing of the process ran yet), and at
  the call's return or exception it stops the session in the process's own
  context, before the process runs on in its caller. Then the pattern is
  cleared and the process's trace flags are turned off: the node is as it
  was, also on timeout (the gate is closed atomically: a call racing the
  timeout is either captured whole or not at all) and when the waiting
  process dies (`FlameOn.Client.Node.Gates` monitors it).

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
  `FlameOn.Client.Node.Breaker`.

  ## Cost

  In mode `:sample` (the default) nothing but the one function's pattern
  is set while waiting; during the call only the captured process is
  sampled. In mode `:nif` the exact stacks of the call need call patterns
  on every function **from the call's entry**, so they are set when the
  capture starts waiting (as for `FlameOn.Client.profile/2`, every process
  of the node pays a breakpoint check per call while they are set): use it
  where that is acceptable.

  While a `:sample` capture waits, the node's `backtrace_depth` is raised
  (as while any sample trace runs, see `FlameOn.Client.Node.Patterns`): the
  first sample comes right at the call.

  **Limitation (one tracer per process).** Captures work in the legacy
  trace session on every release (`FlameOn.Client.Node.Gates`),
  OTP 27 included, unlike FlameOn's other traces there. A process that
  already has a tracer in the legacy session when it makes the call
  (another tool's trace of that process) gets the capture's tracer for the
  call: the other trace loses the call's events.

  With `cross_process: true` the captured process keeps
  its seq_trace token after the call until its next receive of a message
  without one (no process can clear another's token; it costs nothing once
  no cross-process trace runs).
  """

  alias FlameOn.Client.Node.Breaker
  alias FlameOn.Client.Capture
  alias FlameOn.Client.Core.Native
  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Sampling.Sampler
  alias FlameOn.Client.Shipper
  alias FlameOn.Client.Owners.CrossProcess
  alias FlameOn.Client.TraceStore
  alias FlameOn.Client.Tracing
  alias FlameOn.Client.Capture.Sample
  alias FlameOn.Client.Node.Gates
  alias FlameOn.Client.NextCall.Stacks

  @own_keys [:timeout, :shipper, :store]
  @max_timeout 4_294_967_295
  # How long a claimed gate's message may take (it is sent right after the
  # claim, in the same VM call): only a broken node takes longer.
  @fired_grace_ms 5_000
  @ctx_key {__MODULE__, :capture}

  # as FlameOn.Client.Capture.Nif / .Sample / .Graph
  @nif_flags [:call, :return_to, :running, :arity]
  @sample_flags [:running]
  @graph_flags [:send, :procs]

  @doc "See `FlameOn.Client.capture_next/2` and the module documentation."
  @spec capture(mfa(), keyword()) :: {:ok, Profile.t()} | {:error, term()}
  def capture(mfa, opts \\ [])

  def capture(mfa, opts) when is_list(opts) do
    mfa = mfa!(mfa)
    {own, profile_opts} = Keyword.split(opts, @own_keys)
    timeout = timeout!(Keyword.get(own, :timeout, 30_000))
    store? = store!(Keyword.get(own, :store, true))
    shippers = Shipper.normalize!(Keyword.get(own, :shipper))

    opts =
      profile_opts
      |> Keyword.put_new(:name, Profile.frame_name(mfa))
      |> Keyword.put_new_lazy(:mode, &Tracing.default_mode/0)
      |> FlameOn.Client.options!()

    opts = %{opts | mode: if(opts.mode == :process, do: :nif, else: opts.mode)}

    with :ok <- Breaker.check() do
      with {:ok, profile} <- run(mfa, opts, timeout) do
        if store?, do: TraceStore.put(profile)
        if shippers != [], do: Shipper.ship_all(profile, shippers)
        {:ok, profile}
      end
    end
  end

  def capture(_mfa, opts) do
    raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
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
  def parse(text) when is_binary(text) do
    text = text |> String.trim() |> String.trim_leading("&")

    with :ok <- short(text),
         {:ok, name, arity} <- split_arity(text),
         {:ok, module, function} <- split_name(name),
         {:ok, module} <- module_atom(module),
         :ok <- loaded(module),
         {:ok, function} <- function_atom(module, function, arity),
         mfa = {module, function, arity},
         :ok <- check(mfa) do
      {:ok, mfa}
    end
  end

  @doc """
  Checks that `mfa` can be captured: `:ok`, or `{:error, message}` saying
  why not (a module that cannot be loaded, a function it does not define,
  an arity out of 0..255).
  """
  @spec check(term()) :: :ok | {:error, String.t()}
  def check({module, function, arity} = mfa)
      when is_atom(module) and is_atom(function) and is_integer(arity) do
    cond do
      arity not in 0..255 ->
        {:error, "the arity must be an integer from 0 to 255, got: #{arity}"}

      (loaded = loaded(module)) != :ok ->
        loaded

      not defines?(module, function, arity) ->
        {:error, "#{inspect(module)} does not define #{Profile.frame_name(mfa)}"}

      true ->
        :ok
    end
  end

  def check(other),
    do: {:error, "expected {module, function, arity}, got: #{inspect(other, limit: 10)}"}

  defp mfa!(mfa) do
    case check(mfa) do
      :ok -> mfa
      {:error, message} -> raise ArgumentError, message
    end
  end

  defp loaded(module) do
    case Code.ensure_loaded(module) do
      {:module, ^module} -> :ok
      {:error, reason} -> {:error, "module #{inspect(module)} is not available (#{reason})"}
    end
  end

  defp defines?(module, function, arity) do
    function_exported?(module, function, arity) or
      {function, arity} in module.module_info(:functions)
  end

  # --- parsing ------------------------------------------------------------------

  @max_text 300

  defp short(text) do
    cond do
      text == "" -> {:error, "give a function as Module.fun/arity (or module:fun/arity)"}
      byte_size(text) > @max_text -> {:error, "the function is longer than #{@max_text} bytes"}
      true -> :ok
    end
  end

  defp split_arity(text) do
    with [name, digits] <- split_last(text, "/"),
         {arity, ""} when arity in 0..255 <- Integer.parse(digits) do
      {:ok, name, arity}
    else
      {arity, ""} -> {:error, "the arity must be an integer from 0 to 255, got: #{arity}"}
      _ -> {:error, "expected Module.fun/arity or module:fun/arity, got: #{inspect(text)}"}
    end
  end

  defp split_last(text, sep) do
    case :binary.matches(text, sep) do
      [] ->
        [text]

      matches ->
        {at, _} = List.last(matches)
        [binary_part(text, 0, at), binary_part(text, at + 1, byte_size(text) - at - 1)]
    end
  end

  # Erlang: mod:fun, 'Quoted.Mod':'fun'. Elixir: Alias.Mod.fun, :mod.fun.
  defp split_name("'" <> rest) do
    case String.split(rest, "':", parts: 2) do
      [module, function] when module != "" -> {:ok, {:erlang, module}, unquote_atom(function)}
      _ -> bad_name("'" <> rest)
    end
  end

  defp split_name(":" <> rest) do
    case split_last(rest, ".") do
      [module, function] when module != "" and function != "" ->
        {:ok, {:erlang, module}, function}

      _ ->
        bad_name(":" <> rest)
    end
  end

  defp split_name(name) do
    cond do
      String.contains?(name, ":") ->
        case String.split(name, ":", parts: 2) do
          [module, function] when module != "" and function != "" ->
            {:ok, {:erlang, module}, unquote_atom(function)}

          _ ->
            bad_name(name)
        end

      true ->
        case split_last(name, ".") do
          [module, function] when module != "" and function != "" ->
            {:ok, {:elixir, module}, function}

          _ ->
            bad_name(name)
        end
    end
  end

  defp bad_name(name),
    do: {:error, "expected Module.fun/arity or module:fun/arity, got: #{inspect(name <> "/…")}"}

  defp unquote_atom("'" <> rest), do: String.trim_trailing(rest, "'")
  defp unquote_atom(name), do: name

  defp module_atom({:elixir, name}) do
    if name =~ ~r/^[A-Z][A-Za-z0-9_]*(\.[A-Z][A-Za-z0-9_]*)*$/,
      do: existing_module("Elixir." <> name, name),
      else: {:error, "#{inspect(name)} is not a module name"}
  end

  defp module_atom({:erlang, name}), do: existing_module(name, name)

  # An atom from text only when the module exists: loaded (the atom
  # exists) or in a .beam file on the code path.
  defp existing_module(atom_text, shown) do
    {:ok, String.to_existing_atom(atom_text)}
  rescue
    ArgumentError ->
      if :code.where_is_file(String.to_charlist(atom_text <> ".beam")) != :non_existing,
        do: {:ok, String.to_atom(atom_text)},
        else: {:error, "no module named #{shown} is loaded or can be loaded"}
  end

  # A loaded module's function names are atoms already.
  defp function_atom(module, function, arity) do
    atom = String.to_existing_atom(function)

    if defines?(module, atom, arity),
      do: {:ok, atom},
      else: no_function(module, function, arity)
  rescue
    ArgumentError -> no_function(module, function, arity)
  end

  defp no_function(module, function, arity),
    do: {:error, "#{inspect(module)} does not define #{function}/#{arity}"}

  defp timeout!(:infinity), do: :infinity
  defp timeout!(ms) when is_integer(ms) and ms > 0 and ms <= @max_timeout, do: ms

  defp timeout!(other) do
    raise ArgumentError,
          "expected :timeout to be a positive integer of milliseconds (at most " <>
            "#{@max_timeout}) or :infinity, got: #{inspect(other)}"
  end

  defp store!(flag) when is_boolean(flag), do: flag

  defp store!(other),
    do: raise(ArgumentError, "expected :store to be a boolean, got: #{inspect(other)}")

  # --- the capture ----------------------------------------------------------------

  # Everything the capture holds lives in the process dictionary while it
  # runs, so the cleanup finds it whatever step failed.
  defp run(mfa, opts, timeout) do
    hold(%{mfa: mfa, opts: opts})
    # Waiting costs nothing at any priority; once the call fires, what
    # this process does first (start the sampler) decides how soon the
    # call is sampled, on a node as busy as the call may be.
    priority = Process.flag(:priority, :high)

    try do
      ctx = start(mfa, opts, timeout)

      case Gates.arm(mfa, ctx.gate, match_spec(ctx), cleanup(ctx)) do
        :ok -> await(ctx, timeout)
        {:error, _} = error -> error
      end
    after
      release(Process.delete(@ctx_key))
      Process.flag(:priority, priority)
    end
  end

  defp hold(ctx) do
    Process.put(@ctx_key, ctx)
    ctx
  end

  defp update(changes), do: hold(Map.merge(Process.get(@ctx_key), changes))

  defp start(mfa, %{cross_process: true} = opts, timeout) do
    sampler = if opts.mode == :sample, do: sampler_opts(mfa, opts)

    graph_opts = [
      root: nil,
      mode: opts.mode,
      name: opts.name,
      sleep: opts.sleep,
      # GenServer calls only, as before wake-up attribution: following
      # every message would also follow what the gate's caller tells the
      # capture itself (a span of the capture's own process)
      follow: :calls,
      # the graph owner's lifetime runs from now; the call's from its entry
      max_duration_ms: min(opts.max_duration_ms + wait_bound(timeout), @max_timeout),
      limits: Map.take(opts, FlameOn.Client.limit_keys()),
      sampler: sampler && Keyword.delete(sampler, :root),
      # the gate turns the caller's flags on in the legacy session, where
      # its :send flag runs the send pattern
      legacy: true
    ]

    owner =
      case CrossProcess.start(graph_opts) do
        {:ok, owner} -> owner
        {:error, reason} -> Capture.raise_start_error!(reason, "a cross-process capture")
      end

    update(%{graph_owner: owner})

    %{native: native, label: label} =
      case CrossProcess.info(owner) do
        {:ok, info} -> info
        {:error, reason} -> Capture.raise_start_error!(reason, "a cross-process capture")
      end

    if sampler, do: acquire_depth(sampler)
    flags = [{:tracer, Native, :graph} | if(sampler, do: @sample_flags, else: @nif_flags)]
    gate(%{native: native, label: label, flags: flags ++ @graph_flags, sampler_opts: sampler})
  end

  defp start(mfa, %{mode: :sample} = opts, _timeout) do
    native = Capture.new_native!(opts, FlameOn.Client.limit_keys())
    update(%{native: native})
    sampler_opts = sampler_opts(mfa, opts)
    acquire_depth(sampler_opts)

    gate(%{
      native: native,
      label: nil,
      flags: [{:tracer, Native, Native.tracer_state(native)} | @sample_flags],
      sampler_opts: sampler_opts
    })
  end

  defp start(_mfa, %{mode: :nif} = opts, _timeout) do
    native = Capture.new_native!(opts, FlameOn.Client.limit_keys())
    update(%{native: native})

    # Exact stacks from the call's entry need every function's pattern
    # set before the call: taken now, as profile/2 does.
    with {:error, reason} <- Patterns.acquire(nil) do
      Capture.raise_start_error!(reason, "an exact capture")
    end

    update(%{patterns: true})

    gate(%{
      native: native,
      label: nil,
      flags: [{:tracer, Native, Native.tracer_state(native)} | @nif_flags],
      sampler_opts: nil
    })
  end

  # Our own processes never win: the waiting process, the pattern owners,
  # the graph owner.
  defp gate(ctx) do
    excluded =
      [
        self(),
        Process.whereis(Gates),
        Process.whereis(Patterns),
        Process.get(@ctx_key)[:graph_owner]
      ]
      |> Enum.filter(&is_pid/1)

    gate = Native.next_new(ctx.native, self(), excluded)
    update(Map.put(ctx, :gate, gate))
  end

  # Sampled stacks need the node's backtrace_depth raised before the
  # first sample, which comes right at the call: raised now. The sampler's
  # code is loaded now too: loaded on demand (interactive mode) by the code
  # server, on a node as busy as the call may be, the first sample came
  # after the call (measured: 80-260 ms with four busy processes).
  defp acquire_depth(sampler_opts) do
    {:module, _} = Code.ensure_loaded(Sampler)
    {:module, _} = Code.ensure_loaded(FlameOn.Client.Sampling.Budget)
    :ok = Patterns.acquire_depth(sampler_opts[:depth])
    update(%{depth: true})
  end

  defp sampler_opts(mfa, opts), do: Keyword.put(Sample.sampler_opts(opts), :root, mfa)

  defp wait_bound(:infinity), do: @max_timeout
  defp wait_bound(timeout), do: timeout + @fired_grace_ms

  defp cleanup(ctx) do
    %{native: ctx.native, flags: ctx.flags, graph_owner: Process.get(@ctx_key)[:graph_owner]}
  end

  # The match spec runs only for the process that claimed the gate: it
  # notes the caller, gives a cross-process capture's root its token, turns
  # tracing on and asks for the return (or exception) of this call.
  defp match_spec(%{label: label, flags: flags}) do
    tokens =
      if label,
        do: [
          {:set_seq_token, :label, label},
          {:set_seq_token, :send, true},
          {:set_seq_token, :receive, true}
        ],
        else: []

    [
      {:_, [],
       [{:message, {:caller}}] ++
         tokens ++ [{:trace, [], {:const, flags}}, {:exception_trace}]}
    ]
  end

  defp await(%{gate: gate} = ctx, timeout) do
    receive do
      {:flame_on_next, ^gate, :fired, winner, caller, started_ts} ->
        follow(ctx, winner, caller, started_ts)
    after
      timeout ->
        case Native.next_cancel(gate) do
          :cancelled ->
            {:error, :timeout}

          # claimed right at the deadline: the call is captured
          :fired ->
            receive do
              {:flame_on_next, ^gate, :fired, winner, caller, started_ts} ->
                follow(ctx, winner, caller, started_ts)
            after
              @fired_grace_ms -> {:error, :timeout}
            end
        end
    end
  end

  defp follow(%{gate: gate, native: native, opts: opts} = ctx, winner, caller, started_ts) do
    # The gate's messages are sent from the captured process, which holds
    # the trace's seq_trace token by then (cross_process): taking them
    # gave it to this process too. Nothing done here is the trace's.
    :seq_trace.set_token([])
    update(%{winner: winner})
    ctx = start_sampler(ctx, winner)
    ref = Process.monitor(winner)
    # the gate lets nobody else in any more: the pattern can go now
    :ok = Gates.disarm(ctx.mfa)

    {end_ts, lifetime_exceeded} =
      receive do
        {:flame_on_next, ^gate, kind, end_ts, _outcome, _} when kind in [:returned, :raised] ->
          {end_ts, false}

        {:DOWN, ^ref, :process, ^winner, _reason} ->
          {Native.stop(native), false}
      after
        opts.max_duration_ms -> {Native.stop(native), true}
      end

    :seq_trace.set_token([])
    Process.demonitor(ref, [:flush])
    Gates.untrace(winner, ctx.flags)

    with {:ok, profile} <- finish(ctx, winner, started_ts, end_ts) do
      caller = if match?({_, _, _}, caller), do: caller
      profile = Stacks.rewrite(profile, winner, ctx.mfa, caller)
      {:ok, %{profile | stats: Map.put(profile.stats, :lifetime_exceeded, lifetime_exceeded)}}
    end
  end

  defp start_sampler(%{sampler_opts: nil} = ctx, _winner),
    do: Map.merge(ctx, Process.get(@ctx_key))

  defp start_sampler(%{sampler_opts: sampler_opts, native: native}, winner) do
    sampler = Sampler.start(native, winner, sampler_opts)
    update(%{sampler: sampler})
  end

  defp finish(%{graph_owner: owner} = ctx, winner, started_ts, end_ts) when is_pid(owner) do
    root_sampled = stop_sampler(ctx)
    update(%{graph_owner: nil})

    CrossProcess.finish(owner,
      started_ts: started_ts,
      end_ts: end_ts,
      root: winner,
      root_sampled: root_sampled
    )
  end

  defp finish(%{native: native, opts: opts} = ctx, winner, started_ts, end_ts) do
    sampled = stop_sampler(ctx)

    if ctx[:patterns] do
      Patterns.release()
      update(%{patterns: false})
    end

    {raw, stats} = Native.finish(native, :stop)
    stats = Map.put(stats, :unprocessed_events, 0)

    fields = [
      trace_id: System.unique_integer([:positive, :monotonic]),
      name: opts.name,
      mode: opts.mode,
      pid: winner,
      started_at: System.convert_time_unit(started_ts, :native, :microsecond),
      duration_us: System.convert_time_unit(end_ts - started_ts, :native, :microsecond)
    ]

    case sampled do
      nil ->
        {:ok, Profile.build(raw, stats, fields)}

      sampled ->
        summary = Sampler.summarize([{winner, sampled}])
        profile = Profile.build(raw, Map.merge(stats, summary.stats), fields)
        {:ok, %{profile | metrics: summary.metrics}}
    end
  end

  defp stop_sampler(ctx) do
    case ctx[:sampler] do
      nil ->
        nil

      sampler ->
        sampled = Sampler.stop(sampler)
        Patterns.release_depth()
        update(%{sampler: nil, depth: false})
        sampled
    end
  end

  # Gives back whatever the capture still holds (it ended early, or
  # failed): pattern, sampler, backtrace depth, call patterns, graph owner,
  # session, the captured process's flags.
  defp release(nil), do: :ok

  defp release(ctx) do
    Gates.done()
    if ctx[:gate], do: Native.next_cancel(ctx.gate)
    if ctx[:native], do: Native.stop(ctx.native)
    if ctx[:sampler], do: Sampler.stop(ctx.sampler)
    if ctx[:depth], do: Patterns.release_depth()
    if ctx[:patterns], do: Patterns.release()
    if ctx[:winner] && ctx[:flags], do: Gates.untrace(ctx.winner, ctx.flags)

    case ctx[:graph_owner] do
      owner when is_pid(owner) -> Process.exit(owner, :shutdown)
      _ -> :ok
    end

    :ok
  end
end
