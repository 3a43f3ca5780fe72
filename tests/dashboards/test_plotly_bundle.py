"""The dashboards' plotly.js: the bundle `make` builds (dashboards/plotly_bundle), of the plotly.js version the
plotly package targets, registering every trace type the pages draw (tables are drawn as HTML by the page
script) and no other."""

from __future__ import annotations

import json
import re
from pathlib import Path

from dashboards.html import PLOTLY_BUNDLE, full_plotly_js_path, plotly_js_path
from dashboards.pages import WARMED_TRACES, DashboardParams, page_payload
from lakehouse_read.reader import LakehouseReader
from tests.dashboards.test_pages import FIGURES

ROOT = Path(__file__).resolve().parents[2]


def _version(path: Path) -> str:
    head = path.read_bytes()[:300].decode()
    found = re.search(r"plotly\.js[^\n]* v(\d+\.\d+\.\d+)", head)
    assert found, head
    return found.group(1)


def test_the_pages_load_the_bundle_of_the_plotly_packages_version() -> None:
    assert plotly_js_path() == PLOTLY_BUNDLE  # make test built it
    assert "(isrwatch: core, bar, heatmap - minified)" in PLOTLY_BUNDLE.read_bytes()[:100].decode()
    pinned = json.loads((ROOT / "dashboards" / "plotly_bundle" / "package.json").read_text())["dependencies"]
    locked = json.loads((ROOT / "dashboards" / "plotly_bundle" / "package-lock.json").read_text())["packages"]
    assert _version(PLOTLY_BUNDLE) == _version(full_plotly_js_path()) == pinned["plotly.js"] \
        == locked["node_modules/plotly.js"]["version"]
    assert PLOTLY_BUNDLE.stat().st_size < 0.3 * full_plotly_js_path().stat().st_size  # 1.2 of 4.8 MB


def test_every_trace_type_the_pages_draw_is_registered_in_the_bundle(reader: LakehouseReader) -> None:
    registered = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', PLOTLY_BUNDLE.read_text()))
    used = {trace.get("type", "scatter")
            for page in FIGURES
            for figure in page_payload(reader, page, DashboardParams(window_minutes=5))["figures"].values()
            for trace in figure["data"]}
    assert used == {"scatter", "bar", "heatmap", "table"}
    assert used == {trace().type for trace in WARMED_TRACES}  # the server's start-up warm-up covers them all
    assert used - registered == {"table"}  # the page script draws tables as HTML
    assert registered == {"scatter", "bar", "heatmap"}
