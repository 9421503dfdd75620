defmodule FlameOn.Client.UndersampledTest do
  # A sample trace of work shorter than its sampler's interval shows next
  # to nothing of it: stats say so instead of leaving one bare frame.
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  setup do
    ensure_app_started()
    :ok
  end

  def spin(deadline) do
    if System.monotonic_time(:microsecond) < deadline, do: spin(deadline), else: :ok
  end

  test "a call shorter than the sampling interval counts as undersampled" do
    {55, profile} =
      FlameOn.Client.profile(fn -> Enum.sum(1..10) end, mode: :sample, interval_us: 10_000)

    assert profile.stats.sampled_processes == 1
    assert profile.stats.undersampled_processes == 1
  end

  test "work over many sampling intervals is not undersampled" do
    {_, profile} =
      FlameOn.Client.profile(
        fn -> spin(System.monotonic_time(:microsecond) + 60_000) end,
        mode: :sample,
        interval_us: 1_000
      )

    assert profile.stats.sampled_processes == 1
    # on a loaded machine the sampler may run late, but not 20 times over
    assert profile.stats.undersampled_processes == 0, inspect(profile.stats)
  end
end
