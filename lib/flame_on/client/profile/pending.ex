defmodule FlameOn.Client.Profile.Pending do
  @moduledoc """
  A kept trace whose `FlameOn.Client.Profile` is built when it is first
  needed: the folded tree its core session finished with and its
  counters, or the copy of its time slices and samples it replays into a
  core session then; its fields; the names of its processes read while it
  ran.

  A tail trace (`trace/3` with `threshold_ms` on the shared path, or a
  telemetry trace there) that passes its threshold ends as one. With
  shippers, `FlameOn.Client.TraceStore.keep/2` builds it at once and
  ships the profile; without, the trace store keeps it as it is and
  builds it when it is read (`FlameOn.Client.TraceStore.get/1`, the web
  UI). So where every request is kept and nobody looks at most of them,
  the core session, the stacks' texts, the tree and the time classes are
  made only for those read (`bench/tail.exs`).

      iex> tree = {{:process}, {self()}, <<>>, 1024}
      iex> pending = %FlameOn.Client.Profile.Pending{
      ...>   tree: tree,
      ...>   stats: %{},
      ...>   fields: [trace_id: 7, name: "checkout", mode: :native_tail, pid: self(),
      ...>            started_at: 0, duration_us: 1500],
      ...>   names: %{}
      ...> }
      iex> FlameOn.Client.Profile.Pending.field(pending, :duration_us)
      1500
      iex> FlameOn.Client.Profile.Pending.build(pending).name
      "checkout"
  """

  alias FlameOn.Client.{ProcessName, Profile}

  @enforce_keys [:tree, :stats, :fields, :names]
  defstruct [:tree, :stats, :fields, :names, make: nil, bytes: nil]

  @typedoc """
  `tree`: the finished core session's tree (`FlameOn.Client.Core.Native.finish/2`);
  `stats`: the profile's counters; or both nil and `make`, a function
  `{module, name, args}` that returns `{tree, stats, names}` when called (a tail
  trace's copy of its slices and samples, replayed into a core session
  then: `bytes` is what the copy holds outside the term); `fields`: the
  profile's `trace_id`, `name`, `mode`, `pid`, `started_at` and
  `duration_us`; `names`: its processes' names, read while it ran.
  """
  @type t :: %__MODULE__{
          tree: FlameOn.Client.Core.Native.tree() | nil,
          stats: map() | nil,
          fields: keyword(),
          names: ProcessName.names(),
          make: {module(), atom(), list()} | nil,
          bytes: non_neg_integer() | nil
        }

  @doc "The profile (the names of processes not in `names` are read now)."
  @spec build(t()) :: Profile.t()
  def build(%__MODULE__{tree: nil, make: {module, name, args}} = pending) do
    {tree, stats, names} = apply(module, name, args)

    build(%{pending | tree: tree, stats: stats, names: Map.merge(names, pending.names), make: nil})
  end

  def build(%__MODULE__{} = pending) do
    pending.tree
    |> Profile.build(pending.stats, pending.fields)
    |> ProcessName.name_profile(pending.names)
  end

  @doc """
  The bytes it holds: its term's, and those of a copy it replays when
  built (`bytes`), which the term only refers to.
  """
  @spec bytes(t()) :: non_neg_integer()
  def bytes(%__MODULE__{bytes: nil} = pending), do: :erlang.external_size(pending)
  def bytes(%__MODULE__{bytes: bytes} = pending), do: bytes + :erlang.external_size(pending)

  @doc "One of the profile's fields (`:trace_id`, `:name`, `:duration_us`, ...)."
  @spec field(t(), atom()) :: term()
  def field(%__MODULE__{fields: fields}, key), do: Keyword.get(fields, key)

  @doc "How many processes its tree holds (a tail trace's: one, built or not)."
  @spec processes(t()) :: non_neg_integer()
  def processes(%__MODULE__{tree: nil, make: {_, _, _}}), do: 1
  def processes(%__MODULE__{tree: tree}), do: tuple_size(elem(tree, 1))
end
