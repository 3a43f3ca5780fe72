"""Every micro-batch's progress as one JSON line: where a streaming query's time goes, batch by batch.

`isrwatch pipeline run --progress-log FILE` adds it; bench/alert_latency.py reads it back for the breakdown of a
live micro-batch (Spark's own phases: latestOffset, getBatch, queryPlanning, addBatch — the foreachBatch body —,
walCommit, commitOffsets). A listener rather than polling `recentProgress`: that keeps only the last 100 batches.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener


class ProgressLog(StreamingQueryListener):
    """Appends `{"name", "batchId", "timestamp", "numInputRows", "durationMs"}` per query progress event to `path`,
    opened per line (a batch or two a second), so a reader sees each batch as it ends."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def steps(self, name: str, batch_id: int, rows: int, steps: list[tuple[str, float]]) -> None:
        """A job's own steps of one batch (validate's `on_steps`): `{"name", "batchId", "rows", "steps"}`, seconds
        per step, beside Spark's phases of the same batch."""
        self._write({"name": name, "batchId": batch_id, "rows": rows, "steps": dict(steps)})

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        self._write({"name": p.name, "batchId": p.batchId, "timestamp": p.timestamp,
                     "numInputRows": p.numInputRows, "durationMs": dict(p.durationMs)})

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def read_progress(path: str | Path) -> list[dict[str, Any]]:
    """The lines a ProgressLog wrote (a torn last line, from a process killed mid-write, is left out): Spark's
    progress events, and the `steps` lines (which have no `durationMs`)."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
