defmodule FlameOn.Client.ProcessName do
  @moduledoc """
  What a process is called in every output: a name, with its pid beside it
  (`FlameOn.Client.Profile.process_label/2`):
  `"MyApp.Inventory <0.178.0>"`.

  The name is the first of:

    1. its registered name: `"MyApp.Inventory"`, `"logger"`;
    2. its process label (`Process.set_label/1` on Elixir 1.17+,
       `:proc_lib.set_label/1` on OTP 27+; both keep it under
       `:"$process_label"` in the process dictionary, where
       `:proc_lib.get_label/1` reads it): a string as it is, another term
       inspected, `"{:worker, 3}"`;
    3. its initial call, the way `:proc_lib.translate_initial_call/1` tells
       it (`:"$initial_call"` in the process dictionary, set by `proc_lib`,
       before `process_info`'s `:initial_call`):
       * a `GenServer`, `:gen_statem` or other `:gen` behaviour: its
         callback module, `"MyApp.Cart"`; a supervisor: its module;
       * a `Task` (Elixir keeps `:"$callers"` in its dictionary and the
         task's function in `:"$initial_call"`): `"Task MyApp.Mailer.deliver/1"`
         (an anonymous function reads `"Task MyApp.Web.-index/2-fun-0-/0"`);
       * anything else: the function, `"MyApp.Worker.loop/1"`,
         `"timer:sleep/1"`.

  A process started with a bare fun (`spawn(fn -> ... end)`) has
  `erlang:apply/2` as its initial call, which names nothing: it is shown by
  its pid alone, as is a process whose name could not be read (it exited
  before the trace saw it, or it runs on a node that sent no names).

  Names are read **while the trace runs**, since a process may be gone by
  the time its profile is exported: when a process is first traced, when a
  cross-process trace follows a new process (and again shortly after, for
  a `proc_lib` process caught before it said what it is), and for any
  process still unnamed when the trace finishes. They are kept in the
  profile (`FlameOn.Client.Profile`'s `process_names`) and in the span
  graph (each `FlameOn.Client.Graph.Span`'s `name`). A trace across nodes
  names each node's processes on that node.

  Reading a name is one `process_info/2` call with a list of items. From
  OTP 26.2 it asks for the three dictionary keys alone; before, it copies
  the process dictionary once.

      iex> FlameOn.Client.ProcessName.from_info(registered_name: :inventory, initial_call: {:proc_lib, :init_p, 5})
      "inventory"
      iex> FlameOn.Client.ProcessName.from_info(
      ...>   registered_name: [],
      ...>   initial_call: {:proc_lib, :init_p, 5},
      ...>   dictionary: ["$initial_call": {MyApp.Cart, :init, 1}, "$ancestors": [self()]]
      ...> )
      "MyApp.Cart"
      iex> FlameOn.Client.ProcessName.from_info(
      ...>   registered_name: [],
      ...>   initial_call: {:proc_lib, :init_p, 5},
      ...>   dictionary: ["$callers": [self()], "$initial_call": {MyApp.Mailer, :deliver, 1}]
      ...> )
      "Task MyApp.Mailer.deliver/1"
      iex> FlameOn.Client.ProcessName.from_info(registered_name: [], initial_call: {:erlang, :apply, 2}, dictionary: [])
      nil
  """

  alias FlameOn.Client.Graph
  alias FlameOn.Client.Profile

  @typedoc "Names by process: a string, or `nil` for a process that was read and has none."
  @type names :: %{optional(pid()) => String.t() | nil}

  # Long labels and inspected terms are cut: a name is a label, not a dump.
  @max_length 120

  @dict_keys [:"$initial_call", :"$process_label", :"$callers"]

  @doc """
  The name of `pid`, a live process of this node, read now: a string, or
  `nil` when it has none (or is gone, or runs on another node).
  """
  @spec read(pid()) :: String.t() | nil
  def read(pid) do
    case lookup(pid) do
      {:ok, name} -> name
      _ -> nil
    end
  end

  @doc """
  Reads `pid`: `{:ok, name}` (`nil`: it has none), `:gone` (not alive, or
  not of this node) or `{:early, name}`: a `proc_lib` process that has not
  said what it is yet (it has not run its first instructions), to be read
  again soon; `name` is what is known so far (`"Task"` for a task that
  has not set its function yet, else `nil`).
  """
  @spec lookup(pid()) :: {:ok, String.t() | nil} | {:early, String.t() | nil} | :gone
  def lookup(pid) when is_pid(pid) and node(pid) == node() do
    case :erlang.process_info(pid, items()) do
      :undefined -> :gone
      info -> name(info)
    end
  end

  def lookup(_pid), do: :gone

  @doc """
  The name `process_info/2`'s answer gives (its `:registered_name`,
  `:initial_call` and `:dictionary` items, or `{:dictionary, key}` items):
  a string, or `nil`. See the module documentation for the rules.
  """
  @spec from_info([{term(), term()}]) :: String.t() | nil
  def from_info(info) do
    case name(info) do
      {:ok, name} -> name
      {:early, name} -> name
    end
  end

  @doc """
  What `from_info/1` names the calling process by, read now without
  copying its dictionary: its registered name, its initial call and the
  dictionary keys a name comes from, as `process_info/2` gives them.

      iex> Process.put(:"$process_label", :checkout)
      iex> FlameOn.Client.ProcessName.from_info(FlameOn.Client.ProcessName.self_info())
      "checkout"
  """
  @spec self_info() :: [{term(), term()}]
  def self_info do
    # (no registered name: [] rather than the tuple)
    registered =
      case :erlang.process_info(self(), :registered_name) do
        {:registered_name, _} = named -> named
        [] -> {:registered_name, []}
      end

    [
      registered,
      :erlang.process_info(self(), :initial_call)
      | for(key <- @dict_keys, do: {{:dictionary, key}, Process.get(key, :undefined)})
    ]
  end

  @doc """
  `known` plus the names of those `pids` it lacks, read now (processes of
  this node that still run). A process read without a name maps to `nil`,
  so that it is not read again.
  """
  @spec complete(names(), [pid() | term()]) :: names()
  def complete(known, pids) do
    Enum.reduce(pids, known, fn pid, acc ->
      cond do
        not is_pid(pid) or node(pid) != node() or Map.has_key?(acc, pid) ->
          acc

        true ->
          case lookup(pid) do
            {:ok, name} -> Map.put(acc, pid, name)
            {:early, name} -> Map.put(acc, pid, name)
            :gone -> acc
          end
      end
    end)
  end

  @doc """
  Names `profile`'s processes: the names in `known` (read while it ran),
  then those still missing, read now; they go into `process_names` and
  each span's `name`.
  """
  @spec name_profile(Profile.t(), names()) :: Profile.t()
  def name_profile(%Profile{} = profile, known) do
    known = Map.merge(known, profile.process_names)
    names = known |> complete(pids(profile)) |> strings()

    %{
      profile
      | process_names: Map.merge(profile.process_names, names),
        graph: name_graph(profile.graph, names)
    }
  end

  @doc "Each span named after its process in `names` (one `names` lacks keeps its name)."
  @spec name_graph(Graph.t() | nil, names()) :: Graph.t() | nil
  def name_graph(nil, _names), do: nil

  def name_graph(%Graph{spans: spans} = graph, names) do
    %{graph | spans: Enum.map(spans, &%{&1 | name: Map.get(names, &1.pid) || &1.name})}
  end

  @doc "The names that are strings (those read without one left out)."
  @spec strings(names()) :: %{pid() => String.t()}
  def strings(names), do: for({pid, name} <- names, is_binary(name), into: %{}, do: {pid, name})

  # Every process a profile shows.
  defp pids(%Profile{} = profile) do
    spans = if profile.graph, do: Enum.map(profile.graph.spans, & &1.pid), else: []

    Enum.uniq(
      [profile.pid | Map.keys(profile.stacks)] ++
        Map.keys(profile.samples) ++ Map.keys(profile.metrics) ++ spans
    )
  end

  ## Reading

  # {:dictionary, Key} items came with OTP 26.2: one process_info call asks
  # for the three keys alone. Before, the whole dictionary is copied.
  defp items do
    case :persistent_term.get({__MODULE__, :items}, nil) do
      nil ->
        items =
          try do
            dict = for key <- @dict_keys, do: {:dictionary, key}
            _ = :erlang.process_info(self(), dict)
            [:registered_name, :initial_call | dict]
          rescue
            ArgumentError -> [:registered_name, :initial_call, :dictionary]
          end

        :persistent_term.put({__MODULE__, :items}, items)
        items

      items ->
        items
    end
  end

  defp name(info) do
    {registered, initial, dict} = fields(info)

    cond do
      is_atom(registered) and registered not in [nil, []] ->
        {:ok, atom_text(registered)}

      Map.get(dict, :"$process_label", :undefined) not in [:undefined, nil] ->
        {:ok, label_text(dict[:"$process_label"])}

      true ->
        initial_call(Map.get(dict, :"$initial_call"), initial, Map.get(dict, :"$callers"))
    end
  end

  defp fields(info) do
    Enum.reduce(info, {nil, nil, %{}}, fn
      {:registered_name, name}, {_, i, d} ->
        {name, i, d}

      {:initial_call, mfa}, {r, _, d} ->
        {r, mfa, d}

      {:dictionary, dict}, {r, i, d} when is_list(dict) ->
        {r, i, Map.merge(d, for({k, v} <- dict, k in @dict_keys, into: %{}, do: {k, v}))}

      {{:dictionary, key}, :undefined}, acc when key in @dict_keys ->
        acc

      {{:dictionary, key}, value}, {r, i, d} when key in @dict_keys ->
        {r, i, Map.put(d, key, value)}

      _other, acc ->
        acc
    end)
  end

  # Task.Supervised sets the task's function as $initial_call when the
  # task starts, over proc_lib's own (Task.Supervised's entry point; Elixir
  # 1.18 spawns tasks without proc_lib, so the process's own initial call is
  # that entry point); proc_lib puts its $initial_call first thing in the
  # new process.
  defp initial_call({Task.Supervised, _, _}, _initial, _callers), do: {:early, "Task"}
  defp initial_call(nil, {Task.Supervised, _, _}, _callers), do: {:early, "Task"}
  defp initial_call(nil, {:proc_lib, _, _}, _callers), do: {:early, nil}

  defp initial_call({m, f, a} = mfa, _initial, callers) when is_atom(m) and is_atom(f) do
    cond do
      is_list(callers) -> {:ok, "Task " <> mfa_text(mfa)}
      f == :init and a == 1 -> {:ok, atom_text(m)}
      m == :supervisor and a == 1 -> {:ok, atom_text(f)}
      true -> {:ok, mfa_text(mfa)}
    end
  end

  defp initial_call(nil, {:erlang, :apply, 2}, _callers), do: {:ok, nil}

  defp initial_call(nil, {m, f, a} = mfa, _callers)
       when is_atom(m) and is_atom(f) and is_integer(a),
       do: {:ok, mfa_text(mfa)}

  defp initial_call(_dict, _initial, _callers), do: {:ok, nil}

  ## Text

  defp atom_text(atom) do
    case Atom.to_string(atom) do
      "Elixir." <> name -> name
      name -> name
    end
  end

  defp mfa_text({m, f, a}) when is_integer(a), do: Profile.frame_name({m, f, a})
  defp mfa_text({m, f, args}) when is_list(args), do: Profile.frame_name({m, f, length(args)})

  defp label_text(label) when is_binary(label) do
    if String.printable?(label), do: cut(label), else: inspect_text(label)
  end

  defp label_text(label) when is_atom(label), do: cut(atom_text(label))
  defp label_text(label), do: inspect_text(label)

  defp inspect_text(term), do: cut(inspect(term, limit: 8, printable_limit: @max_length))

  defp cut(text) do
    if String.length(text) > @max_length,
      do: String.slice(text, 0, @max_length - 1) <> "…",
      else: text
  end
end
