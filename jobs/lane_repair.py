"""The alert lane's start: batches Spark committed whose record a crash left unwritten, replayed first.

The lane writes a batch's record behind the batch (jobs/alert_recorder.py), so a crash can leave Spark's
checkpoint ahead of gold.alerts_engine_state. Spark would go on with the next batch and the engine, loaded from the
last recorded state, would miss those batches. Before the query starts, each committed batch after the last
recorded one is read again from the bronze commits its offsets name (the source reads any range again), with
the batch's own timestamp as `ingested_at` (what `current_timestamp()` gave it), and evaluated, handed over and
recorded in order: the same state and rows give the same transitions under the same ids, so receivers see at
worst a repeat with the same delivery id, as after any crash.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from foundation.bronze_log import BronzeLogReader
from jobs.alert_stage import AlertStage
from jobs.validate_checkpoints import HadoopFiles
from schemas.gold import ALERTS_STATE


class LaneRepairError(Exception):
    """The lane's checkpoint no longer holds the offsets of a batch that must be replayed."""


def checkpoint_query_id(files: HadoopFiles, checkpoint: str) -> str | None:
    """The query id a checkpoint keeps across restarts (None before the first start)."""
    if not files.exists(f"{checkpoint}/metadata"):
        return None
    return str(json.loads(files.read(f"{checkpoint}/metadata").splitlines()[0])["id"])


def _offsets(files: HadoopFiles, checkpoint: str, batch_id: int) -> tuple[dict[str, Any], dict[str, int]]:
    """(the batch's metadata, its end offset) from the offset log: 'v1', metadata, one line per source."""
    path = f"{checkpoint}/offsets/{batch_id}"
    if not files.exists(path):
        raise LaneRepairError(f"{path} is gone: batch {batch_id} committed by Spark cannot be replayed. Delete the "
                              f"lane's checkpoint ({checkpoint}) to start again from validate's position")
    lines = files.read(path).splitlines()
    return json.loads(lines[1]), {k: int(v) for k, v in json.loads(lines[2]).items()}


def replay_unrecorded(files: HadoopFiles, checkpoint: str, stage: AlertStage, reader: BronzeLogReader,
                      process: Callable[[pa.Table, int], None], log: Callable[[str], None]) -> list[int]:
    """Replay, in order, every batch Spark committed after the stage's last recorded one (`process` evaluates and
    records a batch's rows before returning); the batches replayed."""
    recorded = stage.versions.committed(ALERTS_STATE, stage.lakehouse)
    committed = sorted(int(n) for n in files.names(f"{checkpoint}/commits") if n.isdigit())
    todo = [b for b in committed if b > recorded]
    for batch_id in todo:
        _, start = _offsets(files, checkpoint, batch_id - 1)
        meta, end = _offsets(files, checkpoint, batch_id)
        rows = pa.Table.from_batches(list(reader.readBetweenOffsets(start, end)), schema=reader.schema)
        at_us = int(meta["batchTimestampMs"]) * 1000
        rows = rows.append_column("ingested_at", pa.array([at_us] * rows.num_rows, pa.timestamp("us", tz="UTC")))
        if rows.num_rows:
            process(rows, batch_id)
    if todo:
        log(f"alert_lane: replayed batches {todo[0]}..{todo[-1]}, committed by Spark and not recorded before a stop")
    return todo
