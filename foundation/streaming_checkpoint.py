"""A Spark streaming query's checkpoint, read as files: its offset log, its commit log, and a Delta source's offset.

A query writes `offsets/<batch>` before it runs batch <batch> and `commits/<batch>` once its sink has the batch: the
newest batch with a commit file is the last whose rows are all written. An offsets file is 'v1', the batch's metadata
as JSON, then one line per source in the query's order ('-' for a source without an offset yet). A Delta source's
offset names its table by id (`reservoirId`) and a place in its log (`reservoirVersion`, `index`).
"""

from __future__ import annotations

import json
from typing import Any

# Where, under the checkpoint root, the queries that read bronze keep their checkpoints.
VALIDATE_CHECKPOINT = "validate/union"
ALERT_LANE_CHECKPOINT = "alert_lane"

BASE_INDEX = -1                 # Delta source offset: before the first file of the version
END_INDEX = 2**63 - 1 - 100     # Delta source offset: after the last file of the version (Long.MaxValue - 100)


def parse_offset_log_entry(text: str, where: str) -> tuple[dict[str, Any], list[Any]]:
    """(the batch's metadata, one offset per source, in the query's source order) from the text of an offsets file
    (`where` names it in the error)."""
    lines = text.splitlines()
    if not lines or lines[0] != "v1" or len(lines) < 2:
        raise ValueError(f"{where}: not an offset log entry Spark 4 writes (first line 'v1', then the metadata)")
    return json.loads(lines[1]), [None if line == "-" else json.loads(line) for line in lines[2:]]


def last_committed_batch(names: list[str]) -> int | None:
    """The newest batch of a commit log, from the names in its folder (None: no batch committed)."""
    return max((int(n) for n in names if n.isdigit()), default=None)


def first_unread_version(offset: dict[str, Any]) -> int | None:
    """The first version of its table a committed Delta source offset has not read whole (None: the source had not
    begun the table's first snapshot, so every version is unread)."""
    version, index = int(offset["reservoirVersion"]), int(offset["index"])
    if index >= END_INDEX:
        return version + 1
    if index == BASE_INDEX and offset.get("isStartingVersion"):
        return None
    return version
