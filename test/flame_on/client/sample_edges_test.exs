defmodule FlameOn.Client.SampleEdgesTest do
  # Mode :sample at the edges of what a sampler sees: work shorter than its
  # interval (stats say so instead of leaving one bare frame), and the
  # bursts before a trace's first sample (the traced code's, not the root's).
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

    # the web page says so, and what to do
    html = profile |> FlameOn.Client.Web.Pages.trace(nil, "n") |> IO.iodata_to_binary()
    assert html =~ "Few samples:"
    assert html =~ "exact mode"
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
    html = profile |> FlameOn.Client.Web.Pages.trace(nil, "n") |> IO.iodata_to_binary()
    refute html =~ "Few samples:"
  end

  def first_burst, do: {:burst, spin(System.monotonic_time(:microsecond) + 500)}

  # The first burst (a 0.5 ms spin) comes before any sample can; then a
  # 5 ms sleep, then 20 ms of work. Checked over 5 traces, of which one may
  # miss: on a loaded machine a sampler woken at the end of the sleep can
  # wait for a CPU longer than the work lasts, and then no sample says
  # where the work went.
  test "the bursts before the first sample are under the traced code, never the bare root" do
    failures =
      for _ <- 1..5 do
        {_, profile} =
          FlameOn.Client.profile(
            fn ->
              first_burst()
              Process.sleep(5)
              spin(System.monotonic_time(:microsecond) + 20_000)
            end,
            mode: :sample
          )

        stacks = profile.stacks[self()]
        bare = time_where(profile, self(), &(&1 == "FlameOn.Client.profile/2"))
        slept = time_where(profile, self(), &String.ends_with?(&1, "Process.sleep/1;SLEEP"))
        sleep_self = time_where(profile, self(), &String.ends_with?(&1, "Process.sleep/1"))

        # the root's own frame holds the moments around the call, not half
        # of the first burst; the sleep is a wait, with next to no self time
        if bare < 250 and slept >= 4_000 and sleep_self <= 0.1 * slept,
          do: [],
          else: [stacks]
      end
      |> Enum.concat()

    assert length(failures) <= 1, inspect(failures)
  end
end
