"""Batch records written behind the micro-batches (jobs/alert_recorder.py): in batch order, never more than `depth`
waiting, those that queued up during a write written as one, and a failed write fails the next batch with nothing
written after it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from jobs.alert_recorder import BackgroundRecorder, RecordFailed
from jobs.alert_stage import BatchRecord


class SlowStage:
    """Stands in for an AlertStage: `write` appends the batch id once `gate` opens (or fails on `fail_at`)."""

    name = "lane"

    def __init__(self, fail_at: int | None = None) -> None:
        self.written: list[int] = []
        self.writes: list[BatchRecord] = []
        self.gate = threading.Event()
        self.writing = threading.Event()  # set once a write has begun
        self.fail_at = fail_at

    def write(self, record: BatchRecord) -> None:
        self.writing.set()
        self.gate.wait(10)
        batches = [*record.merged, record.batch_id]
        if self.fail_at in batches:
            raise OSError(f"disk full at batch {self.fail_at}")
        self.written += batches
        self.writes.append(record)


def record(batch_id: int) -> BatchRecord:
    return BatchRecord(batch_id, [{"event_id": f"l{batch_id}-0"}], [{"batch": batch_id}], [{"batch": batch_id}], 1,
                       float(batch_id), False, batch_id)


def recorder_of(stage: SlowStage, **kwargs: Any) -> BackgroundRecorder:
    return BackgroundRecorder(stage, **kwargs)  # type: ignore[arg-type]


def test_records_are_written_in_batch_order_and_at_most_depth_wait() -> None:
    stage = SlowStage()
    recorder = recorder_of(stage, depth=2)
    recorder.submit(record(1))
    assert stage.writing.wait(10)  # 1 is taken by the writer (held at the gate) ...
    for b in (2, 3):               # ... and 2 and 3 fill the two slots
        recorder.submit(record(b))
    fourth = threading.Thread(target=recorder.submit, args=(record(4),))
    fourth.start()
    # A batch finding `depth` records waiting waits for a slot: the fourth is the queue's one waiter for a free slot
    # (its condition's waiters: no sleep, no guess at how long the thread takes to get there).
    slot = recorder.waiting.not_full
    deadline = time.monotonic() + 10
    while not slot._waiters and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.005)
    assert len(slot._waiters) == 1 and fourth.is_alive() and recorder.waiting.full()  # type: ignore[attr-defined]
    stage.gate.set()
    fourth.join(10)
    recorder.flush()
    recorder.stop()
    assert stage.written == [1, 2, 3, 4]


def test_records_queued_during_a_write_are_written_as_one() -> None:
    """Every batch's transitions in order, the last batch's alerts and state, the batches it carries named."""
    stage = SlowStage()
    recorder = recorder_of(stage, depth=4)
    recorder.submit(record(1))
    assert stage.writing.wait(10)  # 1 is being written (held at the gate) ...
    for b in (2, 3, 4):            # ... while 2, 3 and 4 queue up
        recorder.submit(record(b))
    stage.gate.set()
    recorder.flush()
    recorder.stop()
    assert stage.written == [1, 2, 3, 4]
    one, rest = stage.writes
    assert one == record(1)
    assert rest == BatchRecord(4, [{"event_id": f"l{b}-0"} for b in (2, 3, 4)], [{"batch": 4}], [{"batch": 4}], 3, 2.0,
                               False, 4, merged=(2, 3))


def test_a_failed_write_fails_the_next_batch_and_nothing_after_it_is_written() -> None:
    stage = SlowStage(fail_at=2)
    recorder = recorder_of(stage, depth=4)
    recorder.submit(record(1))
    assert stage.writing.wait(10)  # 1 on its own; 2 and 3 in the next write, which fails
    for b in (2, 3):
        recorder.submit(record(b))
    stage.gate.set()
    with pytest.raises(RecordFailed, match="recording the lane stage's batches failed: OSError: disk full at batch 2"):
        recorder.flush()
    with pytest.raises(RecordFailed):
        recorder.submit(record(4))
    recorder.stop()
    assert stage.written == [1]


def test_the_hook_before_each_write_sees_every_batch_in_order() -> None:
    stage, seen = SlowStage(), []
    stage.gate.set()
    recorder = recorder_of(stage, before_write=seen.append)
    for b in (5, 6, 7):
        recorder.submit(record(b))
    recorder.flush()
    recorder.stop()
    assert seen == stage.written == [5, 6, 7]
