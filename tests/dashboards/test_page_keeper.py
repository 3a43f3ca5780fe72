"""The page keeper (api/page_keeper.py): the dashboards' figures built before a browser asks, and rebuilt
only when a table a page reads changed."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.page_keeper import DEFAULT_PATHS, PageKeeper
from dashboards.pages import DashboardParams, keep_built, page_payload
from foundation.settings import load_settings
from lakehouse_read.reader import LakehouseReader
from schemas.gold_durability import SLO_STATUS
from schemas.silver import SILVER_TABLES
from tests.dashboards.lake import at, write

RECENT_TOPIC = ("topics/orders", DashboardParams(cluster="c1", window_minutes=5))


def test_a_pass_builds_every_default_page_once_and_then_only_what_changed(lake_copy: Path) -> None:
    reader = LakehouseReader(lake_copy, refresh_s=0)
    keeper = PageKeeper(reader, interval_s=5, background_share=0)
    assert DEFAULT_PATHS == ("overview", "isr-heatmap", "slos", "posture")
    assert keeper.run_once() == 4
    assert keeper.run_once() == 0
    assert not keep_built(reader, "overview")  # a browser's request now finds the figures built
    write(lake_copy, SLO_STATUS, [])  # a new version of the one table only the SLO page reads
    assert keeper.run_once() == 1
    assert not keep_built(reader, "slos")
    assert keeper.builds == 5


def test_opened_pages_are_kept_built_while_recent(lake_copy: Path) -> None:
    reader = LakehouseReader(lake_copy, refresh_s=0)
    keeper = PageKeeper(reader, interval_s=5, background_share=0)
    keeper.opened(*RECENT_TOPIC)
    assert keeper.targets()[len(DEFAULT_PATHS):] == [RECENT_TOPIC]
    assert keeper.run_once() == 5
    write(lake_copy, SILVER_TABLES["partition_state"],
          [{"run_id": "c1", "ts": at(20), "topic": "orders", "partition": 1, "leader": 2, "replicas": [2, 3, 1],
            "isr": [2], "effective_min_isr": 2, "configured_min_isr": 2, "replica_leos": [0, 0, 0]}])
    assert keeper.run_once() == 5  # every page reads the partition state
    assert page_payload(reader, *RECENT_TOPIC)["scope"]["end"] == "2026-01-01 00:00:20"
    stale = PageKeeper(reader, interval_s=5, recent_s=0)
    stale.opened(*RECENT_TOPIC)
    time.sleep(0.01)
    assert [path for path, _ in stale.targets()] == list(DEFAULT_PATHS)


def test_the_recently_opened_pages_are_bounded_and_newest_first(lake: Path) -> None:
    keeper = PageKeeper(LakehouseReader(lake), interval_s=5, max_recent=2)
    for window in (5, 6, 7):
        keeper.opened("topics/orders", DashboardParams(window_minutes=window))
    recent = keeper.targets()[len(DEFAULT_PATHS):]
    assert [params.window_minutes for _, params in recent] == [7, 6]


def test_a_page_that_no_longer_exists_is_dropped_and_does_not_stop_the_others(lake: Path) -> None:
    reader = LakehouseReader(lake, refresh_s=0)
    keeper = PageKeeper(reader, interval_s=5, background_share=0)
    keeper.opened("topics/gone", DashboardParams())
    keeper.opened("topics", DashboardParams())  # the topic index: no figures to keep
    assert keeper.run_once() == 4
    assert keeper.run_once() == 0
    assert [path for path, _ in keeper.targets()] == [*DEFAULT_PATHS, "topics"]


def test_serve_starts_the_keeper_with_the_app_and_stops_it_with_the_app(lake: Path) -> None:
    settings = load_settings(overrides={"lakehouse": str(lake), "api.dashboard_prebuild": "0.05 seconds"})
    app = create_app(settings)
    keeper = app.state.page_keeper
    with TestClient(app) as client:
        thread = keeper._thread
        assert thread is not None and thread.is_alive()
        deadline = time.monotonic() + 30
        while (keeper.passes < 2 or keeper.last_pass_built) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keeper.builds == len(DEFAULT_PATHS) + 2  # and the two topic pages (c1: orders, logs)
        assert keeper.passes >= 1
        client.get("/dashboards/topics/orders")
        assert ("topics/orders", DashboardParams()) in keeper.targets()
    assert not thread.is_alive()
    with TestClient(app):  # the same app started again: its keeper runs again
        deadline = time.monotonic() + 30
        passes = keeper.passes
        while keeper.passes == passes and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keeper.passes > passes
    off = load_settings(overrides={"lakehouse": str(lake), "api.dashboard_prebuild": "0 seconds"})
    assert create_app(off).state.page_keeper is None


def test_topic_pages_are_built_in_turn_within_the_background_budget(lake: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    reader = LakehouseReader(lake, refresh_s=0)
    clock = iter(range(1_000_000))  # every reading of the keeper's clock is a second later
    monkeypatch.setattr("api.page_keeper.time", SimpleNamespace(monotonic=lambda: float(next(clock))))
    keeper = PageKeeper(reader, interval_s=10, background_share=0.15)  # 1.5 s: one topic page per pass
    assert keeper.run_once() == len(DEFAULT_PATHS)  # the data changed since the last pass: no topic pages
    assert keeper.run_once() == 1
    assert keep_built(reader, "topics/logs") is False  # the round goes by name: logs, then orders
    assert keeper.run_once() == 1
    assert keep_built(reader, "topics/orders") is False
    assert keeper.run_once() == 0 and keeper.last_pass_built == 0
    everything = PageKeeper(LakehouseReader(lake, refresh_s=0), interval_s=10, background_share=1e9)
    assert [everything.run_once(), everything.run_once()] == [len(DEFAULT_PATHS), 2]
