# Records the trace events of a real workload to a file that
# bench/core_replay can replay through the C core.
#
#     mix run bench/record_stream.exs [FILE] [MIN_EVENTS]
#     bench/core_replay FILE
#
# FILE defaults to bench/build/realistic.trace.bin, MIN_EVENTS to 2_000_000.
# The workload (repeated until MIN_EVENTS events are recorded) is a traced
# process that, with set_on_spawn, starts a few worker processes: recursive
# list and map code, Enum pipelines, GenServer calls to an untraced server,
# string formatting and a little file I/O. Tracing uses the same flags and
# match spec as FlameOn's process mode ({:message, {:caller}}).
#
# File format ("FOTRACE1", then 32-byte little-endian records), read by
# core_replay.c:
#   u8 kind (fo_event_kind: 1 call, 2 return_to, 3 in, 4 out, 5 exit),
#   u8 flags (1 has mfa, 2 has caller), u8 arity, u8 caller arity,
#   u32 pid id, u32 module id, u32 function id, u32 caller module id,
#   u32 caller function id, i64 timestamp in ns.
# Atom and pid ids are small integers assigned in order of appearance.

defmodule FlameOn.Bench.Recorder do
  @moduledoc false
  import Bitwise

  @flags [:call, :return_to, :running, :arity, :monotonic_timestamp, :set_on_spawn]
  @match_spec [{:_, [], [{:message, {:caller}}]}]

  def record(path, min_events) do
    File.mkdir_p!(Path.dirname(path))

    recorder =
      spawn_link(fn ->
        # a raw file belongs to the process that opened it
        {:ok, file} = :file.open(path, [:write, :raw, :binary, {:delayed_write, 1 <<< 20, 1000}])
        :ok = :file.write(file, "FOTRACE1")
        loop(file, %{ids: %{}, next: 1, n: 0})
      end)

    {:ok, server} = Agent.start(fn -> %{} end)
    dir = Path.join(System.tmp_dir!(), "flame_on_record_#{System.unique_integer([:positive])}")
    File.mkdir_p!(dir)

    :erlang.trace_pattern({:_, :_, :_}, @match_spec, [:local])
    rounds = record_until(recorder, server, dir, min_events, 0)
    :erlang.trace_pattern({:_, :_, :_}, false, [:local])

    send(recorder, {:done, self()})

    events =
      receive do
        {:recorded, n} -> n
      end

    File.rm_rf!(dir)
    Agent.stop(server)
    {events, rounds}
  end

  defp record_until(recorder, server, dir, min_events, rounds) do
    parent = self()

    {pid, ref} =
      spawn_monitor(fn ->
        receive do
          :go -> :ok
        end

        workload(server, dir, rounds)
        send(parent, {:workload_done, self()})
      end)

    :erlang.trace(pid, true, [{:tracer, recorder} | @flags])
    send(pid, :go)

    receive do
      {:workload_done, ^pid} -> :ok
    end

    receive do
      {:DOWN, ^ref, :process, ^pid, _} -> :ok
    end

    send(recorder, {:count, self()})

    n =
      receive do
        {:count, n} -> n
      end

    if n >= min_events,
      do: rounds + 1,
      else: record_until(recorder, server, dir, min_events, rounds + 1)
  end

  # --- the workload -----------------------------------------------------------

  defp workload(server, dir, round) do
    tasks =
      for w <- 1..3 do
        Task.async(fn -> worker(server, dir, round * 10 + w) end)
      end

    worker(server, dir, round * 10)
    Enum.each(tasks, &Task.await(&1, :infinity))
  end

  defp worker(server, dir, seed) do
    for i <- 1..30 do
      Agent.update(server, &Map.put(&1, {seed, i}, i * i))
      _ = Agent.get(server, &Map.get(&1, {seed, i}))

      data = Map.new(1..60, fn k -> {k, %{k: k, v: rem(k * 31 + seed + i, 97), s: "v#{k}"}} end)

      _ =
        data
        |> Enum.filter(fn {_k, m} -> m.v > 30 end)
        |> Enum.sort_by(fn {_k, m} -> m.v end)
        |> Enum.map(fn {k, m} -> "#{k}=#{String.pad_leading(m.s, 6)}" end)
        |> Enum.join(",")

      _ = depth(rem(i, 12) + 4)
      _ = Enum.reduce(1..50, %{}, fn x, acc -> Map.update(acc, rem(x, 7), 1, &(&1 + 1)) end)

      if rem(i, 10) == 0 do
        path = Path.join(dir, "w#{seed}.txt")
        File.write!(path, :erlang.term_to_binary(data))
        _ = path |> File.read!() |> :erlang.binary_to_term()
      end
    end

    :ok
  end

  defp depth(0), do: [1, 2, 3] |> Enum.map(&(&1 * 2)) |> Enum.sum()
  defp depth(n), do: 1 + depth(n - 1)

  # --- the recorder -----------------------------------------------------------

  defp loop(file, st) do
    receive do
      {:trace_ts, pid, :call, mfa, caller, ts} ->
        loop(file, put(file, st, 1, pid, mfa, caller, ts))

      {:trace_ts, pid, :call, mfa, ts} ->
        loop(file, put(file, st, 1, pid, mfa, :undefined, ts))

      {:trace_ts, pid, :return_to, mfa, ts} ->
        loop(file, put(file, st, 2, pid, mfa, :undefined, ts))

      {:trace_ts, pid, tag, _, ts} when tag in [:in, :in_exiting] ->
        loop(file, put(file, st, 3, pid, :undefined, :undefined, ts))

      {:trace_ts, pid, tag, _, ts} when tag in [:out, :out_exiting, :out_exited] ->
        loop(file, put(file, st, 4, pid, :undefined, :undefined, ts))

      {:trace_ts, pid, :exit, _, ts} ->
        loop(file, put(file, st, 5, pid, :undefined, :undefined, ts))

      {:trace_ts, _pid, _tag, _, _} ->
        loop(file, st)

      {:trace_ts, _pid, _tag, _, _, _} ->
        loop(file, st)

      {:count, from} ->
        send(from, {:count, st.n})
        loop(file, st)

      {:done, from} ->
        :ok = :file.close(file)
        send(from, {:recorded, st.n})
    end
  end

  defp put(file, st, kind, pid, mfa, caller, ts) do
    {pid_id, st} = id(st, pid)
    {mflag, m, f, a, st} = mfa_ids(st, mfa)
    {cflag, cm, cf, ca, st} = mfa_ids(st, caller)
    flags = if(mflag, do: 1, else: 0) ||| if(kind == 1 and cflag, do: 2, else: 0)
    ns = System.convert_time_unit(ts, :native, :nanosecond)

    :ok =
      :file.write(
        file,
        <<kind::8, flags::8, a::8, ca::8, pid_id::little-32, m::little-32, f::little-32,
          cm::little-32, cf::little-32, ns::little-signed-64>>
      )

    %{st | n: st.n + 1}
  end

  defp mfa_ids(st, {m, f, a}) when is_atom(m) and is_atom(f) do
    {mid, st} = id(st, m)
    {fid, st} = id(st, f)
    arity = if is_list(a), do: length(a), else: a
    {true, mid, fid, min(arity, 255), st}
  end

  defp mfa_ids(st, _), do: {false, 0, 0, 0, st}

  defp id(%{ids: ids, next: next} = st, key) do
    case ids do
      %{^key => id} -> {id, st}
      _ -> {next, %{st | ids: Map.put(ids, key, next), next: next + 1}}
    end
  end
end

{path, min_events} =
  case System.argv() do
    [] -> {Path.join([__DIR__, "build", "realistic.trace.bin"]), 2_000_000}
    [path] -> {path, 2_000_000}
    [path, n | _] -> {path, String.to_integer(n)}
  end

{us, {events, rounds}} = :timer.tc(fn -> FlameOn.Bench.Recorder.record(path, min_events) end)

IO.puts(
  "recorded #{events} events (#{rounds} workload rounds) in #{div(us, 1000)} ms to #{path}; " <>
    "replay it with: bench/core_replay #{Path.relative_to_cwd(path)}"
)
