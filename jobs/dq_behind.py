"""Great Expectations behind a live micro-batch: validate's batch ends once its rows are in silver and quarantine.

On a live batch (~1,000 rows over seven tables) routing and the silver commits take well under a second, and Great
Expectations' pandas engine ~0.5 s a table, whatever the rows: 3.5 s a batch. Run inside the batch, GE set the pace
of micro-batches, and with it the time from a bronze commit to silver and to an alert. So a live batch hands its
routed tables here and ends. A worker thread takes every batch waiting, at most once per `GE_EVERY_S`, has Great
Expectations validate their rows together, table by table, in a child process (in a thread of the driver it held
the GIL for seconds and slowed the batches it was meant to spare), and commits their silver.dq_runs records in one
commit. GE's cost per run is nearly fixed, so grouping batches bounds its CPU at about 3.5 s per `GE_EVERY_S`.

Durable: before the hand-over, the batch's GE input (each table's rows with their context, and the routing's counts)
is written to a spool in the query's checkpoint folder (foundation/spool.py); the worker removes it once the dq
records are committed. A job stopped or killed before that validates what it finds there at its next start, before
its first batch, so every batch still gets its one dq record (the commit carries the newest batch's marker: batches
already committed are not written twice).

Bounded: at most `MAX_BEHIND` batches wait for the worker; a batch beyond that waits for room.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from foundation import kill_points
from foundation.spool import Spool
from jobs.validate_routes import RoutedOnDriver

MAX_BEHIND = 64
GE_EVERY_S = 10.0

# A batch waiting for GE: its id, its routed tables with each one's newest ingested_at in µs, its duration in ms.
Waiting = tuple[int, list[tuple[RoutedOnDriver, int]], int]
# Batches in order -> commits their dq records (GE validating their rows first)
Check = Callable[[list[Waiting]], None]


@dataclass
class DqBehind:
    spool: Spool
    check: Check
    _queue: queue.Queue[int | None] = field(default_factory=lambda: queue.Queue(MAX_BEHIND))
    _failure: BaseException | None = None
    _waiting: int = 0   # batches submitted and not yet checked
    _cond: threading.Condition = field(default_factory=threading.Condition)
    every_s: float = GE_EVERY_S
    _stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._worker = threading.Thread(target=self._run, name="validate-great-expectations", daemon=True)

    def start(self, tables: dict[str, Any]) -> DqBehind:
        """Validate what a previous run left in the spool (`tables`: name -> TableDef), then start the worker."""
        left = self.spool.numbers()
        if left:
            self._check(left, tables)
        self.tables = tables
        self._worker.start()
        return self

    def submit(self, batch_id: int, routed: list[tuple[RoutedOnDriver, int]], duration_ms: int) -> None:
        """Spool the batch, then queue it (waiting for room when `MAX_BEHIND` batches wait)."""
        self.raise_if_failed()
        tables = {r.td.name: r.ge_rows for r, _ in routed}
        manifest = {"batch_id": batch_id, "duration_ms": duration_ms,
                    "tables": [{"table": r.td.name, "rows_in": r.rows_in, "rows_valid": r.rows_valid,
                                "counts": r.counts, "runs": r.runs, "at_us": at_us} for r, at_us in routed]}
        self.spool.put(batch_id, tables, manifest)
        with self._cond:
            self._waiting += 1
        self._queue.put(batch_id)

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"validate: Great Expectations behind the batches failed: {self._failure}") \
                from self._failure

    def drain(self, timeout_s: float = 120) -> bool:
        """Wait until every queued batch has its dq record (a stop); True when none is left."""
        if not self._worker.is_alive():
            return self._queue.empty()
        self._stopping.set()
        self._queue.put(None)
        self._worker.join(timeout_s)
        return not self._worker.is_alive()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once nothing is queued or being validated (tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting == 0, timeout_s)

    def _run(self) -> None:
        last = float("-inf")
        while True:
            taken, stop = [self._queue.get()], False
            while taken[-1] is not None:
                try:
                    taken.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            group = [n for n in taken if n is not None]
            stop = taken[-1] is None
            if group and self._failure is None:  # after a failure, batches stay spooled for the next start
                try:
                    for number in group:
                        kill_points.reached("dq_behind", number, "before_check")
                    self._check(group, self.tables)
                except BaseException as e:  # reported by the next batch: the query fails there
                    self._failure = e
                last = time.monotonic()
            with self._cond:
                self._waiting -= len(group)
                self._cond.notify_all()
            if stop:
                return
            # GE's cost is per run: let batches gather (a stop cuts the wait short)
            self._stopping.wait(max(0.0, last + self.every_s - time.monotonic()))

    def _check(self, numbers: list[int], tables: dict[str, Any]) -> None:
        group = []
        for number in numbers:
            loaded, manifest = self.spool.get(number)
            routed = [(RoutedOnDriver(tables[t["table"]], t["rows_in"], t["rows_valid"], t["counts"], t["runs"],
                                      loaded[t["table"]], None, None), t["at_us"]) for t in manifest["tables"]]
            group.append((manifest["batch_id"], routed, manifest["duration_ms"]))
        self.check(group)
        for number in numbers:
            self.spool.remove(number)
