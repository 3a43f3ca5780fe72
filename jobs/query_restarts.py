"""When a failed streaming query is started again: the alert lane's, a few times within a window, by `pipeline run`
and jobs/validate.py alike (`await_validation`); and how a failure is named in one line."""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Callable
from typing import Any, Protocol

from foundation.logs import logger
from jobs.alert_lane import JOB as JOB_LANE
from jobs.alert_lane import RunningLane
from jobs.streaming import await_query, stop_between_batches

log = logger("validate")


# The alert lane's source is a Python data source: Spark starts a Python worker for it and waits a fixed 10 s for the
# worker to connect back (PythonWorkerFactory, not configurable). Beside a busy cluster on 2 cores that start once
# took longer and failed the query 169 s into a run; started again it runs on. Three restarts in 10 minutes are
# a transient; more are a fault a restart does not cure. Each waits longer than the one before (10 s, 20 s, 30 s):
# four restarts back to back all fell into the same busy start-up of a cluster with Strimzi's exporter rules.
RESTARTS_ALLOWED = 3
RESTART_WINDOW_S = 600.0
RESTART_BACKOFF_S = 10.0


def failure_reason(error: Any) -> str:
    """One line of a failed query's exception: Spark's first line, or, when a foreachBatch raised (the first line
    then only says that Python raised), the Python exception's own line at the end of its traceback."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if "Traceback (most recent call last)" in lines[0]:
        return next((line for line in reversed(lines) if re.match(r"^[\w.]+(Error|Exception)\b", line)), lines[-1])
    return lines[0]


class Restarts:
    """How often a failed query may be started again: RESTARTS_ALLOWED times within RESTART_WINDOW_S, each. A
    query that fails more often than that fails for a reason a restart does not cure."""

    def __init__(self, backoff_s: float = RESTART_BACKOFF_S) -> None:
        self.at: dict[str, collections.deque[float]] = collections.defaultdict(collections.deque)
        self.backoff_s = backoff_s

    def wait_s(self, name: str) -> float:
        """How long to wait before the restart `allow` just granted: longer with each restart in the window."""
        return self.backoff_s * len(self.at[name])

    def allow(self, name: str, now: float) -> bool:
        times = self.at[name]
        while times and times[0] <= now - RESTART_WINDOW_S:
            times.popleft()
        if len(times) >= RESTARTS_ALLOWED:
            return False
        times.append(now)
        return True

    def describe(self, name: str) -> str:
        return f"restart {len(self.at[name])} of {RESTARTS_ALLOWED} allowed within {RESTART_WINDOW_S:.0f} s"


class ValidationWithLane(Protocol):
    """jobs/validate.py's RunningValidation, as far as its supervision needs it."""

    query: Any
    lane: RunningLane | None

    def restart_lane(self) -> RunningLane: ...


def _query_of(lane: RunningLane | None) -> Callable[[], Any]:
    return lambda: None if lane is None else lane.query


def await_validation(running: ValidationWithLane) -> tuple[bool, bool]:
    """Until validate's query and the alert lane's end, or a signal stops them: (stopped by a signal, the alert lane
    failed for good). A failed lane is started again as `pipeline run` does, whether validate still runs or has
    finished (available-now); failing more often, it stops validate too: validate never runs on without the lane's
    rules. Available-now, each query ends once it has read what was there at its start; validate failing stops the
    lane."""
    restarts = Restarts()
    lane_done = False
    while True:
        lane = None if lane_done else running.lane
        if running.query.isActive:
            stopped = await_query(running.query, beside=_query_of(lane))
        elif running.query.exception() is None and lane is not None:
            stopped = await_query(lane.query)  # available-now: the lane finishes what it has planned
        else:
            stopped = False
        validate_failed = not running.query.isActive and running.query.exception() is not None
        if stopped or validate_failed or lane is None:
            if lane is not None and lane.query.isActive:
                stop_between_batches(lane.query)
            if lane is None and running.query.isActive:
                continue  # the lane finished first (available-now): validate's turn
            return stopped, False
        if lane.query.isActive:
            continue
        if lane.query.exception() is None:  # available-now: done
            lane_done = True
            continue
        reason = failure_reason(lane.query.exception())
        if not restarts.allow(JOB_LANE, time.monotonic()):
            log.error(f"validate: the alert lane failed ({reason}) again; stopping")
            if running.query.isActive:
                stop_between_batches(running.query)
            return False, True
        log.error(f"validate: the alert lane failed ({reason}); restarting it from its checkpoint "
                  f"({restarts.describe(JOB_LANE)})")
        time.sleep(restarts.wait_s(JOB_LANE))
        running.restart_lane()
