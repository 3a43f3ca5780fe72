"""jobs/query_restarts.py `await_validation` on stand-in queries: available-now, a lane that fails after validate has
finished is started again and awaited to its end; validate failing stops the lane."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from jobs import query_restarts
from jobs.query_restarts import await_validation


@dataclass
class StandInQuery:
    """Ends after `polls` awaitTermination(…) calls, with `error` (None: finished). As Spark's, awaitTermination on
    a query that failed raises its error."""

    polls: int
    error: Exception | None = None
    stopped: bool = False

    @property
    def isActive(self) -> bool:
        return self.polls > 0 and not self.stopped

    def awaitTermination(self, timeout: float | None = None) -> bool:
        if self.isActive:
            self.polls -= 1
        if not self.isActive and self.exception() is not None:
            raise StreamingQueryException(message=str(self.error))
        return not self.isActive

    def exception(self) -> Exception | None:
        return None if self.stopped else self.error

    def stop(self) -> None:
        self.stopped = True

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": False}


@dataclass
class StandInLane:
    query: StandInQuery


@dataclass
class StandInValidation:
    query: StandInQuery
    lane: StandInLane | None
    next_lanes: list[StandInLane] = field(default_factory=list)
    restarts: int = 0

    def restart_lane(self) -> StandInLane:
        self.restarts += 1
        self.lane = self.next_lanes.pop(0)
        return self.lane


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(query_restarts.time, "sleep", lambda _: None)


def test_a_lane_failing_after_validate_finished_is_restarted_and_awaited() -> None:
    finished = StandInQuery(polls=1)
    failing = StandInLane(StandInQuery(polls=3, error=RuntimeError("Python worker failed to connect back")))
    again = StandInLane(StandInQuery(polls=2))
    running = StandInValidation(finished, failing, [again])
    assert await_validation(running) == (False, False)  # type: ignore[arg-type]
    assert running.restarts == 1 and running.lane is again and not again.query.isActive


def test_a_lane_failing_four_times_in_the_window_fails_for_good() -> None:
    lanes = [StandInLane(StandInQuery(polls=1, error=RuntimeError("boom"))) for _ in range(4)]
    running = StandInValidation(StandInQuery(polls=1), lanes[0], lanes[1:])
    assert await_validation(running) == (False, True)  # type: ignore[arg-type]
    assert running.restarts == 3


def test_validate_failing_stops_the_lane() -> None:
    lane = StandInLane(StandInQuery(polls=100))
    running = StandInValidation(StandInQuery(polls=1, error=RuntimeError("validate broke")), lane)
    assert await_validation(running) == (False, False)  # type: ignore[arg-type]
    assert lane.query.stopped and running.restarts == 0
