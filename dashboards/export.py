"""Static export: every dashboard page as a standalone HTML file that opens from disk, offline.

One directory holds index.html, a file per page and per topic (topic-<name>.html), and plotly.min.js
copied from the installed plotly package; pages link to each other by relative file names and embed
their figures, so nothing is fetched from a server or a CDN.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from dashboards import data
from dashboards.html import PLOTLY_JS, StaticLinks, plotly_js_path, topic_file_name
from dashboards.pages import PAGES, TOPIC_PREFIX, DashboardParams, render_index, render_page
from dashboards.scope import resolve_scope
from lakehouse_read.reader import LakehouseReader


def export_pages(reader: LakehouseReader, out_dir: str | Path, cluster: str | None = None,
                 window_minutes: int | None = None, notices: Sequence[str] = ()) -> list[Path]:
    """Write the index, every page and one page per topic into `out_dir` (created if missing), plus
    plotly.min.js; each says `notices` (what it cannot show). Returns the files written, index.html first."""
    out = Path(out_dir)
    params = DashboardParams(cluster=cluster, window_minutes=window_minutes)
    # Fail on a bad window before writing anything.
    scope = resolve_scope(reader, cluster, window_minutes)
    out.mkdir(parents=True, exist_ok=True)
    links = StaticLinks()
    pages: list[tuple[str, str]] = [("index.html", render_index(reader, params, links=links, notices=notices))]
    pages += [(links.page(slug), render_page(reader, slug, params, links=links, notices=notices)) for slug in PAGES]
    pages += [(topic_file_name(topic), render_page(reader, f"{TOPIC_PREFIX}{topic}", params, links=links,
                                                   notices=notices))
              for topic in data.topic_names(reader, scope)]
    written = []
    for name, html in pages:
        path = out / name
        path.write_text(html, encoding="utf-8")
        written.append(path)
    plotly_js = out / PLOTLY_JS
    shutil.copyfile(plotly_js_path(), plotly_js)
    written.append(plotly_js)
    return written
