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

from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener


class _ProgressAsJson(JStreamingQueryListener):
    """The JVM's side of the listener, handing over each progress as Spark's own JSON: one call back into the JVM per
    event. PySpark's wrapper builds the Python event field by field, ~50 py4j round trips an event (each source's,
    each map entry's), which cost the bench's isrwatch ~0.2 cores and the GIL its batches wait for."""

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        listener: Any = self.pylistener  # a ProgressLog
        listener.on_progress(json.loads(jevent.progress().json()))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass


class ProgressLog(StreamingQueryListener):
    """Appends `{"name", "batchId", "timestamp", "numInputRows", "durationMs"}` per query progress event to `path`,
    opened per line (a batch or two a second), so a reader sees each batch as it ends."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    @property
    def _jlistener(self) -> Any:
        """What `spark.streams.addListener` registers (and `removeListener` takes out): `_ProgressAsJson`."""
        if not hasattr(self, "_jlistenerobj"):
            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))
        return self._jlistenerobj

    def on_progress(self, progress: dict[str, Any]) -> None:
        """A progress as Spark's JSON gives it (`StreamingQueryProgress.json`): its timestamp an ISO-8601 string."""
        self._write({"name": progress.get("name"), "batchId": progress["batchId"], "timestamp": progress["timestamp"],
                     "numInputRows": progress.get("numInputRows", 0), "durationMs": progress.get("durationMs", {})})

    def steps(self, name: str, batch_id: int, rows: int, steps: list[tuple[str, float]]) -> None:
        """A job's own steps of one batch (validate's `on_steps`): `{"name", "batchId", "rows", "steps"}`, seconds
        per step, beside Spark's phases of the same batch."""
        self._write({"name": name, "batchId": batch_id, "rows": rows, "steps": dict(steps)})

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:  # not called: `_ProgressAsJson` calls `on_progress`
        pass

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
