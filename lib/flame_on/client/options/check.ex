defmodule FlameOn.Client.Options.Check do
  @moduledoc false
  # The checks of FlameOn.Client.Options: a keyword list of known keys
  # (an unknown one raises naming it, the nearest known one and all of
  # them), and each value of its kind (a wrong one raises saying what was
  # expected).

  @limit_keys [
    :max_nodes,
    :max_depth,
    :max_processes,
    :max_frames,
    :max_stack_frames,
    :max_stack_bytes,
    :max_spans,
    :max_pending_calls,
    :max_fanout
  ]
  @cluster_keys [:nodes, :arm_timeout_ms, :max_part_bytes]

  @doc """
  The options as given, a map: raises `ArgumentError` unless `opts` is a
  keyword list of `keys` (`what` names the entry point in the message)
  whose values are valid (`modes`: the capture modes' names).
  """
  @spec given!(term(), String.t(), [atom()], [atom()]) :: map()
  def given!(opts, what, keys, modes) do
    unless is_list(opts) and Enum.all?(opts, &match?({key, _} when is_atom(key), &1)) do
      raise ArgumentError, "expected options to be a keyword list, got: #{inspect(opts)}"
    end

    case Enum.uniq(for {key, _} <- opts, key not in keys, do: key) do
      [] -> :ok
      unknown -> unknown!(unknown, what, keys)
    end

    Enum.each(opts, fn {key, value} -> check!(key, value, modes) end)
    Map.new(opts)
  end

  defp unknown!(unknown, what, keys) do
    hint =
      case suggest(hd(unknown), keys) do
        nil -> ""
        key -> " (did you mean #{inspect(key)}?)"
      end

    raise ArgumentError,
          "unknown keys #{inspect(unknown)} for #{what}#{hint}; it takes: " <>
            (keys |> Enum.sort() |> Enum.map_join(", ", &inspect/1))
  end

  defp suggest(key, keys) do
    text = Atom.to_string(key)

    keys
    |> Enum.map(&{String.jaro_distance(text, Atom.to_string(&1)), &1})
    |> Enum.max(fn -> {0, nil} end)
    |> case do
      {score, best} when score >= 0.8 -> best
      _ -> nil
    end
  end

  @positive [
              :max_duration_ms,
              :max_samples,
              :duration_ms,
              :window_ms,
              :max_timeout_ms,
              :max_captures,
              :max_connections,
              :arm_timeout_ms,
              :max_part_bytes
            ] ++ @limit_keys

  @doc """
  Raises `ArgumentError` unless `value` is a valid `key`; nil stands for
  "not given" where a default or the environment fills it in.
  """
  @spec check!(atom(), term(), [atom()]) :: :ok
  def check!(key, value, modes) do
    case check(key, value, modes) do
      :ok -> :ok
      {:error, expected} -> invalid!(key, expected, value)
    end
  end

  defp check(key, n, _modes) when key in @positive and is_integer(n) and n > 0, do: :ok
  defp check(key, _, _modes) when key in @positive, do: {:error, "a positive integer"}
  defp check(:name, name, _modes) when is_binary(name), do: :ok
  defp check(:name, _, _modes), do: {:error, "a string"}

  defp check(:mode, mode, modes),
    do: if(mode == nil or mode in modes, do: :ok, else: {:error, alternatives(modes)})

  defp check(:timeout, :infinity, _modes), do: :ok
  defp check(:timeout, ms, _modes) when is_integer(ms) and ms > 0 and ms <= 4_294_967_295, do: :ok
  defp check(:timeout, _, _modes), do: {:error, "a positive integer or :infinity"}
  defp check(:cross_process, flag, _modes) when is_boolean(flag) or is_nil(flag), do: :ok
  defp check(:cross_process, _, _modes), do: {:error, "a boolean"}
  defp check(:follow, follow, _modes) when follow in [:messages, :calls], do: :ok
  defp check(:follow, _, _modes), do: {:error, ":messages or :calls"}
  defp check(:sleep, view, _modes) when view in [:default, :raw], do: :ok
  defp check(:sleep, _, _modes), do: {:error, ":default or :raw"}
  defp check(:cluster, false, _modes), do: :ok

  defp check(:cluster, config, modes) when is_list(config) do
    given!(config, "the :cluster option", @cluster_keys, modes)
    :ok
  end

  defp check(:cluster, _, _modes), do: {:error, "false or a keyword list"}
  defp check(:interval_us, us, _modes) when is_integer(us) and us >= 1_000, do: :ok
  defp check(:interval_us, _, _modes), do: {:error, "an integer of at least 1000"}
  defp check(:frequency, hz, _modes) when is_integer(hz) and hz in 1..10_000, do: :ok
  defp check(:frequency, _, _modes), do: {:error, "an integer from 1 to 10000 (Hz)"}
  defp check(:alloc, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:alloc, _, _modes), do: {:error, "a boolean"}
  defp check(:collapse_recursion, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:collapse_recursion, _, _modes), do: {:error, "a boolean"}
  defp check(:split_status, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:split_status, _, _modes), do: {:error, "a boolean"}
  defp check(:sample_rate, nil, _modes), do: :ok
  defp check(:sample_rate, rate, _modes) when is_number(rate) and rate >= 0 and rate <= 1, do: :ok
  defp check(:sample_rate, _, _modes), do: {:error, "a number from 0.0 to 1.0"}
  defp check(:threshold_ms, nil, _modes), do: :ok
  defp check(:threshold_ms, ms, _modes) when is_number(ms) and ms >= 0, do: :ok
  defp check(:threshold_ms, _, _modes), do: {:error, "a non-negative number"}
  # checked (and raised on) by Shipper.normalize!/1, with its own messages
  defp check(:shipper, _, _modes), do: :ok
  defp check(:store, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:store, _, _modes), do: {:error, "a boolean"}
  defp check(:type, type, _modes) when type in [:call_time, :call_memory], do: :ok
  defp check(:type, _, _modes), do: {:error, ":call_time or :call_memory"}
  defp check(:set_on_spawn, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:set_on_spawn, _, _modes), do: {:error, "a boolean"}
  defp check(:dir, dir, _modes) when is_binary(dir) and dir != "", do: :ok
  defp check(:dir, _, _modes), do: {:error, "a non-empty string"}
  defp check(:formats, formats, _modes), do: formats(formats)
  defp check(:summary, n, _modes) when n == :all or (is_integer(n) and n > 0), do: :ok
  defp check(:summary, _, _modes), do: {:error, "a positive integer or :all"}
  defp check(:regression, flag, _modes) when is_boolean(flag), do: :ok
  defp check(:regression, opts, _modes) when is_list(opts), do: regression(opts)
  defp check(:regression, _, _modes), do: {:error, "false, true or [ratio: 1.2, min_ms: 5]"}
  defp check(:port, port, _modes) when is_integer(port) and port in 0..65_535, do: :ok
  defp check(:port, _, _modes), do: {:error, "an integer from 0 to 65535"}
  defp check(:ip, ip, _modes), do: ip(ip)
  defp check(:token, nil, _modes), do: :ok
  defp check(:token, token, _modes) when is_binary(token) and token != "", do: :ok
  defp check(:token, _, _modes), do: {:error, "a non-empty string"}
  defp check(:nodes, nodes, _modes) when is_list(nodes), do: nodes(nodes)
  defp check(:nodes, _, _modes), do: {:error, "a list of nodes"}

  @doc "`[:a, :b, :c]` as `\":a, :b or :c\"`."
  @spec alternatives([atom()]) :: String.t()
  def alternatives(names) do
    [last | rest] = names |> Enum.sort() |> Enum.map(&inspect/1) |> Enum.reverse()
    Enum.join(Enum.reverse(rest), ", ") <> " or " <> last
  end

  defp formats(formats) when is_list(formats) and formats != [] do
    known = FlameOn.Client.Export.formats()

    case Enum.find(formats, &(&1 not in known)) do
      nil ->
        :ok

      format ->
        raise ArgumentError,
              "unknown export format #{inspect(format)}, expected one of #{inspect(known)}"
    end
  end

  defp formats(_), do: {:error, "a non-empty list of export formats"}

  defp regression(opts) do
    valid? =
      Keyword.keyword?(opts) and
        Enum.all?(opts, fn
          {:ratio, r} -> is_number(r) and r >= 1
          {:min_ms, ms} -> is_number(ms) and ms >= 0
          _ -> false
        end)

    if valid?,
      do: :ok,
      else: {:error, "false, true or a keyword list of :ratio (>= 1) and :min_ms (>= 0)"}
  end

  defp ip(ip) when is_tuple(ip) do
    case :inet.ntoa(ip) do
      {:error, _} -> {:error, "an IP address"}
      _ -> :ok
    end
  end

  defp ip(text) when is_binary(text) do
    case :inet.parse_address(String.to_charlist(text)) do
      {:ok, _} -> :ok
      {:error, _} -> {:error, "an IP address"}
    end
  end

  defp ip(_), do: {:error, "an IP address"}

  defp nodes(nodes) do
    if Enum.all?(nodes, &is_atom/1), do: :ok, else: {:error, "a list of nodes"}
  end

  @doc false
  @spec invalid!(atom(), String.t(), term()) :: no_return()
  def invalid!(key, expected, got) do
    raise ArgumentError, "expected #{inspect(key)} to be #{expected}, got: #{inspect(got)}"
  end
end
