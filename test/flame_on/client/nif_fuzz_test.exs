defmodule FlameOn.Client.NifFuzzTest do
  # Property tests of every NIF entry point, PropEr-generated: random and
  # malformed terms must return or raise ArgumentError and leave the VM up,
  # and ingest/2 must count each trace message as its shape says. A failure
  # prints the shrunk counterexample. Seeded, so a failure reproduces;
  # FO_FUZZ_SEED / FO_FUZZ_CASES change the run. scripts/test runs this file
  # again against the NIF built with ASan + UBSan.
  use ExUnit.Case, async: false

  import FlameOn.Client.ProperHelpers
  import FlameOn.Client.TestHelpers

  alias :proper_types, as: T
  alias FlameOn.Client.Core.Native

  @compile {:no_warn_undefined, [:proper_types]}

  @cases String.to_integer(System.get_env("FO_FUZZ_CASES", "3000"))
  @seed String.to_integer(System.get_env("FO_FUZZ_SEED", "20261122"))
  # An ingest case is a whole session fed many batches, so 1/15 as many;
  # at least 100, enough for every kind of batch to come up.
  @ingest_cases max(div(@cases, 15), 100)

  @file_path Path.relative_to_cwd(__ENV__.file)
  @hint "FO_FUZZ_SEED=#{@seed} FO_FUZZ_CASES=#{@cases} mix test #{@file_path}"

  # Far from the labels real graph traces take, and few, so that sessions
  # of one case collide and seq_trace events find them.
  @labels [1_000_001, 1_000_002, 1_000_003]

  @atoms [:call, :return_to, :in, :out, :exit, :undefined, :trace_ts, :seq_trace, :graph] ++
           [nil, true, :send, :receive, :"$gen_call", :alias, :timestamp, :max_nodes, :label]

  @decoded_tags [:call, :return_to, :in, :out, :in_exiting, :out_exiting, :exit] ++
                  [:gc_minor_start, :gc_major_start, :gc_start] ++
                  [:gc_minor_end, :gc_major_end, :gc_end]

  # Timestamps and end times span int64 and {Mega, Sec, Micro} every Mega
  # the NIF takes; sessions have native units from 1 a second to 1000 a
  # nanosecond. Times whose nanoseconds overflow int64 (after the graph
  # sessions' clock offset) are malformed, or raise in finish/2: the UBSan
  # run checks that no arithmetic overflows on the way.
  @max_ts 2 ** 63 - 1
  @max_mega 999_999_999
  # Either side of where int64 nanoseconds end: in ns, in seconds (native
  # unit 1 a second), in ms (1000 a second), and {Mega, Sec, Micro}.
  @edge_ts [2 ** 63 - 1, -(2 ** 63), 2 ** 62, -(2 ** 62)] ++
             [9_223_372_036, 9_223_372_037, -9_223_372_036, -9_223_372_037] ++
             [9_223_372_036_854, 9_223_372_036_855, -9_223_372_036_854, -9_223_372_036_855]
  @edge_now [{9223, 372_036, 854_775}, {9223, 372_036, 854_776}, {9224, 0, 0}]
  @native_per_second [1, 3, 1000, 1_000_000, 999_999_999, 1_000_000_000, 3_000_000_007] ++
                       [1_000_000_000_000]

  # sample/4 reads this many frames of a stack, innermost first, and leaves
  # the rest of a deeper one unread (FO_SAMPLE_MAX_FRAMES in fo_sample.c).
  @sample_max_frames 4096

  # Per test, not setup_all: each test then counts as failed (setup_all
  # would mark them invalid) when PropEr is missing.
  setup do
    ensure_proper!()
  end

  test "every NIF entry point takes #{@cases} generated calls and raises nothing but ArgumentError" do
    w = world()
    tally = tally()

    assert_forall(
      nif_case(w),
      fn c ->
        case run_case(c) do
          {:ok, op, result} ->
            bump(tally, :ok)
            assert result_ok?(op, result), "#{elem(op, 0)} returned #{inspect(result)}"

          :badarg ->
            bump(tally, :badarg)
        end

        true
      end,
      numtests: @cases,
      seed: @seed,
      hint: @hint
    )

    # Both outcomes happen, so the generators reach past the argument checks.
    ok = count(tally, :ok)
    badarg = count(tally, :badarg)
    assert ok > @cases / 10, "only #{ok} of #{@cases} calls passed the argument checks"
    assert badarg > @cases / 10, "only #{badarg} of #{@cases} calls raised ArgumentError"
    assert Process.alive?(self())
    assert_node_clean()
  end

  test "ingest counts each generated trace message as its shape says and keeps going" do
    w = world()
    tally = tally()

    assert_forall(
      ingest_case(w),
      fn {label, native_per_second, batches, end_ts} ->
        session = Native.new(%{label: label, native_per_second: native_per_second})
        clock = clock(label, native_per_second)

        for batch <- batches do
          {messages, n, expected, proper?, out_of_range} = realize_batch(batch, clock)
          before = counts(Native.stats(session))

          if proper? do
            assert Native.ingest(session, messages) == :ok
            assert delta(counts(Native.stats(session)), before) == expected
          else
            assert_raise ArgumentError, fn -> Native.ingest(session, messages) end
            # What came before the bad tail may have been applied, no more.
            got = delta(counts(Native.stats(session)), before)
            assert Enum.all?(Map.keys(got), &(got[&1] <= expected[&1])), inspect({got, expected})
            bump(tally, :improper)
          end

          bump(tally, :decoded, expected.events)
          bump(tally, :ignored, expected.ignored_events)
          bump(tally, :malformed, expected.malformed_events)
          bump(tally, :out_of_range, out_of_range)
          if n > 2000, do: bump(tally, :long)
        end

        # An end out of int64 nanoseconds raises and leaves the session open.
        end_ts =
          if end_ts == nil or (is_integer(end_ts) and ts?(end_ts, clock)) do
            end_ts
          else
            assert_raise ArgumentError, fn -> Native.finish(session, end_ts) end
            bump(tally, :bad_end)
            nil
          end

        # A finished session returns its tree, which renders, and takes no
        # more messages.
        result = Native.finish(session, end_ts)
        assert {_, _, _, _} = elem(result, 0)
        assert tuple_size(result) == if(label, do: 3, else: 2)
        assert %{} = FlameOn.Client.Profile.build(elem(result, 0), %{}, []).stacks
        assert_raise ArgumentError, fn -> Native.ingest(session, []) end
        true
      end,
      numtests: @ingest_cases,
      seed: @seed,
      hint: @hint
    )

    # Every kind of message and batch came up, so the counts above mean
    # something.
    for {key, what} <- [
          decoded: "decoded messages",
          ignored: "ignored messages",
          malformed: "malformed messages",
          improper: "improper batches",
          long: "batches over one ingest slice",
          out_of_range: "timestamps out of int64 nanoseconds",
          bad_end: "end times out of int64 nanoseconds"
        ] do
      assert count(tally, key) > 0, "the generators made no #{what}"
    end
  end

  test "sample/4,5 take well-formed stacks in every session state and reject malformed ones" do
    w = world()
    tally = tally()

    assert_forall(
      sample_case(w),
      fn {kind, pid, stack, weight, waited} ->
        with_case_sessions([], fn ->
          {session, stack} = {materialize(kind), materialize(stack)}
          before = samples(session)

          result =
            try do
              case waited do
                :none -> Native.sample(session, pid, stack, weight)
                waited -> Native.sample(session, pid, stack, weight, waited)
              end
            rescue
              ArgumentError -> :badarg
            end

          expected =
            if waited in [:none, :plain, :waited, :leading],
              do: expected_sample(kind, session, pid, stack, weight),
              else: [:badarg]

          assert result in expected,
                 "returned #{inspect(result)}, not one of #{inspect(expected)}"

          # Only a taken sample counts, {:same, n} as n.
          taken = if result == :ok, do: with({:same, n} <- stack, do: n, else: (_ -> 1)), else: 0
          if before, do: assert(samples(session) - before == taken)

          bump(tally, result)

          if is_list(stack) and length_at_least?(stack, @sample_max_frames + 1),
            do: bump(tally, :deep)

          unless weight_ok?(weight), do: bump(tally, :bad_weight)

          true
        end)
      end,
      numtests: @cases,
      seed: @seed,
      hint: @hint
    )

    for {key, what} <- [
          ok: "taken samples",
          stopped: "samples into stopped sessions",
          idle: "samples of processes idle in a cross-process trace",
          badarg: "rejected samples",
          deep: "stacks deeper than #{@sample_max_frames} frames",
          bad_weight: "bad weights"
        ] do
      assert count(tally, key) > 0, "the generators made no #{what}"
    end
  end

  # Deliberately false properties over the same generators: that PropEr
  # shrinks what they produce down to a small case is what makes a real
  # failure readable.
  test "a failing property is reported with its shrunk counterexample" do
    w = world()
    no_malformed = fn messages -> counts(ingest_all(messages)).malformed_events == 0 end
    opts = [numtests: 200, seed: @seed, start_size: 30]

    assert {:failed, [message] = shrunk, _} = quickcheck(T.list(message(w)), no_malformed, opts)

    assert classify(message, clock(nil, nil)) == :malformed

    assert {:failed, unshrunk, _} =
             quickcheck(T.list(message(w)), no_malformed, [noshrink: true] ++ opts)

    assert size(shrunk) < size(unshrunk), inspect({shrunk, unshrunk})
    assert size(shrunk) <= 16, "shrunk to #{inspect(shrunk)}"

    # Some call raising ArgumentError is found, and shrinks to a tiny one.
    never_badarg = fn c -> run_case(c) != :badarg end
    assert {:failed, shrunk_case, _} = quickcheck(nif_case(w), never_badarg, opts)
    assert size(shrunk_case) <= 16, "shrunk to #{inspect(shrunk_case)}"

    # The assertion the properties above use shows that counterexample.
    error =
      assert_raise ExUnit.AssertionError, fn ->
        assert_forall(T.list(message(w)), no_malformed, [hint: @hint] ++ opts)
      end

    assert error.message =~ "shrunk counterexample:\n#{inspect_case(shrunk)}"
    assert error.message =~ "on it the property returned false"
    assert error.message =~ "FO_FUZZ_SEED=#{@seed}"
  end

  # What the generated cases did, summed outside PropEr (which reruns the
  # property while shrinking, so counts only mean something on a pass).
  @tallies [:ok, :badarg, :decoded, :ignored, :malformed, :improper, :long, :out_of_range] ++
             [:bad_end, :stopped, :idle, :deep, :bad_weight]
  defp tally, do: :counters.new(length(@tallies), [])
  defp bump(tally, key, n \\ 1), do: :counters.add(tally, slot(key), n)
  defp count(tally, key), do: :counters.get(tally, slot(key))
  defp slot(key), do: Enum.find_index(@tallies, &(&1 == key)) + 1

  ## Running a generated NIF call

  # A case is {labels, op}: graph sessions registered for those labels
  # (rooted at the test process), then one NIF call. Sessions appear in the
  # generated terms as {:session, kind} and are made when the case runs, so
  # a shrunk case replays on fresh ones.
  defp run_case({labels, op}) do
    with_case_sessions(labels, fn ->
      op = op |> Tuple.to_list() |> Enum.map(&materialize/1) |> List.to_tuple()

      try do
        {:ok, op, apply(Native, elem(op, 0), op |> Tuple.delete_at(0) |> Tuple.to_list())}
      rescue
        ArgumentError -> :badarg
      end
    end)
  end

  defp with_case_sessions(labels, fun) do
    Process.put(:fuzz_graph_sessions, [])
    Enum.each(labels, &materialize({:session, {:graph_started, &1}}))
    fun.()
  after
    # Registered graph sessions are held by the router until stopped: stop
    # them so that no case sees another's.
    Enum.each(Process.delete(:fuzz_graph_sessions), &Native.stop/1)
    # graph_watch_callees/2 may have had callees reported to us.
    flush_callees()
  end

  defp flush_callees do
    receive do
      {:flame_on_callee, _} -> flush_callees()
      {:flame_on_left, _} -> flush_callees()
    after
      0 -> :ok
    end
  end

  defp materialize({:session, kind}) do
    case kind do
      :fresh ->
        Native.new(%{})

      :replay ->
        Native.new(%{replay: true})

      :stopped ->
        s = Native.new(%{})
        Native.stop(s)
        s

      :finished ->
        s = Native.new(%{})
        Native.finish(s, nil)
        s

      {:native_per_second, n} ->
        Native.new(%{native_per_second: n})

      {graph, label} ->
        s = Native.new(%{label: label})
        Process.put(:fuzz_graph_sessions, [s | Process.get(:fuzz_graph_sessions)])
        # Another session of the case may hold the label or the root.
        if graph in [:graph_started, :graph_begun],
          do: badarg_ok(fn -> Native.graph_start(s, self()) end)

        if graph == :graph_begun, do: badarg_ok(fn -> Native.graph_begin(s) end)
        s
    end
  end

  defp materialize({:stack, frames, depth, bad, tail}),
    do: realize_stack(frames, depth, bad, tail)

  # render/2's arguments: a real tree (of a session that took a few
  # events) whole or with one byte changed or cut short, then names for
  # it, fitting or not.
  defp materialize({:tree, kind, pos, byte}) do
    s = Native.new(%{})

    :ok =
      Native.ingest(s, [
        {:trace_ts, self(), :call, {:m, :f, 0}, :undefined, 1},
        {:trace_ts, self(), :call, {:m, :g, 1}, {:m, :f, 0}, 2_000},
        {:trace_ts, self(), :out, {:m, :g, 1}, 5_000},
        {:trace_ts, self(), :in, {:m, :g, 1}, 9_000},
        {:trace_ts, self(), :return_to, {:m, :f, 0}, 12_000}
      ])

    {{frames, pids, nodes, max} = tree, _} = Native.finish(s, 20_000)
    pos = rem(pos, max(byte_size(nodes), 1))

    tree =
      case kind do
        :valid -> tree
        :flipped -> {frames, pids, flip(nodes, pos, byte), max}
        :cut -> {frames, pids, binary_part(nodes, 0, pos), max}
        :tiny_budget -> {frames, pids, nodes, 1 + rem(byte, 4)}
      end

    Process.put(:fuzz_tree, tree)
    tree
  end

  defp materialize({:names, kind}) do
    frames = :fuzz_tree |> Process.get({{}, {}, <<>>, 1}) |> elem(0) |> Tuple.to_list()

    case kind do
      :valid -> frames |> Enum.map(&FlameOn.Client.Profile.frame_name/1) |> List.to_tuple()
      :nils -> frames |> Enum.map(fn _ -> nil end) |> List.to_tuple()
      :short -> frames |> Enum.drop(1) |> Enum.map(fn _ -> "x" end) |> List.to_tuple()
      :atoms -> List.to_tuple(frames)
    end
  end

  defp materialize(other), do: other

  defp flip(<<>>, _pos, _byte), do: <<>>

  defp flip(bin, pos, byte) do
    <<before::binary-size(pos), old, rest::binary>> = bin
    <<before::binary, Bitwise.bxor(old, byte)::8, rest::binary>>
  end

  defp badarg_ok(fun) do
    fun.()
  rescue
    ArgumentError -> :badarg
  end

  defp result_ok?({:new, _}, r), do: is_reference(r)
  defp result_ok?({:stats, _}, r), do: is_map(r)
  defp result_ok?({:stop, _}, r), do: is_integer(r)

  defp result_ok?({:finish, _, _}, r),
    do: match?({{_, _, _, _}, %{}}, r) or match?({{_, _, _, _}, %{}, %{}}, r)

  # stacks, samples, trees, names, stacks without text, alloc, alloc trees
  defp result_ok?({:render, _, _}, r),
    do: match?({%{}, %{}, %{}, names, n, %{}, %{}} when is_tuple(names) and n >= 0, r)

  defp result_ok?({:tracer_state, _}, r), do: is_integer(r) and r > 0
  defp result_ok?({:enabled, _, _, _}, r), do: r in [:trace, :discard, :remove]
  defp result_ok?({:sample, _, _, _, _}, r), do: r in [:ok, :stopped, :idle]
  defp result_ok?({:graph_role, _}, r), do: r in [:root, :follower, nil]
  defp result_ok?(_ingest_graph_or_trace, r), do: r == :ok

  ## Samples

  # A stack as generated: `frames` repeated up to `depth` (nil: as they
  # are), with `bad` ({position, frame} or nil) put in, ending in `tail`
  # (the list is improper unless it is []).
  defp realize_stack(frames, depth, bad, tail) do
    frames = if depth && frames != [], do: Enum.take(Stream.cycle(frames), depth), else: frames

    frames =
      case bad do
        nil -> frames
        {at, frame} -> List.insert_at(frames, min(at, length(frames)), frame)
      end

    frames ++ tail
  end

  # What sample/4 answers (the rules of fo_sample_nif): ArgumentError for
  # anything but a session, a local pid, :same or a stack whose first
  # @sample_max_frames cells are well-formed frames ending in [] (the rest
  # of a deeper stack is not read) and a weight in 0..2^64-1; then :stopped
  # once the session is stopped or finished; a cross-process trace answers
  # :idle for a process that serves none of its requests; otherwise the
  # sample is taken.
  defp expected_sample(kind, session, pid, stack, weight) do
    cond do
      samples(session) == nil -> [:badarg]
      not (is_pid(pid) and node(pid) == node()) -> [:badarg]
      not stack_ok?(stack, @sample_max_frames) -> [:badarg]
      not weight_ok?(weight) -> [:badarg]
      true -> sample_taken(kind)
    end
  end

  defp weight_ok?(weight), do: is_integer(weight) and weight >= 0 and weight < 2 ** 64

  defp sample_taken({:session, kind}) when kind in [:stopped, :finished], do: [:stopped]
  defp sample_taken({:session, kind}) when kind in [:fresh, :replay], do: [:ok]
  defp sample_taken({:session, {:native_per_second, _}}), do: [:ok]
  defp sample_taken({:session, {_graph, _label}}), do: [:ok, :idle]

  defp stack_ok?(:same, _n), do: true
  defp stack_ok?({:same, times}, _n), do: is_integer(times) and times in 1..(2 ** 32 - 1)
  defp stack_ok?(_stack, 0), do: true
  defp stack_ok?([], _n), do: true
  defp stack_ok?([frame | rest], n), do: frame_ok?(frame) and stack_ok?(rest, n - 1)
  defp stack_ok?(_improper, _n), do: false

  defp frame_ok?({m, f, a}), do: mfa?({m, f, a})
  defp frame_ok?({m, f, a, _location}), do: mfa?({m, f, a})
  defp frame_ok?(_), do: false

  defp length_at_least?(_list, 0), do: true
  defp length_at_least?([_ | rest], n), do: length_at_least?(rest, n - 1)
  defp length_at_least?(_, _n), do: false

  # stats.samples of a session, nil for anything else.
  defp samples(session) do
    Native.stats(session).samples
  rescue
    ArgumentError -> nil
  end

  ## Ingest

  defp ingest_all(messages) do
    session = Native.new(%{})
    :ok = Native.ingest(session, messages)
    Native.stats(session)
  end

  defp counts(stats), do: Map.take(stats, [:events, :ignored_events, :malformed_events])

  # How a session turns timestamps into nanoseconds: its native unit, and
  # the clock offset a graph session takes from them (Erlang monotonic -
  # tracer clock, as finish/2 of a graph session reports it; the probe's
  # read is the session's within microseconds, and no generated timestamp
  # lands that close to where the shifted range ends).
  defp clock(label, native_per_second) do
    offset =
      if label do
        {_, _, %{clock_offset_ns: offset}} = Native.finish(Native.new(%{label: label}), nil)
        offset
      else
        0
      end

    %{native_per_second: native_per_second || 1_000_000_000, offset: offset}
  end

  defp delta(now, before), do: Map.new(now, fn {k, v} -> {k, v - before[k]} end)

  # A batch is {messages, length, tail}: a long one repeats its messages up
  # to `length` (around the NIF's 2000-message slice), a non-[] tail makes
  # the list improper. Returns the list, its length without the tail, the
  # counts it should add in a session with this clock, whether it is proper
  # and how many of its timestamps are out of the session's range.
  defp realize_batch({messages, length, tail}, clock) do
    messages =
      if length && messages != [], do: Enum.take(Stream.cycle(messages), length), else: messages

    classes = Enum.frequencies(Enum.map(messages, &classify(&1, clock)))

    expected = %{
      events: Map.get(classes, :decoded, 0),
      ignored_events: Map.get(classes, :ignored, 0),
      malformed_events: Map.get(classes, :malformed, 0)
    }

    out_of_range = Enum.count(messages, &out_of_range?(&1, clock))
    {messages ++ tail, length(messages), expected, tail == [], out_of_range}
  end

  # What ingest/2 makes of a message (the rules of fo_decode_trace_msg) in a
  # session with this clock: :decoded (an event), :ignored (a trace message
  # that is not ours) or :malformed.
  defp classify(msg, clock) when is_tuple(msg) and tuple_size(msg) in [5, 6] do
    [first, who, tag, payload | _] = Tuple.to_list(msg)
    ts = elem(msg, tuple_size(msg) - 1)

    cond do
      first != :trace_ts or not is_atom(tag) ->
        :malformed

      is_port(who) ->
        :ignored

      not (is_pid(who) and node(who) == node()) ->
        :malformed

      not ts?(ts, clock) ->
        :malformed

      tuple_size(msg) == 6 and tag != :call ->
        :ignored

      tag == :call ->
        if mfa?(payload), do: :decoded, else: :malformed

      tag == :return_to ->
        if mfa?(payload) or payload == :undefined, do: :decoded, else: :malformed

      tag in @decoded_tags ->
        :decoded

      true ->
        :ignored
    end
  end

  defp classify(_msg, _clock), do: :malformed

  # A timestamp the session takes: an int64 in native units or a
  # {Mega, Sec, Micro} in range, whose nanoseconds fit in int64, and still
  # do less the clock offset. Integer division truncates toward zero, as
  # the NIF's does.
  defp ts?(ts, clock), do: ts_class(ts, clock) == :ok

  defp out_of_range?(msg, clock),
    do:
      is_tuple(msg) and tuple_size(msg) in [5, 6] and
        ts_class(elem(msg, tuple_size(msg) - 1), clock) == :out_of_range

  defp ts_class(ts, clock) when is_integer(ts) do
    if int64?(ts),
      do: ns_class(div(ts * 1_000_000_000, clock.native_per_second), clock),
      else: :bad
  end

  defp ts_class({mega, sec, micro}, clock)
       when is_integer(mega) and is_integer(sec) and is_integer(micro) do
    if mega in 0..999_999_999 and sec in 0..999_999 and micro in 0..999_999,
      do: ns_class(((mega * 1_000_000 + sec) * 1_000_000 + micro) * 1000, clock),
      else: :bad
  end

  defp ts_class(_, _clock), do: :bad

  defp ns_class(ns, clock),
    do: if(int64?(ns) and int64?(ns - clock.offset), do: :ok, else: :out_of_range)

  defp int64?(n), do: n >= -(2 ** 63) and n < 2 ** 63

  defp mfa?({m, f, a}) when is_atom(m) and is_atom(f) do
    cond do
      is_integer(a) -> a in 0..255
      is_list(a) -> proper_list_length(a) in 0..255
      true -> false
    end
  end

  defp mfa?(_), do: false

  defp proper_list_length(list, n \\ 0)
  defp proper_list_length([], n), do: n
  defp proper_list_length([_ | t], n), do: proper_list_length(t, n + 1)
  defp proper_list_length(_improper, _n), do: nil

  defp size(term), do: :erts_debug.flat_size(term)

  ## Generators

  # Building a PropEr type costs far more than generating from it (a union
  # walks all its alternatives, nested ones again and again), so the shared
  # ones are built once per test process.
  defp memo(key, build) do
    case Process.get({__MODULE__, key}) do
      nil -> tap(build.(), &Process.put({__MODULE__, key}, &1))
      type -> type
    end
  end

  # Pids, refs and ports are made once per test, not inside generators: a
  # term that differs on every generation (make_ref/0) keeps shrinking from
  # converging, and a seq_trace request and its reply need equal tags.
  defp world do
    {dead, monitor} = spawn_monitor(fn -> :ok end)
    assert_receive {:DOWN, ^monitor, :process, _, _}
    refs = [make_ref(), make_ref()]

    %{
      pids: [self(), dead],
      remote: remote_pid(),
      refs: refs,
      ports: Enum.take(Port.list(), 1),
      aliases: for(r <- refs, do: [:alias | r])
    }
  end

  # A pid of another node, as a term from there carries it.
  defp remote_pid do
    node = "fuzz@nowhere"

    pid =
      :erlang.binary_to_term(<<131, 88, 119, byte_size(node), node::binary, 1::32, 0::32, 1::32>>)

    true = node(pid) != node()
    pid
  end

  defp nif_case(w), do: {T.resize(3, T.list(T.elements(@labels))), op(w)}

  defp op(w) do
    s = T.union([session(), term(w, 1)])
    state = T.union([session(), :graph, term(w, 1)])

    T.oneof([
      {:new, new_opts(w)},
      {:ingest, s, T.union([term(w, 2), T.resize(6, T.list(message(w)))])},
      {:stats, s},
      {:finish, s, T.union([nil, :stop, 5, timestamp(), term(w, 0)])},
      {:stop, s},
      {:tracer_state, s},
      {:render,
       T.union([
         {:tree, T.elements([:valid, :flipped, :cut, :tiny_budget]), T.integer(0, 400),
          T.integer(1, 255)},
         term(w, 1)
       ]), T.union([{:names, T.elements([:valid, :nils, :short, :atoms])}, term(w, 1)])},
      {:graph_start, s, T.union([T.elements(w.pids), term(w, 0)])},
      {:graph_begin, s},
      {:graph_watch_callees, s, T.union([T.elements(w.pids ++ [w.remote]), term(w, 0)])},
      {:graph_owner, s, T.union([T.elements(w.pids ++ [w.remote]), term(w, 0)]),
       T.union([T.elements([true, false]), term(w, 0)])},
      {:graph_role, T.union([T.elements(w.pids ++ [w.remote]), term(w, 0)])},
      {:sample, s, sample_pid(w), stack(w), weight(w)},
      {:enabled,
       T.union([T.elements([:call, :trace_status, :seq_trace, :send, :spawn]), term(w, 0)]),
       state, term(w, 1)},
      trace_callback(w, state)
    ])
  end

  defp session do
    T.union([
      {:session, T.elements([:fresh, :replay, :stopped, :finished])},
      {:session, {:native_per_second, T.elements(@native_per_second)}},
      {:session, {T.elements([:graph, :graph_started, :graph_begun]), T.elements(@labels)}}
    ])
  end

  defp new_opts(w) do
    limit =
      T.union([
        T.integer(0, 10),
        T.integer(),
        nil,
        T.elements([2 ** 31, 2 ** 32, 50_000_001]),
        term(w, 0)
      ])

    keys =
      [:max_nodes, :max_depth, :max_processes, :max_frames, :max_stack_frames] ++
        [:max_spans, :max_pending_calls, :max_fanout, :native_per_second]

    pair =
      T.union([
        {T.elements(keys), limit},
        {:label, T.union([T.elements(@labels), limit])},
        {:replay, T.union([true, term(w, 0)])},
        {term(w, 0), term(w, 0)}
      ])

    T.union([let(T.resize(4, T.list(pair)), &Map.new/1), term(w, 2)])
  end

  # trace/5 as the VM calls it: event tags with their payloads, seq_trace
  # events (label, info) shaped like gen_server calls and replies, or junk.
  defp trace_callback(w, state) do
    pid = T.elements(w.pids)
    tag = T.elements(w.refs ++ w.aliases)

    opts =
      T.union([
        %{},
        let({T.elements([:match_spec_result, :extra, :timestamp]), term(w, 1)}, &Map.new([&1]))
      ])

    seq_info =
      T.union([
        {T.elements([:send, :receive]), T.integer(0, 5), pid, pid,
         {:"$gen_call", {pid, tag}, term(w, 0)}},
        {T.elements([:send, :receive]), T.integer(0, 5), pid, T.union([pid, :undefined]),
         {tag, term(w, 0)}},
        term(w, 2)
      ])

    T.union([
      {:trace, T.elements(@decoded_tags), state, T.union([pid, term(w, 0)]),
       T.union([mfa(), term(w, 1)]), opts},
      {:trace, :seq_trace, state, T.union([T.elements(@labels), term(w, 0)]), seq_info, opts},
      {:trace, T.union([T.elements([:call, :return_to, :seq_trace, :in]), term(w, 0)]), state,
       T.union([pid, term(w, 0), 7]), term(w, 2), T.union([opts, term(w, 1)])},
      # a follower's receive (the match-spec result is the sender) and a
      # child's start (the parent in the payload)
      {:trace, T.elements([:receive, :spawned]), state, pid, T.union([pid, term(w, 1)]),
       T.union([opts, %{match_spec_result: T.union([pid, :undefined])}])}
    ])
  end

  defp sample_case(w) do
    {T.frequency([{9, session()}, {1, term(w, 1)}]), sample_pid(w), stack(w), weight(w),
     T.frequency([{4, :none}, {6, T.elements([:plain, :waited, :leading])}, {1, term(w, 0)}])}
  end

  # Reductions since the previous sample: mostly fine, at the edges of
  # 0..2^64-1 or past them now and then, or any term.
  defp weight(w) do
    T.frequency([
      {8, T.integer(0, 1_000_000)},
      {1, T.elements([0, 2 ** 64 - 1, 2 ** 64, -1])},
      {1, term(w, 0)}
    ])
  end

  defp sample_pid(w) do
    T.frequency([{8, T.elements(w.pids)}, {1, w.remote}, {1, term(w, 0)}])
  end

  # Stacks as process_info(Pid, current_stacktrace) gives them, made when
  # the case runs (see realize_stack/4), or :same / {:same, times} (the
  # stack the process has): mostly a few frames, sometimes
  # around 64 or around and past the @sample_max_frames that sample/4
  # reads; with a bad frame somewhere or an improper tail now and then; or
  # any term.
  defp stack(w) do
    memo({:stack, w}, fn ->
      frames = T.resize(8, T.list(frame(w)))

      depth =
        T.frequency([
          {12, nil},
          {3, T.integer(60, 70)},
          {1, T.elements([@sample_max_frames - 1, @sample_max_frames, @sample_max_frames + 1])},
          {1, T.integer(@sample_max_frames + 2, 5000)}
        ])

      bad =
        T.frequency([
          {5, nil},
          {1, {T.union([T.integer(0, 10), T.integer(0, 5000)]), bad_frame(w)}}
        ])

      tail = T.frequency([{8, []}, {1, T.union([:tail, term(w, 0)])}])
      same = {:same, T.union([T.integer(0, 5), T.elements([2 ** 32 - 1, 2 ** 32, -1, :x])])}

      T.frequency([
        {12, {:stack, frames, depth, bad, tail}},
        {1, :same},
        {1, same},
        {1, term(w, 2)}
      ])
    end)
  end

  # {M, F, Arity | Args} or {M, F, Arity | Args, Location}.
  defp frame(w) do
    location = T.union([[], [file: ~c"lib/fuzz.ex", line: T.integer(1, 9999)], term(w, 1)])

    T.union([mfa(), let({mfa(), location}, fn {{m, f, a}, loc} -> {m, f, a, loc} end)])
  end

  defp bad_frame(w) do
    arity = T.elements([256, 300, -1, 2 ** 32, :a, 1.5, [1 | 2], List.duplicate(:a, 256)])
    not_atom = such_that(term(w, 0), &(not is_atom(&1)))

    T.oneof([
      {:m, :f, arity},
      {:m, :f, arity, [line: 1]},
      {not_atom, :f, 0},
      {:m, not_atom, 1, []},
      T.elements([{:m, :f}, {:m, :f, 1, [], :x}, {}, {:m}]),
      such_that(term(w, 0), &(not is_tuple(&1)))
    ])
  end

  defp ingest_case(w) do
    end_ts = T.union([nil, T.integer(), T.integer(-@max_ts - 1, @max_ts), T.elements(@edge_ts)])
    native_per_second = T.union([nil, T.elements(@native_per_second), T.integer(1, 10 ** 12)])

    {T.union([nil, T.elements(@labels)]), native_per_second,
     sized(&memo({:batches, w, &1}, fn -> batches(w, &1) end)), end_ts}
  end

  defp batches(w, size) do
    messages = T.resize(div(size, 2) + 1, T.list(message(w)))

    batch =
      T.frequency([
        {12, {messages, nil, []}},
        {1,
         {T.non_empty(messages),
          T.union([T.elements([1999, 2000, 2001, 4000]), T.integer(2002, 4500)]), []}},
        {1, {messages, T.union([nil, 2000]), T.elements([:tail, 7, {:t}])}}
      ])

    T.resize(div(size, 8) + 1, T.list(batch))
  end

  # Trace messages: well-formed events, ones that ingest/2 skips (not ours),
  # and malformed ones (a well-formed one with one field broken, or junk).
  defp message(w) do
    memo({:message, w}, fn ->
      T.frequency([
        {6, event_message(w)},
        {2, ignored_message(w)},
        {3, let({event_message(w), breakage(w)}, &break/1)},
        {1, term(w, 1)}
      ])
    end)
  end

  defp event_message(w) do
    pid = T.elements(w.pids)

    T.oneof([
      {:trace_ts, pid, :call, mfa(), timestamp()},
      {:trace_ts, pid, :call, mfa(), T.union([mfa(), :undefined, term(w, 1)]), timestamp()},
      {:trace_ts, pid, :return_to, T.union([mfa(), :undefined]), timestamp()},
      {:trace_ts, pid, T.elements([:in, :out, :in_exiting, :out_exiting]), T.union([mfa(), 0]),
       timestamp()},
      {:trace_ts, pid, :exit, term(w, 1), timestamp()},
      {:trace_ts, pid, T.elements(@decoded_tags -- [:call, :return_to]), term(w, 1), timestamp()}
    ])
  end

  defp ignored_message(w) do
    pid = T.elements(w.pids)

    T.oneof(
      [
        {:trace_ts, pid, :send, term(w, 1), pid, timestamp()},
        {:trace_ts, pid, :return_from, mfa(), term(w, 0), timestamp()},
        {:trace_ts, pid, T.elements([:spawn, :link, :register, :gc_max_heap_size]), term(w, 1),
         timestamp()}
      ] ++
        for(port <- w.ports, do: {:trace_ts, port, T.elements(@decoded_tags), mfa(), timestamp()})
    )
  end

  defp breakage(w) do
    T.oneof([
      {:first, T.union([:trace, term(w, 0)])},
      {:pid, such_that(term(w, 0), &(not is_pid(&1) and not is_port(&1)))},
      {:tag, such_that(term(w, 0), &(not is_atom(&1)))},
      {:ts, T.elements([2 ** 63, -(2 ** 63) - 1, 2 ** 70, :now, 1.5, {1, 2}, {-1, 0, 0}])},
      {:ts,
       T.elements([{0, 1_000_000, 0}, {0, 0, 1_000_000}, {1_000_000_000, 0, 0}, {1, 2, 3, 4}])},
      {:payload, T.elements([:call, :return_to]), bad_mfa(w)},
      {:arity, T.elements([4, 7, 2])}
    ])
  end

  defp break({msg, {:first, v}}), do: put_elem(msg, 0, v)
  defp break({msg, {:pid, v}}), do: put_elem(msg, 1, v)
  defp break({msg, {:tag, v}}), do: put_elem(msg, 2, v)
  defp break({msg, {:ts, v}}), do: put_elem(msg, tuple_size(msg) - 1, v)

  defp break({msg, {:arity, n}}),
    do: msg |> Tuple.to_list() |> Stream.cycle() |> Enum.take(n) |> List.to_tuple()

  # Only call and return_to look at their payload.
  defp break({msg, {:payload, tag, v}}), do: msg |> put_elem(2, tag) |> put_elem(3, v)

  defp mfa do
    arity = T.union([T.integer(0, 255), T.resize(4, T.list(:a))])
    {T.elements([:m, Enum, :lists, nil]), T.elements([:f, :map, :reverse]), arity}
  end

  defp bad_mfa(w) do
    T.oneof([
      {:m, :f,
       T.elements([256, 300, -1, 2 ** 32, :a, 1.5, [1 | 2], ~c"x" ++ List.duplicate(?a, 300)])},
      {such_that(term(w, 0), &(not is_atom(&1))), :f, 0},
      {:m, such_that(term(w, 0), &(not is_atom(&1))), 1},
      {:m, :f},
      {:m, :f, 1, 2}
    ])
  end

  defp timestamp do
    T.union([
      T.integer(),
      T.integer(-@max_ts - 1, @max_ts),
      T.elements(@edge_ts ++ @edge_now),
      {T.union([T.integer(0, 10_000), T.integer(0, @max_mega)]), T.integer(0, 999_999),
       T.integer(0, 999_999)}
    ])
  end

  # A random term of at most `depth` levels of nesting.
  defp term(w, 0), do: leaf(w)

  defp term(w, depth) do
    memo({:term, w, depth}, fn ->
      sub = term(w, depth - 1)

      T.frequency([
        {4, leaf(w)},
        {1, let(T.resize(6, T.non_empty(T.list(sub))), &List.to_tuple/1)},
        {1, T.resize(5, T.list(sub))},
        {1, let({sub, sub}, fn {h, t} -> [h | t] end)},
        {1, let(T.resize(3, T.list({leaf(w), sub})), &Map.new/1)}
      ])
    end)
  end

  defp leaf(w), do: memo({:leaf, w}, fn -> build_leaf(w) end)

  defp build_leaf(w) do
    T.oneof([
      T.integer(),
      T.elements(@atoms),
      let(T.integer(0, 200), &(2 ** &1)),
      let(T.integer(0, 200), &(-(2 ** &1))),
      T.float(),
      T.binary(),
      T.elements(w.pids ++ [w.remote] ++ w.refs ++ w.ports ++ w.aliases),
      T.elements([{:m, :f, 0}, {Enum, :map, 2}, {:lists, :reverse, [1, 2]}, {:m, :f, 300}]),
      []
    ])
  end
end
