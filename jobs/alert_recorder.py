"""A stage's batch records written behind its micro-batches, so the next batch does not wait for three Delta commits.

The alert lane hands a batch's transitions to the webhook lanes, then its record (gold.alert_events, gold.alerts,
the engine's state: jobs/alert_stage.py) goes to this writer, and the micro-batch ends: Spark commits it while the
record is written. Records are written in batch order by one thread. At most `depth` wait: a batch finding them all
waiting waits for a slot, so the records never fall more than `depth` batches behind Spark's commits (the
lane's offset log keeps 100). The records that queued up while a write was under way are written as one (`merged`):
three commits for all of them rather than three each, so a writer held up (another stage committing to the same
table: foundation/delta_io.committing) catches up at once. A failed write fails the next micro-batch (or `flush`),
and nothing after it is written, as after a crash.

A crash can so leave batches committed by Spark and not recorded. The lane's start replays them first from its
offset log (jobs/lane_log.py): the same commits, the same state, so the same transitions under the same ids.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import replace

from jobs.alert_stage import AlertStage, BatchRecord


class RecordFailed(Exception):
    """A batch's record could not be written: the stage stops, and its restart replays what is not recorded."""


def merged(records: list[BatchRecord]) -> BatchRecord:
    """The records of consecutive batches as one: every batch's transitions in order, the last one's alerts and state
    (each overwrites the one before). Its writes carry the last batch's app version, which marks the batches before
    it recorded too: a replay of any of them skips what the merged write committed."""
    last = records[-1]
    if len(records) == 1:
        return last
    return replace(last, events=[e for r in records for e in r.events], rows_in=sum(r.rows_in for r in records),
                   began=records[0].began, on_executors=any(r.on_executors for r in records),
                   merged=tuple(b for r in records[:-1] for b in (*r.merged, r.batch_id)) + last.merged)


class BackgroundRecorder:
    def __init__(self, stage: AlertStage, depth: int = 8,
                 before_write: Callable[[int], None] = lambda batch_id: None) -> None:
        self.stage, self.before_write = stage, before_write
        self.waiting: queue.Queue[BatchRecord | None] = queue.Queue(maxsize=depth)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"isrwatch-{stage.name}-recorder", daemon=True)
        self.thread.start()

    def submit(self, record: BatchRecord) -> None:
        """Queue a batch's record (waiting for a slot when `depth` are queued); a failed earlier write raises."""
        self.raise_if_failed()
        self.waiting.put(record)

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise RecordFailed(f"recording the {self.stage.name} stage's batches failed: "
                               f"{type(self.failure).__name__}: {self.failure}") from self.failure

    def flush(self) -> None:
        """Every queued record written (or dropped after a failure, which raises)."""
        self.waiting.join()
        self.raise_if_failed()

    def stop(self) -> None:
        """Stop the writer after what is queued; a failure is not raised here (see `flush`)."""
        if self.thread.is_alive():
            self.waiting.put(None)
            self.thread.join()

    def _run(self) -> None:
        while True:
            taken = [self.waiting.get()]
            while taken[-1] is not None:  # and whatever queued up behind it
                try:
                    taken.append(self.waiting.get_nowait())
                except queue.Empty:
                    break
            records = [r for r in taken if r is not None]
            try:
                if records and self.failure is None:  # after a failure nothing more is written, as after a crash
                    for r in records:
                        self.before_write(r.batch_id)
                    self.stage.write(merged(records))
            except BaseException as e:
                self.failure = e
            finally:
                for _ in taken:
                    self.waiting.task_done()
            if taken[-1] is None:
                return
