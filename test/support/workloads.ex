defmodule FlameOn.Client.Test.Workloads do
  @moduledoc false
  # Functions to profile in tests. Defined in a compiled module (not in the
  # test files) so their frame names are stable.

  @doc "Non-tail-recursive Fibonacci: real call depth n."
  def fib(n) when n < 2, do: n
  def fib(n), do: fib(n - 1) + fib(n - 2)

  @doc "A tail-recursive loop: constant stack depth."
  def loop(0, acc), do: acc
  def loop(n, acc), do: loop(n - 1, acc + 1)

  @doc "Calls `fib/1` repeatedly until at least `ms` milliseconds passed."
  def busy(ms) do
    deadline = System.monotonic_time(:millisecond) + ms
    busy_until(deadline, 0)
  end

  defp busy_until(deadline, acc) do
    if System.monotonic_time(:millisecond) >= deadline do
      acc
    else
      busy_until(deadline, acc + fib(12))
    end
  end

  @doc "A mixed workload of about `ms` milliseconds: CPU, a sleep, an Enum pipeline."
  def mixed(ms) do
    busy(div(ms, 2))
    Process.sleep(div(ms, 4))
    1..5_000 |> Enum.map(&(&1 * 2)) |> Enum.filter(&(rem(&1, 3) == 0)) |> Enum.sum()
    busy(div(ms, 4))
  end

  @doc """
  Body recursion `n` frames deep through two functions, then `fun`. Two
  call sites alternate, so a sampled stack keeps every level (the VM
  records a run of one return address once).
  """
  def deep_even(0, fun), do: fun.()
  def deep_even(n, fun), do: 1 + deep_odd(n - 1, fun)
  def deep_odd(0, fun), do: fun.()
  def deep_odd(n, fun), do: 1 + deep_even(n - 1, fun)

  @doc """
  Work in two parts, for diffs: `steady/1` does the same in every run,
  `grown/1` `n` times as much. Each unit is a little CPU (`fib(10)`) and
  a 20 ms wait, so that its time stays about the same on a loaded machine
  (CPU time there does not: a spike of load in one run moves it by tens
  of percent).
  """
  def two_parts(n) do
    steady(6)
    grown(3 * n)
  end

  @doc "`k` units of work."
  def steady(0), do: :ok

  def steady(k) do
    unit()
    steady(k - 1)
  end

  @doc "`k` units of work (the part of `two_parts/1` that grows)."
  def grown(0), do: :ok

  def grown(k) do
    unit()
    grown(k - 1)
  end

  defp unit do
    fib(10)
    Process.sleep(20)
  end

  @doc "Tells `parent` `{:waiting, self()}`, then waits in a receive here until `:go`."
  def wait_here(parent) do
    send(parent, {:waiting, self()})

    receive do
      :go -> :ok
    end
  end

  @doc "Raises from a known frame."
  def boom!, do: raise(RuntimeError, "boom")
end
