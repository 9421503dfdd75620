defmodule FlameOn.Client.Shipper.Directory do
  @moduledoc """
  A `FlameOn.Client.Shipper` that writes each profile to files, one
  subdirectory per trace: `DIR/<name>-<trace_id>/`.

      config :flame_on_client,
        shipper: {FlameOn.Client.Shipper.Directory, dir: "/var/tmp/flame_on", formats: [:folded]}

  Options:

    * `:dir` (required) – the directory; created if missing.
    * `:formats` (`[:folded]`) – what to write. `:folded` is always
      available (`<name>.folded`, see `FlameOn.Client.Profile.folded/1`);
      `:speedscope`, `:perfetto`, `:svg` and `:pprof` need
      `FlameOn.Client.Export`, which then writes every format.

  `<name>` is the trace's name with characters other than letters, digits,
  `_`, `-` and `.` replaced by `_`. A trace whose directory already exists
  (two nodes writing to one place) gets a unique suffix.
  """

  @behaviour FlameOn.Client.Shipper

  alias FlameOn.Client.Profile

  @export FlameOn.Client.Export
  @formats [:folded, :speedscope, :perfetto, :svg, :pprof]

  @impl FlameOn.Client.Shipper
  @spec ship(Profile.t(), keyword()) :: :ok | {:error, term()}
  def ship(%Profile{} = profile, opts) do
    with {:ok, dir} <- fetch_dir(opts),
         {:ok, formats} <- fetch_formats(opts),
         {:ok, trace_dir} <- make_trace_dir(dir, profile),
         {:ok, _written} <- write(profile, trace_dir, formats) do
      :ok
    end
  end

  @doc """
  The files `ship/2` would write for `profile` under `dir`, as
  `{:ok, [{format, path}]}`; used by `ship/2` and handy to find them.
  """
  @spec write(Profile.t(), Path.t(), [atom()]) :: {:ok, [{atom(), Path.t()}]} | {:error, term()}
  def write(profile, dir, formats) do
    if export?() do
      try do
        {:ok, apply(@export, :write, [profile, dir, formats])}
      rescue
        error -> {:error, {:export, Exception.message(error)}}
      end
    else
      path = Path.join(dir, safe_name(profile.name) <> ".folded")

      case File.write(path, Profile.folded(profile)) do
        :ok -> {:ok, [folded: path]}
        {:error, reason} -> {:error, {:write, path, reason}}
      end
    end
  end

  @doc false
  # Also used by the mix task and the tests.
  @spec export?() :: boolean()
  def export?, do: Code.ensure_loaded?(@export) and function_exported?(@export, :write, 3)

  @doc false
  @spec safe_name(String.t()) :: String.t()
  def safe_name(name), do: String.replace(name, ~r/[^A-Za-z0-9_.\-]/u, "_")

  defp fetch_dir(opts) do
    case Keyword.fetch(opts, :dir) do
      {:ok, dir} when is_binary(dir) and dir != "" -> {:ok, dir}
      {:ok, other} -> {:error, {:invalid_dir, other}}
      :error -> {:error, :dir_required}
    end
  end

  defp fetch_formats(opts) do
    formats = Keyword.get(opts, :formats, [:folded])

    cond do
      not is_list(formats) or formats == [] ->
        {:error, {:invalid_formats, formats}}

      (unknown = formats -- @formats) != [] ->
        {:error, {:unknown_formats, unknown}}

      not export?() and formats != [:folded] ->
        {:error, {:export_not_available, formats -- [:folded]}}

      true ->
        {:ok, Enum.uniq(formats)}
    end
  end

  defp make_trace_dir(dir, profile) do
    base = Path.join(dir, "#{safe_name(profile.name)}-#{profile.trace_id}")

    with :ok <- mkdir_p(dir) do
      case File.mkdir(base) do
        :ok ->
          {:ok, base}

        {:error, :eexist} ->
          unique = "#{base}-#{System.unique_integer([:positive])}"
          with :ok <- mkdir_p(unique), do: {:ok, unique}

        {:error, reason} ->
          {:error, {:mkdir, base, reason}}
      end
    end
  end

  defp mkdir_p(dir) do
    case File.mkdir_p(dir) do
      :ok -> :ok
      {:error, reason} -> {:error, {:mkdir, dir, reason}}
    end
  end
end
