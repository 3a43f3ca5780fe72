"""A stage's batch records written behind its micro-batches, so the next batch does not wait for three Delta commits.

The alert lane hands a batch's transitions to the webhook lanes, then its record (gold.alert_events, gold.alerts,
the engine's state: jobs/alert_stage.py) goes to this writer, and the micro-batch ends: Spark commits it while the
record is written. Records are written in batch order by one thread. At most `depth` wait: a batch finding them all
waiting waits for a slot, so the records never fall more than `depth` batches behind Spark's commits (the
lane's offset log keeps 100). A failed write fails the next micro-batch (or `flush`), and nothing after it is
written, as after a crash.

A crash can so leave batches committed by Spark and not recorded. The lane's start replays them first from its
offset log (jobs/lane_log.py): the same commits, the same state, so the same transitions under the same ids.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from jobs.alert_stage import AlertStage, BatchRecord


class RecordFailed(Exception):
    """A batch's record could not be written: the stage stops, and its restart replays what is not recorded."""


class BackgroundRecorder:
    def __init__(self, stage: AlertStage, depth: int = 2,
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
            record = self.waiting.get()
            try:
                if record is None:
                    return
                if self.failure is None:  # after a failure nothing more is written, as after a crash
                    self.before_write(record.batch_id)
                    self.stage.write(record)
            except BaseException as e:
                self.failure = e
            finally:
                self.waiting.task_done()
