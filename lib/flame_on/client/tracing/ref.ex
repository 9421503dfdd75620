defmodule FlameOn.Client.Tracing.Ref do
  @moduledoc """
  A running trace of another process, from
  `FlameOn.Client.Tracing.start_trace/2`: `controller` is the process that
  owns the trace, `pid` the traced process (a list of them for a
  whole-node trace).
  """

  @enforce_keys [:controller, :pid]
  defstruct [:controller, :pid, name: "flame_on"]

  @type t :: %__MODULE__{controller: pid(), pid: pid() | [pid()], name: String.t()}
end
