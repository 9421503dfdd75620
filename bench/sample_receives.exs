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
#     mix run bench/sample_receives.exs          # about 1 min
#
# Prints, per condition, the median µs per call over the rounds and the
# core's events per call; and the receive flag's cost as the median (and
# quartiles) of each round's own ratio with / without it, and in ns per
# receive event (the round's time difference over its extra events).

defmodule FlameOn.Bench.SampleReceives do
  @moduledoc false

  defmodule Echo do
    @moduledoc false
    use GenServer
    def init(:ok), do: {:ok, nil}
    def handle_call(msg, _from, state), do: {:reply, msg, state}
  end

  @calls 20_000
  @rounds 21

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

    rounds =
      for round <- 1..@rounds do
        order = Enum.drop(conditions, rem(round, 3)) ++ Enum.take(conditions, rem(round, 3))
        Map.new(order, &{&1, run(server, &1)})
      end

    results = Map.new(conditions, fn c -> {c, Enum.map(rounds, & &1[c])} end)

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

    {_, ev_with} = medians.sample
    {_, ev_without} = medians.no_receive

    ratios = Enum.sort(for r <- rounds, do: elem(r.sample, 0) / elem(r.no_receive, 0))

    per_event =
      for r <- rounds do
        {with, e_with} = r.sample
        {without, e_without} = r.no_receive
        (with - without) * 1000 / max(e_with - e_without, 1.0e-9)
      end

    q = fn list, k -> Enum.at(Enum.sort(list), div(k * (length(list) - 1), 4)) end

    IO.puts(
      "receive flag: #{Float.round(ev_with / max(ev_without, 1.0e-9), 3)}x events " <>
        "(+#{Float.round(ev_with - ev_without, 2)} per call); time per call, paired by round: " <>
        "median #{Float.round(q.(ratios, 2), 3)}x (quartiles #{Float.round(q.(ratios, 1), 3)}-" <>
        "#{Float.round(q.(ratios, 3), 3)}), #{round(q.(per_event, 2))} ns per receive event " <>
        "(quartiles #{round(q.(per_event, 1))} to #{round(q.(per_event, 3))})"
    )

    GenServer.stop(server)
  end
end

FlameOn.Bench.SampleReceives.main()
