"""Stopping a query between micro-batches (jobs/streaming.py), on a stand-in for Spark's StreamingQuery."""

from __future__ import annotations

import threading
from typing import Any

from jobs.streaming import stop_between_batches


class Query:
    """Its trigger active for its first `active_polls` status reads, running batch 4 (`finishes`: the batch completes
    when the trigger goes inactive) or only looking for data. Counts the reads, so nothing here depends on time."""

    def __init__(self, active_polls: int, finishes: bool) -> None:
        self.active_polls, self.finishes, self.polls, self.stopped_after = active_polls, finishes, 0, None
        self.isActive = True

    @property
    def status(self) -> dict[str, Any]:
        self.polls += 1
        return {"isTriggerActive": self.polls <= self.active_polls}

    @property
    def lastProgress(self) -> dict[str, Any]:
        return {"batchId": 5 if self.finishes and self.polls > self.active_polls else 4}

    def stop(self) -> None:
        self.stopped_after = self.polls
        self.isActive = False


def test_a_running_batch_is_let_finish_then_the_query_stops() -> None:
    q = Query(15, finishes=True)
    stop_between_batches(q)  # type: ignore[arg-type]
    assert q.stopped_after == 16  # at the first look that found the batch over, not before


def test_an_idle_query_looking_for_data_stops_when_the_look_ends_not_at_the_timeout() -> None:
    """No batch follows an idle trigger, so the last batch id never changes: before, this waited `timeout_s`."""
    q = Query(5, finishes=False)
    done = threading.Event()
    threading.Thread(target=lambda: (stop_between_batches(q, timeout_s=60), done.set()), daemon=True).start()  # type: ignore[arg-type]
    assert done.wait(30)
    assert q.stopped_after == 6   # 60 s of 20 ms polls would be ~3,000
