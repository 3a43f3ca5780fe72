"""When a failed streaming query is started again: the alert lane's, a few times within a window, by `pipeline run`
and jobs/validate.py alike; and how a failure is named in one line."""

from __future__ import annotations

import collections
import re
from typing import Any

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
