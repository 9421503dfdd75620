# The processes named in FlameOn.Client.ProcessNamesTest. Outside
# FlameOn.Client's namespace: start_trace({:top, n}) leaves the library's
# own processes out, by their initial call.
defmodule FlameOnNamesTest.Store do
  @moduledoc false
  # A GenServer that keeps busy on its own (so that {:top, n} picks it)
  # and works when called.
  use GenServer

  alias FlameOn.Client.Test.Workloads

  def start(opts), do: GenServer.start(__MODULE__, opts[:busy], Keyword.take(opts, [:name]))

  @impl true
  def init(busy?) do
    if busy?, do: send(self(), :work)
    {:ok, busy?}
  end

  @impl true
  def handle_info(:work, busy?) do
    Workloads.busy(2)
    send(self(), :work)
    {:noreply, busy?}
  end

  @impl true
  def handle_call({:work, ms}, _from, state), do: {:reply, Workloads.busy(ms), state}
end

defmodule FlameOn.Client.ProcessNamesTest do
  # FlameOn.Client.ProcessName: a process's registered name, else its
  # process label, else its initial call (a GenServer's module, a Task's
  # function, a spawn's function).
  use ExUnit.Case, async: false

  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.ProcessName
  alias FlameOnNamesTest.Store

  @store "FlameOnNamesTest.Store"

  setup do
    on_exit(fn -> assert_node_clean() end)
  end

  test "the rules, from process_info's answer" do
    info = [registered_name: [], initial_call: {:proc_lib, :init_p, 5}]

    # a process label (Process.set_label/1, :proc_lib.set_label/1) before the initial call
    dict = ["$process_label": "checkout worker", "$initial_call": {Store, :init, 1}]
    assert ProcessName.from_info(info ++ [dictionary: dict]) == "checkout worker"
    dict = ["$process_label": {:shard, 3}, "$initial_call": {Store, :init, 1}]
    assert ProcessName.from_info(info ++ [dictionary: dict]) == "{:shard, 3}"
    # the registered name before anything
    assert ProcessName.from_info([registered_name: :inv] ++ tl(info) ++ [dictionary: dict]) ==
             "inv"

    # a supervisor: its module
    dict = ["$initial_call": {:supervisor, MyApp.Sup, 1}]
    assert ProcessName.from_info(info ++ [dictionary: dict]) == "MyApp.Sup"
    # an Erlang function
    assert ProcessName.from_info(registered_name: [], initial_call: {:timer, :sleep, 1}) ==
             "timer:sleep/1"

    # the answer to {:dictionary, key} items (OTP 26.2+)
    keyed = [
      {{:dictionary, :"$initial_call"}, {Store, :init, 1}},
      {{:dictionary, :"$process_label"}, :undefined},
      {{:dictionary, :"$callers"}, :undefined}
    ]

    assert ProcessName.from_info(info ++ keyed) == @store

    # spawn(fn -> ... end) names nothing; a task caught before it set its
    # function is a task
    assert ProcessName.from_info(registered_name: [], initial_call: {:erlang, :apply, 2}) == nil
    dict = ["$initial_call": {Task.Supervised, :reply, 5}, "$ancestors": [self()]]
    assert ProcessName.from_info(info ++ [dictionary: dict]) == "Task"
    # (Elixir 1.18 spawns tasks without proc_lib)
    assert ProcessName.from_info(registered_name: [], initial_call: {Task.Supervised, :reply, 3}) ==
             "Task"
  end

  test "a process label set in the process, read from another" do
    test = self()

    pid =
      spawn(fn ->
        # what Process.set_label/1 and :proc_lib.set_label/1 keep
        if function_exported?(:proc_lib, :set_label, 1),
          do: apply(:proc_lib, :set_label, ["checkout worker"]),
          else: Process.put(:"$process_label", "checkout worker")

        send(test, :labelled)
        receive do: (:stop -> :ok)
      end)

    assert_receive :labelled
    assert ProcessName.read(pid) == "checkout worker"
    assert ProcessName.lookup(pid) == {:ok, "checkout worker"}
    send(pid, :stop)
    ref = Process.monitor(pid)
    assert_receive {:DOWN, ^ref, _, _, _}
    assert ProcessName.lookup(pid) == :gone
    assert ProcessName.read(pid) == nil
  end
end
