defmodule FlameOn.Client.Export.SVG.Template do
  @moduledoc false
  # The fixed part of FlameOn.Client.Export.SVG's document: its stylesheet
  # and the script behind hover details, click-to-zoom and search. The
  # layout (frames, legend, texts) is the SVG module's; the script reads it
  # back from the frames' data-x, data-w and data-d attributes and from the
  # element ids (details, matched, search, unzoom, frames), so the two
  # change together.

  @doc "The SVG's stylesheet, for text of `font_size` pixels."
  @spec style(number()) :: String.t()
  def style(font_size) do
    """
    <style type="text/css">
    text { font-family: Verdana, "DejaVu Sans", sans-serif; font-size: #{font_size}px; fill: rgb(0,0,0); }
    #title { font-size: #{font_size + 5}px; }
    .sub { fill: rgb(80,80,80); }
    .bg { fill: rgb(250,250,246); }
    #search, #unzoom { cursor: pointer; fill: rgb(40,40,160); }
    #frames g { cursor: pointer; }
    #frames text { pointer-events: none; }
    #frames g:hover rect { stroke: rgb(0,0,0); stroke-width: 0.5; }
    #frames g.p rect { opacity: 0.5; }
    .h { display: none; }
    </style>
    """
  end

  @script """
  var frames = [], details, hint, matched, searchBtn, unzoomBtn, term = null;
  function init(evt) {
    details = document.getElementById("details");
    hint = details.textContent;
    matched = document.getElementById("matched");
    searchBtn = document.getElementById("search");
    unzoomBtn = document.getElementById("unzoom");
    var box = document.getElementById("frames"), gs = box.getElementsByTagName("g");
    for (var i = 0; i < gs.length; i++) {
      var g = gs[i], info = g.getElementsByTagName("title")[0].textContent;
      var f = {g: g, rect: g.getElementsByTagName("rect")[0], text: g.getElementsByTagName("text")[0],
               x: +g.getAttribute("data-x"), w: +g.getAttribute("data-w"), d: +g.getAttribute("data-d"),
               info: info, name: info.substring(0, info.lastIndexOf(" ("))};
      f.fill = f.rect.getAttribute("fill");
      g.flameFrame = f;
      frames.push(f);
    }
    box.addEventListener("mouseover", function (e) { var f = frameOf(e.target); if (f) details.textContent = f.info; });
    box.addEventListener("mouseout", function (e) { if (frameOf(e.target)) details.textContent = hint; });
    box.addEventListener("click", function (e) { var f = frameOf(e.target); if (f) zoom(f); });
    unzoomBtn.addEventListener("click", function () { zoom(null); });
    searchBtn.addEventListener("click", function () { if (term === null) ask(); else search(null); });
    document.addEventListener("keydown", function (e) {
      if (((e.ctrlKey || e.metaKey) && (e.key === "f" || e.keyCode === 70)) || e.key === "/") {
        e.preventDefault();
        ask();
      } else if (e.key === "Escape") {
        search(null);
      }
    });
  }
  function frameOf(el) {
    while (el && el.getAttribute) {
      if (el.flameFrame) return el.flameFrame;
      el = el.parentNode;
    }
    return null;
  }
  function fit(name, w) {
    var n = Math.floor((w - 6) / CW);
    if (n < 3) return "";
    return name.length <= n ? name : name.substring(0, n - 2) + "..";
  }
  function place(f, x, w) {
    f.rect.setAttribute("x", x.toFixed(2));
    f.rect.setAttribute("width", w.toFixed(2));
    f.text.setAttribute("x", (x + 3).toFixed(2));
    f.text.textContent = fit(f.name, w);
  }
  // Zooms so that f spans the width; its ancestors stay, faded, full width.
  function zoom(f) {
    if (f && f.d === 0) f = null;
    var zx = f ? f.x : 0, zw = f ? f.w : TOTAL, zd = f ? f.d : 0, scale = (W - 2 * PAD) / zw;
    for (var i = 0; i < frames.length; i++) {
      var o = frames[i], cls = "";
      if (o.d >= zd && o.x >= zx && o.x + o.w <= zx + zw) {
        place(o, PAD + (o.x - zx) * scale, o.w * scale);
      } else if (o.d < zd && o.x <= zx && o.x + o.w >= zx + zw) {
        place(o, PAD, W - 2 * PAD);
        cls = "p";
      } else {
        cls = "h";
      }
      o.g.setAttribute("class", cls);
    }
    unzoomBtn.setAttribute("class", f ? "" : "h");
  }
  function ask() {
    var t = window.prompt("Search frames (regular expression)", term === null ? "" : term);
    if (t) search(t);
  }
  function thousands(n) { return String(n).replace(/\\B(?=(\\d{3})+(?!\\d))/g, ","); }
  // Highlights the frames whose name matches; the share counts each
  // matching frame's time once (a match inside a match adds nothing).
  function search(t) {
    var re = null, hits = [];
    if (t !== null) {
      try { re = new RegExp(t); } catch (err) { window.alert("Invalid regular expression: " + err.message); return; }
    }
    term = t;
    for (var i = 0; i < frames.length; i++) {
      var o = frames[i];
      if (re && re.test(o.name)) { o.rect.setAttribute("fill", "rgb(230,0,230)"); hits.push(o); }
      else o.rect.setAttribute("fill", o.fill);
    }
    if (!re) { matched.textContent = " "; searchBtn.textContent = "Search"; return; }
    hits.sort(function (a, b) { return a.x - b.x || b.w - a.w; });
    var sum = 0, end = -1;
    for (var j = 0; j < hits.length; j++) {
      if (hits[j].x >= end) { sum += hits[j].w; end = hits[j].x + hits[j].w; }
    }
    var pct = TOTAL > 0 ? (100 * sum / TOTAL).toFixed(2) : "0.00";
    matched.textContent = "Matched /" + t + "/: " + thousands(sum) + " \\u00b5s, " + pct + "%";
    searchBtn.textContent = "Reset Search";
  }
  """

  @doc """
  The SVG's script, given the geometry it was laid out with: the image's
  `width`, its side padding `pad`, the `font_size` and the `total` µs the
  full width stands for.
  """
  @spec script(pos_integer(), non_neg_integer(), number(), non_neg_integer()) :: iodata()
  def script(width, pad, font_size, total) do
    [
      ~s(<script type="text/ecmascript"><![CDATA[\n),
      "var W = #{width}, PAD = #{pad}, TOTAL = #{total}, CW = #{font_size} * 0.59;\n",
      @script,
      "]]></script>\n"
    ]
  end
end
