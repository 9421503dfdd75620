defmodule FlameOn.Client.Export.Util do
  @moduledoc false
  # Helpers shared by the exporters: process order and labels, stack parsing.

  alias FlameOn.Client.Profile

  @doc "`\"<0.96.0>\"` (`\"<0.96.0>@node\"` on another node): `Profile.pid_text/1`."
  @spec pid_text(pid()) :: String.t()
  defdelegate pid_text(pid), to: Profile

  @doc """
  The processes of the profile's stacks in export order: the traced process
  first, then the others in term order.
  """
  @spec pids(Profile.t()) :: [pid()]
  def pids(%Profile{stacks: stacks, pid: root}) do
    stacks |> Map.keys() |> order(root)
  end

  @doc "Orders `pids` with `root` first and the rest sorted."
  @spec order([pid()], pid() | nil) :: [pid()]
  defdelegate order(pids, root), to: FlameOn.Client.Profile.Tree

  @doc "A `%{pid => value}` map as a list in `order/2` order."
  @spec order_map(%{pid() => v}, pid() | nil) :: [{pid(), v}] when v: term()
  def order_map(map, root), do: for(pid <- order(Map.keys(map), root), do: {pid, map[pid]})

  @doc """
  The names of the profile's processes, `%{pid => name}`
  (`FlameOn.Client.Profile.names/1`: read while tracing).
  """
  @spec names(Profile.t()) :: %{pid() => String.t()}
  defdelegate names(profile), to: Profile

  @doc "`\"<0.96.0>\"`, or `\"MyApp.Inventory <0.96.0>\"` for a named process (`Profile.process_label/2`)."
  @spec process_label(pid(), %{pid() => String.t()}) :: String.t()
  defdelegate process_label(pid, names), to: Profile

  @doc "A stack's frames, root first (`\"\"` has none)."
  @spec frames(String.t()) :: [String.t()]
  def frames(""), do: []
  def frames(stack), do: :binary.split(stack, ";", [:global])

  @doc "Numbers things in order of first sight (`FlameOn.Client.Profile.Tree.intern/2`)."
  @spec intern(term(), {map(), non_neg_integer()}) ::
          {non_neg_integer(), {map(), non_neg_integer()}}
  defdelegate intern(key, table), to: FlameOn.Client.Profile.Tree

  @doc "Total microseconds of a list of `{stack, us}`."
  @spec sum([{String.t(), non_neg_integer()}]) :: non_neg_integer()
  def sum(entries), do: Enum.reduce(entries, 0, fn {_stack, us}, acc -> acc + us end)

  @doc "The exporter's name and version, as written into the files."
  @spec exporter() :: String.t()
  def exporter do
    case Application.spec(:flame_on_client, :vsn) do
      nil -> "flame_on_client"
      vsn -> "flame_on_client #{vsn}"
    end
  end
end
