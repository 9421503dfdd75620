defmodule FlameOn.Client.Export.Folded do
  @moduledoc false
  # Collapsed stacks (`FlameOn.Client.Profile.folded/1`), for all processes,
  # some of them, or one file per process.

  alias FlameOn.Client.Profile
  alias FlameOn.Client.Export.Util

  @spec encode(Profile.t(), keyword()) :: iodata()
  def encode(%Profile{} = profile, opts) do
    case Keyword.validate!(opts, pids: :all)[:pids] do
      :all ->
        Profile.folded(profile)

      pids when is_list(pids) ->
        Profile.folded(%{profile | stacks: Map.take(profile.stacks, pids)})

      other ->
        raise ArgumentError,
              "invalid folded option :pids: #{inspect(other)}, expected :all or a list of pids"
    end
  end

  @spec per_process(Profile.t()) :: %{pid() => iodata()}
  def per_process(%Profile{} = profile) do
    Map.new(Util.pids(profile), &{&1, encode(profile, pids: [&1])})
  end
end
