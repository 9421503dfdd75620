defmodule FlameOn.Client.Web.HTML do
  @moduledoc false
  # What every page of the web UI shares: the frame (head, stylesheet,
  # header) and the helpers that turn values into text. Every value that
  # comes from a trace or a request goes through h/1. Web.Pages and
  # Web.TracePage build on it; it knows neither.
  #
  # Every page is built with its response's nonce (Web.Router): every
  # inline <script> and <style> carries it, else the page's
  # Content-Security-Policy does not run it. No style= or on...= attribute
  # anywhere: the policy ignores them.

  alias FlameOn.Client.Export

  @style """
  body { font: 14px/1.45 -apple-system, "Segoe UI", "DejaVu Sans", Verdana, sans-serif; margin: 0; color: #222; background: #fafaf6; }
  header { background: #3b2f2a; color: #fff; padding: 10px 24px; display: flex; gap: 24px; align-items: baseline; }
  header a { color: #ffd9a0; text-decoration: none; font-weight: 600; font-size: 17px; }
  header .node { color: #d8cfc8; font-size: 13px; }
  main { padding: 16px 24px 40px; max-width: 1400px; }
  h1 { font-size: 20px; margin: 8px 0 12px; }
  h2 { font-size: 16px; margin: 26px 0 8px; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #e3ddd0; padding: 4px 10px; text-align: left; vertical-align: top; }
  th { background: #f1ece0; font-weight: 600; }
  td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
  tr:target { background: #fff3c4; }
  form.capture { background: #fff; border: 1px solid #e3ddd0; padding: 12px 14px; display: flex; flex-wrap: wrap; gap: 12px; align-items: end; }
  form.capture label { display: flex; flex-direction: column; font-size: 12px; color: #555; gap: 3px; }
  form.capture input[type=text] { width: 340px; font: 14px monospace; padding: 5px; }
  form.capture input[type=number] { width: 80px; padding: 5px; }
  button { background: #b8561b; color: #fff; border: 0; padding: 7px 16px; font-size: 14px; border-radius: 3px; cursor: pointer; }
  button.secondary { background: #8a8178; padding: 3px 10px; font-size: 12px; }
  form.cancel { margin-top: 12px; }
  .hint { color: #666; font-size: 12px; }
  .error { background: #fde8e4; border: 1px solid #e4a597; padding: 12px 14px; }
  .waiting { background: #fff8e0; border: 1px solid #e8d48c; padding: 12px 14px; }
  .flame { background: #fff; border: 1px solid #e3ddd0; }
  .flame svg { display: block; width: 100%; height: auto; }
  .procs a { margin-right: 10px; white-space: nowrap; }
  .procs a.current { font-weight: 700; color: #000; text-decoration: none; }
  .facts th { font-weight: normal; color: #555; font-size: 12px; }
  .counters td:nth-child(odd) { color: #555; }
  code { font-size: 13px; }
  """

  @doc """
  A page: `title`, `body` and any extra `head` elements, in the shared
  frame; its stylesheet carries `nonce`.
  """
  @spec layout(String.t(), iodata(), String.t(), iodata()) :: iodata()
  def layout(title, body, nonce, head \\ []) do
    [
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
      "<title>",
      h(title),
      " · FlameOn</title>",
      head,
      ~s(<style nonce="#{h(nonce)}">),
      @style,
      "</style></head><body><header><a href=\"/\">FlameOn</a><span class=\"node\">",
      h(Atom.to_string(node())),
      "</span></header><main>",
      body,
      "</main></body></html>\n"
    ]
  end

  @doc """
  An SVG flame graph of `FlameOn.Client.Export` (a profile's or a diff's),
  in the page: the same document, so its script (hover, zoom, search) runs
  here, under the page's Content-Security-Policy: its `<style>` and
  `<script>` get the nonce, and its `onload=` attribute (which the policy
  would not run) is replaced by a script after it that calls `init`. Every
  name in it is escaped, so a `"<script"` or `"<style"` in it is the SVG's own.
  """
  @spec inline_svg(iodata(), String.t()) :: iodata()
  def inline_svg(svg, nonce) do
    svg = IO.iodata_to_binary(svg)

    svg =
      case svg do
        "<?xml" <> _ -> svg |> String.split("\n", parts: 2) |> List.last()
        _ -> svg
      end

    [
      svg
      |> String.replace(~s[ onload="init(evt)"], "", global: false)
      |> String.replace(~r/<(script|style)\b/, ~s(<\\1 nonce="#{h(nonce)}")),
      ~s[<script nonce="#{h(nonce)}">init(null);</script>]
    ]
  end

  @doc "`text` escaped for HTML text and attribute values."
  @spec h(String.t()) :: iodata()
  def h(text) when is_binary(text), do: Export.SVG.escape(text)

  @doc "A system time in µs as UTC date and time (`-` when unknown)."
  @spec time(integer() | nil) :: String.t()
  def time(nil), do: "-"

  def time(system_us) do
    system_us
    |> DateTime.from_unix!(:microsecond)
    |> Calendar.strftime("%Y-%m-%d %H:%M:%S")
  end

  @doc "Microseconds for people: 850 µs, 12.3 ms, 4.56 s."
  @spec duration(integer()) :: String.t()
  def duration(us) when us < 1_000, do: "#{us} µs"

  def duration(us) when us < 1_000_000,
    do: :erlang.float_to_binary(us / 1000, decimals: 1) <> " ms"

  def duration(us), do: :erlang.float_to_binary(us / 1_000_000, decimals: 2) <> " s"

  @doc "A pid as the UI writes it in links: `0.123.0`."
  @spec pid_text(pid()) :: String.t()
  def pid_text(pid),
    do: pid |> :erlang.pid_to_list() |> to_string() |> String.trim("<") |> String.trim(">")
end
