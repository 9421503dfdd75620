defmodule FlameOn.Client.ExUnit.Config do
  @moduledoc false
  # What FlameOn.Client.ExUnit.start/1 configured, for the tests' runs and
  # the formatter; and a tag's options, checked.

  @key {__MODULE__, :config}

  @doc "Stores the configuration of `FlameOn.Client.ExUnit.start/1`."
  @spec put(map()) :: :ok
  def put(config), do: :persistent_term.put(@key, config)

  @doc "The configuration `FlameOn.Client.ExUnit.start/1` stored, or nil."
  @spec config() :: map() | nil
  def config, do: :persistent_term.get(@key, nil)

  @doc """
  `{[dir: ..., formats: ...], capture_options}` from a tag's options, each
  checked (`FlameOn.Client.Options`).
  """
  @spec split_options!(keyword()) :: {keyword(), keyword()}
  def split_options!(opts) do
    for {key, _} <- opts, key in [:name, :summary] do
      raise ArgumentError,
            "#{inspect(key)} is not an option of a flame: tag" <>
              if(key == :name,
                do: " (each profile is named after its test)",
                else: " (start/1 takes it)"
              )
    end

    FlameOn.Client.Options.ex_unit!(opts, :ex_unit_tag)
  end
end
