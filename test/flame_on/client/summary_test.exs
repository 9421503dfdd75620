defmodule FlameOn.Client.SummaryTest do
  # summary/2: the VM's call_time / call_memory counters per function, as
  # tprof reports them. Call counts are exact; time and memory agree with
  # tprof's (OTP 27+) on the same workload; call_memory is refused on OTP
  # 25; nothing is left on the node, whatever the function does.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.Summary
  alias FlameOn.Client.Node.TraceBackend
  alias FlameOn.Client.Test.Workloads

  doctest Summary

  @fib {Workloads, :fib, 1}
  @loop {Workloads, :loop, 2}

  setup do
    ensure_app_started()
    assert_node_clean()
    on_exit(fn -> FlameOn.Client.Test.Tools.otp_lib(:tools) end)
    :ok
  end

  defp otp, do: :erlang.system_info(:otp_release) |> List.to_integer()
  defp entry(summary, mfa), do: Enum.find(summary.entries, &(&1.mfa == mfa))

  # fib(n) makes 2 * fib(n + 1) - 1 calls of fib/1.
  defp fib_calls(n), do: 2 * Workloads.fib(n + 1) - 1

  # Some allocation per call: a list and a tuple.
  def alloc(0, acc), do: acc
  def alloc(n, acc), do: alloc(n - 1, [{n, n} | acc])

  test "call_time: exact calls, µs per function, sorted, shares add up to 100" do
    {result, summary} =
      FlameOn.Client.summary(fn -> {Workloads.fib(18), Workloads.loop(50_000, 0)} end)

    assert result == {2584, 50_000}
    assert %Summary{type: :call_time, unit: :microsecond, pid: pid} = summary
    # as tprof, in a process of its own
    assert is_pid(pid) and pid != self()
    refute Process.alive?(pid)
    assert entry(summary, @fib).calls == fib_calls(18)
    assert entry(summary, @loop).calls == 50_001
    assert entry(summary, @fib).function == "FlameOn.Client.Test.Workloads.fib/1"
    assert entry(summary, @fib).value > 0
    assert summary.total == Enum.sum(Enum.map(summary.entries, & &1.value))
    assert summary.calls == Enum.sum(Enum.map(summary.entries, & &1.calls))
    assert_in_delta Enum.sum(Enum.map(summary.entries, & &1.share)), 100.0, 0.01
    values = Enum.map(summary.entries, & &1.value)
    assert values == Enum.sort(values, :desc)
    # the two functions did the work; the counted time is within the wall time
    assert entry(summary, @fib).share + entry(summary, @loop).share > 90
    assert summary.total <= summary.duration_us
    # nothing of ours is in it
    refute Enum.any?(summary.entries, fn %{mfa: {m, f, _}} ->
             m in [:trace, TraceBackend, FlameOn.Client.Capture.Counters] or
               (m == :erts_internal and f in [:trace, :trace_pattern])
           end)

    assert Map.keys(summary.by_process) == [pid]
    assert_node_clean()
  end

  test "table/2 and csv/1 hold every function, largest first" do
    {_, summary} = FlameOn.Client.summary(fn -> Workloads.fib(15) end)
    table = Summary.table(summary)
    [header | lines] = String.split(table, "\n")
    assert header =~ ~r/^FUNCTION +CALLS +TIME \(µs\) +PER CALL +\[ +%\]$/
    assert length(lines) == length(summary.entries) + 1
    assert List.last(lines) =~ ~r/^ +#{summary.calls} +#{summary.total} +\[100\.00\]$/

    assert Enum.any?(
             lines,
             &(&1 =~ ~r/^FlameOn\.Client\.Test\.Workloads\.fib\/1 +#{fib_calls(15)} /)
           )

    short = Summary.table(summary, top: 1)
    assert length(String.split(short, "\n")) == if(length(summary.entries) > 1, do: 4, else: 3)

    [csv_header | rows] =
      summary |> Summary.csv() |> IO.iodata_to_binary() |> String.split("\n", trim: true)

    assert csv_header == "function,calls,time_us,per_call,percent"
    assert length(rows) == length(summary.entries)
    fib_row = Enum.find(rows, &String.starts_with?(&1, "FlameOn.Client.Test.Workloads.fib/1,"))
    assert [_, calls, us, _per_call, _share] = String.split(fib_row, ",")
    assert String.to_integer(calls) == fib_calls(15)
    assert String.to_integer(us) == entry(summary, @fib).value
    # a function name with a comma is quoted
    assert Summary.csv(%{summary | entries: [%{hd(summary.entries) | function: "a,b"}]})
           |> IO.iodata_to_binary() =~ ~s("a,b",)
  end

  test "set_on_spawn: the function's own processes are counted, or not" do
    work = fn ->
      task = Task.async(fn -> Workloads.fib(12) end)
      Workloads.fib(10) + Task.await(task)
    end

    {199, with_children} = FlameOn.Client.summary(work)
    assert map_size(with_children.by_process) >= 2
    assert entry(with_children, @fib).calls == fib_calls(12) + fib_calls(10)

    {199, alone} = FlameOn.Client.summary(work, set_on_spawn: false)
    assert Map.keys(alone.by_process) == [alone.pid]
    assert entry(alone, @fib).calls == fib_calls(10)
    assert_node_clean()
  end

  test "call_memory: words per function (OTP 26+), refused with a clear error on OTP 25" do
    if otp() >= 26 do
      {_, summary} = FlameOn.Client.summary(fn -> alloc(1000, []) end, type: :call_memory)
      assert summary.unit == :word
      # 1000 calls, each a cons cell (2 words) and a 2-tuple (3 words)
      assert %{calls: 1001, value: 5000} = entry(summary, {__MODULE__, :alloc, 2})
      assert Summary.table(summary) =~ ~r/WORDS/
    else
      error =
        assert_raise ArgumentError, fn ->
          FlameOn.Client.summary(fn -> :ok end, type: :call_memory)
        end

      assert error.message =~ "OTP 26"
    end

    assert_node_clean()
  end

  test "agrees with tprof on the same workload (OTP 27+: tprof's own trace session)" do
    if TraceBackend.sessions?() do
      FlameOn.Client.Test.Tools.otp_lib!(:tools, "erlang-tools")
      work = fn -> {Workloads.fib(17), alloc(2000, []), Workloads.loop(20_000, 0)} end

      for type <- [:call_memory, :call_time] do
        {_, ours} = FlameOn.Client.summary(work, type: type)
        {_, raw} = apply(:tprof, :profile, [work, %{type: type, report: :return}])
        %{all: {^type, tprof_total, lines}} = apply(:tprof, :inspect, [raw, :total, :measurement])

        theirs =
          Map.new(lines, fn {m, {f, a}, calls, value, _per_call, share} ->
            {{m, f, a}, %{calls: calls, value: value, share: share}}
          end)

        # fib/1 and loop/2 allocate nothing: no line in a call_memory report
        for mfa <- [@fib, @loop, {__MODULE__, :alloc, 2}],
            type == :call_time or mfa == {__MODULE__, :alloc, 2} do
          %{calls: calls, value: value, share: share} = Map.fetch!(theirs, mfa)
          mine = entry(ours, mfa)

          assert mine.calls == calls,
                 "#{type} #{inspect(mfa)}: #{mine.calls} calls, tprof #{calls}"

          if type == :call_memory do
            assert mine.value == value
          else
            # time: shares within 20 percentage points; two tprof runs of
            # one workload differ by up to a third on a loaded machine
            # (bench/sessions.exs measures it), so this only catches a
            # wrong method, not noise
            assert abs(mine.share - share) <= 20,
                   "#{inspect(mfa)}: #{mine.share}% here, #{share}% in tprof"
          end
        end

        if type == :call_memory, do: assert_in_delta(ours.total, tprof_total, tprof_total * 0.1)
      end
    else
      # OTP 25: no tprof; call counts are exact all the same
      {_, ours} = FlameOn.Client.summary(fn -> Workloads.fib(17) end)
      assert entry(ours, @fib).calls == fib_calls(17)
    end

    assert_node_clean()
  end

  test "an exception in the function is raised again; nothing is left" do
    assert_raise RuntimeError, "boom", fn ->
      FlameOn.Client.summary(fn ->
        Workloads.fib(10)
        raise "boom"
      end)
    end

    assert catch_throw(FlameOn.Client.summary(fn -> throw(:up) end)) == :up
    assert catch_exit(FlameOn.Client.summary(fn -> exit(:bye) end)) == :bye
    # a process of its own, with the caller in its $callers
    test = self()
    assert {[^test | _], _} = FlameOn.Client.summary(fn -> Process.get(:"$callers") end)
    assert_node_clean()
  end

  test "a summary killed midway leaves nothing behind" do
    test = self()

    pid =
      spawn(fn ->
        FlameOn.Client.summary(fn ->
          send(test, :counting)
          Workloads.busy(10_000)
        end)
      end)

    assert_receive :counting, 5_000
    Process.exit(pid, :kill)
    assert_node_clean()
  end

  test "bad options raise ArgumentError" do
    assert_raise ArgumentError, ~r/:type/, fn ->
      FlameOn.Client.summary(fn -> 1 end, type: :calls)
    end

    assert_raise ArgumentError, ~r/:set_on_spawn/, fn ->
      FlameOn.Client.summary(fn -> 1 end, set_on_spawn: :yes)
    end

    assert_raise ArgumentError, fn -> FlameOn.Client.summary(fn -> 1 end, bogus: 1) end
    assert_raise ArgumentError, ~r/arity 0/, fn -> FlameOn.Client.summary(fn _ -> 1 end) end
    assert_node_clean()
  end

  test "summaries side by side: in sessions of their own (OTP 27+), one at a time before" do
    parent = self()

    spawn(fn ->
      result =
        try do
          FlameOn.Client.summary(fn ->
            send(parent, {:counting, self()})
            receive do: (:go -> Workloads.fib(12))
          end)
        rescue
          e in ArgumentError -> {:refused, Exception.message(e)}
        end

      send(parent, {:other, result})
    end)

    assert_receive {:counting, counted}, 5_000

    if TraceBackend.sessions?() do
      {_, mine} = FlameOn.Client.summary(fn -> Workloads.fib(10) end)
      send(counted, :go)
      assert_receive {:other, {144, theirs}}, 5_000
      assert entry(mine, @fib).calls == fib_calls(10)
      assert entry(theirs, @fib).calls == fib_calls(12)
    else
      error = assert_raise ArgumentError, fn -> FlameOn.Client.summary(fn -> :ok end) end
      assert error.message =~ "another trace of ours"
      send(counted, :go)
      assert_receive {:other, {144, _}}, 5_000
    end

    assert_node_clean()
  end
end
