defmodule FlameOn.Client.CLI.Run do
  @moduledoc false
  # What mix profile.flame runs: the project's applications, the code
  # (compiled inside a function, traced in this process), the capture of
  # the next call here, and the files it writes.

  alias FlameOn.Client.Shipper.Directory

  @result_key {__MODULE__, :result}

  @doc "Starts the project (as app.start does, or only configures it with --no-start)."
  @spec start_apps(keyword()) :: :ok
  def start_apps(opts) do
    args =
      for {key, flag} <- [
            compile: "--no-compile",
            deps_check: "--no-deps-check",
            archives_check: "--no-archives-check",
            elixir_version_check: "--no-elixir-version-check"
          ],
          opts[key] == false,
          do: flag

    if opts[:start] == false do
      Mix.Task.run("app.config", args)
    else
      Mix.Task.run("app.start", args)
    end

    # Its pattern owner and session supervisor are needed even with
    # --no-start.
    {:ok, _} = Application.ensure_all_started(:flame_on_client)
    :ok
  end

  @doc "Requires the files the patterns match (`--require`)."
  @spec require_files([String.t()]) :: :ok
  def require_files(patterns) do
    Enum.each(patterns, fn pattern ->
      case Path.wildcard(pattern) do
        [] -> Mix.raise("No files matched pattern #{inspect(pattern)} given to --require")
        files -> Enum.each(files, &Code.require_file/1)
      end
    end)
  end

  # The code is compiled (not evaluated) inside a function, as mix
  # profile.eprof does: the profile then shows the code's own calls rather
  # than the evaluator's.
  @doc "Runs the code traced (or counted, `--summary`): the profile or the summary."
  @spec profile!(String.t(), String.t() | nil, [String.t()], map()) :: term()
  def profile!(code, file, argv, config) do
    file = file || "nofile"
    quoted = Code.string_to_quoted!(code, file: file)
    previous_argv = System.argv()
    System.argv(argv)

    try do
      Process.delete(@result_key)

      Code.compile_quoted(
        quote do
          unquote(__MODULE__).__profile__(
            fn -> unquote(quoted) end,
            unquote(Macro.escape(config))
          )
        end,
        file
      )

      Process.delete(@result_key) || Mix.raise("the code did not run")
    after
      System.argv(previous_argv)
    end
  end

  @doc false
  # Called by the compiled code with the code as a function.
  @spec __profile__((() -> term()), map()) :: term()
  def __profile__(fun, config) do
    shell = Mix.shell()

    if config.warmup do
      shell.info("Warmup...")
      fun.()
    end

    shell.info("Profiling...")
    started = System.monotonic_time(:millisecond)

    {_result, profile} =
      case config.summary do
        nil -> FlameOn.Client.profile(fun, config.profile_opts)
        type -> FlameOn.Client.summary(fun, type: type, name: config.profile_opts[:name])
      end

    shell.info("Profiled in #{System.monotonic_time(:millisecond) - started} ms.")
    Process.put(@result_key, profile)
  end

  @doc "Writes a summary's CSV; its path."
  @spec write_csv!(FlameOn.Client.Summary.t(), map()) :: String.t()
  def write_csv!(summary, %{out: out}) do
    path = Path.join(out, "#{Directory.safe_name(summary.name)}.summary.csv")

    with :ok <- File.mkdir_p(out),
         :ok <- File.write(path, FlameOn.Client.Summary.csv(summary)) do
      path
    else
      {:error, reason} -> Mix.raise("could not write #{path}: #{inspect(reason)}")
    end
  end

  @doc "Writes the profile in the chosen formats: `[{format, path}]`."
  @spec write!(FlameOn.Client.Profile.t(), map()) :: [{atom(), String.t()}]
  def write!(profile, %{out: out, formats: formats} = config) do
    n = length(formats)
    Mix.shell().info("Writing #{n} file#{if n == 1, do: "", else: "s"} to #{out}...")

    with :ok <- File.mkdir_p(out),
         {:ok, paths} <- Directory.write(profile, out, formats) do
      paths ++ write_alloc!(profile, out, formats, config)
    else
      {:error, reason} -> Mix.raise("could not write the profile to #{out}: #{inspect(reason)}")
    end
  end

  # --alloc: the same formats weighed by words (perfetto has no such view),
  # as `NAME.alloc.<extension>`.
  defp write_alloc!(profile, out, formats, %{alloc: true}) do
    case formats -- [:perfetto] do
      [] ->
        []

      alloc_formats ->
        alloc_formats
        |> then(&FlameOn.Client.Export.write(profile, out, &1, weight: :alloc))
        |> Enum.map(fn {format, path} -> {:"#{format} (words)", path} end)
    end
  end

  defp write_alloc!(_profile, _out, _formats, _config), do: []

  @doc "Captures the next call of the function `text` names, in this VM."
  @spec capture_here!(String.t(), map()) :: FlameOn.Client.Profile.t()
  def capture_here!(text, config) do
    mfa =
      case FlameOn.Client.NextCall.parse(text) do
        {:ok, mfa} -> mfa
        {:error, message} -> Mix.raise("--next: #{message}")
      end

    name = FlameOn.Client.Profile.frame_name(mfa)
    Mix.shell().info("Waiting up to #{config.timeout} ms for the next call of #{name}...")
    task = Task.async(fn -> FlameOn.Client.capture_next(mfa, config.capture_opts) end)

    # the code that makes the call runs once the capture waits
    if config.source do
      await_armed(mfa, task)
      {code, file, argv} = config.source
      run_code(code, file, argv)
    end

    case Task.await(task, :infinity) do
      {:ok, profile} -> profile
      {:error, :timeout} -> Mix.raise("no process called #{name} within #{config.timeout} ms")
      {:error, reason} -> Mix.raise("could not capture #{name}: #{inspect(reason)}")
    end
  end

  defp await_armed(mfa, task, tries \\ 500) do
    cond do
      Enum.any?(FlameOn.Client.Node.Gates.waiting(), &match?({^mfa, _}, &1)) -> :ok
      Task.yield(task, 0) != nil -> Mix.raise("the capture ended before the code ran")
      tries == 0 -> Mix.raise("the capture did not start")
      true -> Process.sleep(10) && await_armed(mfa, task, tries - 1)
    end
  end

  defp run_code(code, file, argv) do
    previous_argv = System.argv()
    System.argv(argv)

    try do
      Code.eval_string(code, [], file: file || "nofile")
    after
      System.argv(previous_argv)
    end
  end
end
