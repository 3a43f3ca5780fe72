"""Kill points: the places in the write paths where a crash is tested, named `<job>:<batch>:<point>`.

The code calls `reached(job, batch, point)` at each (after a commit, before the next), and nothing happens there
unless the process armed that one point first (`arm`). The crash tests arm it from outside the product: a runner
(tests/kill_at.py) arms the point, then runs the job's script in the same process, and the armed point SIGKILLs
it as a crash, an OOM kill or a lost node ends a process: no handler, no flush, no `finally`. A point that must
follow something the job does not wait for (the receivers have the batch's transitions; Spark committed the
batch) asks `armed` first and waits for it. An in-process test may arm a point with another action (raise).

`DECLARED` lists every point there is, per job: `reached` and `parse` refuse any other, and a run of the whole suite
fails when one of them was not reached by a real SIGKILL (tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

# Validate's points are named per bronze table (`partition_state:3:after_silver`): its job is the table's name.
VALIDATE = "validate"
DECLARED: dict[str, tuple[str, ...]] = {
    VALIDATE: ("after_silver", "after_quarantine", "after_dq"),
    "dq_behind": ("before_check",),
    "alert_lane": ("after_delivery", "after_events", "after_alerts", "after_state", "before_record"),
    "alerts": ("after_delivery", "after_events", "after_alerts", "after_state"),
    "posture": ("after_history",),
    "slo": ("after_timeslices",),
    "webhook": ("after_post",),
}


def declared(job: str, point: str) -> bool:
    """Whether `point` is one of `job`'s (a job not in DECLARED is a bronze table's, validate's)."""
    return point in DECLARED.get(job, DECLARED[VALIDATE])


def sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class KillPoint:
    job: str
    batch: int
    point: str
    action: Callable[[], None] = sigkill

    @classmethod
    def parse(cls, spec: str, action: Callable[[], None] = sigkill) -> KillPoint:
        """`<job>:<batch>:<point>`, e.g. `alerts:1:after_events`, `webhook:2:after_post`."""
        parts = spec.split(":")
        if len(parts) != 3 or not (parts[0] and parts[2] and parts[1].isdigit()):
            raise ValueError(f"a kill point is <job>:<batch>:<point> (e.g. alerts:1:after_events), got {spec!r}")
        if not declared(parts[0], parts[2]):
            raise ValueError(f"no kill point {parts[2]!r} in {parts[0]!r}: {parts[0]!r} has "
                             f"{', '.join(DECLARED.get(parts[0], DECLARED[VALIDATE]))}")
        return cls(parts[0], int(parts[1]), parts[2], action)


_armed: KillPoint | None = None


def arm(point: KillPoint | None) -> None:
    """The one point armed in this process (None: none)."""
    global _armed
    _armed = point


def armed(job: str, batch: int, point: str) -> bool:
    return _armed is not None and (_armed.job, _armed.batch, _armed.point) == (job, batch, point)


def reached(job: str, batch: int, point: str) -> None:
    if not declared(job, point):
        raise ValueError(f"kill point {point!r} of {job!r} is not in foundation/kill_points.py's DECLARED")
    if _armed is not None and armed(job, batch, point):
        _armed.action()
