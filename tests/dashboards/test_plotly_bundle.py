"""The dashboards' plotly.js: the cartesian bundle `make` fetches, of the plotly.js version the plotly package
targets, registering every trace type the pages draw (tables are drawn as HTML by the page script)."""

from __future__ import annotations

import re
from pathlib import Path

from api.lakehouse import LakehouseReader
from dashboards.html import CARTESIAN_BUNDLE, full_plotly_js_path, plotly_js_path
from dashboards.pages import DashboardParams, page_payload
from tests.dashboards.test_pages import FIGURES

ROOT = Path(__file__).resolve().parents[2]


def _version(path: Path) -> str:
    head = path.read_bytes()[:300].decode()
    found = re.search(r"plotly\.js[^\n]* v(\d+\.\d+\.\d+)", head)
    assert found, head
    return found.group(1)


def test_the_pages_load_the_cartesian_bundle_of_the_plotly_packages_version() -> None:
    assert plotly_js_path() == CARTESIAN_BUNDLE  # make test fetched it
    assert "(cartesian - minified)" in CARTESIAN_BUNDLE.read_bytes()[:100].decode()
    makefile = re.search(r"^PLOTLY_JS_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert makefile is not None
    assert _version(CARTESIAN_BUNDLE) == _version(full_plotly_js_path()) == makefile.group(1)
    assert CARTESIAN_BUNDLE.stat().st_size < 0.35 * full_plotly_js_path().stat().st_size  # 1.5 of 4.8 MB


def test_every_trace_type_the_pages_draw_is_registered_in_the_bundle(reader: LakehouseReader) -> None:
    registered = set(re.findall(r'moduleType:"trace",name:"([a-z0-9]+)"', CARTESIAN_BUNDLE.read_text()))
    used = {trace.get("type", "scatter")
            for page in FIGURES
            for figure in page_payload(reader, page, DashboardParams(window_minutes=5))["figures"].values()
            for trace in figure["data"]}
    assert used == {"scatter", "bar", "heatmap", "table"}
    assert used - registered == {"table"}  # the page script draws tables as HTML
