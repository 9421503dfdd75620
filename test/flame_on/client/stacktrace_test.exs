defmodule FlameOn.Client.StacktraceTest do
  # Tracing is node-global (patterns, flags).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  defmodule Raiser do
    @moduledoc false
    def check_all!(values), do: Enum.each(values, fn value -> check!(value) end)

    def check!(value) when value < 3, do: value
    # `raise` in tail position: a raising BIF (erlang:error/1 on Elixir
    # 1.18, error/3 on 1.14) called by a tail call
    def check!(value), do: raise(ArgumentError, "value out of range: #{value}")
  end

  setup do
    assert_node_clean()
    on_exit(fn -> assert_node_clean() end)
    :ok
  end

  # The raising function and its caller (below them the caller differs:
  # profile/2 or not).
  defp stacktrace_of(fun) do
    fun.()
    flunk("no exception")
  rescue
    ArgumentError -> Enum.take(__STACKTRACE__, 2)
  end

  # profile/2 raises a function's exception again with its stacktrace, and
  # that stacktrace must be the one the function has unprofiled (on OTP 27,
  # while the raising BIFs were call-traced, the exception named the next
  # function of the module as its raiser). Only OTP 27+ can fail this.
  test "a profiled function raises with the stacktrace it has unprofiled, in every mode" do
    raise_it = fn -> Raiser.check_all!([1, 7]) end
    untraced = stacktrace_of(raise_it)
    assert [{Raiser, :check!, 1, _} | _] = untraced

    for mode <- [:nif, :process, :sample] do
      traced = stacktrace_of(fn -> FlameOn.Client.profile(raise_it, mode: mode) end)
      assert traced == untraced, "#{mode}: #{inspect(traced)}"
    end
  end
end
