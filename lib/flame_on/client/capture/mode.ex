defmodule FlameOn.Client.Capture.Mode do
  @moduledoc false
  # How a traced process's stacks are captured: one module per mode
  # (FlameOn.Client.Capture.Nif, .Process, .Sample, .Native), listed by name in
  # FlameOn.Client.Options (the `:mode` option's values). The scopes
  # (FlameOn.Client.Capture.Local, .CrossProcess) and the cross-process
  # owner (FlameOn.Client.Owners.CrossProcess) ask the mode what they need
  # and never which mode it is. Adding a mode is a module implementing
  # this behaviour and its line in Options (see ARCHITECTURE.md).

  alias FlameOn.Client.Core.Native

  @typedoc "What a mode's watchers add to the profile: metrics by pid, counters."
  @type watched :: %{metrics: %{pid() => list()}, stats: map()}

  @doc "What the mode is, in a few words (the web form and `mix profile.flame --help` show it)."
  @callback description() :: String.t()

  @doc "The trace flags a traced process gets (the tracer is added where it goes)."
  @callback flags() :: [atom()]

  @doc "Whether the mode needs the call patterns on every function while it runs."
  @callback call_patterns?() :: boolean()

  @doc """
  Who takes the traced processes' events: `:core` (the NIF tracer module
  folds them into the core session in the traced process) or `:process` (a
  `FlameOn.Client.Owners.Tracer` process takes trace messages and ingests
  them).
  """
  @callback tracer() :: :core | :process

  @doc """
  Whether `watch/5` must see each process that joins a cross-process trace
  (the trace's owner is then told of each one).
  """
  @callback follows_callees?() :: boolean()

  @doc """
  Keys the mode adds to the core session's options
  (`FlameOn.Client.Core.Native.new/1`); `root` is the function the traced
  process's stacks start at, or nil.
  """
  @callback core_options(opts :: map(), root :: mfa() | nil) :: map()

  @doc "Takes what the mode needs of the node besides patterns (raises when it cannot)."
  @callback acquire(opts :: map()) :: :ok

  @doc "Gives back what `acquire/1` took."
  @callback release(opts :: map()) :: :ok

  @doc """
  `pid` is traced from now on (a root, a traced process, a gate's caller,
  a follower): starts what watches it, if anything (a sampler). `root` is
  the function its stacks start at, or nil.
  """
  @callback watch(watchers :: map(), Native.session(), pid(), opts :: map(), root :: mfa() | nil) ::
              map()

  @doc "The trace is over: stops the watchers; what they add to the profile."
  @callback unwatch(watchers :: map()) :: watched()

  @doc """
  `use FlameOn.Client.Capture.Mode` declares the behaviour and gives the
  callbacks a mode often does not need their plain defaults: no node
  state (`acquire/1`, `release/1`), no core session options
  (`core_options/2`), no watchers (`watch/5`, `unwatch/1`),
  nothing to see of a cross-process trace's callees (`follows_callees?/0`),
  the NIF as the tracer (`tracer/0`). A mode overrides what it needs.
  """
  defmacro __using__(_opts) do
    quote do
      @behaviour FlameOn.Client.Capture.Mode

      @impl true
      def tracer, do: :core

      @impl true
      def follows_callees?, do: false

      @impl true
      def core_options(_opts, _root), do: %{}

      @impl true
      def acquire(_opts), do: :ok

      @impl true
      def release(_opts), do: :ok

      @impl true
      def watch(watchers, _core, _pid, _opts, _root), do: watchers

      @impl true
      def unwatch(_watchers), do: %{metrics: %{}, stats: %{}}

      defoverridable tracer: 0,
                     follows_callees?: 0,
                     core_options: 2,
                     acquire: 1,
                     release: 1,
                     watch: 5,
                     unwatch: 1
    end
  end
end
