defmodule FlameOn.Client.Continuous.Window do
  @moduledoc false
  # One window of continuous profiling: the stack samples of its busiest
  # processes, folded while it is open, and closed into a compact,
  # byte-counted form that the ring keeps and that profiles are merged
  # from. Pure functions: the server (FlameOn.Client.Continuous) owns the
  # state, this module only shapes it.
  #
  # Open: `%{stacks: %{{key, raw_stack} => {samples, reductions}}, ...}`,
  # `raw_stack` the VM's stacktrace as {m, f, a} tuples, innermost first
  # (named once, at close). `key` is the process's name
  # (FlameOn.Client.ProcessName: processes that share a name are merged)
  # or, for a process without one, its pid.
  #
  # Closed: `%{from, to, mode, interval_us, samples, stacks: %{key =>
  # [{text, samples, reductions}]}, pids: %{key => pid}, names: %{key =>
  # name}, bytes, dropped_stacks, truncated_stacks}`.
  #
  # `mode` is how its samples were taken: `:sample` (stacks of the busiest
  # processes) or `:native` (CPU samples of every scheduler thread, under
  # one pseudo-process; their frames come as {m, f, a} and a chain the
  # kernel cut ends in `:cut`).

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Profile.Tree

  # Where samples of stacks past a window's `max_stacks` go, under their
  # process: their time is kept, their stacks are not.
  @overflow "[truncated]"
  # The root of a stack the VM cut at `backtrace_depth`.
  @cut "…"
  # The bytes a kept stack costs beside its text (the tuple, the list
  # cell, the map entry, the binary's header), measured on OTP 25 with
  # :erts_debug.size/1 and rounded up.
  @entry_bytes 96

  @type key :: String.t() | pid()

  @type mode :: :sample | :native

  @type open :: %{
          from: integer(),
          mode: mode(),
          started: integer(),
          interval_us: pos_integer(),
          stacks: %{{key(), [mfa()] | :overflow} => {pos_integer(), non_neg_integer()}},
          pids: %{key() => pid()},
          names: %{key() => String.t()},
          samples: non_neg_integer(),
          dropped_stacks: non_neg_integer()
        }

  @type t :: %{
          from: integer(),
          to: integer(),
          mode: mode(),
          interval_us: pos_integer(),
          samples: non_neg_integer(),
          stacks: %{key() => [{String.t(), pos_integer(), non_neg_integer()}]},
          pids: %{key() => pid()},
          names: %{key() => String.t()},
          bytes: non_neg_integer(),
          dropped_stacks: non_neg_integer(),
          truncated_stacks: non_neg_integer()
        }

  @doc "A new open window from `from` (Unix ms), of samples taken in `mode`."
  @spec open(integer(), pos_integer(), mode()) :: open()
  def open(from, interval_us, mode \\ :sample) do
    %{
      from: from,
      mode: mode,
      started: System.monotonic_time(:microsecond),
      interval_us: interval_us,
      stacks: %{},
      pids: %{},
      names: %{},
      samples: 0,
      dropped_stacks: 0
    }
  end

  @doc """
  Folds one sample of process `key` (`pid`, `name` or nil) into the open
  window: `stack` is `Process.info(pid, :current_stacktrace)`'s answer,
  `reductions` what the process did since its previous sample. A new
  distinct stack past `max_stacks` goes to its process's `"[truncated]"`
  stack and is counted in `dropped_stacks`.
  """
  @spec add(open(), key(), pid(), String.t() | nil, list(), non_neg_integer(), keyword()) ::
          open()
  def add(window, key, pid, name, stack, reductions, opts) do
    depth = Keyword.fetch!(opts, :depth)
    raw = raw(stack, depth, [])
    stacks = window.stacks

    {slot, dropped} =
      cond do
        is_map_key(stacks, {key, raw}) -> {{key, raw}, 0}
        map_size(stacks) < Keyword.fetch!(opts, :max_stacks) -> {{key, raw}, 0}
        true -> {{key, :overflow}, 1}
      end

    stacks =
      case stacks do
        %{^slot => {n, r}} -> %{stacks | slot => {n + 1, r + reductions}}
        _ -> Map.put(stacks, slot, {1, reductions})
      end

    %{
      window
      | stacks: stacks,
        pids: Map.put_new(window.pids, key, pid),
        names: if(name, do: Map.put_new(window.names, key, name), else: window.names),
        samples: window.samples + 1,
        dropped_stacks: window.dropped_stacks + dropped
    }
  end

  # {m, f, a} frames, innermost first, at most `depth`: a longer answer
  # (another user raised backtrace_depth further) is cut the same way.
  defp raw([], _depth, acc), do: Enum.reverse(acc)
  defp raw(_more, 0, acc), do: Enum.reverse([:cut | acc])

  defp raw([{m, f, a, _loc} | rest], depth, acc) when is_list(a),
    do: raw(rest, depth - 1, [{m, f, length(a)} | acc])

  defp raw([{m, f, a, _loc} | rest], depth, acc), do: raw(rest, depth - 1, [{m, f, a} | acc])
  # native samples: {m, f, a} frames, and a chain the kernel cut
  defp raw([{m, f, a} | rest], depth, acc), do: raw(rest, depth - 1, [{m, f, a} | acc])
  defp raw([:cut | _rest], _depth, acc), do: Enum.reverse([:cut | acc])
  defp raw([_other | rest], depth, acc), do: raw(rest, depth, acc)

  @doc """
  Closes the window at `to` (Unix ms): names its frames, merges stacks
  that read the same, and counts its bytes. A window over `max_bytes`
  keeps its largest stacks and moves the rest to `"[truncated]"`
  (`truncated_stacks`), so that one window always fits the ring.
  """
  @spec close(open(), integer(), pos_integer()) :: t()
  def close(window, to, max_bytes) do
    {by_key, _names} =
      Enum.reduce(window.stacks, {%{}, %{}}, fn {{key, raw}, {n, r}}, {acc, cache} ->
        {text, cache} = text(raw, cache)
        texts = Map.get(acc, key, %{})

        texts =
          case texts do
            %{^text => {n0, r0}} -> %{texts | text => {n0 + n, r0 + r}}
            _ -> Map.put(texts, text, {n, r})
          end

        {Map.put(acc, key, texts), cache}
      end)

    stacks =
      Map.new(by_key, fn {key, texts} ->
        {key, texts |> Enum.map(fn {t, {n, r}} -> {t, n, r} end) |> Enum.sort()}
      end)

    {stacks, truncated} = fit(stacks, window, max_bytes)

    %{
      from: window.from,
      to: to,
      mode: window.mode,
      interval_us: window.interval_us,
      samples: window.samples,
      stacks: stacks,
      pids: window.pids,
      names: window.names,
      bytes: bytes(stacks, window.names),
      dropped_stacks: window.dropped_stacks,
      truncated_stacks: truncated
    }
  end

  defp text(:overflow, cache), do: {@overflow, cache}

  defp text(raw, cache) do
    {names, cache} =
      Enum.reduce(raw, {[], cache}, fn frame, {names, cache} ->
        case cache do
          %{^frame => name} ->
            {[name | names], cache}

          _ ->
            name = if frame == :cut, do: @cut, else: Profile.frame_name(frame)
            {[name | names], Map.put(cache, frame, name)}
        end
      end)

    # innermost first in `raw`: reduced into root first
    {Enum.join(names, ";"), cache}
  end

  # Drops the smallest stacks into their process's "[truncated]" until the
  # window fits.
  defp fit(stacks, window, max_bytes) do
    if bytes(stacks, window.names) <= max_bytes do
      {stacks, 0}
    else
      # what stays whatever is kept: the names, and per process its key
      # and its "[truncated]" stack
      fixed =
        Enum.reduce(Map.keys(stacks), bytes(%{}, window.names), fn key, acc ->
          acc + key_bytes(key) + @entry_bytes + byte_size(@overflow) + @entry_bytes
        end)

      budget = max_bytes - fixed

      {kept, overflow, _} =
        for({key, entries} <- stacks, {text, n, r} <- entries, do: {key, text, n, r})
        |> Enum.sort_by(fn {_k, _t, n, _r} -> -n end)
        |> Enum.reduce({[], %{}, budget}, fn {key, text, n, r} = e, {kept, over, left} ->
          cost = byte_size(text) + @entry_bytes

          if cost <= left and text != @overflow do
            {[e | kept], over, left - cost}
          else
            {kept, Map.update(over, key, {n, r}, fn {n0, r0} -> {n0 + n, r0 + r} end), left}
          end
        end)

      truncated = length(for {_k, e} <- stacks, _ <- e, do: 1) - length(kept)

      kept = Enum.group_by(kept, &elem(&1, 0), fn {_k, t, n, r} -> {t, n, r} end)

      merged =
        Enum.reduce(overflow, kept, fn {key, {n, r}}, acc ->
          Map.update(acc, key, [{@overflow, n, r}], &[{@overflow, n, r} | &1])
        end)

      {Map.new(merged, fn {k, e} -> {k, Enum.sort(e)} end), max(truncated, 0)}
    end
  end

  @doc "The bytes a closed window's stacks and names take (an estimate, kept conservative)."
  @spec bytes(map(), map()) :: non_neg_integer()
  def bytes(stacks, names) do
    stack_bytes =
      Enum.reduce(stacks, 0, fn {key, entries}, acc ->
        Enum.reduce(entries, acc + key_bytes(key) + @entry_bytes, fn {text, _n, _r}, acc ->
          acc + byte_size(text) + @entry_bytes
        end)
      end)

    Enum.reduce(names, stack_bytes + 256, fn {key, name}, acc ->
      acc + key_bytes(key) + byte_size(name) + @entry_bytes
    end)
  end

  defp key_bytes(key) when is_binary(key), do: byte_size(key) + 32
  defp key_bytes(_pid), do: 32

  @doc "What `FlameOn.Client.Continuous.windows/0` shows of a closed window."
  @spec summary(t()) :: map()
  def summary(window) do
    %{
      from: window.from,
      to: window.to,
      mode: Map.get(window, :mode, :sample),
      samples: window.samples,
      processes: map_size(window.stacks),
      stacks: Enum.reduce(window.stacks, 0, fn {_k, e}, acc -> acc + length(e) end),
      bytes: window.bytes,
      dropped_stacks: window.dropped_stacks,
      truncated_stacks: window.truncated_stacks
    }
  end

  @doc """
  Merges closed windows (oldest first) into one `FlameOn.Client.Profile`:
  per process name (or pid), each stack's samples, reductions and time
  (samples × the window's sampling interval).
  """
  @spec to_profile([t()], keyword()) :: Profile.t()
  def to_profile(windows, opts \\ []) do
    {merged, pids, names} =
      Enum.reduce(windows, {%{}, %{}, %{}}, fn w, {merged, pids, names} ->
        merged =
          Enum.reduce(w.stacks, merged, fn {key, entries}, merged ->
            texts =
              Enum.reduce(entries, Map.get(merged, key, %{}), fn {t, n, r}, texts ->
                us = n * w.interval_us

                case texts do
                  %{^t => {n0, r0, us0}} -> %{texts | t => {n0 + n, r0 + r, us0 + us}}
                  _ -> Map.put(texts, t, {n, r, us})
                end
              end)

            Map.put(merged, key, texts)
          end)

        {merged, Map.merge(w.pids, pids), Map.merge(w.names, names)}
      end)

    # Keys that share a pid (a process that got its name mid-range) are
    # one process of the profile.
    by_pid =
      Enum.reduce(merged, %{}, fn {key, texts}, acc ->
        Map.update(acc, Map.fetch!(pids, key), texts, fn known ->
          Map.merge(known, texts, fn _t, {n0, r0, us0}, {n, r, us} ->
            {n0 + n, r0 + r, us0 + us}
          end)
        end)
      end)

    stacks =
      Map.new(by_pid, fn {pid, texts} ->
        {pid, texts |> Enum.map(fn {t, {_n, _r, us}} -> {t, us} end) |> Enum.sort()}
      end)

    samples =
      Map.new(by_pid, fn {pid, texts} ->
        {pid, texts |> Enum.map(fn {t, {n, r, _}} -> {t, n, r} end) |> Enum.sort()}
      end)

    process_names =
      for {key, name} <- names, Map.has_key?(merged, key), into: %{}, do: {pids[key], name}

    {from, to} =
      case windows do
        # no window: an empty profile at the range's end
        [] -> {Keyword.get(opts, :to, 0), Keyword.get(opts, :to, 0)}
        [first | _] -> {first.from, List.last(windows).to}
      end

    total = Enum.reduce(windows, 0, &(&1.samples + &2))

    interval_us =
      case windows do
        [] -> 0
        [_ | _] -> List.last(windows).interval_us
      end

    profile = %Profile{
      trace_id: System.unique_integer([:positive, :monotonic]),
      name: Keyword.get(opts, :name, "continuous"),
      mode: mode(windows),
      pid: nil,
      started_at: from * 1000 - System.time_offset(:microsecond),
      duration_us: max(to - from, 0) * 1000,
      stacks: stacks,
      samples: samples,
      process_names: process_names,
      stats: %{
        windows: length(windows),
        samples: total,
        processes: map_size(by_pid),
        interval_us: interval_us,
        sample_hz: if(interval_us > 0, do: div(1_000_000, interval_us), else: 0),
        dropped_stacks: Enum.reduce(windows, 0, &(&1.dropped_stacks + &2)),
        truncated_stacks: Enum.reduce(windows, 0, &(&1.truncated_stacks + &2))
      }
    }

    %{profile | tree: Tree.from_stacks(stacks, samples)}
  end

  # One run of continuous profiling takes every window one way; a range
  # with none is :sample.
  defp mode([]), do: :sample
  defp mode(windows), do: Map.get(List.last(windows), :mode, :sample)
end
