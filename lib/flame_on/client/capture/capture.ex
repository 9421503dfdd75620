defmodule FlameOn.Client.Capture do
  @moduledoc false
  # A capture front end: how `FlameOn.Client.profile/2` traces the calling
  # process in one mode. Every front end feeds the same core session and
  # ends in the same `FlameOn.Client.Profile`, so `profile/2` has one code
  # path and no case per mode:
  #
  #   capture = module.start(opts)       # session, patterns, sampler, ...
  #   TraceBackend.set_flags(self(), capture.flags)
  #   ... fun runs ...
  #   end_ts = module.stop(capture)      # nothing after this is profiled
  #   untrace, then module.finish(capture, started_ts, end_ts, opts)
  #
  # Modules: Capture.Nif (the NIF is the tracer module), Capture.Process (a
  # TraceSession process is the tracer), Capture.Sample (stack samples and
  # the :running flag; no call breakpoints) and Capture.Graph (cross-process
  # traces of any mode, owned by a TraceGraphSession).

  alias FlameOn.Client.Profile

  @type t :: %{
          required(:module) => module(),
          required(:flags) => [{FlameOn.Client.Node.TraceBackend.t(), [atom()]}],
          optional(atom()) => term()
        }

  @doc "Prepares the trace of the calling process; raises `ArgumentError` when it cannot."
  @callback start(opts :: map()) :: t()

  @doc "Tracing is on and `fun` is about to run."
  @callback begin(t()) :: t()

  @doc "`fun` returned: nothing after this is profiled. Returns the end timestamp (native)."
  @callback stop(t()) :: integer()

  @doc "Turns the capture into a profile (the calling process is untraced by now)."
  @callback finish(t(), started_ts :: integer(), end_ts :: integer(), opts :: map()) ::
              {:ok, Profile.t()} | {:error, term()}

  @doc "The front end for validated `profile/2` options."
  @spec module_for(map()) :: module()
  def module_for(%{cross_process: true}), do: FlameOn.Client.Capture.CrossProcess
  def module_for(%{mode: :nif}), do: FlameOn.Client.Capture.Nif
  def module_for(%{mode: :process}), do: FlameOn.Client.Capture.Process
  def module_for(%{mode: :sample}), do: FlameOn.Client.Capture.Sample

  @doc """
  Raises unless FlameOn can trace the calling process
  (`TraceBackend.check_tracee/1`). A process that only follows another
  cross-process trace (a message of that trace reached it) leaves it: it
  starts a trace of its own.
  """
  @spec ensure_untraced!() :: :ok
  def ensure_untraced!, do: ensure_untraced!(true)

  defp ensure_untraced!(leave?) do
    case FlameOn.Client.Node.TraceBackend.check_tracee(self()) do
      :ok ->
        :ok

      {:error, {:already_traced, tracer}} ->
        if leave? and follower_only?(tracer) do
          FlameOn.Client.Node.TraceBackend.untrace_graph(self())
          :seq_trace.set_token([])
          ensure_untraced!(false)
        else
          already_traced!(tracer)
        end
    end
  end

  defp follower_only?(tracer) do
    tracer in [{FlameOn.Client.Core.Native, :graph}, {:trace_session, :flame_on_client_graph}] and
      FlameOn.Client.Core.Native.graph_role(self()) != :root
  end

  @doc "A native session with the limits of `opts` (and its extra keys), or raises."
  @spec new_native!(map(), [atom()], map()) :: FlameOn.Client.Core.Native.session()
  def new_native!(opts, limit_keys, extra \\ %{}) do
    limits =
      opts
      |> Map.take(limit_keys)
      |> Map.merge(extra)
      |> Map.put(:native_per_second, System.convert_time_unit(1, :second, :native))

    FlameOn.Client.Core.Native.new(limits)
  rescue
    ArgumentError -> limits_out_of_range!(Map.take(opts, limit_keys))
  end

  @doc "Turns the trace flags of `capture` off on the calling process, where still ours."
  @spec untrace_self(t()) :: :ok
  def untrace_self(%{flags: flags}),
    do: FlameOn.Client.Node.TraceBackend.clear_flags(self(), flags)

  @doc "The common error of a front end that could not start, raised."
  @spec raise_start_error!(term(), String.t()) :: no_return()
  def raise_start_error!({:invalid_limits, limits}, _what), do: limits_out_of_range!(limits)
  def raise_start_error!({:already_traced, tracer}, _what), do: already_traced!(tracer)
  def raise_start_error!({:call_tracing_in_use, what}, _), do: call_tracing_in_use!(what)

  def raise_start_error!({:tracing_in_use, what}, _what) do
    raise ArgumentError,
          "another tool is tracing on this node (#{what}); in the legacy trace session " <>
            "(OTP 25-26) a process has one tracer, and cross_process: true would take " <>
            "over any process that serves one of our requests, so no cross-process trace " <>
            "starts until it stops (on OTP 27+ our traces run in trace sessions of their own)"
  end

  def raise_start_error!({:system_tracer_taken, tracer}, _what) do
    raise ArgumentError,
          "cross_process: true needs the seq_trace system tracer, but " <>
            "#{inspect(tracer)} owns it (another tracing tool is running)"
  end

  def raise_start_error!(reason, what),
    do: raise("FlameOn: could not start #{what}: #{inspect(reason)}")

  @spec limits_out_of_range!(map()) :: no_return()
  def limits_out_of_range!(limits) do
    raise ArgumentError,
          "limits out of range: #{inspect(limits)} (the NIF rejected them; " <>
            "each must be a positive integer no larger than its ceiling)"
  end

  @spec already_traced!(term()) :: no_return()
  def already_traced!(tracer) do
    raise ArgumentError,
          "the calling process is already traced by #{inspect(tracer)}; " <>
            "a process can have only one tracer"
  end

  @spec call_tracing_in_use!(String.t()) :: no_return()
  def call_tracing_in_use!(what) do
    raise ArgumentError,
          "another tool is call tracing on this node (#{what}); FlameOn's call " <>
            "patterns would replace its patterns, so no trace starts until it stops " <>
            "(e.g. :dbg.stop/0), or use mode: :sample, which sets none"
  end
end
