defmodule FlameOn.Client.Export.Speedscope do
  @moduledoc false
  # speedscope's file format (https://www.speedscope.app/file-format-schema.json):
  # one "sampled" profile per process, one sample per distinct stack weighted
  # by its microseconds. See FlameOn.Client.Export.speedscope/1.

  alias FlameOn.Client.{JSON, Profile}
  alias FlameOn.Client.Export.Util

  @schema "https://www.speedscope.app/file-format-schema.json"

  @spec encode(Profile.t()) :: iodata()
  def encode(%Profile{} = profile) do
    names = Util.registered_names(profile)

    {profiles, {index, _next}} =
      profile
      |> Util.pids()
      |> Enum.map_reduce({%{}, 0}, fn pid, frames ->
        sampled(profile, pid, names, frames)
      end)

    frames =
      index
      |> Enum.sort_by(fn {_name, i} -> i end)
      |> Enum.map(fn {name, _i} -> %{name: name} end)

    JSON.encode!(%{
      "$schema" => @schema,
      "exporter" => Util.exporter(),
      "name" => profile.name,
      "activeProfileIndex" => 0,
      "shared" => %{"frames" => frames},
      "profiles" => profiles
    })
  end

  defp sampled(profile, pid, names, frames) do
    entries = Map.fetch!(profile.stacks, pid)

    {samples, frames} =
      Enum.map_reduce(entries, frames, fn {stack, _us}, frames ->
        stack |> Util.frames() |> Enum.map_reduce(frames, &intern/2)
      end)

    total = Util.sum(entries)

    json = %{
      "type" => "sampled",
      "name" => "#{profile.name} #{Util.process_label(pid, names)}",
      "unit" => "microseconds",
      "startValue" => 0,
      "endValue" => total,
      "samples" => samples,
      "weights" => Enum.map(entries, fn {_stack, us} -> us end)
    }

    {json, frames}
  end

  defp intern(name, {index, next} = frames) do
    case index do
      %{^name => i} -> {i, frames}
      _ -> {next, {Map.put(index, name, next), next + 1}}
    end
  end
end
