"""Great Expectations behind the batches (jobs/dq_behind.py): spooled before the hand-over, checked in batch order,
the batches waiting together, removed once checked; a failed check stays spooled and fails the next batch; a new
start checks what was left."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from foundation.spool import Spool
from jobs.dq_behind import DqBehind, Waiting
from jobs.validate_routes import RoutedOnDriver
from schemas.bronze import BROKER_METRICS, RUNS

TABLES = {td.name: td for td in (BROKER_METRICS, RUNS)}


def _routed(batch: int) -> list[tuple[RoutedOnDriver, int]]:
    rows = pa.table({"run_id": ["r"] * (batch + 1), "value": [float(batch)] * (batch + 1)})
    metrics = RoutedOnDriver(BROKER_METRICS, batch + 1, batch, {"value >= 0": 1}, ["r"], rows, None, None)
    runs = RoutedOnDriver(RUNS, 1, 1, {}, ["r"], rows.slice(0, 1), None, None)
    return [(metrics, 1000 + batch), (runs, 2000 + batch)]


class Recorder:
    def __init__(self, fail_on: int | None = None) -> None:
        self.seen: list[tuple[int, list[tuple[str, int, int, dict[str, int], int, list[float]]], int]] = []
        self.groups: list[list[int]] = []
        self.fail_on = fail_on

    def __call__(self, group: list[Waiting]) -> None:
        if any(batch_id == self.fail_on for batch_id, _, _ in group):
            raise ValueError(f"GE disagrees on batch {self.fail_on}")
        self.groups.append([batch_id for batch_id, _, _ in group])
        for batch_id, routed, duration_ms in group:
            self.seen.append((batch_id, [(r.table, r.rows_in, r.rows_valid, r.counts, at,
                                          r.ge_rows["value"].to_pylist()) for r, at in routed], duration_ms))


def test_batches_are_checked_in_order_with_what_routing_handed_over(tmp_path: Path) -> None:
    spool, check = Spool(str(tmp_path / "spool")), Recorder()
    behind = DqBehind(spool, check, every_s=0.5).start(TABLES)
    behind.submit(0, _routed(0), 40)
    assert behind.wait_idle(30)
    for batch in (1, 2):   # handed over while the worker waits out `every_s` after checking batch 0: one group
        behind.submit(batch, _routed(batch), 40 + batch)
    assert behind.drain(30)
    assert check.groups == [[0], [1, 2]]
    assert [b for b, _, _ in check.seen] == [0, 1, 2]
    _, tables, duration = check.seen[2]
    assert duration == 42
    assert tables == [("broker_metrics", 3, 2, {"value >= 0": 1}, 1002, [2.0, 2.0, 2.0]),
                      ("runs", 1, 1, {}, 2002, [2.0])]
    assert spool.numbers() == []


def test_a_failed_check_fails_the_next_batch_and_stays_for_the_next_start(tmp_path: Path) -> None:
    spool = Spool(str(tmp_path / "spool"))
    behind = DqBehind(spool, Recorder(fail_on=1), every_s=0).start(TABLES)
    behind.submit(0, _routed(0), 1)
    assert behind.wait_idle(30)
    behind.submit(1, _routed(1), 1)
    assert behind.wait_idle(30)
    with pytest.raises(RuntimeError, match="Great Expectations behind the batches failed: GE disagrees on batch 1"):
        behind.submit(2, _routed(2), 1)
    assert behind.drain(30)
    assert spool.numbers() == [1]   # batch 0 checked; 1 failed; 2 never handed over
    # The next start checks the left-over batch before anything else.
    again = Recorder()
    DqBehind(spool, again).start(TABLES).drain(30)
    assert again.groups == [[1]]
    assert spool.numbers() == []


def test_an_entry_without_its_manifest_is_not_listed(tmp_path: Path) -> None:
    """A process killed while spooling leaves no entry: the manifest is written last, by a rename."""
    spool = Spool(str(tmp_path / "spool"))
    spool.put(7, {"t": pa.table({"x": [1]})}, {"batch_id": 7})
    (tmp_path / "spool" / "000000000008").mkdir()
    (tmp_path / "spool" / "000000000008" / "t.arrow").write_bytes(b"torn")
    (tmp_path / "spool" / "000000000008" / "manifest.json.tmp").write_text('{"batch')
    assert spool.numbers() == [7]
    tables, manifest = spool.get(7)
    assert manifest == {"batch_id": 7} and tables["t"].to_pylist() == [{"x": 1}]
