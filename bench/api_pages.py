"""The dashboards phase of the API benchmark (bench/api.py): each page opened in headless Chromium, from
`page.goto` to `window.isrwatchRendered` set (the page's plots drawn), first in a fresh browser context, then
again in the same context; side by side, the first load from a server with the page keeper off."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
from api_server import Server

PAGE_TARGET_S = 1.0
PAGES = ["/", "/dashboards/overview", "/dashboards/isr-heatmap", "/dashboards/topics", "/dashboards/slos",
         "/dashboards/posture"]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def wait_prebuilt(server: Server, timeout_s: float = 300) -> float:
    """Seconds until the server's page keeper has every page it keeps built (GET /readyz: a pass that built
    nothing, after the first)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        dashboards = httpx.get(f"{server.base}/readyz", timeout=60).json().get("dashboards", {})
        if dashboards.get("passes", 0) >= 2 and dashboards.get("last_pass_built") == 0:
            return time.monotonic() - began
        time.sleep(0.5)
    raise SystemExit(f"the page keeper did not settle within {timeout_s:.0f} s; see {server.log.name}")


def _page_loads(browser: Any, base: str, path: str, loads: int) -> dict[str, Any]:
    """`loads` loads of a page in one fresh browser context: seconds from goto to the plots drawn, and for each
    load when its HTML was all in and when DOMContentLoaded ended (from the navigation's start)."""
    from playwright.sync_api import Error as PlaywrightError

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    out: dict[str, Any] = {"times": [], "phases": [], "drawn": None, "html_bytes": 0, "failure": None}
    try:
        for _ in range(loads):
            t0 = time.perf_counter()
            try:
                response = page.goto(f"{base}{path}", timeout=60_000)
                if response is None or response.status != 200:
                    out["failure"] = f"HTTP {response.status if response else '?'}"
                    break
                page.wait_for_function("window.isrwatchRendered !== undefined", timeout=60_000)
            except PlaywrightError as e:
                out["failure"] = str(e).splitlines()[0][:80]
                break
            out["times"].append(time.perf_counter() - t0)
            out["drawn"] = page.evaluate("window.isrwatchRendered")
            nav = page.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0]; "
                                "return [n.responseEnd, n.domContentLoadedEventEnd]; })()")
            out["phases"].append((nav[0] / 1000, nav[1] / 1000))
            out["html_bytes"] = len(response.body())
    finally:
        context.close()
    return out


def dashboards_phase(server: Server, on_request: Server | None, page_loads: int) -> None:
    # The index, not a page: a page probed here would have its figures computed before its measured first load.
    probe = httpx.get(f"{server.base}/", timeout=120)
    if probe.status_code == 404:
        print("dashboards: not available (GET / answers 404); skipped")
        return
    from playwright.sync_api import sync_playwright

    topics = httpx.get(f"{server.base}/api/v1/topics", timeout=60).json()["items"]
    biggest = max(topics, key=lambda t: (t.get("partitions") or 0, t["topic"]))
    pages = [*PAGES, f"/dashboards/topics/{biggest['topic']}"]
    print(f"dashboards: headless Chromium ({CHROMIUM}), goto -> window.isrwatchRendered set; first load in a "
          f"fresh context, then {page_loads - 1} more in the same context (topic page: {biggest['topic']}, "
          f"{biggest.get('partitions')} partitions, the largest)"
          + ("" if on_request is None else "; side by side, each page's first load from a second server with "
             "the keeper off (api.dashboard_prebuild: 0 seconds), whose figures are built when the page asks"))
    rows = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            first = browser.new_context()  # the browser's own first-page start-up is not a page's cost
            first.new_page().goto(f"{server.base}/healthz")
            first.close()
            for path in pages:
                print(f"  loading {path} ...", flush=True)
                kept = _page_loads(browser, server.base, path, page_loads)
                asked = None if on_request is None else _page_loads(browser, on_request.base, path, 1)
                html_s: list[float] = []  # the HTML alone, as a client without a browser gets it
                for _ in range(3):
                    t0 = time.perf_counter()
                    httpx.get(f"{server.base}{path}", timeout=60)
                    html_s.append(time.perf_counter() - t0)
                rows.append((path, kept, asked, statistics.median(html_s)))
        finally:
            browser.close()
    print("  first = the page's first load in a fresh context (plotly.js not cached), with when its HTML was all "
          "in (the server's share) and when DOMContentLoaded ended (scripts, plotly.js among them, run), from the "
          "navigation's start: served with the page keeper on (every page's and topic page's figures built "
          "ahead at the default scope) and, 'asked', with it off (built when the page asks); then = median of "
          "the next loads; HTML s = the HTML alone over httpx (median of 3)")
    print(f"  {'page':<40} {'figures':>7} {'HTML KB':>8} {'HTML s':>7} {'first s':>8} {'HTML in':>8} {'DCL':>6} "
          f"{'asked s':>8} {'HTML in':>8} {'then s':>7} {'<=1 s':>6}")
    for path, kept, asked, served in rows:
        if kept["failure"] or (asked is not None and asked["failure"]):
            print(f"  {path:<40} failed: {kept['failure'] or asked['failure']}")
            continue
        times, phases = kept["times"], kept["phases"]
        warm = statistics.median(times[1:] or [float("nan")])
        asked_s, asked_in = ((asked["times"][0], asked["phases"][0][0]) if asked is not None
                             else (float("nan"), float("nan")))
        within = "yes" if max(times) <= PAGE_TARGET_S else ("warm" if warm <= PAGE_TARGET_S else "no")
        print(f"  {path:<40} {kept['drawn']:>7} {kept['html_bytes'] / 1024:>8,.0f} {served:>7.2f} {times[0]:>8.2f} "
              f"{phases[0][0]:>8.2f} {phases[0][1]:>6.2f} {asked_s:>8.2f} {asked_in:>8.2f} {warm:>7.2f} "
              f"{within:>6}")
