defmodule FlameOn.Client.Shipper do
  @moduledoc """
  Where finished profiles go: a behaviour with one callback, `c:ship/2`.

  `FlameOn.Client.Tracing.trace/3`, `FlameOn.Client.Tracing.start_trace/2`
  and the `FlameOn.Client.Telemetry` handler hand every profile they keep
  to the configured shippers. A shipper is given as `{module, opts}` (or
  just `module`, with `opts = []`), or a list of them, in the `:shipper`
  option or the application environment:

      config :flame_on_client,
        shipper: {FlameOn.Client.Shipper.Directory, dir: "/var/tmp/flame_on"}

      FlameOn.Client.Tracing.trace("checkout", fn -> Shop.checkout(cart) end,
        shipper: [
          {FlameOn.Client.Shipper.Directory, dir: "traces", formats: [:folded]},
          {FlameOn.Client.Shipper.Process, pid: self()}
        ]
      )

  With no shipper configured, profiles are not shipped (a debug log says
  so); they still go to `FlameOn.Client.TraceStore`, the recent traces of
  the web UI.

  Built-in shippers:

    * `FlameOn.Client.Shipper.Directory` – writes files (folded stacks, and
      the other formats of `FlameOn.Client.Export` when it is available).
    * `FlameOn.Client.Shipper.Process` – sends `{:flame_on_profile,
      profile}` to a process.

  ## Writing a shipper

      defmodule MyApp.FlameShipper do
        @behaviour FlameOn.Client.Shipper

        @impl true
        def ship(profile, opts) do
          body = IO.iodata_to_binary(FlameOn.Client.Profile.folded(profile))
          MyApp.Http.post(Keyword.fetch!(opts, :url), body)
        end
      end

  `c:ship/2` runs in the process that finished the trace (for `trace/3`
  and the telemetry handler, the traced process itself, after the traced
  work): keep it short, or hand the profile to another process. A shipper
  that returns `{:error, reason}`, raises, throws or exits is logged; it
  never crashes the traced code.
  """

  require Logger

  alias FlameOn.Client.Profile

  @typedoc "A shipper as given in options: `{module, opts}` or `module`."
  @type spec :: {module(), keyword()} | module()

  @doc "Delivers one finished profile. `opts` are the shipper's own options."
  @callback ship(profile :: Profile.t(), opts :: keyword()) :: :ok | {:error, term()}

  @doc """
  Turns a `:shipper` option (`nil`, a spec or a list of specs) into a list
  of `{module, opts}`. Raises `ArgumentError` if a module does not
  implement `c:ship/2`.

      iex> FlameOn.Client.Shipper.normalize!(nil)
      []
      iex> FlameOn.Client.Shipper.normalize!(FlameOn.Client.Shipper.Process)
      [{FlameOn.Client.Shipper.Process, []}]
      iex> FlameOn.Client.Shipper.normalize!([{FlameOn.Client.Shipper.Directory, dir: "t"}])
      [{FlameOn.Client.Shipper.Directory, [dir: "t"]}]
  """
  @spec normalize!(nil | spec() | [spec()]) :: [{module(), keyword()}]
  def normalize!(nil), do: []
  def normalize!(specs) when is_list(specs), do: Enum.map(specs, &normalize_one!/1)
  def normalize!(spec), do: [normalize_one!(spec)]

  defp normalize_one!({module, opts}) when is_atom(module) and is_list(opts) do
    unless Keyword.keyword?(opts) do
      raise ArgumentError,
            "expected the options of shipper #{inspect(module)} to be a keyword list, " <>
              "got: #{inspect(opts)}"
    end

    unless Code.ensure_loaded?(module) and function_exported?(module, :ship, 2) do
      raise ArgumentError,
            "shipper #{inspect(module)} is not a module implementing ship/2 " <>
              "(the FlameOn.Client.Shipper behaviour)"
    end

    {module, opts}
  end

  defp normalize_one!(module) when is_atom(module) and module != nil,
    do: normalize_one!({module, []})

  defp normalize_one!(other) do
    raise ArgumentError,
          "expected a shipper as {module, opts} or module, got: #{inspect(other)}"
  end

  @doc """
  Ships `profile` to each of `shippers` (a list from `normalize!/1`), one
  after the other. Failures are logged, never raised; returns `:ok`.
  """
  @spec ship_all(Profile.t(), [{module(), keyword()}]) :: :ok
  def ship_all(%Profile{} = profile, []) do
    Logger.debug(fn ->
      "FlameOn: no shipper configured, trace #{label(profile)} is not shipped " <>
        "(the trace store keeps the recent ones)"
    end)

    :ok
  end

  def ship_all(%Profile{} = profile, shippers) when is_list(shippers) do
    Enum.each(shippers, fn {module, opts} -> ship_one(module, opts, profile) end)
  end

  defp ship_one(module, opts, profile) do
    case module.ship(profile, opts) do
      :ok ->
        :ok

      {:error, reason} ->
        Logger.error(
          "FlameOn: shipper #{inspect(module)} failed for trace #{label(profile)}: " <>
            inspect(reason)
        )

      other ->
        Logger.error(
          "FlameOn: shipper #{inspect(module)} returned #{inspect(other)} for trace " <>
            "#{label(profile)} (expected :ok or {:error, reason})"
        )
    end
  catch
    kind, reason ->
      Logger.error(
        "FlameOn: shipper #{inspect(module)} crashed for trace #{label(profile)}:\n" <>
          Exception.format(kind, reason, __STACKTRACE__)
      )
  end

  defp label(%Profile{name: name, trace_id: id}), do: "#{inspect(name)} (#{id})"
end
