defmodule FlameOn.Client.CLI.Remote do
  @moduledoc false
  # mix profile.flame --next on another node: this VM joins the cluster,
  # and the capture runs there over :erpc (its process owns it, so nothing
  # is left there after the call, a timeout or the end of the task).

  alias FlameOn.Client.CLI.Options

  @doc "Captures the next call on `node_text`: the profile, here."
  @spec capture_on!(String.t(), keyword(), map()) :: FlameOn.Client.Profile.t()
  def capture_on!(node_text, opts, config) do
    node = String.to_atom(node_text)
    start_distribution!(node, opts)

    unless Node.connect(node) do
      Mix.raise("could not connect to #{node} (is it running, with the same cookie?)")
    end

    remote = fn module, fun, args, timeout ->
      try do
        :erpc.call(node, module, fun, args, timeout)
      catch
        :error, {:erpc, reason} -> Mix.raise("#{node}: #{inspect(reason)}")
        kind, reason -> Mix.raise("#{node}: #{Exception.format(kind, reason)}")
      end
    end

    unless remote.(Code, :ensure_loaded?, [FlameOn.Client.NextCall], 10_000) do
      Mix.raise("#{node} does not have flame_on_client (FlameOn.Client.NextCall is not loaded)")
    end

    mfa =
      case remote.(FlameOn.Client.NextCall, :parse, [opts[:next]], 10_000) do
        {:ok, mfa} -> mfa
        {:error, message} -> Mix.raise("--next on #{node}: #{message}")
      end

    name = FlameOn.Client.Profile.frame_name(mfa)

    Mix.shell().info(
      "Waiting up to #{config.timeout} ms for the next call of #{name} on #{node}..."
    )

    # the call's own time limit (max_duration_ms) plus the wait, and slack
    erpc_timeout = config.timeout + 70_000

    case remote.(FlameOn.Client, :capture_next, [mfa, config.capture_opts], erpc_timeout) do
      {:ok, profile} ->
        profile

      {:error, :timeout} ->
        Mix.raise("no process on #{node} called #{name} within #{config.timeout} ms")

      {:error, reason} ->
        Mix.raise("could not capture #{name} on #{node}: #{inspect(reason)}")
    end
  end

  defp start_distribution!(node, opts) do
    {name, type} =
      case {opts[:sname], opts[:longname]} do
        {nil, nil} -> {:"flame_on_#{System.unique_integer([:positive])}", :shortnames}
        {sname, nil} -> {String.to_atom(sname), :shortnames}
        {nil, name} -> {String.to_atom(name), :longnames}
        _ -> Options.usage!("give --sname or --longname, not both")
      end

    unless Node.alive?() do
      case Node.start(name, type) do
        {:ok, _} ->
          :ok

        {:error, reason} ->
          Mix.raise(
            "could not start distribution as #{name} (#{inspect(reason)}; is epmd running? " <>
              "`epmd -daemon` starts it)"
          )
      end
    end

    if cookie = opts[:cookie], do: Node.set_cookie(node, String.to_atom(cookie))
  end
end
