"""Stopping a query between micro-batches (jobs/streaming.py), on a stand-in for Spark's StreamingQuery."""

from __future__ import annotations

import threading
import time
from typing import Any

from jobs.streaming import stop_between_batches


class Query:
    """Its trigger active for `active_s` from now, running batch `batch` or only looking for data (`finishes`:
    the batch completes when the trigger goes inactive)."""

    def __init__(self, active_s: float, finishes: bool) -> None:
        self.until, self.finishes, self.batch, self.stopped_at = time.monotonic() + active_s, finishes, 4, None
        self.isActive = True

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": time.monotonic() < self.until}

    @property
    def lastProgress(self) -> dict[str, Any]:
        done = self.finishes and time.monotonic() >= self.until
        return {"batchId": self.batch + 1 if done else self.batch}

    def stop(self) -> None:
        self.stopped_at = time.monotonic()
        self.isActive = False


def test_a_running_batch_is_let_finish_then_the_query_stops() -> None:
    q = Query(0.3, finishes=True)
    began = time.monotonic()
    stop_between_batches(q)  # type: ignore[arg-type]
    assert q.stopped_at is not None and 0.3 <= q.stopped_at - began < 0.5


def test_an_idle_query_looking_for_data_stops_when_the_look_ends_not_at_the_timeout() -> None:
    """No batch follows an idle trigger, so the last batch id never changes: before, this waited `timeout_s`."""
    q = Query(0.1, finishes=False)
    began = time.monotonic()
    done = threading.Event()
    threading.Thread(target=lambda: (stop_between_batches(q, timeout_s=5), done.set()), daemon=True).start()  # type: ignore[arg-type]
    assert done.wait(2)
    assert q.stopped_at is not None and q.stopped_at - began < 0.5
