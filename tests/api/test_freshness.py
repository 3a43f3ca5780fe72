"""How far the pipeline's queries are behind bronze (lakehouse_read/freshness.py), read from their checkpoints, and
said by the API and on every dashboard page."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient

from api.app import create_app
from foundation.streaming_checkpoint import END_INDEX
from lakehouse_read.freshness import Freshness
from tests.api.conftest import api_settings

T0 = 1_795_000_000.0   # the first commit's time; commit v is written at T0 + 10 v


def commit(lake: Path, table: str, versions: int) -> str:
    """`versions` more commits of bronze.<table>, commit v written (its file's time) at T0 + 10 v; the table's id."""
    path = lake / "bronze" / table
    for _ in range(versions):
        write_deltalake(str(path), pa.table({"ts": [1]}), mode="append")
    for log in (path / "_delta_log").glob("*.json"):
        at = T0 + 10 * int(log.stem)
        os.utime(log, (at, at))
    return str(DeltaTable(str(path)).metadata().id)


def checkpoint(lake: Path, query: str, batch: int, *offsets: dict[str, object]) -> None:
    """A committed batch of a streaming query's checkpoint, as Spark writes it."""
    root = lake / "_checkpoints" / query
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0})] + [json.dumps(o) for o in offsets]
    (root / "offsets" / str(batch)).write_text("\n".join(lines))
    (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def delta_offset(table_id: str, version: int, index: int = -1) -> dict[str, object]:
    return {"sourceVersion": 1, "reservoirId": table_id, "reservoirVersion": version, "index": index,
            "isStartingVersion": False}


def freshness_at(lake: Path, now: float) -> Freshness:
    return Freshness(str(lake), str(lake / "_checkpoints"), clock=lambda: now)


def test_a_query_is_behind_by_the_age_of_the_oldest_commit_it_has_not_taken(tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    state_id = commit(lake, "partition_state", 5)          # versions 0-4
    commit(lake, "broker_metrics", 2)                       # versions 0-1
    metrics_id = str(DeltaTable(str(lake / "bronze" / "broker_metrics")).metadata().id)
    # validate took partition_state up to version 1 and broker_metrics whole; the lane read everything.
    checkpoint(lake, "validate/union", 3, delta_offset(state_id, 2), delta_offset(metrics_id, 1, END_INDEX))
    checkpoint(lake, "alert_lane", 7, {"partition_state": 4, "broker_metrics": 1})
    freshness = freshness_at(lake, T0 + 100)
    validate, lane = freshness.measure()
    assert (validate.reader.name, validate.status, lane.reader.name, lane.status) == (
        "validate", "behind", "alert lane", "current")
    (state,) = [t for t in validate.tables if t.commits_behind]
    assert (state.table, state.newest_version, state.first_untaken, state.commits_behind) == (
        "bronze.partition_state", 4, 2, 3)
    assert state.behind_since == datetime.fromtimestamp(T0 + 20, UTC) and state.behind_seconds == 80.0
    assert freshness.warnings() == [
        f"validate is 80 s behind bronze: 3 commits of bronze.partition_state not taken since "
        f"{datetime.fromtimestamp(T0 + 20, UTC):%H:%M:%S} UTC; silver tables, the pages and the rules over silver "
        "show the cluster as it was then"]
    # Commits go on; the same reader finds the newest by probing from the last it saw.
    commit(lake, "partition_state", 6)                      # versions 5-10
    freshness.clock = lambda: T0 + 200
    (validate, lane) = freshness.measure()
    assert [(t.table, t.newest_version, t.commits_behind) for t in validate.tables] == [
        ("bronze.broker_metrics", 1, 0), ("bronze.partition_state", 10, 9)]
    assert (lane.status, [t.commits_behind for t in lane.tables]) == ("behind", [0, 6])
    assert lane.behind_seconds == 200 - 50
    # Caught up: nothing to say.
    checkpoint(lake, "validate/union", 4, delta_offset(state_id, 11), delta_offset(metrics_id, 2))
    checkpoint(lake, "alert_lane", 8, {"partition_state": 10, "broker_metrics": 1})
    caught_up = freshness_at(lake, T0 + 300)
    assert [(r.status, r.behind_seconds) for r in caught_up.measure()] == [("current", 0.0), ("current", 0.0)]
    assert caught_up.warnings() == []


def test_a_lake_without_a_validate_checkpoint_says_validate_has_not_run(tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    assert freshness_at(lake, T0).measure() == [], "no bronze: nothing to be behind"
    commit(lake, "partition_state", 1)
    (validate,) = freshness_at(lake, T0).measure()   # the lane runs only with rules on silver: left out
    assert validate.status == "not started"
    assert freshness_at(lake, T0).warnings() == [
        f"validate: it has not committed a batch (checkpoint {lake}/_checkpoints/validate/union) (silver tables, "
        "the pages and the rules over silver are not updated)"]


def test_a_checkpoint_it_cannot_read_is_said_not_skipped(tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    commit(lake, "partition_state", 1)
    checkpoint(lake, "validate/union", 0)
    (lake / "_checkpoints" / "validate" / "union" / "offsets" / "0").write_text("not an offset log")
    (validate,) = freshness_at(lake, T0).measure()
    assert validate.status == "unreadable"
    assert "offsets/0: not an offset log entry" in validate.detail


def test_the_api_and_every_page_say_a_query_is_behind(tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    state_id = commit(lake, "partition_state", 3)
    checkpoint(lake, "validate/union", 0, delta_offset(state_id, 0))
    with TestClient(create_app(api_settings(str(lake)))) as client:
        answer = client.get("/api/v1/freshness").json()
        (validate,) = answer["queries"]
        assert (validate["query"], validate["status"], validate["tables"][0]["commits_behind"]) == (
            "validate", "behind", 3)
        (notice,) = answer["notices"]
        assert notice.startswith("validate is ") and "3 commits of bronze.partition_state" in notice
        page = client.get("/dashboards/overview").text
        assert f'<div id="isrwatch-notices" role="alert"><p>{notice}</p></div>' in page
        assert client.get("/api/v1/dashboards/overview/figures").json()["notices"] == [notice]
        assert f"<p>{notice}</p>" in client.get("/").text
