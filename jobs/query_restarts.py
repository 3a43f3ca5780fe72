"""When a failed streaming query is started again: the alert lane's, a few times within a window, by `pipeline run`
and jobs/validate.py alike (`await_validation`); and how a failure is named in one line."""

from __future__ import annotations

import collections
import re
import sys
import time
from typing import Any, Protocol

from jobs.alert_lane import JOB as JOB_LANE
from jobs.alert_lane import RunningLane
from jobs.streaming import await_query, stop_between_batches

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


def await_validation(running: ValidationWithLane) -> tuple[bool, bool]:
    """Until validate's query ends or a signal stops it: (stopped by a signal, the alert lane failed for good). A
    failed lane is started again as `pipeline run` does (jobs/query_restarts.py); failing more often, it stops
    validate too: validate never runs on without the lane's rules."""
    restarts = Restarts()
    while True:
        stopped = await_query(running.query, beside=lambda: None if running.lane is None else running.lane.query)
        lane = running.lane
        if stopped or lane is None or lane.query.isActive or not running.query.isActive:
            return stopped, False
        reason = failure_reason(lane.query.exception())
        if not restarts.allow(JOB_LANE, time.monotonic()):
            print(f"validate: the alert lane failed ({reason}) again; stopping", file=sys.stderr)
            stop_between_batches(running.query)
            return False, True
        print(f"validate: the alert lane failed ({reason}); restarting it from its checkpoint "
              f"({restarts.describe(JOB_LANE)})", file=sys.stderr)
        time.sleep(restarts.wait_s(JOB_LANE))
        running.restart_lane()
