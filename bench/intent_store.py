"""Where a webhook intent is committed before its POST: the write-ahead journal on the local disk against a delta-rs
commit to gold.deliveries, on a local lakehouse and on an S3-compatible store (s3proxy), side by side in one run.

    .venv/bin/python bench/intent_store.py [--appends 200] [--rows 1,10]

A webhook lane commits the intents of its head and the transitions queued behind it (1 to 50 rows) before the
first of those POSTs (pipelines/webhook_delivery.py), so this cost sits between every alert's hand-over and its
POST. Each append here is what a lane does: one Arrow table of `--rows` intent rows, the journal's `append`
(written and fsync'd) or `KeptOpen(DELIVERIES).append(rows, checksum=False)` (the table kept open, brought up to
date, one commit). Both stores are empty at the start; the Delta table grows by one commit per append, as
gold.deliveries does between its maintenance runs. Prints p50 / p95 / max in ms per store, mechanism and batch size.
The journal on a store lakehouse is on the local disk too (the store has no append-and-fsync), so its row is the
local one. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.percentiles import percentile
from foundation import object_store
from foundation.delta_io import KeptOpen, ensure_table
from foundation.journal import Journal
from schemas.gold import DELIVERIES
from testing.s3proxy import S3Proxy


def intents(n: int, offset: int) -> pa.Table:
    now = datetime.now(UTC)
    return pa.Table.from_pylist([{
        "delivery_id": f"{offset + i}-0@hook", "event_id": f"{offset + i}-0", "receiver": "hook",
        "rule": "UnderMinIsr", "fingerprint": f"{offset + i:016x}", "alert_status": "firing", "attempt": 1,
        "outcome": "sending", "http_status": None, "error": None, "attempted_at": now, "duration_ms": 0.0,
        "next_attempt_at": None} for i in range(n)], schema=DELIVERIES.arrow_schema)


def timed(append: Callable[[pa.Table], object], rows: int, appends: int) -> list[float]:
    took = []
    for k in range(appends):
        batch = intents(rows, k * rows)
        start = time.perf_counter()
        append(batch)
        took.append((time.perf_counter() - start) * 1000)
    return took


def line(store: str, how: str, rows: int, took: list[float]) -> str:
    return (f"{store:<12} {how:<34} {rows:>4} {percentile(took, 50):>8.2f} {percentile(took, 95):>8.2f} "
            f"{max(took):>8.2f}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="intent_store", description=__doc__.splitlines()[0])
    p.add_argument("--appends", type=int, default=200, help="appends per store, mechanism and batch size (200)")
    p.add_argument("--rows", default="1,10", help="intent rows per append, comma-separated (1,10)")
    a = p.parse_args(argv)
    sizes = [int(n) for n in a.rows.split(",")]
    print(f"{'store':<12} {'intent committed to':<34} {'rows':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
    with tempfile.TemporaryDirectory(prefix="isrwatch-intents-") as work:
        root = Path(work)
        for rows in sizes:
            journal = Journal(root / f"journal-{rows}", DELIVERIES.arrow_schema)
            print(line("local disk", "journal (append + fsync)", rows, timed(journal.append, rows, a.appends)),
                  flush=True)
            journal.close()
            lake = str(root / f"lake-{rows}")
            ensure_table(DELIVERIES, lake)
            table = KeptOpen(DELIVERIES, lake)
            print(line("local disk", "gold.deliveries (delta-rs commit)", rows,
                       timed(lambda t, kept=table: kept.append(t, checksum=False), rows, a.appends)), flush=True)
        with S3Proxy(root / "s3proxy") as s3:
            os.environ.update(s3.environment)
            object_store.use(None)
            for rows in sizes:
                lake = s3.uri(f"lake-{rows}")
                ensure_table(DELIVERIES, lake)
                table = KeptOpen(DELIVERIES, lake)
                print(line("s3proxy", "gold.deliveries (delta-rs commit)", rows,
                           timed(lambda t, kept=table: kept.append(t, checksum=False), rows, a.appends)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
