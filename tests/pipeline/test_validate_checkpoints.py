"""A lakehouse validated by the earlier per-table queries: the union query starts where they stopped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from foundation.streaming_checkpoint import END_INDEX
from jobs.validate_checkpoints import (
    CheckpointMigrationError,
    HadoopFiles,
    continue_from_per_table_checkpoints,
    next_version,
    offset_log_entry,
)
from schemas.bronze import BROKER_METRICS
from schemas.silver import SILVER_TABLES
from tests.pipeline.helpers import emulate
from tests.pipeline.test_validate import validate


def test_next_version_after_a_committed_delta_source_offset() -> None:
    assert next_version({"reservoirVersion": 7, "index": -1, "isStartingVersion": False}, "x") == 7
    assert next_version({"reservoirVersion": 7, "index": END_INDEX, "isStartingVersion": False}, "x") == 8
    assert next_version({"reservoirVersion": 7, "index": -1, "isStartingVersion": True}, "x") is None
    with pytest.raises(CheckpointMigrationError, match="stopped inside bronze version 7 \\(file 3\\)"):
        next_version({"reservoirVersion": 7, "index": 3, "isStartingVersion": False}, "x")


def test_an_offset_log_entry_reads_its_metadata_and_one_offset_per_source(spark: Any, tmp_path: Path) -> None:
    """Spark's format: 'v1', the batch's metadata, one line per source in the query's order, '-' for a source that
    has no offset yet. Anything else is refused by name."""
    entry = tmp_path / "3"
    entry.write_text('v1\n{"batchTimestampMs": 17}\n{"reservoirVersion": 2}\n-\n{"a": 1}')
    assert offset_log_entry(HadoopFiles(spark), str(entry)) == (
        {"batchTimestampMs": 17}, [{"reservoirVersion": 2}, None, {"a": 1}])
    entry.write_text('v2\n{"batchTimestampMs": 17}')
    with pytest.raises(ValueError, match=r"3: not an offset log entry Spark 4 writes"):
        offset_log_entry(HadoopFiles(spark), str(entry))


def _old_checkpoint(root: Path, table: str, batches: list[dict[str, Any]], committed: int) -> None:
    """What a per-table query left: offsets/<n> (v1, metadata, the source offset) and commits/<n>."""
    for sub in ("offsets", "commits"):
        (root / "validate" / table / sub).mkdir(parents=True, exist_ok=True)
    for n, offset in enumerate(batches):
        (root / "validate" / table / "offsets" / str(n)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}}) + "\n"
            + json.dumps({"sourceVersion": 1, "reservoirId": "r", **offset}))
        if n <= committed:
            (root / "validate" / table / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_each_table_starts_after_its_old_query_last_commit(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _old_checkpoint(root, "broker_metrics", [{"reservoirVersion": 2, "index": -1, "isStartingVersion": False},
                                             {"reservoirVersion": 3, "index": -1, "isStartingVersion": False}],
                    committed=0)  # batch 1 was planned but never committed: it is read again
    _old_checkpoint(root, "runs", [{"reservoirVersion": 4, "index": END_INDEX, "isStartingVersion": False}], 0)
    logged: list[str] = []
    starting = continue_from_per_table_checkpoints(spark, str(root), str(root / "validate" / "union"),
                                                   ["broker_metrics", "runs", "ack_ledger"], logged.append)
    assert starting == {"broker_metrics": 2, "runs": 5}
    assert len(logged) == 2 and "broker_metrics continues from bronze version 2" in logged[0]
    # Once the union query has progress of its own, the old checkpoints are history.
    (root / "validate" / "union" / "offsets").mkdir(parents=True)
    (root / "validate" / "union" / "offsets" / "0").write_text("v1")
    assert continue_from_per_table_checkpoints(spark, str(root), str(root / "validate" / "union"),
                                               ["broker_metrics"], logged.append) == {}


def test_validate_reads_nothing_twice_after_per_table_checkpoints(spark: Any, lakehouse: str) -> None:
    emulate(lakehouse, duration="8s", flush_every_intervals=2, faults=[])  # 4 bronze commits per table
    versions = DeltaTable(BROKER_METRICS.path(lakehouse)).version()
    # The old broker_metrics query had validated every version but the last.
    _old_checkpoint(Path(lakehouse) / "_checkpoints", "broker_metrics",
                    [{"reservoirVersion": versions, "index": -1, "isStartingVersion": False}], committed=0)
    validate(spark, lakehouse, tables=("broker_metrics", "runs"))
    rows_of_last = DeltaTable(BROKER_METRICS.path(lakehouse), version=versions).to_pyarrow_table().num_rows - \
        DeltaTable(BROKER_METRICS.path(lakehouse), version=versions - 1).to_pyarrow_table().num_rows
    silver = DeltaTable(SILVER_TABLES["broker_metrics"].path(lakehouse)).to_pyarrow_table()
    assert silver.num_rows == rows_of_last > 0
    # runs had no old checkpoint: all of it.
    runs_silver = DeltaTable(SILVER_TABLES["runs"].path(lakehouse)).to_pyarrow_table().num_rows
    assert runs_silver == DeltaTable(f"{lakehouse}/bronze/runs").to_pyarrow_table().num_rows
