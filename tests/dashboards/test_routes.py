"""The dashboard routes (api/dashboard_routes.py) on an app holding only them, over the hand-written lakehouse."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.dashboard_routes import router
from dashboards.html import PLOTLY_BUNDLE, plotly_js_path
from dashboards.pages import PAGES
from foundation.settings import ApiSettings
from lakehouse_read.freshness import Freshness
from lakehouse_read.reader import LakehouseReader


def app_over(lake: Path, **settings: object) -> FastAPI:
    app = FastAPI()
    app.state.reader = LakehouseReader(lake, refresh_s=0)
    app.state.freshness = Freshness(str(lake), str(lake / "_checkpoints"))
    app.state.settings = ApiSettings.model_validate(settings)
    app.include_router(router)
    return app


@pytest.fixture
def client(lake: Path) -> Iterator[TestClient]:
    with TestClient(app_over(lake)) as c:
        yield c


@pytest.mark.parametrize("path", ["/", "/dashboards/overview", "/dashboards/isr-heatmap", "/dashboards/topics",
                                  "/dashboards/slos", "/dashboards/posture", "/dashboards/topics/orders"])
def test_pages_are_html(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    assert r.text.startswith("<!doctype html>")
    assert f'<script src="/static/plotly.min.js?v={plotly.__version__}-isrwatch">' in r.text


def test_a_page_polls_at_the_configured_interval_unless_the_query_says_otherwise(lake: Path) -> None:
    with TestClient(app_over(lake, dashboard_refresh="7.5 seconds")) as c:
        assert '"refreshMs":7500' in c.get("/dashboards/overview").text
        assert '"refreshMs":1000' in c.get("/dashboards/overview?refresh_seconds=1").text
        assert '"figuresUrl":null' in c.get("/dashboards/overview?refresh_seconds=0").text


def test_figures_json_carries_the_version_scope_and_figures(client: TestClient) -> None:
    r = client.get("/api/v1/dashboards/isr-heatmap/figures", params={"cluster": "c1", "window_minutes": 5})
    assert r.status_code == 200
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["version"] == "silver.partition_state=0"
    assert body["scope"] == {"cluster": "c1", "window_minutes": 5, "end": "2026-01-01 00:00:19"}
    heatmap = body["figures"]["isr-heatmap"]
    assert heatmap["data"][0]["type"] == "heatmap"
    assert heatmap["data"][0]["y"] == ["logs-0", "orders-0", "orders-1"]
    unchanged = client.get("/api/v1/dashboards/isr-heatmap/figures",
                           params={"cluster": "c1", "window_minutes": 5, "since": body["version"]}).json()
    assert unchanged["figures"] == {}


def test_topic_figures(client: TestClient) -> None:
    body = client.get("/api/v1/dashboards/topics/orders/figures").json()
    assert list(body["figures"]) == ["isr-membership", "offsets", "produce-errors"]
    assert client.get("/api/v1/dashboards/topics/old/figures", params={"cluster": "c0"}).status_code == 200


def test_a_blank_cluster_means_the_default_one(client: TestClient) -> None:
    assert client.get("/api/v1/dashboards/slos/figures?cluster=").json()["scope"]["cluster"] == "c1"


@pytest.mark.parametrize(("path", "detail"), [
    ("/dashboards/nope", "unknown dashboard page 'nope'"),
    ("/api/v1/dashboards/nope/figures", "unknown dashboard page 'nope'"),
    ("/dashboards/topics/nope", "unknown topic 'nope'"),
    ("/api/v1/dashboards/topics/nope/figures", "unknown topic 'nope'"),
])
def test_unknown_pages_and_topics_are_404(client: TestClient, path: str, detail: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert r.json() == {"detail": detail}


@pytest.mark.parametrize("path", ["/dashboards/..%2F..%2Fetc%2Fpasswd", "/dashboards/topics/..%2F..%2Fetc%2Fpasswd",
                                  "/static/..%2F..%2Fetc%2Fpasswd", "/static/plotly.min.js%2F..%2F..%2Fsetup.py"])
def test_no_path_reaches_outside_the_dashboards(client: TestClient, path: str) -> None:
    r = client.get(path)
    assert r.status_code == 404
    assert "root:" not in r.text


@pytest.mark.parametrize("query", ["window_minutes=0", "window_minutes=-3", "window_minutes=abc",
                                   "window_minutes=1.5", "window_minutes=40321", "refresh_seconds=-1"])
def test_bad_query_parameters_are_422(client: TestClient, query: str) -> None:
    assert client.get(f"/dashboards/overview?{query}").status_code == 422
    if not query.startswith("refresh"):
        assert client.get(f"/api/v1/dashboards/overview/figures?{query}").status_code == 422


def test_plotly_js_is_served_from_the_dashboards_bundle_with_a_long_cache(client: TestClient) -> None:
    r = client.get("/static/plotly.min.js")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/javascript")
    # A year, immutable: the pages' URL for it carries plotly's version and the bundle's digest.
    cache = dict(d.strip().partition("=")[::2] for d in r.headers["cache-control"].split(","))
    assert "public" in cache and "immutable" in cache and int(cache["max-age"]) >= 365 * 24 * 3600
    assert plotly_js_path() == PLOTLY_BUNDLE
    assert r.content == PLOTLY_BUNDLE.read_bytes()


def _get_raw(app: FastAPI, path: str, query: bytes, sent: list[dict[str, Any]]) -> None:
    """One GET; the ASGI messages the app sends are appended to `sent` as they are sent."""
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if requested:   # the client stays connected: the next message would be its disconnect
            await asyncio.Event().wait()
        requested = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query, "root_path": "", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))


def test_a_page_sends_its_head_before_computing_its_figures_and_each_figure_once_built(
        lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The browser can fetch and compile plotly.js while the server builds the figures, and draw the first
    figure while the server builds the next."""
    built_when: list[tuple[str, int]] = []
    sent: list[dict[str, Any]] = []
    overview = PAGES["overview"]

    def build(*args: Any) -> Iterator[tuple[str, Any]]:
        for fid, fig in overview.build(*args):
            built_when.append((fid, len(sent)))
            yield fid, fig

    monkeypatch.setitem(PAGES, "overview", dataclasses.replace(overview, build=build))
    _get_raw(app_over(lake), "/dashboards/overview", b"window_minutes=17", sent)
    bodies = [bytes(m["body"]).decode() for m in sent if m["type"] == "http.response.body"]
    assert sent[0]["status"] == 200
    head, start, first, second, third, end = bodies[:6]
    assert head.startswith("<!doctype html>") and head.rstrip().endswith("</head>") and "plotly.min.js" in head
    assert "<h1>Overview</h1>" in start and "window.isrwatch = " in start and "isrwatch.draw(" not in start
    # Message 3 (after the start, the head and the body's start) is the first figure: sent before the second
    # figure was built.
    assert built_when == [("partition-health", 3), ("active-alerts", 4), ("metrics-coverage", 5)]
    assert first.count("isrwatch.draw(") == 1 and 'isrwatch.draw("partition-health",' in first
    assert second.count("isrwatch.draw(") == 1 and 'isrwatch.draw("active-alerts",' in second
    assert third.count("isrwatch.draw(") == 1 and 'isrwatch.draw("metrics-coverage",' in third
    assert 'id="isrwatch-config"' in end and end.rstrip().endswith("</html>")


def test_a_page_that_fails_after_its_head_ends_with_the_error(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def build(*args: object) -> dict[str, Any]:
        raise RuntimeError("the figure broke")

    monkeypatch.setitem(PAGES, "overview", dataclasses.replace(PAGES["overview"], build=build))
    with TestClient(app_over(lake)) as c:
        r = c.get("/dashboards/overview", params={"window_minutes": 18})
    assert r.status_code == 200   # the status line went with the head
    assert r.text.startswith("<!doctype html>") and r.text.rstrip().endswith("</html>")
    assert "This page failed" in r.text and "RuntimeError: the figure broke" in r.text
    assert r.text.count("<body>") == 1 and "<h1>Overview</h1>" in r.text  # inside the body already sent


def test_a_page_that_fails_before_its_body_still_gets_a_body(lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def body(*args: object) -> str:
        raise RuntimeError("the topic index broke")

    monkeypatch.setitem(PAGES, "topics", dataclasses.replace(PAGES["topics"], body=body))
    with TestClient(app_over(lake)) as c:
        r = c.get("/dashboards/topics", params={"window_minutes": 18})
    assert r.status_code == 200
    assert r.text.count("<body>") == 1 and r.text.index("</head>") < r.text.index("<body>")
    assert "<h1>This page failed</h1>" in r.text and "RuntimeError: the topic index broke" in r.text
    assert r.text.rstrip().endswith("</html>")
