"""API benchmark: latency and throughput of the read endpoints, and dashboard page loads, over a simulated day.

    .venv/bin/python bench/api.py [--data bench/.data/api-lakehouse] [--rebuild] [--requests 2000]
                                  [--clients 50] [--client raw|httpx] [--page-loads 3] [--skip-load] [--skip-dashboards]
                                  [--skip-on-request]

1. Lakehouse: a simulated day of a 30-broker cluster (bench/api_lakehouse.py: a 4 h emulated window
   replicated to 24 h in bronze, then the real pipeline, available-now). Built once into `--data` and
   reused (`--rebuild` builds it again; ~25 min on this 2-core machine); what it holds is printed first.
2. Load: `isrwatch serve` in a subprocess. The first, cold request of each endpoint after start-up is
   reported apart; after a warm-up (every URL once), for each endpoint a 1-client baseline and then
   `--clients` concurrent clients (closed loop, one keep-alive connection each) send `--requests`
   requests: GET /api/v1/alerts cycling through filter/page combinations, GET /api/v1/topics/{topic}
   round-robin over every topic. p50, p99, max latency and requests/s side by side, with the CPU time per
   request of the server and of the load generator. The default generator writes HTTP/1.1 on asyncio
   streams (~0.15 ms of CPU a request); `--client httpx` uses httpx.AsyncClient (~5 ms a request here,
   more than the server, so it takes the server's cores). Before the load it waits (`--quiet-wait`, up to
   5 min) for the machine's load average to fall (`--quiet-load`): the machine is shared.
3. Dashboards: each page in headless Chromium (playwright, Debian's /usr/bin/chromium), from `page.goto`
   to `window.isrwatchRendered` being set (the page's plots drawn): the first load in a fresh browser
   context (plotly.js not cached) and the median of the following loads in the same context, with the
   time the HTML alone takes over HTTP. The server's page keeper builds the default pages' figures ahead;
   side by side, each page's first load from a second server with the keeper off (figures built when the
   page asks; `--skip-on-request` leaves it out).
The load generator and Chromium share the machine's cores with the server. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
from api_lakehouse import TOPICS, build  # noqa: E402
from api_pages import dashboards_phase, wait_prebuilt  # noqa: E402
from api_server import Server, free_port  # noqa: E402
from percentiles import percentile  # noqa: E402

API_P99_TARGET_MS = 50.0
BASELINE_REQUESTS = 200
ALERT_QUERIES = ["?limit=100", "?state=firing", "?severity=critical&limit=50&offset=50",
                 "?state=resolved&limit=20", "?severity=warning&limit=200"]


# -- what the lakehouse holds ----------------------------------------------------------------------------
def describe(manifest: dict[str, Any]) -> None:
    inv, params = manifest["inventory"], manifest["params"]
    copies = params["hours"] // params["window_hours"]
    print(f"lakehouse: {inv['simulated_hours']:.1f} simulated hours ({inv['first_ts']} .. {inv['last_ts']}) of "
          f"{len(inv['clusters'])} cluster ({', '.join(inv['clusters'])}): {inv['brokers']} brokers, "
          f"{inv['topics']} topics, {inv['partitions']} partitions, metric and partition-state interval "
          f"{params['metric_interval_s']} s")
    print(f"  built from a {params['window_hours']} h emulated window replicated {copies}x in bronze (faults "
          f"repeat every {params['window_hours']} h; brokers' meters reset and leaders return to preferred at "
          "each boundary), then the real pipeline")
    print(f"  alerts: gold.alerts {sum(inv['alerts_by_status'].values())} rows "
          f"({', '.join(f'{k} {v}' for k, v in sorted(inv['alerts_by_status'].items()))}); gold.alert_events "
          f"{sum(inv['alert_transitions'].values()):,} transitions "
          f"({', '.join(f'{k} {v:,}' for k, v in sorted(inv['alert_transitions'].items()))})")
    print(f"  {'table':<28} {'rows':>12} {'files':>6}")
    layers = ("silver", "quarantine", "gold")
    for name, st in sorted(inv["tables"].items(), key=lambda kv: (layers.index(kv[0].split(".")[0])
                                                                   if kv[0].split(".")[0] in layers else 9, kv[0])):
        if name.startswith("bronze.") or (st["rows"] == 0 and name.startswith("quarantine.")):
            continue
        print(f"  {name:<28} {st['rows']:>12,} {st['files']:>6}")
    bronze = sum(st["rows"] for n, st in inv["tables"].items() if n.startswith("bronze."))
    quarantined = sum(st["rows"] for n, st in inv["tables"].items() if n.startswith("quarantine."))
    print(f"  (bronze {bronze:,} rows; quarantine {quarantined:,} rows)")


# -- load ------------------------------------------------------------------------------------------------
async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One HTTP/1.1 response: (status, connection kept alive); the body is read and dropped."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length, chunked, keep = 0, False, True
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif name == "connection" and value == "close":
            keep = False
    if not chunked:
        await reader.readexactly(length)
        return status, keep
    while (size := int((await reader.readline()).split(b";")[0], 16)) > 0:
        await reader.readexactly(size + 2)
    await reader.readline()
    return status, keep


async def _load(base: str, urls: list[str], requests: int, clients: int, client: str) -> dict[str, Any]:
    """`clients` connections, each a client sending its next request when the previous answer is in, until
    `requests` requests were sent in total; URLs taken in turn from `urls`. `client`: "raw" (HTTP/1.1 over
    asyncio streams: ~0.1 ms of CPU per request, so the load generator takes little from the server's cores)
    or "httpx" (httpx.AsyncClient: ~2-7 ms of CPU per request here)."""
    next_url = itertools.cycle(urls)
    budget = itertools.count()
    results: list[tuple[str, float, int]] = []
    host, port = base.removeprefix("http://").split(":")

    async def raw_worker() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while next(budget) < requests:
                url = next(next_url)
                t0 = time.perf_counter()
                writer.write(f"GET {url} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: */*\r\n\r\n".encode())
                status, keep = await _read_response(reader)
                results.append((url, time.perf_counter() - t0, status))
                if not keep:
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, int(port))
        finally:
            writer.close()

    if client == "raw":
        began = time.perf_counter()
        await asyncio.gather(*(raw_worker() for _ in range(clients)))
        return {"results": results, "wall_s": time.perf_counter() - began}
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
        async def httpx_worker() -> None:
            while next(budget) < requests:
                url = next(next_url)
                t0 = time.perf_counter()
                r = await http.get(url)
                await r.aread()
                results.append((url, time.perf_counter() - t0, r.status_code))

        began = time.perf_counter()
        await asyncio.gather(*(httpx_worker() for _ in range(clients)))
        return {"results": results, "wall_s": time.perf_counter() - began}


def _row(label: str, lat: list[float], wall_s: float | None = None, cpu_ms: tuple[float, float] | None = None,
         errors: int = 0) -> str:
    ms = [x * 1000 for x in lat]
    rps = f"{len(lat) / wall_s:>8,.0f}" if wall_s else f"{'':>8}"
    cpu = f"{cpu_ms[0]:>8.1f} {cpu_ms[1]:>8.1f}" if cpu_ms is not None else f"{'':>8} {'':>8}"
    p99 = percentile(ms, 99)
    within = "yes" if p99 <= API_P99_TARGET_MS else "no"
    return (f"  {label:<58} {len(ms):>6} {statistics.median(ms):>7.1f} {p99:>7.1f} {max(ms):>7.1f} {rps} {cpu} "
            f"{errors:>6} {within:>7}")


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _wait_quiet(quiet_load: float, max_wait_s: float) -> float | None:
    """Wait (up to max_wait_s) until the 1-minute load average is at most quiet_load: other work on this shared
    machine takes cores from the server. None when it already was."""
    if os.getloadavg()[0] <= quiet_load or max_wait_s <= 0:
        return None
    began = time.monotonic()
    print(f"load: 1-minute load average {os.getloadavg()[0]:.1f}; waiting up to {max_wait_s:.0f} s for "
          f"<= {quiet_load:g} ...", flush=True)
    while os.getloadavg()[0] > quiet_load and time.monotonic() - began < max_wait_s:
        time.sleep(5)
    return time.monotonic() - began


def load_phase(server: Server, requests: int, clients: int, client: str = "raw", quiet_load: float = 1.5,
               quiet_wait_s: float = 0) -> None:
    alert_urls = [f"/api/v1/alerts{q}" for q in ALERT_QUERIES]
    # Cold: the first request of each kind after start-up reads its tables (later ones are served from memory).
    cold = {}
    for label, url in (("alerts", alert_urls[0]), ("topic", f"/api/v1/topics/{TOPICS[0][0]}")):
        t0 = time.perf_counter()
        r = httpx.get(f"{server.base}{url}", timeout=120)
        cold[label] = (time.perf_counter() - t0, r.status_code, len(r.content))
    topics = httpx.get(f"{server.base}/api/v1/topics", timeout=120).json()["items"]
    topic_urls = [f"/api/v1/topics/{t['topic']}" for t in topics]
    for url in alert_urls + topic_urls:  # warm-up: every URL once
        httpx.get(f"{server.base}{url}", timeout=120)
    sizes = {u: len(httpx.get(f"{server.base}{u}", timeout=60).content) for u in alert_urls + topic_urls[:1]}
    print(f"load: cold first requests after start-up: GET {alert_urls[0]} {cold['alerts'][0] * 1000:.0f} ms "
          f"(HTTP {cold['alerts'][1]}, {cold['alerts'][2]:,} B), GET /api/v1/topics/{TOPICS[0][0]} "
          f"{cold['topic'][0] * 1000:.0f} ms "
          f"(HTTP {cold['topic'][1]}, {cold['topic'][2]:,} B)")
    waited = _wait_quiet(quiet_load, quiet_wait_s)
    load1, load5, _ = os.getloadavg()
    if waited is not None:
        print(f"load: waited {waited:.0f} s for the machine's 1-minute load average to fall to {quiet_load:g}"
              + ("" if load1 <= quiet_load else " (it did not; measuring anyway)"))
    generator = ("raw HTTP/1.1 keep-alive over asyncio streams" if client == "raw" else "httpx.AsyncClient")
    print(f"load: {clients} concurrent clients (closed loop: each sends its next request when the answer is in), "
          f"{requests:,} requests per endpoint, and a 1-client baseline of {BASELINE_REQUESTS}; the load generator "
          f"(this process: {generator}) shares the machine's {os.cpu_count()} cores with the server, so latency "
          f"includes its queueing; load average before: {load1:.1f} (1 min), {load5:.1f} (5 min)")
    header = (f"  {'endpoint':<58} {'n':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'req/s':>8} "
              f"{'srv CPU':>8} {'gen CPU':>8} {'errors':>6} {'p99<=50':>7}")
    lines = []
    for label, urls in ((f"GET /api/v1/alerts ({len(alert_urls)} filter/page combinations)", alert_urls),
                        (f"GET /api/v1/topics/{{t}} ({len(topic_urls)} topics round-robin)", topic_urls)):
        print(f"  running {label} ...", flush=True)
        runs = []
        for n_clients, n_requests in ((1, BASELINE_REQUESTS), (clients, requests)):
            cpu0, gen0 = server.cpu_s(), _client_cpu_s()
            out = asyncio.run(_load(server.base, urls, n_requests, n_clients, client))
            n = max(1, len(out["results"]))
            cpu = ((server.cpu_s() - cpu0) * 1000 / n, (_client_cpu_s() - gen0) * 1000 / n)
            runs.append((n_clients, out, cpu))
        lines.append(f"  {label}")
        for n_clients, out, cpu in runs:
            res = out["results"]
            lines.append(_row(f"  {n_clients} client{'s' if n_clients > 1 else ''}", [r[1] for r in res],
                              out["wall_s"], cpu, sum(r[2] != 200 for r in res)))
        res = runs[-1][1]["results"]
        if len(urls) <= 8:  # each variant on its own (same run)
            for u in urls:
                mine = [r for r in res if r[0] == u]
                lines.append(_row(f"    {u.removeprefix('/api/v1/alerts')} ({sizes.get(u, 0):,} B)",
                                  [r[1] for r in mine], errors=sum(r[2] != 200 for r in mine)))
        else:
            by_url: dict[str, list[float]] = {}
            for u, lat, _ in res:
                by_url.setdefault(u, []).append(lat)
            worst = max(by_url, key=lambda u: percentile(by_url[u], 99))
            lines.append(_row(f"    slowest topic by p99: {worst.rsplit('/', 1)[1]}", by_url[worst]))
    print(f"results ({clients}-client rows are the figures; srv/gen CPU = server / load generator CPU ms per request):")
    print(header)
    for line in lines:
        print(line)
    print(f"  server RSS after the load: {server.rss_mb():,.0f} MB")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(ROOT / "bench" / ".data" / "api-lakehouse"),
                   help="where the bench lakehouse is built and cached")
    p.add_argument("--rebuild", action="store_true", help="build the lakehouse again even if --data holds it")
    p.add_argument("--hours", type=int, default=24, help="simulated hours in the lakehouse")
    p.add_argument("--window-hours", type=int, default=4, help="hours actually emulated (replicated to --hours)")
    p.add_argument("--metric-interval", type=int, default=30, help="metric and partition-state interval, seconds")
    p.add_argument("--requests", type=int, default=2000, help="requests per endpoint")
    p.add_argument("--clients", type=int, default=50, help="concurrent clients")
    p.add_argument("--client", choices=["raw", "httpx"], default="raw",
                   help="load generator: raw HTTP/1.1 over asyncio (light) or httpx.AsyncClient")
    p.add_argument("--quiet-load", type=float, default=1.5,
                   help="before the load, wait for the 1-minute load average to fall to this (shared machine)")
    p.add_argument("--quiet-wait", type=float, default=300, help="... for at most this many seconds")
    p.add_argument("--page-loads", type=int, default=3, help="loads per dashboard page (first one cold)")
    p.add_argument("--skip-load", action="store_true", help="no request load; dashboards only")
    p.add_argument("--skip-dashboards", action="store_true")
    p.add_argument("--skip-on-request", action="store_true",
                   help="no second server with the page keeper off (its first loads side by side)")
    p.add_argument("--build-only", action="store_true", help="build (or check) the lakehouse and stop")
    args = p.parse_args()
    began = time.monotonic()
    data = Path(args.data).resolve()
    manifest = build(data, hours=args.hours, window_hours=args.window_hours,
                     metric_interval_s=args.metric_interval, rebuild=args.rebuild)
    describe(manifest)
    if args.build_only:
        return
    server = Server(data, free_port())
    on_request: Server | None = None
    status = "FAILED"
    try:
        startup = server.wait_ready()
        ready = httpx.get(f"{server.base}/readyz", timeout=60)
        print(f"server: isrwatch serve on {server.base} answered /healthz after {startup:.1f} s; /readyz "
              f"{ready.status_code} {ready.json().get('status')}")
        settled = wait_prebuilt(server)
        kept = httpx.get(f"{server.base}/readyz", timeout=60).json()["dashboards"]
        print(f"server: its page keeper had built {kept['pages_built']} dashboard pages (every page and every topic "
              f"page at the default scope) {settled:.1f} s later, in {kept['passes']} passes; the load and the "
              "page loads below start after that")
        if args.skip_load:
            print("load: skipped (--skip-load)")
        else:
            load_phase(server, args.requests, args.clients, args.client, args.quiet_load, args.quiet_wait)
        if args.skip_dashboards:
            print("dashboards: skipped (--skip-dashboards)")
        else:
            if not args.skip_on_request:
                on_request = Server(data, free_port(), prebuild=False)
                on_request.wait_ready()
            dashboards_phase(server, on_request, max(1, args.page_loads))
        status = "done"
    finally:
        if on_request is not None:
            on_request.stop()
        server.stop()
        print(f"server: stopped (exit {server.proc.returncode}); bench {status} in "
              f"{(time.monotonic() - began) / 60:.1f} min")


if __name__ == "__main__":
    main()
