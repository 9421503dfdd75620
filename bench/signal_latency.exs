# How long a computing process takes to answer a stack request
# (`process_info(pid, [:current_stacktrace])` from another process: a
# signal it handles at a scheduling point), by the trace flags it has.
# Mode :sample asks this every interval; an answer that comes late lands
# later in the process's work, or after it.
#
#     mix run bench/signal_latency.exs        # about 10 s
#
# Each row: one process computing until the row ends (SHAPE=busy: fib(12) calls
# between clock reads, as test/support's Workloads.busy/1; SHAPE=fib: fib(15)
# calls only), its flags set with a process that drops the events as its
# tracer (or, in the "tracer module" row, bench/floor_tracer.c's module,
# which only counts), while this process asks for its stack every
# millisecond (REQUESTS, default 200). Latencies in µs (p50, p90, p99,
# max), and the share of requests answered later than 1 ms.

Code.require_file("support.exs", __DIR__)

defmodule FlameOn.Bench.SignalLatency do
  @moduledoc false

  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  # Computes until `stop` is set (an atomics: no message, no receive).
  def busy(stop) do
    if :atomics.get(stop, 1) == 0 do
      _ = System.monotonic_time(:millisecond)
      fib(12)
      busy(stop)
    end
  end

  def fib_loop(stop) do
    Enum.each(1..50, fn _ -> fib(15) end)
    if :atomics.get(stop, 1) == 0, do: fib_loop(stop)
  end

  def run do
    requests = String.to_integer(System.get_env("REQUESTS", "200"))
    shape = System.get_env("SHAPE", "busy")
    sink = spawn(fn -> drop() end)

    IO.puts("""
    stack requests to a computing process (#{shape}), #{requests} per row, \
    #{:erlang.system_info(:schedulers_online)} schedulers, OTP #{:erlang.system_info(:otp_release)}
    #{pad("flags", 40)}#{pad("p50", 8)}#{pad("p90", 8)}#{pad("p99", 8)}#{pad("max", 8)}late (>1 ms)\
    """)

    rows = [
      {"none", []},
      {"running", [:running]},
      {"running (tracer module)", {:module, [:running]}},
      {"running_procs", [:running_procs]},
      {"garbage_collection", [:garbage_collection]},
      {"receive", [:receive]},
      {"call (no pattern)", [:call]},
      {"running, garbage_collection, receive", [:running, :garbage_collection, :receive]}
    ]

    for {label, flags} <- rows do
      lats = measure(flags, sink, requests, shape)
      sorted = Enum.sort(lats)
      late = Enum.count(lats, &(&1 > 1000)) / length(lats)

      IO.puts(
        pad(label, 40) <>
          pad(at(sorted, 0.5), 8) <>
          pad(at(sorted, 0.9), 8) <>
          pad(at(sorted, 0.99), 8) <>
          pad(List.last(sorted), 8) <> "#{Float.round(late * 100, 1)}%"
      )
    end
  end

  defp measure(flags, sink, requests, shape) do
    me = self()
    stop = :atomics.new(1, [])

    target =
      spawn(fn ->
        receive do: (:go -> :ok)
        if shape == "fib", do: fib_loop(stop), else: busy(stop)
        send(me, {:done, self()})
      end)

    case flags do
      [] ->
        :ok

      {:module, flags} ->
        :erlang.trace(target, true, [{:tracer, FlameOn.Bench.FloorTracer, []} | flags])

      flags ->
        :erlang.trace(target, true, [{:tracer, sink} | flags])
    end

    send(target, :go)
    Process.sleep(2)

    lats =
      for _ <- 1..requests do
        t = System.monotonic_time(:microsecond)
        Process.info(target, [:current_stacktrace])
        d = System.monotonic_time(:microsecond) - t
        Process.sleep(1)
        d
      end

    :atomics.put(stop, 1, 1)
    receive do: ({:done, ^target} -> :ok)
    lats
  end

  defp drop do
    receive do: (_ -> drop())
  end

  defp at(sorted, q), do: Enum.at(sorted, min(trunc(q * length(sorted)), length(sorted) - 1))
  defp pad(value, width), do: String.pad_trailing(to_string(value), width)
end

FlameOn.Bench.SignalLatency.run()
