defmodule FlameOn.Client.NextCall.Stacks do
  @moduledoc false
  # The captured process's stacks start at the captured function.
  #
  # The session starts with the call itself, from its caller C (the gate
  # adds it as a traced call would read: C, then the function R), so exact
  # stacks read "C;R;..." ("C;g;..." once R tail-called g). Stack samples
  # (mode :sample) hold the process's whole stack: the sampler trims one at
  # R when R's frame is on it ("R;..."), but a function that tail-called
  # on, or whose frame the VM hides (the return-trace frame of the capture),
  # leaves "outer;...;C;inner" – the frames outside the call (C, the frame
  # the call returns to, and what called it) are on every sample of the
  # call. Here each stack of the captured process becomes "R;..." with
  # nothing outside the call: C and what lies below it go, R is the root.

  alias FlameOn.Client.Profile

  @cut "…"

  @doc "`profile` with `pid`'s stacks (and samples) rooted at `root`, called from `caller`."
  @spec rewrite(Profile.t(), pid(), mfa(), mfa() | nil) :: Profile.t()
  def rewrite(%Profile{} = profile, pid, root, caller) do
    r = Profile.frame_name(root)
    c = caller && Profile.frame_name(caller)
    stacks = Map.get(profile.stacks, pid, [])
    samples = Map.get(profile.samples, pid, [])
    paths = Enum.map(stacks, &elem(&1, 0)) ++ Enum.map(samples, &elem(&1, 0))
    outer = outer_part(paths, r, c)
    rename = fn stack -> rewrite_stack(stack, r, c, outer) end

    stacks = merge(for({stack, us} <- stacks, do: {rename.(stack), us}), &(&1 + &2))

    samples =
      for({stack, n, reds} <- samples, do: {rename.(stack), {n, reds}})
      |> merge(fn {n1, r1}, {n2, r2} -> {n1 + n2, r1 + r2} end)
      |> Enum.map(fn {stack, {n, reds}} -> {stack, n, reds} end)

    %{
      profile
      | stacks: put_non_empty(profile.stacks, pid, stacks),
        samples: put_non_empty(profile.samples, pid, samples),
        # the exporters walk `tree`: rebuilt from the rewritten stacks
        tree: nil
    }
  end

  defp put_non_empty(map, pid, []), do: Map.delete(map, pid)
  defp put_non_empty(map, pid, entries), do: Map.put(map, pid, entries)

  defp merge(entries, add) do
    entries
    |> Enum.reduce(%{}, fn {stack, v}, acc -> Map.update(acc, stack, v, &add.(&1, v)) end)
    |> Enum.sort()
  end

  # The frames outside the call on full samples: their longest common
  # start, up to and including its innermost frame C. nil when there are
  # none or C is not among them (then nothing is cut).
  defp outer_part(paths, r, c) do
    fulls =
      for path <- paths,
          {_status, body} = split_status(frames(path)),
          full?(body, r, c),
          do: body

    with [_ | _] <- fulls, c when c != nil <- c do
      prefix = Enum.reduce(fulls, &common_prefix/2)

      case prefix |> Enum.with_index() |> Enum.filter(fn {f, _} -> f == c end) |> List.last() do
        nil -> nil
        {_, index} -> Enum.take(prefix, index + 1)
      end
    else
      _ -> nil
    end
  end

  defp full?([], _r, _c), do: false
  defp full?([first | _], r, c), do: first not in [r, c, @cut]

  defp common_prefix([a | as], [a | bs]), do: [a | common_prefix(as, bs)]
  defp common_prefix(_as, _bs), do: []

  defp rewrite_stack("", _r, _c, _outer), do: ""

  defp rewrite_stack(stack, r, c, outer) do
    {status, body} = split_status(frames(stack))

    body =
      case body do
        [^c | rest] when c != nil -> rooted(rest, r)
        [^r | _] -> body
        [@cut | _] -> [r | body]
        _ -> cut_outer(body, outer, r)
      end

    Enum.join(status ++ body, ";")
  end

  defp rooted([r | _] = rest, r), do: rest
  defp rooted(rest, r), do: [r | rest]

  defp cut_outer(body, nil, _r), do: body

  defp cut_outer(body, outer, r) do
    if List.starts_with?(body, outer),
      do: [r | Enum.drop(body, length(outer))],
      else: body
  end

  defp frames(stack), do: String.split(stack, ";")

  # split_status: true puts the sampled status ("[running]", ...) first.
  defp split_status(["[" <> _ = first | rest] = frames) do
    if first != "[truncated]" and String.ends_with?(first, "]"),
      do: {[first], rest},
      else: {[], frames}
  end

  defp split_status(frames), do: {[], frames}
end
