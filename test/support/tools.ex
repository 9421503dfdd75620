defmodule FlameOn.Client.Test.Tools do
  @moduledoc false
  # The programs and OTP libraries some tests need, found or failed on with
  # the Debian package that brings them (scripts/packages lists them all;
  # `scripts/setup build test` installs them). A missing tool fails the
  # test that needs it: a skip would hide it.

  import ExUnit.Assertions

  @packages_file Path.expand("../../scripts/packages", __DIR__)
  @external_resource @packages_file

  # package => group, as listed in scripts/packages
  @packages for line <- File.read!(@packages_file) |> String.split("\n"),
                not String.starts_with?(line, "#"),
                [group, package | _] <- [String.split(line)],
                into: %{},
                do: {package, group}

  @doc "The path of `program`; fails the test, naming `package`, when it is not installed."
  def executable!(program, package) do
    listed!(package)

    System.find_executable(program) ||
      flunk(
        "#{program} is not installed: run scripts/setup build test " <>
          "(or apt-get install #{package})"
      )
  end

  @doc "The first of `programs` that is installed (see `executable!/2`)."
  def executable_of!(programs, package) do
    listed!(package)

    Enum.find_value(programs, &System.find_executable/1) ||
      flunk(
        "none of #{Enum.join(programs, ", ")} is installed: run scripts/setup build test " <>
          "(or apt-get install #{package})"
      )
  end

  @doc """
  The directory of OTP library `app` (e.g. `:xmerl`), put on the code path;
  `nil` when it is not installed. Newer Mix prunes the code path to the
  project's applications, so it is looked up under the OTP root too.
  """
  def otp_lib(app) do
    dir =
      case :code.lib_dir(app) do
        {:error, _} ->
          :code.root_dir() |> Path.join("lib/#{app}-*") |> Path.wildcard() |> List.last()

        dir ->
          to_string(dir)
      end

    if dir, do: :code.add_patha(String.to_charlist(Path.join(dir, "ebin")))
    dir
  end

  @doc "Like `otp_lib/1`, failing the test with the package to install when missing."
  def otp_lib!(app, package) do
    listed!(package)
    otp_lib(app) || flunk("the OTP library #{app} is not installed: apt-get install #{package}")
  end

  @doc "Every package scripts/packages lists, as `%{package => group}`."
  def packages, do: @packages

  defp listed!(package) do
    Map.has_key?(@packages, package) ||
      raise ArgumentError, "#{package} is not listed in scripts/packages"
  end
end
