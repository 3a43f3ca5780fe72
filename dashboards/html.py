"""The HTML of a dashboard page: a self-contained document (inline CSS and script, plotly.js local).

A page is written in parts, in the order a server can stream them: `document_head` (loads plotly.js),
`body_start` (header, headings, and the drawing runtime), one `figure_section` per figure (its card and a
script drawing it: the browser draws it while the server builds the next), and `body_end` (the page's
version, and the script that reports the page drawn). The figures are embedded, so a page shows data without
a second request. Served, it then polls its figures endpoint every `refresh_seconds` with `since=<version>`
and redraws with `Plotly.react` only when the version changed; exported, it draws once and links to its
sibling files.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any, NamedTuple, Protocol
from urllib.parse import quote

import plotly

PLOTLY_JS = "plotly.min.js"
DEFAULT_REFRESH_SECONDS = 5

CSS = """
*{box-sizing:border-box}
html{scrollbar-gutter:stable}/* a figure drawn while the page streams keeps its width when a scrollbar appears */
body{margin:0;font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;background:#f3f4f6;color:#111827}
header{background:#111827;color:#f9fafb;padding:0 20px;display:flex;flex-wrap:wrap;align-items:center;gap:4px 18px}
header .brand{font-weight:700;font-size:17px;padding:12px 0;color:#f9fafb;text-decoration:none}
header nav{display:flex;flex-wrap:wrap;gap:2px}
header nav a{color:#d1d5db;text-decoration:none;padding:14px 10px;border-bottom:3px solid transparent}
header nav a:hover{color:#fff}
header nav a.current{color:#fff;border-bottom-color:#f0a500}
header .scope{margin-left:auto;font-size:13px;color:#d1d5db;text-align:right}
.status{display:block;font-size:12px;color:#9ca3af}.status.error{color:#fca5a5}
#isrwatch-notices p{margin:0 0 10px;padding:8px 12px;border-radius:8px;background:#fef3c7;color:#78350f;
border:1px solid #f59e0b;font-size:14px}
main{max-width:1400px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:22px;margin:8px 0 4px}
p.lead{margin:0 0 14px;color:#4b5563}
form.controls{display:flex;flex-wrap:wrap;gap:10px;align-items:end;margin:0 0 14px;font-size:13px;color:#374151}
form.controls label{display:flex;flex-direction:column;gap:3px}
form.controls input{font:inherit;padding:5px 8px;border:1px solid #d1d5db;border-radius:6px;min-width:90px}
form.controls button{font:inherit;padding:6px 14px;border:0;border-radius:6px;background:#111827;color:#fff;
cursor:pointer}
.card{background:#fff;border-radius:10px;box-shadow:0 1px 2px rgba(0,0,0,.06),0 1px 6px rgba(0,0,0,.04);
padding:8px;margin:0 0 16px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(260px,1fr));gap:14px}
.grid a{display:block;background:#fff;border-radius:10px;padding:14px 16px;text-decoration:none;color:inherit;
box-shadow:0 1px 2px rgba(0,0,0,.06)}
.grid a:hover{box-shadow:0 2px 10px rgba(0,0,0,.12)}
.grid a strong{display:block;font-size:16px;margin-bottom:4px;color:#1d4ed8}
.grid a span{font-size:13px;color:#4b5563}
.empty{color:#6b7280;font-style:italic}
.isrwatch-table{padding:6px 8px 10px;overflow-x:auto}
.isrwatch-table h2{font-size:17px;font-weight:400;margin:6px 4px 2px}
.isrwatch-table p.subtitle{font-size:12px;color:#6b7280;margin:0 4px 8px}
.isrwatch-table table{width:100%;border-collapse:collapse;font-size:12px;table-layout:fixed}
.isrwatch-table th{background:#f3f4f6;text-align:left;padding:6px 8px;border:1px solid #e5e7eb}
.isrwatch-table td{padding:5px 8px;border:1px solid #e5e7eb;vertical-align:top;overflow-wrap:anywhere}
"""

# Defined where the body starts, before any figure arrives: each figure's own script (sent as soon as the server
# built it) calls isrwatch.draw, so the browser draws the first figures while the server computes the others.
RUNTIME = """
window.isrwatch = (function () {
  "use strict";
  var plotConfig = {responsive: true, displaylogo: false};
  var drawing = [];

  function text(tag, content, className) {
    var el = document.createElement(tag);
    el.textContent = content;
    if (className) { el.className = className; }
    return el;
  }

  // A table trace becomes an HTML table: the dashboards' plotly.js bundle has no table trace, and a
  // browser lays out text tables faster than plotly.js draws them. Cells are set as text, never as HTML.
  function drawTable(div, figure) {
    var trace = figure.data[0], title = (figure.layout && figure.layout.title) || {};
    var columns = trace.header.values.map(function (h) { return String(h).replace(/<[^>]*>/g, ""); });
    var cells = trace.cells.values, fills = (trace.cells.fill && trace.cells.fill.color) || null;
    var widths = trace.columnwidth || columns.map(function () { return 1; });
    var total = widths.reduce(function (a, b) { return a + b; }, 0);
    var table = document.createElement("table"), colgroup = document.createElement("colgroup");
    widths.forEach(function (w) {
      var col = document.createElement("col");
      col.style.width = (100 * w / total).toFixed(2) + "%";
      colgroup.appendChild(col);
    });
    table.appendChild(colgroup);
    var head = table.createTHead().insertRow();
    columns.forEach(function (c) { head.appendChild(text("th", c)); });
    var body = table.createTBody(), rows = cells.length ? cells[0].length : 0;
    for (var r = 0; r < rows; r++) {
      var tr = body.insertRow();
      for (var c = 0; c < cells.length; c++) {
        var td = text("td", String(cells[c][r]));
        if (fills) { td.style.background = fills[Math.min(c, fills.length - 1)][r]; }
        tr.appendChild(td);
      }
    }
    if (div.classList.contains("js-plotly-plot")) { Plotly.purge(div); }
    div.textContent = "";
    if (!div.classList.contains("isrwatch-table")) { div.dataset.plotMinHeight = div.style.minHeight; }
    div.classList.add("isrwatch-table");
    div.style.minHeight = "0";   // the reserved plot height would leave a gap under a short table
    div.appendChild(text("h2", title.text || ""));
    if (title.subtitle && title.subtitle.text) { div.appendChild(text("p", title.subtitle.text, "subtitle")); }
    div.appendChild(table);
    return Promise.resolve();
  }

  function drawOne(id, figure) {
    var div = document.getElementById("fig-" + id);
    if (!div) { return Promise.resolve(); }
    if (figure.data.length && figure.data[0].type === "table") { return drawTable(div, figure); }
    if (div.classList.contains("isrwatch-table")) {   // was a table: plotly.js gets an empty div
      div.textContent = "";
      div.classList.remove("isrwatch-table");
      div.style.minHeight = div.dataset.plotMinHeight || "";
    }
    return Plotly.react(div, figure.data, figure.layout, plotConfig);
  }

  return {
    // A figure of the page as it arrives.
    draw: function (id, figure) { drawing.push(drawOne(id, figure)); },
    // Every figure of a refreshed payload; resolves to how many were drawn.
    redraw: function (figures) {
      var jobs = Object.keys(figures).map(function (id) { return drawOne(id, figures[id]); });
      return Promise.all(jobs).then(function () { return jobs.length; });
    },
    // Resolves to how many figures the page drew as it loaded, once all are drawn.
    drawn: function () { return Promise.all(drawing).then(function () { return drawing.length; }); }
  };
})();
"""

# At the end of the body, after the last figure: report the page drawn, then poll for new figures.
SCRIPT = """
(function () {
  "use strict";
  var config = JSON.parse(document.getElementById("isrwatch-config").textContent);
  var version = config.version;
  var status = document.getElementById("isrwatch-status");
  var scopeText = document.getElementById("isrwatch-scope");

  function describe(scope) {
    if (!scope.cluster || !scope.end) { return "no data yet"; }
    return "cluster " + scope.cluster + " \\u00b7 " + scope.window_minutes + " min to " + scope.end + " UTC";
  }

  function setStatus(text, failed) {
    if (!status) { return; }
    status.textContent = text;
    status.className = failed ? "status error" : "status";
  }

  // What the page cannot show (a pipeline behind bronze): said on every poll, whether the figures changed or not.
  function showNotices(notices) {
    var box = document.getElementById("isrwatch-notices");
    if (!box) { return; }
    box.textContent = "";
    notices.forEach(function (text) {
      var p = document.createElement("p");
      p.textContent = text;
      box.appendChild(p);
    });
  }

  isrwatch.drawn().then(function (drawn) { window.isrwatchRendered = drawn; });
  if (!config.figuresUrl || !(config.refreshMs > 0)) { return; }

  var separator = config.figuresUrl.indexOf("?") >= 0 ? "&" : "?";
  function poll() {
    fetch(config.figuresUrl + separator + "since=" + encodeURIComponent(version), {cache: "no-store"})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        return response.json();
      })
      .then(function (payload) {
        showNotices(payload.notices || []);
        if (payload.version === version) { return null; }
        return isrwatch.redraw(payload.figures).then(function () {
          version = payload.version;
          window.isrwatchRedraws = (window.isrwatchRedraws || 0) + 1;   // tests wait on it
          if (scopeText) { scopeText.textContent = describe(payload.scope); }
        });
      })
      .then(function () { setStatus("live \\u00b7 checked " + new Date().toLocaleTimeString(), false); },
            function (error) { setStatus("refresh failed: " + error.message, true); })
      .then(function () { window.setTimeout(poll, config.refreshMs); });
  }
  window.setTimeout(poll, config.refreshMs);
})();
"""


# plotly.js built for the dashboards (scatter, bar, heatmap: every trace type the figures draw; tables are drawn as
# HTML by SCRIPT), fetched by `make` for the plotly.js version the plotly package targets.
PLOTLY_BUNDLE = Path(__file__).resolve().parent.parent / "vendor" / "plotly" / "plotly-isrwatch.min.js"


def full_plotly_js_path() -> Path:
    """plotly.min.js as shipped inside the installed plotly package (the version its figures target)."""
    resource = importlib.resources.files("plotly") / "package_data" / PLOTLY_JS
    path = Path(str(resource))
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js not found in the plotly package at {path}")
    return path


@functools.cache  # asked on every page render and plotly.js request: one look at the disk per process
def plotly_js_path() -> Path:
    """The plotly.js the pages load: the bundle `make` builds (a fresh browser runs it in ~0.15 s, the full
    plotly.min.js in ~1.2 s) when it is there, else the plotly package's full plotly.min.js."""
    return PLOTLY_BUNDLE if PLOTLY_BUNDLE.is_file() else full_plotly_js_path()


class Links(Protocol):
    """Where a page's links point: the API's routes when served, sibling files when exported."""

    def index(self) -> str: ...
    def page(self, slug: str) -> str: ...
    def topic(self, topic: str) -> str: ...
    def plotly_js(self) -> str: ...
    def figures(self, page: str) -> str | None: ...


@dataclass(frozen=True)
class ServedLinks:
    """Links to the API's routes, under `base` (the app's root path), keeping the page's query."""

    base: str = ""
    query: str = ""

    def _with_query(self, path: str) -> str:
        return f"{self.base}{path}" + (f"?{self.query}" if self.query else "")

    def index(self) -> str:
        return self._with_query("/")

    def page(self, slug: str) -> str:
        return self._with_query(f"/dashboards/{slug}")

    def topic(self, topic: str) -> str:
        return self._with_query(f"/dashboards/topics/{quote(topic, safe='')}")

    def plotly_js(self) -> str:
        # The version in the query lets the route cache the file for a year and still serve an upgrade.
        bundle = "isrwatch" if plotly_js_path() == PLOTLY_BUNDLE else "full"
        return f"{self.base}/static/{PLOTLY_JS}?v={plotly.__version__}-{bundle}"

    def figures(self, page: str) -> str | None:
        path = "/".join(quote(part, safe="") for part in page.split("/"))
        return self._with_query(f"/api/v1/dashboards/{path}/figures")


@dataclass(frozen=True)
class StaticLinks:
    """Links between exported files in one directory; nothing to poll."""

    def index(self) -> str:
        return "index.html"

    def page(self, slug: str) -> str:
        return f"{slug}.html"

    def topic(self, topic: str) -> str:
        return quote(topic_file_name(topic))

    def plotly_js(self) -> str:
        return PLOTLY_JS

    def figures(self, page: str) -> str | None:
        return None


def topic_file_name(topic: str) -> str:
    """The exported file of a topic page. Kafka topic names are [A-Za-z0-9._-], safe as file names;
    anything else is replaced so that no name can leave the export directory."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in topic)
    return f"topic-{safe}.html"


def script_safe(json_text: str) -> str:
    """JSON text with every `<` escaped, so that no string in it can close the `<script>` it is embedded in."""
    return json_text.replace("<", "\\u003c")


def _json_for_script(value: Any) -> str:
    return script_safe(json.dumps(value, separators=(",", ":"), allow_nan=False))


def document_head(*, title: str, links: Links) -> str:
    """The page up to `</head>`: it needs no data, so a server can send it before computing the figures, and
    the browser fetches and compiles plotly.js (a first load's largest cost) while they are computed."""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)} · isrwatch</title>
<link rel="icon" href="data:,">
<style>{CSS}</style>
<script src="{escape(links.plotly_js())}"></script>
</head>
"""


def body_start(*, heading: str, lead: str, nav: list[tuple[str, str, bool]], scope_text: str, status_text: str,
               controls: str, body: str, links: Links, notices: Sequence[str] = ()) -> str:
    """The body up to its figures (after `document_head`). `nav` is (label, href, current); `body` is trusted
    HTML placed before the figures; `notices` (text) are shown above everything: what the page cannot show."""
    current_class = ' class="current"'
    nav_html = "".join(f'<a href="{escape(href)}"{current_class if current else ""}>{escape(label)}</a>'
                       for label, href, current in nav)
    return f"""<body>
<header>
<a class="brand" href="{escape(links.index())}">isrwatch</a>
<nav>{nav_html}</nav>
<div class="scope"><span id="isrwatch-scope">{escape(scope_text)}</span>
<span id="isrwatch-status" class="status">{escape(status_text)}</span></div>
</header>
<main>
<div id="isrwatch-notices" role="alert">{"".join(f"<p>{escape(n)}</p>" for n in notices)}</div>
<h1>{escape(heading)}</h1>
<p class="lead">{escape(lead)}</p>
{controls}
{body}
<script>{RUNTIME}</script>
"""


class FigureJson(NamedTuple):
    """A figure as JSON text safe inside a `<script>` (no `<`), and its height in px."""

    text: str
    height: int


def figure_section(figure_id: str, figure: FigureJson) -> str:
    """One figure: its card (the plot's height reserved so the page does not jump when drawn) and the script
    drawing it, which runs as soon as the browser has it."""
    return (f'<section class="card"><div id="fig-{escape(figure_id)}" class="figure" data-figure="{escape(figure_id)}" '
            f'style="min-height:{figure.height}px"></div></section>\n'
            f'<script>isrwatch.draw({_json_for_script(figure_id)},{figure.text})</script>\n')


def body_end(*, version: str, scope: dict[str, Any], figures_url: str | None, refresh_seconds: float) -> str:
    """The body after its figures: the page's version (what a refresh compares) and the script reporting the
    page drawn and polling `figures_url` every `refresh_seconds` (none: drawn once)."""
    config = {"version": version, "scope": scope, "figuresUrl": figures_url,
              "refreshMs": round(refresh_seconds * 1000) if figures_url else 0}
    return f"""</main>
<script id="isrwatch-config" type="application/json">{_json_for_script(config)}</script>
<script>{SCRIPT}</script>
</body>
</html>
"""


def failed_tail(message: str, *, body_started: bool) -> str:
    """What a page whose head (and, if `body_started`, the start of its body) was already sent ends with when
    computing the rest failed."""
    tail = f'<p class="empty">This page failed: {escape(message)}</p></main></body></html>\n'
    return tail if body_started else f"<body><main><h1>This page failed</h1>{tail}"


def controls_form(cluster: str | None, window_minutes: int) -> str:
    """GET form choosing the cluster and window of the current page (served mode only)."""
    return f"""<form class="controls" method="get">
<label>cluster<input name="cluster" value="{escape(cluster or '')}" placeholder="latest"></label>
<label>window (minutes)<input name="window_minutes" type="number" min="1" value="{window_minutes}"></label>
<button type="submit">Apply</button>
</form>"""
