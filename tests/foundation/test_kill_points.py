"""Kill points (foundation/kill_points.py): one point armed per process, reached only at its job, batch and point."""

from __future__ import annotations

import pytest

from foundation import kill_points
from foundation.kill_points import KillPoint


def test_a_kill_point_is_job_batch_point_and_anything_else_is_refused_with_the_form() -> None:
    point = KillPoint.parse("alert_lane:12:before_record")
    assert (point.job, point.batch, point.point) == ("alert_lane", 12, "before_record")
    for bad in ("alerts:1", "alerts:x:after_events", "alerts:1:after:events", ":1:after_events", "alerts:1:"):
        with pytest.raises(ValueError, match=r"<job>:<batch>:<point> .*got '"):
            KillPoint.parse(bad)


def test_only_the_armed_point_acts_and_disarming_ends_it() -> None:
    hits: list[str] = []
    kill_points.arm(KillPoint("alerts", 2, "after_state", lambda: hits.append("killed")))
    try:
        for job, batch, point in [("alerts", 1, "after_state"), ("alerts", 2, "after_events"),
                                  ("slo", 2, "after_state"), ("alerts", 2, "after_state")]:
            kill_points.reached(job, batch, point)
        assert hits == ["killed"]
        assert kill_points.armed("alerts", 2, "after_state") and not kill_points.armed("alerts", 3, "after_state")
    finally:
        kill_points.arm(None)
    kill_points.reached("alerts", 2, "after_state")
    assert hits == ["killed"] and not kill_points.armed("alerts", 2, "after_state")
