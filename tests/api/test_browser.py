"""The dashboards in a real browser: `isrwatch serve` on 127.0.0.1, each page opened in Debian's headless
chromium (driven by Playwright's library), plots drawn with data, no console errors, a screenshot of each
saved under test-artifacts/screenshots/; and a page redraws new data without a reload."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.api.server import serve, stop

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The lose-two cluster: alerts still firing at its end and posture findings, so every figure has data (the
# default, the newest cluster, is the healthy one: its alert table and findings chart say "no data yet").
PAGES = {name: f"{path}?cluster=lose-two-s3" for name, path in {
    "index": "/", "overview": "/dashboards/overview", "isr-heatmap": "/dashboards/isr-heatmap",
    "topics": "/dashboards/topics", "topic-orders": "/dashboards/topics/orders", "slos": "/dashboards/slos",
    "posture": "/dashboards/posture"}.items()}
# Per plot: its traces and the points they hold (x for scatter/bar, z rows for heatmaps); a table (drawn as
# HTML) counts as one trace holding its body rows. Traces plotly.js could not draw (a type the bundle lacks)
# are not counted.
PLOTS_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot, .isrwatch-table')).map(el =>
    el.classList.contains('isrwatch-table')
    ? {id: el.id, traces: 1, points: el.querySelectorAll('tbody tr').length}
    : {id: el.id, traces: (el._fullData || []).filter(t => t.visible !== false).length,
       points: (el._fullData || []).filter(t => t.visible !== false).reduce((n, t) =>
           n + ((t.x && t.x.length) || (t.z && t.z.length) || 0), 0)})"""

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (make test installs it)")]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(api_lake: str) -> Iterator[str]:
    proc, url = serve(api_lake, Path(api_lake).parent)
    yield url
    stop(proc)


def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(url)
    page.wait_for_function("window.isrwatchRendered !== undefined", timeout=30_000)
    return page, errors


@pytest.mark.parametrize("name", sorted(PAGES))
def test_each_dashboard_draws_its_plots_with_data(browser: Any, server: str, name: str) -> None:
    page, errors = open_page(browser, server + PAGES[name])
    try:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        plots = page.evaluate(PLOTS_JS)
        rendered = page.evaluate("window.isrwatchRendered")
        scripts = page.evaluate("Array.from(document.scripts).map(s => s.src).filter(Boolean)")
    finally:
        page.close()
    assert errors == []
    assert all(s.startswith(server) for s in scripts), scripts      # plotly.js from the server, no CDN
    if name in ("index", "topics"):
        assert rendered == 0 and plots == []                          # link pages
        return
    assert rendered == len(plots) > 0
    assert all(p["traces"] > 0 for p in plots), plots
    assert sum(p["points"] > 0 for p in plots) == len(plots), plots


def test_a_page_redraws_new_data_and_says_validate_fell_behind_without_a_reload(browser: Any, api_lake: str,
                                                                                tmp_path: Path) -> None:
    lake = str(shutil.copytree(api_lake, tmp_path / "lakehouse"))
    proc, url = serve(lake, Path(lake).parent)
    try:
        page, errors = open_page(browser, f"{url}/dashboards/isr-heatmap?cluster=lose-two-s3&refresh_seconds=1")
        page.evaluate("window.__notReloaded = true")
        scope_before = page.inner_text("#isrwatch-scope")
        # A new partition_state snapshot one interval after the newest, with partition 0 of orders
        # down to a single in-sync replica.
        path = f"{lake}/silver/partition_state"
        rows = DeltaTable(path).to_pyarrow_table()
        mine = rows.filter(pc.equal(rows["run_id"], "lose-two-s3"))
        newest = pc.max(mine["ts"]).as_py()
        snap = mine.filter(pc.equal(mine["ts"], pa.scalar(newest, mine.schema.field("ts").type)))
        snap = snap.set_column(snap.schema.get_field_index("ts"), "ts",
                               pa.array([newest + timedelta(seconds=1)] * snap.num_rows, snap.schema.field("ts").type))
        write_deltalake(path, snap, mode="append")
        page.wait_for_function("window.isrwatchRedraws >= 1", timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True
        later = (newest + timedelta(seconds=1)).strftime("%H:%M:%S")
        assert later not in scope_before and later in page.inner_text("#isrwatch-scope")
        # A bronze commit validate has not taken, written two minutes ago: the page says so at its next refresh.
        assert page.inner_text("#isrwatch-notices") == ""
        bronze = f"{lake}/bronze/partition_state"
        write_deltalake(bronze, DeltaTable(bronze).to_pyarrow_table().slice(0, 1), mode="append")
        commit = Path(bronze) / "_delta_log" / f"{DeltaTable(bronze).version():020d}.json"
        os.utime(commit, (time.time() - 120, time.time() - 120))
        page.wait_for_function("document.getElementById('isrwatch-notices').textContent.includes('validate is')",
                               timeout=30_000)
        notice = page.inner_text("#isrwatch-notices")
        assert "behind bronze: 1 commit of bronze.partition_state not taken since" in notice, notice
        assert page.evaluate("window.__notReloaded") is True
        assert errors == []
        page.close()
    finally:
        stop(proc)
