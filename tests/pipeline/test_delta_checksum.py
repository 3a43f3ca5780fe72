"""Checksums written after delta-rs commits: exact, read by Spark, and continued across Spark's commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from foundation.delta_checksum import write_checksum, write_with_checksum


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "name": [f"r{i}" for i in range(n)]})


def _crc(path: Path, version: int) -> dict[str, Any]:
    return json.loads((path / "_delta_log" / f"{version:020d}.crc").read_text())


def _state(path: Path) -> tuple[int, int]:
    """(files, bytes) of the table's current version, from delta-rs's own log replay."""
    adds = DeltaTable(str(path)).get_add_actions(flatten=True)
    sizes = adds.column("size_bytes").to_pylist()
    return len(sizes), sum(sizes)


def test_every_delta_rs_version_gets_an_exact_checksum(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "t"
    versions = [write_with_checksum(str(path), _rows(0, 5), mode="append")]
    for i in range(1, 4):
        versions.append(write_with_checksum(str(path), _rows(10 * i, 3), mode="append"))
    versions.append(write_with_checksum(str(path), _rows(100, 2), mode="overwrite"))  # removes every file
    assert versions == [0, 1, 2, 3, 4]
    crc = _crc(path, 3)
    assert (crc["numFiles"], crc["tableSizeBytes"]) == (4, sum(DeltaTable(str(path), version=3)
                                                               .get_add_actions(flatten=True)
                                                               .column("size_bytes").to_pylist()))
    last = _crc(path, 4)
    assert (last["numFiles"], last["tableSizeBytes"]) == _state(path) and last["numFiles"] == 1
    assert json.loads(last["metadata"]["schemaString"])["fields"][0]["name"] == "id"
    # Spark takes size and file count from the checksum and reads the rows
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    assert (detail["numFiles"], detail["sizeInBytes"]) == _state(path)
    assert sorted(r["id"] for r in spark.read.format("delta").load(str(path)).collect()) == [100, 101]


def test_checksums_continue_across_spark_commits_and_gaps(tmp_path: Path, spark: Any) -> None:
    path = tmp_path / "t"
    write_with_checksum(str(path), _rows(0, 4), mode="append")
    spark.createDataFrame(_rows(50, 2).to_pandas()).write.format("delta").mode("append").save(str(path))
    write_deltalake(str(path), _rows(60, 2), mode="append")  # another writer, no checksum: version 2
    assert not (path / "_delta_log" / f"{2:020d}.crc").exists()
    assert write_with_checksum(str(path), _rows(70, 2), mode="append") == 3
    assert (path / "_delta_log" / f"{2:020d}.crc").exists()  # filled in from version 1's
    assert (_crc(path, 3)["numFiles"], _crc(path, 3)["tableSizeBytes"]) == _state(path)
    # Spark's compaction rebuilds the state from the files and checks it against the checksums
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    write_with_checksum(str(path), _rows(80, 1), mode="append")
    version = DeltaTable(str(path)).version()
    assert (_crc(path, version)["numFiles"], _crc(path, version)["tableSizeBytes"]) == _state(path)
    assert spark.read.format("delta").load(str(path)).count() == 11


def test_a_commit_it_cannot_account_for_gets_no_checksum(tmp_path: Path) -> None:
    path = tmp_path / "t"
    write_with_checksum(str(path), _rows(0, 2), mode="append")
    log = path / "_delta_log"
    (log / f"{1:020d}.json").write_text(json.dumps({"remove": {"path": "x.parquet", "dataChange": True}}) + "\n")
    assert not write_checksum(str(path), 1)  # a removed file without its size
    assert not (log / f"{1:020d}.crc").exists()
    (log / f"{2:020d}.json").write_text(json.dumps({"commitInfo": {}}) + "\n")
    assert not write_checksum(str(path), 2)  # version 1 has none and cannot be accounted for
    assert not (log / f"{2:020d}.crc").exists()
