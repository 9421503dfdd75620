defmodule Mix.Tasks.Compile.FlameOnNif do
  @moduledoc false
  # Builds the C NIF with `make` so that `mix compile` (and so `mix test`)
  # needs nothing from hex.
  use Mix.Task.Compiler

  @impl Mix.Task.Compiler
  def run(_args) do
    make = System.find_executable("make") || Mix.raise("make not found: apt-get install make gcc")
    {out, status} = System.cmd(make, ["-s", "all"], stderr_to_stdout: true, cd: __DIR__)

    case status do
      0 ->
        if out != "", do: Mix.shell().info(out)
        {:ok, []}

      _ ->
        Mix.shell().error(out)
        Mix.raise("building the flame_on_client NIF failed (make exited with #{status})")
    end
  end

  @impl Mix.Task.Compiler
  def clean do
    System.cmd("make", ["clean"], cd: __DIR__)
    :ok
  end
end

defmodule FlameOn.Client.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :flame_on_client,
      version: @version,
      elixir: "~> 1.14",
      compilers: [:flame_on_nif | Mix.compilers()],
      start_permanent: Mix.env() == :prod,
      elixirc_paths: elixirc_paths(Mix.env()),
      deps: [],
      # inets (:httpc, FlameOn.Client.Shipper.Pyroscope) is started when
      # first used, not with the library
      xref: [exclude: [:httpc]],
      description: "BEAM profiler: per-process flame graphs and cross-process span graphs",
      package: [licenses: ["MIT"], files: ~w(lib c_src Makefile mix.exs README.md LICENSE)]
    ]
  end

  def application do
    [
      # crypto: random tokens of the web UI (FlameOn.Client.Web)
      extra_applications: [:logger, :crypto],
      mod: {FlameOn.Client.Application, []}
    ]
  end

  defp elixirc_paths(:test), do: ["lib", "test/support"]
  defp elixirc_paths(_), do: ["lib"]
end
