# PropEr's helpers, and PropEr on the code path (Elixir 1.15+ prunes it).
Code.require_file("support/proper_helpers.exs", __DIR__)
FlameOn.Client.ProperHelpers.add_code_path()
# The OTP tools some tests drive (:dbg, :tprof, :eprof), on the code path
# before the test files compile, so calls to them compile without warnings;
# a test that needs one fails with its package when it is missing.
Enum.each([:runtime_tools, :tools], &FlameOn.Client.Test.Tools.otp_lib/1)

# A loaded 2-core CI machine can take well over the default 100 ms to
# deliver a message; assertions that a message comes wait up to 5 s.
# mode :native's tests run in a VM that can sample natively (started with
# +JPperf true, perf_event_open allowed: scripts/test runs them so); the
# tests of its absence in one that cannot.
native? = FlameOn.Client.Node.PerfSampler.available?()

# A crash in the library's code fails the suite (after it ran).
FlameOn.Client.Test.CrashWatch.start()

FlameOn.Client.Test.FailureRecap.start()

# Failures are printed again at the end, where a CI log's tail shows them.
ExUnit.start(
  assert_receive_timeout: 5_000,
  formatters: [ExUnit.CLIFormatter, FlameOn.Client.Test.FailureRecap],
  exclude: if(native?, do: [:native_unavailable], else: [:native])
)
