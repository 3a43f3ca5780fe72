"""Page payloads (version token, figures per page), the served HTML, and the static export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pytest

from dashboards.export import export_pages
from dashboards.html import ServedLinks, plotly_js_path, topic_file_name
from dashboards.pages import (
    PAGES,
    DashboardParams,
    UnknownPage,
    UnknownTopic,
    figure_json,
    page_payload,
    render_index,
    render_page,
)
from lakehouse_read.reader import LakehouseReader
from schemas.silver import SILVER_TABLES
from tests.dashboards.lake import at, write

FIGURES = {
    "overview": ["partition-health", "active-alerts", "metrics-coverage"],
    "isr-heatmap": ["isr-heatmap"],
    "topics": [],
    "slos": ["slo-status", "error-budget", "burn-rates"],
    "posture": ["posture", "findings"],
    "topics/orders": ["isr-membership", "offsets", "produce-errors"],
}


@pytest.mark.parametrize("page", list(FIGURES))
def test_each_page_draws_its_figures_as_plain_json(reader: LakehouseReader, page: str) -> None:
    payload = page_payload(reader, page, DashboardParams(window_minutes=5))
    assert list(payload["figures"]) == FIGURES[page]
    assert payload["scope"] == {"cluster": "c1", "window_minutes": 5, "end": "2026-01-01 00:00:19"}
    for figure in payload["figures"].values():
        assert figure["layout"]["title"]["text"]
    json.dumps(payload, allow_nan=False)  # what the figures endpoint sends, NaN-free


def test_the_version_is_the_versions_of_the_tables_a_page_reads(reader: LakehouseReader) -> None:
    assert page_payload(reader, "isr-heatmap")["version"] == "silver.partition_state=0"
    assert page_payload(reader, "slos")["version"] == "silver.partition_state=0;gold.slo_status=0"


def test_an_unchanged_lakehouse_keeps_the_version_and_sends_no_figures_to_a_client_that_has_it(
        lake_copy: Path) -> None:
    reader = LakehouseReader(lake_copy, refresh_s=0)
    first = page_payload(reader, "overview")
    again = page_payload(reader, "overview", since=first["version"])
    assert again == {"version": first["version"], "scope": first["scope"], "notices": [], "figures": {}}
    write(lake_copy, SILVER_TABLES["partition_state"],
          [{"run_id": "c1", "ts": at(20), "topic": "orders", "partition": 1, "leader": 2, "replicas": [2, 3, 1],
            "isr": [2], "effective_min_isr": 2, "configured_min_isr": 2, "replica_leos": [0, 0, 0]}])
    changed = page_payload(reader, "overview", since=first["version"])
    assert changed["version"] != first["version"]
    assert changed["version"].startswith("silver.partition_state=1;")
    assert list(changed["figures"]) == FIGURES["overview"]
    assert changed["scope"]["end"] == "2026-01-01 00:00:20"


def test_unknown_pages_and_topics_are_refused(reader: LakehouseReader) -> None:
    with pytest.raises(UnknownPage, match=r"^unknown dashboard page 'nope'$"):
        page_payload(reader, "nope")
    with pytest.raises(UnknownTopic, match=r"^unknown topic 'old'$"):
        page_payload(reader, "topics/old")  # c0's topic, not the default cluster's
    assert page_payload(reader, "topics/old", DashboardParams(cluster="c0"))["figures"]


def test_a_served_page_loads_local_plotly_and_polls_its_figures(reader: LakehouseReader) -> None:
    params = DashboardParams(cluster="c1", window_minutes=5)
    html = render_page(reader, "topics/orders", params, links=ServedLinks(query=params.query()),
                       refresh_seconds=2)
    assert re.findall(r'<script src="([^"]+)"', html) == [f"/static/plotly.min.js?v={_plotly_version()}"]
    assert "https://" not in html and "cdn" not in html.lower()
    for fid in FIGURES["topics/orders"]:
        assert f'id="fig-{fid}" class="figure" data-figure="{fid}"' in html
    config = _config(html)
    assert config["figuresUrl"] == "/api/v1/dashboards/topics/orders/figures?cluster=c1&window_minutes=5"
    assert config["refreshMs"] == 2000
    payload = page_payload(reader, "topics/orders", params)
    assert config["version"] == payload["version"]
    assert _drawn(html) == payload["figures"]  # each figure's own script draws exactly what the API serves
    assert "window.isrwatchRendered = drawn" in html and "Plotly.react" in html
    assert 'href="/dashboards/slos?cluster=c1&amp;window_minutes=5"' in html


def test_a_page_without_refresh_does_not_poll(reader: LakehouseReader) -> None:
    assert _config(render_page(reader, "overview", refresh_seconds=0))["figuresUrl"] is None


def test_the_index_links_every_page_and_topic(reader: LakehouseReader) -> None:
    html = render_index(reader)
    for slug in PAGES:
        assert f'href="/dashboards/{slug}"' in html
    assert 'href="/dashboards/topics/orders"' in html and 'href="/dashboards/topics/logs"' in html


def test_pages_of_an_empty_lakehouse_say_no_data_yet(tmp_path: Path) -> None:
    reader = LakehouseReader(tmp_path / "empty")
    for page in PAGES:
        payload = page_payload(reader, page)
        assert payload["version"].endswith("=-")
        for figure in payload["figures"].values():
            assert "no data yet" in [a["text"] for a in figure["layout"].get("annotations", [])]
        assert "no data yet" in render_page(reader, page)
    assert "no data yet" in render_index(reader)


def test_export_writes_every_page_and_topic_with_local_plotly_and_relative_links(reader: LakehouseReader,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "site"
    written = export_pages(reader, out, window_minutes=5)
    names = [p.name for p in written]
    assert names == ["index.html", *(f"{slug}.html" for slug in PAGES), "topic-logs.html", "topic-orders.html",
                     "plotly.min.js"]
    assert all(p.parent == out for p in written)
    assert (out / "plotly.min.js").read_bytes() == plotly_js_path().read_bytes()
    for path in written[:-1]:
        html = path.read_text(encoding="utf-8")
        assert re.findall(r'<script src="([^"]+)"', html) == ["plotly.min.js"], path.name
        assert "https://" not in html and "cdn" not in html.lower(), path.name
        for href in re.findall(r'href="([^"]+)"', html):
            assert href == "data:," or (out / href).is_file(), (path.name, href)
        assert _config(html)["figuresUrl"] is None  # drawn once from the embedded figures
    assert list(_drawn((out / "overview.html").read_text(encoding="utf-8"))) == FIGURES["overview"]


def test_exported_topic_files_stay_in_the_directory() -> None:
    assert topic_file_name("orders.v2-eu_1") == "topic-orders.v2-eu_1.html"
    assert topic_file_name("../../etc/passwd") == "topic-.._.._etc_passwd.html"


def _drawn(html: str) -> dict[str, Any]:
    """The figures a page's scripts draw as it loads, by id, in page order, each after its div."""
    drawn = {}
    for fid, figure in re.findall(r'<script>isrwatch\.draw\(("[^"]+"),(.*?)\)</script>', html):
        fid = json.loads(fid)
        assert html.index(f'id="fig-{fid}"') < html.index(f"isrwatch.draw({json.dumps(fid)},")
        drawn[fid] = json.loads(figure)
    return drawn


def _config(html: str) -> dict[str, Any]:
    match = re.search(r'<script id="isrwatch-config" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    config: dict[str, Any] = json.loads(match.group(1))
    return config


def _plotly_version() -> str:
    import plotly

    return f"{plotly.__version__}-isrwatch"  # the bundle `make` builds (tests/dashboards/test_plotly_bundle.py)


def test_figure_json_cannot_close_the_script_it_is_embedded_in() -> None:
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1.5, float("nan")], name="</script><b>x</b>"))
    fig.update_layout(height=321)
    built = figure_json(fig)
    assert "<" not in built.text and built.height == 321
    value = json.loads(built.text, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert value["data"][0]["name"] == "</script><b>x</b>"
