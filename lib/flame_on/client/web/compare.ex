defmodule FlameOn.Client.Web.Compare do
  @moduledoc false
  # /diff?base=ID&new=ID[&normalize=median|total|none]: two traces of the
  # store and their FlameOn.Client.Diff (resolve/1), and the files the
  # diff page offers (download/2). Knows no HTML: Web.DiffPage draws it,
  # Web.Router answers with it.

  alias FlameOn.Client.Export.Diff, as: DiffFiles
  alias FlameOn.Client.TraceStore

  # The query's names for Diff's :normalize, the default first.
  @normalize [{"median", :median}, {"total", :total}, {"none", false}]

  # download name => {content type, what it is}
  @downloads [
    {"folded", "text/plain; charset=utf-8"},
    {"svg", "image/svg+xml"},
    {"speedscope", "application/json"},
    {"pprof-base", "application/octet-stream"},
    {"pprof-new", "application/octet-stream"}
  ]

  @typedoc "A comparison: both traces, the diff, and the normalisation's query name."
  @type t :: %{
          base: FlameOn.Client.Profile.t(),
          new: FlameOn.Client.Profile.t(),
          diff: FlameOn.Client.Diff.t(),
          normalize: String.t()
        }

  @doc "The query names of the normalisations, the default first."
  @spec normalizations() :: [String.t()]
  def normalizations, do: for({name, _} <- @normalize, do: name)

  @doc "The names of the downloads, in the order the page lists them."
  @spec downloads() :: [String.t()]
  def downloads, do: for({name, _} <- @downloads, do: name)

  @doc """
  The comparison a query asks for, or `{:error, status, message}`: 400
  without `base` or `new` or with a bad `normalize`, 404 for a trace the
  store does not have. The same trace twice is allowed (nothing changed).
  """
  @spec resolve(map()) :: {:ok, t()} | {:error, pos_integer(), String.t()}
  def resolve(query) do
    with {:ok, name, normalize} <- normalize(query["normalize"]),
         {:ok, base_id} <- given(query, "base"),
         {:ok, new_id} <- given(query, "new"),
         {:ok, base} <- stored(base_id),
         {:ok, new} <- stored(new_id) do
      diff = FlameOn.Client.diff(base, new, normalize: normalize)
      {:ok, %{base: base, new: new, diff: diff, normalize: name}}
    end
  end

  defp normalize(blank) when blank in [nil, ""], do: normalize("median")

  defp normalize(text) do
    case List.keyfind(@normalize, text, 0) do
      {name, value} ->
        {:ok, name, value}

      nil ->
        {:error, 400,
         "normalize must be one of #{Enum.join(normalizations(), ", ")}, got: #{inspect(text)}"}
    end
  end

  defp given(query, key) do
    case query[key] do
      blank when blank in [nil, ""] ->
        {:error, 400,
         "choose a base and a new trace: /diff?base=ID&new=ID (no #{key} given; " <>
           "the list of recent traces has a form for it)"}

      id ->
        {:ok, id}
    end
  end

  defp stored(id) do
    with {n, ""} when n > 0 <- Integer.parse(id),
         {:ok, profile} <- TraceStore.get(n) do
      {:ok, profile}
    else
      _ ->
        {:error, 404,
         "no trace #{id} in the store (it keeps the last #{TraceStore.max_traces()})"}
    end
  end

  @doc "The query string of a comparison (optionally with another normalisation)."
  @spec query(t(), String.t() | nil) :: String.t()
  def query(compare, normalize \\ nil) do
    URI.encode_query([
      {"base", compare.base.trace_id},
      {"new", compare.new.trace_id},
      {"normalize", normalize || compare.normalize}
    ])
  end

  @doc "A download: `{:ok, file name, content type, body}`, or `:error` for an unknown one."
  @spec download(t(), String.t()) :: {:ok, String.t(), String.t(), iodata()} | :error
  def download(compare, name) do
    case List.keyfind(@downloads, name, 0) do
      {^name, type} ->
        {file, body} = file(compare.diff, name)
        {:ok, file, type, body}

      nil ->
        :error
    end
  end

  @doc "The file name of a download."
  @spec file_name(t(), String.t()) :: String.t()
  def file_name(compare, name) do
    stem = stem(compare.diff)

    case name do
      "folded" -> stem <> ".diff.folded"
      "svg" -> stem <> ".diff.svg"
      "speedscope" -> stem <> ".diff.speedscope.json"
      "pprof-base" -> stem <> ".base.pb.gz"
      "pprof-new" -> stem <> ".new.pb.gz"
    end
  end

  defp file(diff, "pprof-base"), do: {stem(diff) <> ".base.pb.gz", DiffFiles.pprof(diff, :base)}
  defp file(diff, "pprof-new"), do: {stem(diff) <> ".new.pb.gz", DiffFiles.pprof(diff, :new)}

  defp file(diff, name) do
    [{_format, file, body}] =
      DiffFiles.outputs(diff, String.to_existing_atom(name), stem(diff), [])

    {file, body}
  end

  defp stem(diff), do: String.replace(diff.name, ~r/[^A-Za-z0-9._-]+/, "_")
end
