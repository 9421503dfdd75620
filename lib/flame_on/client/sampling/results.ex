defmodule FlameOn.Client.Sampling.Results do
  @moduledoc false
  # What a stopped FlameOn.Client.Sampling.Sampler hands back (its
  # counters and metrics series), and what the samplers of one trace add
  # to its profile together.

  # Fewer samples than this and a process's stacks say next to nothing of
  # where its time went (its work was shorter than a few sampling
  # intervals): `undersampled_processes` counts them.
  @few_samples 3

  # The counters of a sampler that took no sample.
  @none %{
    metrics: [],
    samples: 0,
    same_samples: 0,
    late_ticks: 0,
    throttled_ticks: 0,
    dropped_metrics: 0,
    slept_samples: 0
  }

  @typedoc "One sample's metrics."
  @type metric :: FlameOn.Client.Profile.metric()

  @typedoc "What a stopped sampler hands back."
  @type t :: %{
          metrics: [metric()],
          samples: non_neg_integer(),
          same_samples: non_neg_integer(),
          late_ticks: non_neg_integer(),
          throttled_ticks: non_neg_integer(),
          dropped_metrics: non_neg_integer(),
          slept_samples: non_neg_integer()
        }

  @doc "The result of a sampler that took no sample."
  @spec none() :: t()
  def none, do: @none

  @doc "A sampler's result, from its state."
  @spec of(map()) :: t()
  def of(state) do
    state
    |> Map.take(Map.keys(@none))
    |> Map.put(:metrics, Enum.reverse(state.metrics))
  end

  @doc """
  What the stopped samplers of one trace (`[{pid, result}]`) add to its
  profile: `metrics` by pid (processes with none left out) and the `stats`
  counters `late_ticks`, `throttled_ticks`, `same_samples` (samples of a
  waiting process that repeated its stack without asking it),
  `slept_samples` (those of them its sampler slept through),
  `dropped_metrics`, `sampled_processes` and `undersampled_processes` (those
  sampled fewer than #{@few_samples} times: their work was shorter than a
  few sampling intervals, and their stacks show little of it).
  """
  @spec summarize([{pid(), t()}]) :: %{metrics: map(), stats: map()}
  def summarize(results) do
    sum = fn key -> Enum.sum(for {_, r} <- results, do: Map.fetch!(r, key)) end

    %{
      metrics: for({pid, %{metrics: [_ | _] = m}} <- results, into: %{}, do: {pid, m}),
      stats: %{
        late_ticks: sum.(:late_ticks),
        throttled_ticks: sum.(:throttled_ticks),
        same_samples: sum.(:same_samples),
        slept_samples: sum.(:slept_samples),
        dropped_metrics: sum.(:dropped_metrics),
        sampled_processes: length(results),
        undersampled_processes: Enum.count(results, fn {_, r} -> r.samples < @few_samples end)
      }
    }
  end
end
