# What the `:receive` flag costs mode :sample (#24: its receive events tell
# runnable time from waits): a traced process makes GenServer.call after
# GenServer.call to an echo server (one message taken per call, the worst
# case for the flag: its slices are short), timed per call in three
# conditions, interleaved in rounds (their order rotates) so that drift
# hits them alike:
#
#   * untraced;
#   * mode :sample as it ships (flags :running, :garbage_collection, :receive);
#   * mode :sample with the receive flag taken off the traced process as its
#     work begins (`:erlang.trace(self(), false, [:receive])`): the same
#     session, sampler and tracer, no receive events.
#
#     mix run bench/sample_receives.exs          # about 30 s
#
# Prints, per condition, the median µs per call over the rounds and the
# core's events per call; ratios to untraced and between the two traced ones.

defmodule FlameOn.Bench.SampleReceives do
  @moduledoc false

  defmodule Echo do
    @moduledoc false
    use GenServer
    def init(:ok), do: {:ok, nil}
    def handle_call(msg, _from, state), do: {:reply, msg, state}
  end

  @calls 4_000
  @rounds 15

  def calls(server, n) do
    for i <- 1..n, do: GenServer.call(server, i)
    :ok
  end

  # {µs per call, events per call} of one run in a fresh process
  def run(server, condition) do
    parent = self()

    spawn(fn ->
      work = fn ->
        if condition == :no_receive, do: :erlang.trace(self(), false, [:receive])
        t0 = System.monotonic_time(:microsecond)
        calls(server, @calls)
        System.monotonic_time(:microsecond) - t0
      end

      {us, events} =
        case condition do
          :untraced ->
            {work.(), 0}

          _ ->
            {us, profile} = FlameOn.Client.profile(work, mode: :sample)
            {us, profile.stats.events}
        end

      send(parent, {:done, us / @calls, events / @calls})
    end)

    receive do
      {:done, per_call, events} -> {per_call, events}
    end
  end

  def median(list) do
    sorted = Enum.sort(list)
    Enum.at(sorted, div(length(sorted), 2))
  end

  def main do
    {:ok, server} = GenServer.start(Echo, :ok)
    conditions = [:untraced, :sample, :no_receive]
    # warm up: code loaded, the sampler's modules too
    for c <- conditions, do: run(server, c)

    results =
      for round <- 1..@rounds, reduce: Map.new(conditions, &{&1, []}) do
        acc ->
          order = Enum.drop(conditions, rem(round, 3)) ++ Enum.take(conditions, rem(round, 3))

          Enum.reduce(order, acc, fn c, acc ->
            Map.update!(acc, c, &[run(server, c) | &1])
          end)
      end

    medians =
      Map.new(results, fn {c, runs} ->
        {c, {median(Enum.map(runs, &elem(&1, 0))), median(Enum.map(runs, &elem(&1, 1)))}}
      end)

    {base, _} = medians.untraced

    IO.puts(
      "#{@calls} GenServer.call per run, #{@rounds} rounds, OTP #{System.otp_release()}, " <>
        "#{System.schedulers_online()} schedulers"
    )

    IO.puts("condition                 µs/call  x untraced  events/call")

    for c <- conditions do
      {us, events} = medians[c]

      IO.puts(
        String.pad_trailing(to_string(c), 24) <>
          to_string(:io_lib.format("~8.3f  ~9.3f  ~11.2f", [us, us / base, events * 1.0]))
      )
    end

    {with, ev_with} = medians.sample
    {without, ev_without} = medians.no_receive

    IO.puts(
      "receive flag: #{Float.round(with / without, 3)}x time per call, " <>
        "#{Float.round(ev_with / max(ev_without, 1.0e-9), 3)}x events " <>
        "(+#{Float.round(ev_with - ev_without, 2)} events per call)"
    )

    GenServer.stop(server)
  end
end

FlameOn.Bench.SampleReceives.main()
