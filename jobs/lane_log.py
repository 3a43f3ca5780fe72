"""The alert lane's own checkpoint, read by the lane: the bronze commits each micro-batch covers.

The lane's source only plans (foundation/bronze_log.py with `rows=false`): Spark writes a batch's end offsets to
the lane's offset log before the batch runs, and the batch reads its rows itself, on the driver, from the commits
between the batch before's offsets and its own. Handing ~100 rows through Spark (the Python source's worker, the
JVM, a Spark job, Arrow back to the driver) cost ~140 ms a batch in the latency bench; reading them here costs a
few.

The same reading replays a batch. Spark replays an uncommitted batch under the same offsets, and the lane's start
replays the batches Spark committed whose record a crash left unwritten (the lane records behind its batches,
jobs/alert_recorder.py): the same commits, the same engine state, so the same transitions under the same ids. The
offsets before batch 0 are kept in the checkpoint too (`lane_start`), written at the first start.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from foundation.bronze_log import BronzeLogReader
from jobs.alert_stage import AlertStage
from jobs.validate_checkpoints import HadoopFiles, offset_log_entry
from schemas.gold import ALERTS_STATE


class LaneLogError(Exception):
    """The lane's checkpoint no longer holds the offsets of a batch that must be read."""


@dataclass
class LaneLog:
    files: HadoopFiles
    checkpoint: str
    reader: BronzeLogReader
    first: dict[str, int] = field(default_factory=dict)  # the offsets before batch 0 (`first_position`)
    # The last batch read and its end offsets: the next batch starts there, without reading that file again.
    last: tuple[int, dict[str, int]] | None = None

    def query_id(self) -> str | None:
        """The query id the checkpoint keeps across restarts (None before the first start)."""
        path = f"{self.checkpoint}/metadata"
        return str(json.loads(self.files.read(path).splitlines()[0])["id"]) if self.files.exists(path) else None

    def first_position(self, compute: Callable[[], dict[str, int]]) -> dict[str, int]:
        """The offsets before batch 0: kept in the checkpoint at the first start (`compute`d then), read after. A
        table the lane reads since a later start (the lane took over more rules) is `compute`d at that start and
        kept beside the others: the rules that moved continue where validate left them. The reader starts every
        table there when a batch's offsets do not name it."""
        path = f"{self.checkpoint}/lane_start"
        kept = {k: int(v) for k, v in json.loads(self.files.read(path)).items()} if self.files.exists(path) else {}
        missing = [td.name for td in self.reader.tables if td.name not in kept]
        if missing:
            computed = compute()
            kept.update({name: int(computed.get(name, -1)) for name in missing})
            self.files.write(path, json.dumps(kept, sort_keys=True))
        self.first = kept
        self.reader.start = dict(kept)
        return self.first

    def committed(self) -> list[int]:
        return sorted(int(n) for n in self.files.names(f"{self.checkpoint}/commits") if n.isdigit())

    def rows(self, batch_id: int) -> pa.Table:
        """The batch's rows in the source's shape, with the batch's own timestamp as `ingested_at` (what
        `current_timestamp()` gives a micro-batch)."""
        if batch_id == 0:
            start = self.first
        elif self.last is not None and self.last[0] == batch_id - 1:
            start = self.last[1]
        else:  # the first batch after a start, or a replay
            start = self._offsets(batch_id - 1)[1]
        meta, end = self._offsets(batch_id)
        rows = self.reader.rows_between(start, end)
        self.last = (batch_id, end)
        at_us = int(meta["batchTimestampMs"]) * 1000
        return rows.append_column("ingested_at", pa.array([at_us] * rows.num_rows, pa.timestamp("us", tz="UTC")))

    def _offsets(self, batch_id: int) -> tuple[dict[str, Any], dict[str, int]]:
        """(the batch's metadata, its end offsets) from the offset log: 'v1', metadata, one line per source."""
        path = f"{self.checkpoint}/offsets/{batch_id}"
        if not self.files.exists(path):
            raise LaneLogError(f"{path} is gone: the alert lane cannot read the commits of its batch {batch_id} "
                               f"again. Delete the lane's checkpoint ({self.checkpoint}) to start again from "
                               "validate's position")
        meta, offsets = offset_log_entry(self.files, path)
        return meta, {k: int(v) for k, v in offsets[0].items()}  # the lane's query has one source


def replay_unrecorded(log: LaneLog, stage: AlertStage, replay: Callable[[int], None],
                      say: Callable[[str], None]) -> list[int]:
    """At the lane's start, before its query: every batch Spark committed after the stage's last recorded one,
    replayed in order (`replay` reads, evaluates, hands over and records a batch before returning)."""
    recorded = stage.versions.committed(ALERTS_STATE, stage.lakehouse)
    todo = [b for b in log.committed() if b > recorded]
    for batch_id in todo:
        replay(batch_id)
    if todo:
        say(f"alert_lane: replayed batches {todo[0]}..{todo[-1]}, committed by Spark and not recorded before a stop")
    return todo
