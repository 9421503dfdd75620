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

defmodule FlameOnNamesTest.Worker do
  @moduledoc false
  # What a Task and a plain spawn run.

  alias FlameOn.Client.Test.Workloads

  # busy until told to stop
  def churn do
    receive do
      :stop -> :ok
    after
      0 ->
        Workloads.busy(2)
        churn()
    end
  end

  def loop, do: churn()

  # Takes a request of the trace (a process is named once the trace sees
  # it take one: one whose first message is its last, as it ends, may be
  # gone before its name can be read), works, then tells `to`.
  def crunch(to, ms) do
    receive do
      :go -> :ok
    end

    Workloads.busy(ms)
    send(to, {:crunched, self()})
  end

  def task_work(to) do
    send(to, {:task_working, self()})
    Workloads.busy(30)
  end
end

defmodule FlameOn.Client.ProcessNamesTest do
  # Every output names each process (FlameOn.Client.ProcessName): its
  # registered name, else its process label, else its initial call (a
  # GenServer's module, a Task's function, a spawn's function), with its
  # pid beside it; read while the trace runs, so that processes gone by
  # export time keep their names. Checked in the folded lines, the SVG,
  # the web UI's trace page, speedscope, Perfetto and pprof.
  use ExUnit.Case, async: false

  import FlameOn.Client.Test.ExportHelpers
  import FlameOn.Client.TestHelpers

  alias FlameOn.Client.{Export, ProcessName, Profile}
  alias FlameOnNamesTest.{Store, Worker}

  @store "FlameOnNamesTest.Store"
  @worker "FlameOnNamesTest.Worker"

  setup do
    on_exit(fn -> assert_node_clean() end)
  end

  doctest FlameOn.Client.ProcessName

  test "a process's own read (self_info/0, no dictionary copied) names it as a read of it does" do
    parent = self()

    starts = [
      fn -> Process.register(self(), :self_info_named) end,
      fn -> Process.put(:"$process_label", {:worker, 7}) end,
      fn -> :ok end
    ]

    for start <- starts do
      # a task (its $callers and $initial_call): registered, labelled, plain
      {:ok, task} =
        Task.start(fn ->
          start.()
          send(parent, {:read, self(), ProcessName.from_info(ProcessName.self_info())})
          receive do: (:stop -> :ok)
        end)

      assert_receive {:read, ^task, own}
      assert own == ProcessName.read(task) and is_binary(own)
      send(task, :stop)
    end

    # a bare process (spawned with a fun): no name
    spawn(fn -> send(parent, {:read, ProcessName.from_info(ProcessName.self_info())}) end)
    assert_receive {:read, nil}
  end

  test "a whole-node trace names the processes it picked, after they are gone" do
    {:ok, inventory} = Store.start(busy: true, name: :inventory_server)
    {:ok, cart} = Store.start(busy: true)
    {:ok, task} = Task.start(&Worker.churn/0)
    plain = spawn(Worker, :loop, [])
    ours = [inventory, cart, task, plain]

    {:ok, ref} = FlameOn.Client.start_trace({:top, 10}, window_ms: 200, name: "names")
    for pid <- ours, do: assert(pid in ref.pid, inspect({pid, ref.pid}))
    Process.sleep(200)
    assert {:ok, profile} = FlameOn.Client.stop_trace(ref)

    # gone before anything is exported: the names were read while tracing
    for pid <- ours do
      ref = Process.monitor(pid)
      Process.exit(pid, :kill)
      assert_receive {:DOWN, ^ref, :process, ^pid, _}
    end

    assert_named(profile, [
      {inventory, "inventory_server"},
      {cart, @store},
      {task, "Task #{@worker}.churn/0"},
      {plain, "#{@worker}.loop/0"}
    ])
  end

  test "a cross-process trace names the processes that joined it, a task that ended too" do
    {:ok, inventory} = Store.start(name: :inventory_server)
    {:ok, cart} = Store.start([])
    test = self()

    {{task, plain}, profile} =
      FlameOn.Client.profile(
        fn ->
          GenServer.call(:inventory_server, {:work, 10})
          GenServer.call(cart, {:work, 10})
          task = Task.async(Worker, :task_work, [test])
          Task.await(task)
          plain = spawn(Worker, :crunch, [test, 20])
          send(plain, :go)
          assert_receive {:crunched, ^plain}
          {task.pid, plain}
        end,
        cross_process: true,
        name: "names"
      )

    GenServer.stop(inventory)
    GenServer.stop(cart)

    for pid <- [task, plain, inventory, cart], do: refute(Process.alive?(pid))
    # the spans carry the names too
    spans = Map.new(profile.graph.spans, &{&1.pid, &1.name})
    assert spans[cart] == @store
    assert spans[task] == "Task #{@worker}.task_work/1"

    assert_named(profile, [
      {inventory, "inventory_server"},
      {cart, @store},
      {task, "Task #{@worker}.task_work/1"},
      {plain, "#{@worker}.crunch/2"}
    ])
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

  # `profile` shows each `{pid, name}` as "name <pid>" in every output.
  defp assert_named(profile, expected) do
    for {pid, name} <- expected do
      assert profile.process_names[pid] == name, inspect({name, profile.process_names})
      assert Map.has_key?(profile.stacks, pid), name
    end

    labels = for {pid, name} <- expected, do: {pid, name, "#{name} #{pid_text(pid)}"}

    # folded: the process's frame, whitespace made "_"
    folded = profile |> Export.folded() |> IO.iodata_to_binary()

    for {_pid, _name, label} <- labels do
      prefix = "names;" <> String.replace(label, " ", "_") <> ";"
      assert folded =~ "\n" <> prefix or String.starts_with?(folded, prefix), label
    end

    # SVG: one frame per process, above the root
    frames = profile |> Export.svg() |> svg_parse!() |> svg_frames()
    level1 = for %{depth: 1, name: name} <- frames, do: name
    for {_pid, _name, label} <- labels, do: assert(label in level1, inspect({label, level1}))

    # the web UI's trace page: the process selector and the flame graph
    html = profile |> FlameOn.Client.Web.Pages.trace(nil, "test-nonce") |> IO.iodata_to_binary()

    for {_pid, _name, label} <- labels do
      escaped = label |> FlameOn.Client.Web.HTML.h() |> IO.iodata_to_binary()
      assert html =~ ">#{escaped} · ", label
      assert html =~ "<title>#{escaped} (", label
    end

    # speedscope: a profile per process, named "<trace> <label>"
    speedscope = profile |> Export.speedscope() |> json_decode!()
    names = Enum.map(speedscope["profiles"], & &1["name"])
    for {_pid, _name, label} <- labels, do: assert("names #{label}" in names, label)

    # Perfetto: the process's track is named after it
    events = profile |> Export.perfetto() |> json_decode!() |> Map.fetch!("traceEvents")

    threads =
      for %{"ph" => "M", "name" => "thread_name", "args" => %{"name" => n}} <- events, do: n

    for {_pid, _name, label} <- labels, do: assert(label in threads, inspect({label, threads}))

    # pprof: a "pid" and a "process" label on each of its samples
    pprof = profile |> Export.pprof() |> pprof_decode!()

    for {pid, name, _label} <- labels do
      mine = for s <- pprof.samples, {"pid", pid_text(pid)} in s.labels, do: s.labels
      assert mine != [], name
      assert Enum.all?(mine, &(&1 == [{"pid", pid_text(pid)}, {"process", name}])), name
    end
  end

  defp pid_text(pid), do: Profile.pid_text(pid)
end
