defmodule FlameOn.Client.Profile.TimeClasses do
  @moduledoc """
  Where each process's time went, by class: running its code, collecting
  garbage, runnable (preempted), waiting. The `time_classes` field of a
  `FlameOn.Client.Profile`, derived from its tree: each class is the sum of
  the process's stacks that end in that class's leaf, so the classes add up
  to the process's time in `stacks` exactly.

    * `running_us` – every stack that ends in a frame of its code (or the
      process's root `""`).
    * `gc_minor_us`, `gc_major_us` – the `"GC_MINOR"` and `"GC_MAJOR"`
      leaves: the collections' time, from the VM's `garbage_collection`
      trace events (every mode, `cross_process: true` included).
    * `runnable_us` – the `"RUNNABLE"` leaves: off a CPU with nothing to
      wait for (preempted by another process, a BIF that yields, a move to
      a dirty scheduler to collect): no message ended the wait, and the
      process then ran its code. Exact modes see the code run (a call);
      modes `:sample` and `:native` tell it by the time slice after the
      wait (`:sample`: any slice but one its sampler's stack request woke
      it for; `:native`: one with a CPU sample of its code, or 100 µs
      long); `cross_process: true` by the span graph's receive events.
    * `waiting_us` – the `"SLEEP"`, `"WAITING"` and `"ATTRIBUTED"` leaves:
      off a CPU in a receive. With `cross_process: true` the part of a wait
      that a span of the trace explains is not in the waiter's stacks (the
      span graph links it to that span; `sleep: :raw` keeps it), so it is
      not here either: what is here is its spans' `unattributed_wait_us`.
    * `gc_minor_count`, `gc_major_count`, `gc_count` – the collections the
      process started (`gc_count` is their sum), counted where their time
      is.

  `running_us + gc_minor_us + gc_major_us + runnable_us + waiting_us` is the
  sum of the process's stacks (µs, each stack rounded once).

      iex> pid = :c.pid(0, 42, 0)
      iex> profile = %FlameOn.Client.Profile{
      ...>   stacks: %{pid => [{"f/0", 10}, {"f/0;GC_MINOR", 3}, {"f/0;RUNNABLE", 2}, {"f/0;SLEEP", 5}]}
      ...> }
      iex> FlameOn.Client.Profile.TimeClasses.of(FlameOn.Client.Profile.Tree.of(profile), %{pid => {1, 0}})
      %{
        :c.pid(0, 42, 0) => %{
          running_us: 10,
          gc_minor_us: 3,
          gc_major_us: 0,
          runnable_us: 2,
          waiting_us: 5,
          gc_minor_count: 1,
          gc_major_count: 0,
          gc_count: 1
        }
      }
  """

  alias FlameOn.Client.Profile.Tree

  @type t :: %{
          running_us: non_neg_integer(),
          gc_minor_us: non_neg_integer(),
          gc_major_us: non_neg_integer(),
          runnable_us: non_neg_integer(),
          waiting_us: non_neg_integer(),
          gc_minor_count: non_neg_integer(),
          gc_major_count: non_neg_integer(),
          gc_count: non_neg_integer()
        }

  @leaves %{
    "GC_MINOR" => :gc_minor_us,
    "GC_MAJOR" => :gc_major_us,
    "RUNNABLE" => :runnable_us,
    "SLEEP" => :waiting_us,
    "WAITING" => :waiting_us,
    "ATTRIBUTED" => :waiting_us
  }

  @zero %{running_us: 0, gc_minor_us: 0, gc_major_us: 0, runnable_us: 0, waiting_us: 0}

  @doc """
  The classes of every process of `tree`, with the collections each
  started (`%{pid => {minor, major}}`; a process not there started none).
  """
  @spec of(Tree.t(), %{pid() => {non_neg_integer(), non_neg_integer()}}) :: %{pid() => t()}
  def of(%Tree{nodes: nodes} = tree, gcs) do
    # a name index's class, looked up once per name
    classes =
      for {name, i} <- Enum.with_index(Tuple.to_list(tree.names)),
          class = @leaves[name],
          into: %{},
          do: {i, class}

    for pid <- Map.keys(nodes), into: %{} do
      us =
        Tree.reduce(tree, pid, @zero, fn {_depth, name, self_us, _total, _samples, _weight},
                                         acc ->
          Map.update!(acc, Map.get(classes, name, :running_us), &(&1 + self_us))
        end)

      {minor, major} = Map.get(gcs, pid, {0, 0})

      {pid,
       Map.merge(us, %{gc_minor_count: minor, gc_major_count: major, gc_count: minor + major})}
    end
  end
end
