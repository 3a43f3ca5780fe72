"""Kill points (foundation/kill_points.py): one point armed per process, reached only at its job, batch and point."""

from __future__ import annotations

import ast
from pathlib import Path

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
                                  ("alert_lane", 2, "after_state"), ("alerts", 2, "after_state")]:
            kill_points.reached(job, batch, point)
        assert hits == ["killed"]
        assert kill_points.armed("alerts", 2, "after_state") and not kill_points.armed("alerts", 3, "after_state")
    finally:
        kill_points.arm(None)
    kill_points.reached("alerts", 2, "after_state")
    assert hits == ["killed"] and not kill_points.armed("alerts", 2, "after_state")


def test_a_point_not_declared_is_refused_where_it_is_reached_and_where_it_is_armed() -> None:
    with pytest.raises(ValueError, match="'after_lunch' of 'alerts' is not in"):
        kill_points.reached("alerts", 0, "after_lunch")
    with pytest.raises(ValueError, match="no kill point 'after_events' in 'slo': 'slo' has after_timeslices"):
        KillPoint.parse("slo:1:after_events")
    # Validate's points are named per bronze table.
    assert KillPoint.parse("partition_state:2:after_quarantine").job == "partition_state"


def _call_sites() -> set[tuple[str, str]]:
    """(job, point) of every `kill_points.reached(...)` in the product's code. The job is a literal (or a module's
    constant), or the alert
    evaluator's stage (`self.job`: alerts or alert_lane), or a bronze table's name (validate's)."""
    root = Path(__file__).resolve().parents[2]
    sites: set[tuple[str, str]] = set()
    for package in ("foundation", "jobs", "pipelines", "collector", "isrwatch", "broker_emulator", "api"):
        for path in (root / package).rglob("*.py"):
            module = ast.parse(path.read_text())
            constants = {t.id: n.value.value for n in module.body if isinstance(n, ast.Assign)
                         and isinstance(n.value, ast.Constant) for t in n.targets if isinstance(t, ast.Name)}
            for node in ast.walk(module):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr == "reached" and ast.unparse(node.func.value) == "kill_points":
                    job, _, point = node.args
                    assert isinstance(point, ast.Constant), f"{path}: a kill point's name is a literal"
                    if isinstance(job, ast.Name) and job.id in constants:
                        job = ast.Constant(constants[job.id])
                    jobs = ([job.value] if isinstance(job, ast.Constant) else ["alerts", "alert_lane"]
                            if ast.unparse(job) == "self.job" else [kill_points.VALIDATE])
                    sites |= {(j, point.value) for j in jobs}
    return sites


def test_every_declared_kill_point_is_in_the_code_and_every_one_in_the_code_is_declared() -> None:
    declared = {(job, p) for job, points in kill_points.DECLARED.items() for p in points}
    assert _call_sites() == declared
