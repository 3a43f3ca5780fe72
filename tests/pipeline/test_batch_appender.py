"""Idempotent appends by commit marker: a restarted writer finds its last batch and skips replays."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from foundation.batch_appender import BatchAppender, last_marked_batch, marker

pytestmark = pytest.mark.spark


def _ids(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table().column("id").to_pylist())


def test_a_restarted_appender_skips_the_batches_its_app_committed(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    first = BatchAppender(spark, "validate/q1")
    assert first.append(spark.range(0, 3), path, 0) is True
    assert first.append(spark.range(3, 5), path, 1) is True
    assert first.append(spark.range(3, 5), path, 1) is False  # the same process knows without a lookup
    other = BatchAppender(spark, "validate/q2")  # another query sharing the table (as dq_runs is shared)
    assert other.append(spark.range(100, 101), path, 0) is True

    restarted = BatchAppender(spark, "validate/q1")  # a new driver: learns its state from the history
    assert restarted.last_committed(path) == 1
    assert restarted.append(spark.range(3, 5), path, 1) is False  # the replayed batch
    assert restarted.append(spark.range(5, 6), path, 2) is True
    assert _ids(path) == [0, 1, 2, 3, 4, 5, 100]
    assert last_marked_batch(spark, path, "validate/q2") == 0
    assert last_marked_batch(spark, path, "validate/q3") == -1
    assert last_marked_batch(spark, str(tmp_path / "missing"), "validate/q1") == -1


def test_markers_reject_ids_they_could_not_parse_back() -> None:
    assert marker("validate/broker_metrics/abc", 7) == "validate/broker_metrics/abc#batch=7"
    with pytest.raises(ValueError, match="app_id must not contain '#'"):
        marker("a#b", 1)
    with pytest.raises(ValueError, match="batch_id must be >= 0"):
        marker("a", -1)


def test_driver_appends_carry_the_same_markers_as_spark_appends(spark: Any, tmp_path: Any) -> None:
    path = str(tmp_path / "t")
    first = BatchAppender(spark, "validate/q1")
    assert first.append(spark.range(0, 2), path, 0) is True  # Spark creates the table
    assert first.append_rows(pa.table({"id": pa.array([2, 3], pa.int64())}), path, 1) is True  # delta-rs
    assert first.append_rows(pa.table({"id": pa.array([2, 3], pa.int64())}), path, 1) is False

    restarted = BatchAppender(spark, "validate/q1")  # reads the delta-rs commit's marker back through Spark
    assert restarted.last_committed(path) == 1
    assert restarted.append_rows(pa.table({"id": pa.array([2, 3], pa.int64())}), path, 1) is False
    assert restarted.append(spark.range(4, 5), path, 2) is True
    assert _ids(path) == [0, 1, 2, 3, 4]
    markers = [r["userMetadata"] for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
    assert markers[:3] == ["validate/q1#batch=2", "validate/q1#batch=1", "validate/q1#batch=0"]
