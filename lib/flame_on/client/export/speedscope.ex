defmodule FlameOn.Client.Export.Speedscope do
  @moduledoc false
  # speedscope's file format (https://www.speedscope.app/file-format-schema.json):
  # one "evented" profile per process, written from the profile's tree: each
  # node opens at the end of its previous sibling and closes after its total
  # time, so the file grows with the tree, not with depth times stacks (a
  # "sampled" profile would list every frame of every stack). See
  # FlameOn.Client.Export.speedscope/1.

  alias FlameOn.Client.Export.JSON
  alias FlameOn.Client.Profile
  alias FlameOn.Client.Export.Util
  alias FlameOn.Client.Profile.Tree

  @schema "https://www.speedscope.app/file-format-schema.json"

  # `unit: :alloc` writes an allocation view (Profile.alloc_view/1): its
  # values are words, which speedscope has no unit for ("none"); each
  # profile's name says so.
  @spec encode(Profile.t(), keyword()) :: iodata()
  def encode(%Profile{} = profile, opts \\ []) do
    names = Util.names(profile)
    alloc? = Keyword.get(opts, :unit, :time) == :alloc
    note = if alloc?, do: " (words allocated)", else: ""

    profiles =
      for pid <- Util.pids(profile),
          do: {pid, "#{profile.name} #{Util.process_label(pid, names)}#{note}"}

    encode_tree(
      profile.name,
      Tree.of(profile),
      profiles,
      if(alloc?, do: "none", else: "microseconds")
    )
  end

  @doc false
  # One file of several profiles: `[{key, title}]`, each the tree's nodes
  # under `key`, in `unit` (a speedscope unit: "microseconds", "none", ...).
  # A diff writes its base and new profiles into one file this way.
  @spec encode_tree(String.t(), Tree.t(), [{term(), String.t()}], String.t()) :: iodata()
  def encode_tree(name, tree, profiles, unit) do
    {profiles, {index, _next}} =
      Enum.map_reduce(profiles, {%{}, 0}, fn {key, title}, frames ->
        evented(tree, key, title, unit, frames)
      end)

    frames =
      index
      |> Enum.sort_by(fn {_name, i} -> i end)
      |> Enum.map(fn {name, _i} -> %{name: Tree.name(tree, name)} end)

    JSON.encode!(%{
      "$schema" => @schema,
      "exporter" => Util.exporter(),
      "name" => name,
      "activeProfileIndex" => 0,
      "shared" => %{"frames" => frames},
      "profiles" => profiles
    })
  end

  # Open frames are kept as a stack of {depth, frame, ends_at, cursor}:
  # cursor is where the next child opens.
  defp evented(tree, key, title, unit, frames) do
    {events, open, frames, total} =
      Tree.reduce(tree, key, {[], [], frames, 0}, fn
        {0, _name, _self, total, _s, _w}, {events, _open, frames, _} ->
          {events, [{0, nil, total, 0}], frames, total}

        {_depth, _name, _self, 0, _s, _w}, acc ->
          acc

        {depth, name, _self, us, _s, _w}, {events, open, frames, total} ->
          {events, [{d, parent, ends, cursor} | open]} = close(events, open, depth)
          {frame, frames} = Util.intern(name, frames)
          open = [{depth, frame, cursor + us, cursor}, {d, parent, ends, cursor + us} | open]
          {[%{type: "O", frame: frame, at: cursor} | events], open, frames, total}
      end)

    {events, _} = close(events, open, 1)

    json = %{
      "type" => "evented",
      "name" => title,
      "unit" => unit,
      "startValue" => 0,
      "endValue" => total,
      "events" => Enum.reverse(events)
    }

    {json, frames}
  end

  # Closes the open frames at depth >= depth (not the process root).
  defp close(events, [{d, frame, ends, _cursor} | open], depth) when d >= depth and d > 0,
    do: close([%{type: "C", frame: frame, at: ends} | events], open, depth)

  defp close(events, open, _depth), do: {events, open}
end
