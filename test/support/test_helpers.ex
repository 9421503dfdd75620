defmodule FlameOn.Client.TestHelpers do
  @moduledoc false
  import ExUnit.Assertions

  alias FlameOn.Client.Node.Patterns
  alias FlameOn.Client.Node.TraceBackend

  # MFAs whose trace patterns must be off once no trace runs.
  @probe_mfas [
    {FlameOn.Client, :profile, 2},
    {:lists, :reverse, 1},
    {Enum, :map, 2},
    {FlameOn.Client.Test.Workloads, :fib, 1}
  ]

  @reserved_frames [
    :process,
    :sleep,
    :depth_cap,
    :node_cap,
    :waiting,
    :gc,
    :attributed,
    :undefined
  ]

  @doc """
  The stacks of a `FlameOn.Client.Core.Native.finish/2` tree, one entry per
  node with time or samples: `%{pid => [{frames_leaf_first, ns}]}`, or
  `{frames, ns, samples, weight}` for a node samples landed on.
  """
  def raw_stacks({frames, pids, nodes, _max_bytes}) do
    rows =
      for <<parent::32-native, frame::32-native, proc::32-native, ns::64-native,
            samples::64-native, weight::64-native <- nodes>>,
          do: {parent, frame, proc, ns, samples, weight}

    {paths, _} =
      Enum.map_reduce(rows, %{}, fn {parent, frame, _proc, _ns, _s, _w}, paths ->
        id = map_size(paths)

        path =
          if parent == 0xFFFFFFFF, do: [], else: [elem(frames, frame) | Map.fetch!(paths, parent)]

        {path, Map.put(paths, id, path)}
      end)

    rows
    |> Enum.zip(paths)
    |> Enum.filter(fn {{_, _, _, ns, samples, _}, _} -> ns > 0 or samples > 0 end)
    |> Enum.group_by(
      fn {{_, _, proc, _, _, _}, _} -> elem(pids, proc) end,
      fn
        {{_, _, _, ns, 0, _}, path} -> {path, ns}
        {{_, _, _, ns, samples, weight}, path} -> {path, ns, samples, weight}
      end
    )
  end

  @doc """
  A `FlameOn.Client.Core.Native.finish/2` tree from stacks written as
  `%{pid => [{frames_leaf_first, ns}]}` (or `{frames, ns, samples,
  weight}`), for `FlameOn.Client.Profile.build/4` tests.
  """
  def raw_tree(stacks, max_stack_bytes \\ 64 * 1024 * 1024) do
    pids = Map.keys(stacks)

    {frames, ids} =
      stacks
      |> Enum.flat_map(fn {_pid, entries} -> Enum.flat_map(entries, &elem(&1, 0)) end)
      |> Enum.reject(&(&1 in @reserved_frames))
      |> Enum.uniq()
      |> then(fn real ->
        {@reserved_frames ++ real, Map.new(Enum.with_index(@reserved_frames ++ real))}
      end)

    {rows, _} =
      pids
      |> Enum.with_index()
      |> Enum.reduce({[], %{}}, fn {pid, proc}, acc ->
        Enum.reduce(Map.fetch!(stacks, pid), add_row(acc, {proc, []}, nil), fn entry, acc ->
          {path, ns, samples, weight} =
            case entry do
              {path, ns} -> {path, ns, 0, 0}
              full -> full
            end

          path = Enum.reverse(path)
          acc = add_path(acc, proc, path)
          bump(acc, {proc, path}, ns, samples, weight)
        end)
      end)

    rows = Enum.reverse(rows)

    nodes =
      for {{proc, path}, parent, ns, samples, weight} <- rows, into: <<>> do
        frame = if path == [], do: 0, else: Map.fetch!(ids, List.last(path))

        <<parent || 0xFFFFFFFF::32-native, frame::32-native, proc::32-native, ns::64-native,
          samples::64-native, weight::64-native>>
      end

    {List.to_tuple(frames), List.to_tuple(pids), nodes, max_stack_bytes}
  end

  # rows: newest first, {key, parent_id, ns, samples, weight}; index: key => id
  defp add_row({rows, index} = acc, key, parent) do
    if Map.has_key?(index, key),
      do: acc,
      else: {[{key, parent, 0, 0, 0} | rows], Map.put(index, key, map_size(index))}
  end

  defp add_path(acc, proc, path) do
    Enum.reduce(1..length(path)//1, acc, fn n, {_rows, index} = acc ->
      prefix = Enum.take(path, n)
      add_row(acc, {proc, prefix}, Map.fetch!(index, {proc, Enum.take(path, n - 1)}))
    end)
  end

  defp bump({rows, index}, key, ns, samples, weight) do
    rows =
      Enum.map(rows, fn
        {^key, parent, a, b, c} -> {key, parent, a + ns, b + samples, c + weight}
        row -> row
      end)

    {rows, index}
  end

  @doc """
  What the tracer module's enabled/3 answers a process whose trace is
  gone: `:remove`, or `:discard` before erts 13.2 (OTP 25.3), where the
  VM could crash on a removal it did itself (erlang/otp#6448).
  """
  def tracer_gone do
    [major, minor | _] =
      :erlang.system_info(:version)
      |> to_string()
      |> String.split(".")
      |> Enum.map(&String.to_integer/1)

    if {major, minor} >= {13, 2}, do: :remove, else: :discard
  end

  @doc """
  Asserts that no trace is left on the node: no process has trace flags, no
  call pattern is set (on a few probe MFAs and for modules loaded later), the
  pattern owner has no users and no trace session runs. Cleanup after a
  crash is asynchronous (the pattern owner handles a 'DOWN'), so this polls
  for up to `timeout` ms before failing.
  """
  def assert_node_clean(timeout \\ 2_000) do
    deadline = System.monotonic_time(:millisecond) + timeout
    problems = wait_clean(deadline)
    assert problems == [], "the node is not clean: #{inspect(problems)}"
  end

  defp wait_clean(deadline), do: wait_for(&leftovers/0, deadline)

  @doc """
  Starts the application if a test (or the supervisor's restart limit)
  stopped it, and waits until its processes answer: after a kill of the
  tree the application controller notices a moment later, and until then
  the dying processes are still registered.
  """
  def ensure_app_started(timeout \\ 5_000) do
    deadline = System.monotonic_time(:millisecond) + timeout

    ready? = fn ->
      {:ok, _} = Application.ensure_all_started(:flame_on_client)

      try do
        Patterns.users()
        DynamicSupervisor.count_children(FlameOn.Client.OwnerSupervisor)
        true
      catch
        :exit, _ -> false
      end
    end

    Enum.find(Stream.repeatedly(fn -> ready?.() || (Process.sleep(10) && false) end), fn ok ->
      ok or System.monotonic_time(:millisecond) > deadline
    end)

    assert ready?.(), "the application did not come back within #{timeout} ms"
  end

  @doc "What is left of traces on the node, as a list of findings."
  def leftovers do
    users = Patterns.users()
    sessions = DynamicSupervisor.count_children(FlameOn.Client.OwnerSupervisor).active

    trace_leftovers() ++
      if(users > 0, do: [{:pattern_users, users}], else: []) ++
      if sessions > 0, do: [{:sessions, sessions}], else: []
  end

  @doc """
  Like `assert_node_clean/1` but asks the node only, not our processes (so
  it works while the application is stopped or restarting).
  """
  def assert_no_trace_leftovers(timeout \\ 1_000) do
    deadline = System.monotonic_time(:millisecond) + timeout
    problems = wait_for(&trace_leftovers/0, deadline)
    assert problems == [], "trace leftovers on the node: #{inspect(problems)}"
  end

  defp wait_for(fun, deadline) do
    case fun.() do
      [] ->
        []

      problems ->
        if System.monotonic_time(:millisecond) >= deadline do
          problems
        else
          Process.sleep(10)
          wait_for(fun, deadline)
        end
    end
  end

  @doc """
  Trace sessions of ours (OTP 27+), and in the legacy session trace flags,
  call patterns, the send pattern, and the seq_trace system tracer left on
  the node, as a list of findings.
  """
  def trace_leftovers do
    sessions = for session <- TraceBackend.our_sessions(), do: {:trace_session, session}

    traced_processes =
      for pid <- Process.list(),
          flags = :erlang.trace_info(pid, :flags),
          flags not in [{:flags, []}, :undefined],
          do: {:flags, pid, flags}

    patterns =
      for mfa <- [:on_load | @probe_mfas],
          # An unloaded module reads as `{:traced, :undefined}`.
          loaded?(mfa),
          traced = :erlang.trace_info(mfa, :traced),
          traced != {:traced, false},
          do: {:pattern, mfa, traced}

    # Cross-process traces: the seq_trace system tracer, the send and
    # receive patterns are back to the node's defaults.
    graph =
      case {:seq_trace.get_system_tracer(), :erlang.trace_info(:send, :match_spec),
            :erlang.trace_info(:receive, :match_spec)} do
        {false, {:match_spec, true}, {:match_spec, true}} -> []
        other -> [{:graph_tracing, other}]
      end

    # Counter patterns (summary/2) in the legacy session.
    counters =
      for item <- counter_items(),
          mfa <- [:on_load, {:lists, :reverse, 1}],
          (found = :erlang.trace_info(mfa, item)) not in [{item, false}, {item, :undefined}],
          do: {:counters, mfa, found}

    sessions ++ traced_processes ++ patterns ++ graph ++ counters
  end

  defp counter_items do
    if :erlang.system_info(:otp_release) >= ~c"26",
      do: [:call_time, :call_memory],
      else: [:call_time]
  end

  defp loaded?({module, _f, _a}), do: match?({:module, _}, Code.ensure_loaded(module))
  defp loaded?(:on_load), do: true

  @doc """
  Whether a local call pattern of ours is currently set (probed on
  `:lists.reverse/1`): in the legacy session or in a trace session of ours.
  """
  def patterns_set? do
    probe = {:lists, :reverse, 1}

    :erlang.trace_info(probe, :traced) == {:traced, :local} or
      Enum.any?(TraceBackend.our_sessions(), fn session ->
        TraceBackend.info(%TraceBackend{session: session}, probe, :traced) == {:traced, :local}
      end)
  end

  @doc """
  Whether `mfa` has a call pattern (any kind) in the legacy session or in a
  trace session of ours.
  """
  def patterns_on?(mfa) do
    handles = [
      TraceBackend.legacy() | for(s <- TraceBackend.our_sessions(), do: %TraceBackend{session: s})
    ]

    Enum.any?(
      handles,
      &(TraceBackend.info(&1, mfa, :traced) not in [{:traced, false}, {:traced, :undefined}])
    )
  end

  @doc """
  `pid`'s flags in FlameOn's tracing: the legacy session's, plus, with trace
  sessions, those of every session of ours.
  """
  def our_flags(pid) do
    legacy =
      case :erlang.trace_info(pid, :flags) do
        {:flags, flags} -> flags
        _ -> []
      end

    sessions =
      Enum.flat_map(TraceBackend.our_sessions(), fn session ->
        TraceBackend.flags(%TraceBackend{session: session}, pid)
      end)

    Enum.uniq(legacy ++ sessions)
  end

  @doc """
  `pid`'s tracers in FlameOn's tracing (the legacy session's, then those of
  the sessions of ours that trace it), `[]` when none.
  """
  def our_tracers(pid) do
    handles = [
      TraceBackend.legacy() | for(s <- TraceBackend.our_sessions(), do: %TraceBackend{session: s})
    ]

    for handle <- handles,
        TraceBackend.flags(handle, pid) != [],
        {:ok, tracer} <- [TraceBackend.tracer(handle, pid)],
        do: tracer
  end

  @doc "How many times `frame` occurs in the stack string (frames split on `;`)."
  def frame_count(stack, frame), do: stack |> String.split(";") |> Enum.count(&(&1 == frame))

  @doc "The largest `frame_count/2` of `frame` over all stacks of `pid`."
  def max_frame_count(profile, pid, frame) do
    profile.stacks
    |> Map.get(pid, [])
    |> Enum.map(fn {stack, _us} -> frame_count(stack, frame) end)
    |> Enum.max(fn -> 0 end)
  end

  @doc "True once `fun.()` returns true, polled every 10 ms up to `tries` times."
  def until(fun, tries) do
    cond do
      fun.() -> true
      tries == 0 -> false
      true -> Process.sleep(10) && until(fun, tries - 1)
    end
  end

  @doc "Microseconds of `pid`'s stacks for which `fun.(stack)` is true."
  def time_where(profile, pid, fun) do
    for {stack, us} <- Map.get(profile.stacks, pid, []), fun.(stack), reduce: 0 do
      acc -> acc + us
    end
  end
end
