# Renders docs/exunit_summary.png, the README's picture of the summary
# FlameOn.Client.ExUnit prints: runs the `mix test` of the fixture app
# test/fixtures/exunit_app in colour, keeps the end of its output (ExUnit's
# counts and the summary), turns the ANSI colours into HTML and takes a
# screenshot with headless chromium (`scripts/setup build test` installs it).
#
#     elixir scripts/exunit_picture.exs [OUT.png]

root = Path.expand("..", __DIR__)
app = Path.join(root, "test/fixtures/exunit_app")
out = Path.expand(List.first(System.argv()) || Path.join(root, "docs/exunit_summary.png"))

chromium =
  Enum.find_value(~w(chromium chromium-browser), &System.find_executable/1) ||
    raise "chromium is not installed: apt-get install chromium"

File.rm_rf!(Path.join(app, "flame_on_out"))

{output, _status} =
  System.cmd("mix", ~w(test --color --seed 0),
    cd: app,
    env: [{"MIX_ENV", "test"}],
    stderr_to_stdout: true
  )

# From the line with ExUnit's counts to the end, without the seed line, and
# the summary's first four tests.
lines = String.split(output, "\n")
start = Enum.find_index(lines, &(&1 =~ "Finished in")) || raise "no ExUnit report in:\n#{output}"

{text, _shown} =
  lines
  |> Enum.drop(start)
  |> Enum.reject(&(&1 =~ "Randomized with seed"))
  |> Enum.reduce_while({[], 0}, fn line, {acc, entries} ->
    entries = if line =~ ~r/^  \d+\) /, do: entries + 1, else: entries
    if entries > 4, do: {:halt, {acc, entries}}, else: {:cont, {[line | acc], entries}}
  end)

text = text |> Enum.reverse() |> Enum.join("\n") |> String.trim_trailing()

colors = %{
  "1" => "font-weight:bold",
  "2" => "color:#8b949e",
  "31" => "color:#ff7b72",
  "32" => "color:#7ee787",
  "33" => "color:#e3b341",
  "36" => "color:#79c0ff"
}

escape = fn s ->
  s |> String.replace("&", "&amp;") |> String.replace("<", "&lt;") |> String.replace(">", "&gt;")
end

# Each SGR sequence closes what is open and opens a span of its styles.
{html, open} =
  Regex.split(~r/\e\[([\d;]*)m/, text, include_captures: true)
  |> Enum.reduce({[], 0}, fn part, {acc, open} ->
    case Regex.run(~r/^\e\[([\d;]*)m$/, part) do
      [_, codes] ->
        styles = codes |> String.split(";") |> Enum.map(&colors[&1]) |> Enum.reject(&is_nil/1)
        acc = [String.duplicate("</span>", open) | acc]

        if styles == [],
          do: {acc, 0},
          else: {[~s(<span style="#{Enum.join(styles, ";")}">) | acc], 1}

      nil ->
        {[escape.(part) | acc], open}
    end
  end)

body = IO.iodata_to_binary(Enum.reverse([String.duplicate("</span>", open) | html]))
rows = length(String.split(text, "\n")) + 1

page = """
<!doctype html>
<html><head><meta charset="utf-8"><style>
  body { margin: 0; background: #0d1117; }
  pre { margin: 0; padding: 14px 18px; color: #c9d1d9;
        font: 13px/1.45 "DejaVu Sans Mono", monospace; white-space: pre; }
</style></head>
<body><pre><span style="color:#7ee787">$</span> mix test
#{body}</pre></body></html>
"""

html_file = Path.join(System.tmp_dir!(), "flame_on_exunit_summary.html")
File.write!(html_file, page)
height = rows * 19 + 40

{log, status} =
  System.cmd(
    chromium,
    ~w(--headless --no-sandbox --disable-gpu --hide-scrollbars) ++
      ["--window-size=1760,#{height}", "--screenshot=#{out}", "file://#{html_file}"],
    stderr_to_stdout: true
  )

if status != 0, do: raise("chromium failed (#{status}):\n#{log}")
IO.puts("wrote #{out}")
