# sample-mode tail traces on a loop, for perf
work = fn -> Enum.reduce(1..1000, 0, fn k, acc -> rem(acc * 31 + k, 1_000_003) end) end
IO.puts("os pid #{System.pid()}")
mode = String.to_atom(System.get_env("MODE", "sample"))
n = String.to_integer(System.get_env("N", "3000"))
t0 = System.monotonic_time(:microsecond)
for _ <- 1..n do
  FlameOn.Client.Tracing.trace("x", work, mode: mode, sample_rate: 1.0, threshold_ms: 250)
end
IO.puts("#{mode}: #{(System.monotonic_time(:microsecond) - t0) / n} us per trace")
