defmodule FlameOn.Client.NextCall.Parse do
  @moduledoc false
  # A function as typed by a person (FlameOn.Client.NextCall.parse/1, the
  # web form, mix profile.flame --next), checked against the loaded code.

  alias FlameOn.Client.Profile

  @spec parse(String.t()) :: {:ok, mfa()} | {:error, String.t()}
  def parse(text) when is_binary(text) do
    text = text |> String.trim() |> String.trim_leading("&")

    with :ok <- short(text),
         {:ok, name, arity} <- split_arity(text),
         {:ok, module, function} <- split_name(name),
         {:ok, module} <- module_atom(module),
         :ok <- loaded(module),
         {:ok, function} <- function_atom(module, function, arity),
         mfa = {module, function, arity},
         :ok <- check(mfa) do
      {:ok, mfa}
    end
  end

  @spec check(term()) :: :ok | {:error, String.t()}
  def check({module, function, arity} = mfa)
      when is_atom(module) and is_atom(function) and is_integer(arity) do
    cond do
      arity not in 0..255 ->
        {:error, "the arity must be an integer from 0 to 255, got: #{arity}"}

      (loaded = loaded(module)) != :ok ->
        loaded

      not defines?(module, function, arity) ->
        {:error, "#{inspect(module)} does not define #{Profile.frame_name(mfa)}"}

      true ->
        :ok
    end
  end

  def check(other),
    do: {:error, "expected {module, function, arity}, got: #{inspect(other, limit: 10)}"}

  defp loaded(module) do
    case Code.ensure_loaded(module) do
      {:module, ^module} -> :ok
      {:error, reason} -> {:error, "module #{inspect(module)} is not available (#{reason})"}
    end
  end

  defp defines?(module, function, arity) do
    function_exported?(module, function, arity) or
      {function, arity} in module.module_info(:functions)
  end

  @max_text 300

  defp short(text) do
    cond do
      text == "" -> {:error, "give a function as Module.fun/arity (or module:fun/arity)"}
      byte_size(text) > @max_text -> {:error, "the function is longer than #{@max_text} bytes"}
      true -> :ok
    end
  end

  defp split_arity(text) do
    with [name, digits] <- split_last(text, "/"),
         {arity, ""} when arity in 0..255 <- Integer.parse(digits) do
      {:ok, name, arity}
    else
      {arity, ""} -> {:error, "the arity must be an integer from 0 to 255, got: #{arity}"}
      _ -> {:error, "expected Module.fun/arity or module:fun/arity, got: #{inspect(text)}"}
    end
  end

  defp split_last(text, sep) do
    case :binary.matches(text, sep) do
      [] ->
        [text]

      matches ->
        {at, _} = List.last(matches)
        [binary_part(text, 0, at), binary_part(text, at + 1, byte_size(text) - at - 1)]
    end
  end

  # Erlang: mod:fun, 'Quoted.Mod':'fun'. Elixir: Alias.Mod.fun, :mod.fun.
  defp split_name("'" <> rest) do
    case String.split(rest, "':", parts: 2) do
      [module, function] when module != "" -> {:ok, {:erlang, module}, unquote_atom(function)}
      _ -> bad_name("'" <> rest)
    end
  end

  defp split_name(":" <> rest) do
    case split_last(rest, ".") do
      [module, function] when module != "" and function != "" ->
        {:ok, {:erlang, module}, function}

      _ ->
        bad_name(":" <> rest)
    end
  end

  defp split_name(name) do
    cond do
      String.contains?(name, ":") ->
        case String.split(name, ":", parts: 2) do
          [module, function] when module != "" and function != "" ->
            {:ok, {:erlang, module}, unquote_atom(function)}

          _ ->
            bad_name(name)
        end

      true ->
        case split_last(name, ".") do
          [module, function] when module != "" and function != "" ->
            {:ok, {:elixir, module}, function}

          _ ->
            bad_name(name)
        end
    end
  end

  defp bad_name(name),
    do: {:error, "expected Module.fun/arity or module:fun/arity, got: #{inspect(name <> "/…")}"}

  defp unquote_atom("'" <> rest), do: String.trim_trailing(rest, "'")
  defp unquote_atom(name), do: name

  defp module_atom({:elixir, name}) do
    if name =~ ~r/^[A-Z][A-Za-z0-9_]*(\.[A-Z][A-Za-z0-9_]*)*$/,
      do: existing_module("Elixir." <> name, name),
      else: {:error, "#{inspect(name)} is not a module name"}
  end

  defp module_atom({:erlang, name}), do: existing_module(name, name)

  # An atom from text only when the module exists: loaded (the atom
  # exists) or in a .beam file on the code path.
  defp existing_module(atom_text, shown) do
    {:ok, String.to_existing_atom(atom_text)}
  rescue
    ArgumentError ->
      if :code.where_is_file(String.to_charlist(atom_text <> ".beam")) != :non_existing,
        do: {:ok, String.to_atom(atom_text)},
        else: {:error, "no module named #{shown} is loaded or can be loaded"}
  end

  # A loaded module's function names are atoms already.
  defp function_atom(module, function, arity) do
    atom = String.to_existing_atom(function)

    if defines?(module, atom, arity),
      do: {:ok, atom},
      else: no_function(module, function, arity)
  rescue
    ArgumentError -> no_function(module, function, arity)
  end

  defp no_function(module, function, arity),
    do: {:error, "#{inspect(module)} does not define #{function}/#{arity}"}
end
