"""The alert lane (jobs/alert_lane.py): the one evaluator of the rules on silver tables, a query of its own over the
bronze commit logs beside validate.

On a cluster losing two of its three brokers: the lane's transitions are the engine's on the same rows; its query killed
between delivering a batch's transitions and recording them, then started again, the lane loses none and sends the
killed batch's again under the same ids; available-now, it stops at the commits there at its start. The lane's
source is read directly in tests/test_bronze_log.py; which rules it holds, and an older lakehouse's rows given to it,
in tests/alerts/test_rule_layers.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pandas as pd
import pyarrow as pa
import pytest

from foundation import kill_points
from foundation.bronze_log import BronzeLogReader
from foundation.delta_io import open_table, read_rows
from foundation.settings import load_settings
from foundation.streaming_checkpoint import END_INDEX
from jobs.alert_lane import HandedOver, LaneBatches, lane_tables, validate_position
from jobs.alert_recorder import RecordFailed
from jobs.alert_stage import SOURCE_COLUMNS, build_stage
from jobs.lane_log import LaneLog, LaneLogError
from jobs.validate import RunningValidation, start_validation
from jobs.validate_checkpoints import HadoopFiles
from pipelines.alert_config import LANE_TABLES, load_alert_config, split_by_layer
from pipelines.alert_engine import AlertEngine
from pipelines.alert_signals import shape_union
from schemas.bronze import BRONZE_BY_NAME
from schemas.gold import ALERT_EVENTS, ALERTS_STATE
from tests.alerts.lane_runs import lane_to_the_end
from tests.alerts.receiver import Receiver, rules_file
from tests.thread_priority import stream_thread_nices

LANE = split_by_layer(load_alert_config())[0]
FILES_PER_BATCH = 4   # bronze commits per table and micro-batch: batches of fixed bounds over a bronze written before


def test_the_lanes_first_start_continues_from_validates_last_committed_offsets(bronze: Path, spark: Any,
                                                                                tmp_path: Path) -> None:
    """validate's checkpoint names each Delta source's table by id: the lane starts after the last version validate
    read whole (inside a version: before it), for its own tables only, from the last committed batch."""
    ids = {t: open_table(BRONZE_BY_NAME[t], str(bronze)).metadata().id for t in LANE_TABLES}  # type: ignore[union-attr]

    def offset(table_id: str, version: int, index: int) -> str:
        return json.dumps({"sourceVersion": 1, "reservoirId": table_id, "reservoirVersion": version, "index": index,
                           "isStartingVersion": False})

    checkpoint = tmp_path / "validate"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "commits" / "3").write_text("v1\n{}")
    header = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {}})]
    (checkpoint / "offsets" / "3").write_text("\n".join([
        *header, offset("a-table-the-lane-does-not-read", 9, END_INDEX),
        offset(ids["broker_metrics"], 7, END_INDEX), offset(ids["partition_state"], 5, 2)]))
    (checkpoint / "offsets" / "4").write_text("\n".join([  # a batch not committed yet
        *header, offset(ids["broker_metrics"], 30, END_INDEX), offset(ids["partition_state"], 30, END_INDEX)]))
    assert validate_position(spark, str(checkpoint), str(bronze), lane_tables()) == {
        "broker_metrics": 7, "partition_state": 4}
    assert validate_position(spark, str(tmp_path / "none"), str(bronze), lane_tables()) == {}


def test_the_lane_keeps_its_first_position_and_reads_each_batch_from_its_logged_offsets(bronze: Path, spark: Any,
                                                                                       tmp_path: Path) -> None:
    """Batch 0 starts where the first start stood, even when validate has moved on by a restart; a batch's rows are
    the commits between the offsets Spark logged for the batch before and its own, stamped with its timestamp."""
    checkpoint = tmp_path / "alert_lane"
    reader = BronzeLogReader(str(bronze), lane_tables(), {}, 1000)
    first = LaneLog(HadoopFiles(spark), str(checkpoint), reader)
    assert first.first_position(lambda: {"partition_state": 1, "broker_metrics": 2}) == {
        "runs": -1, "topic_configs": -1, "partition_state": 1, "broker_metrics": 2, "ack_ledger": -1,
        "cluster_events": -1}
    again = LaneLog(HadoopFiles(spark), str(checkpoint), reader)
    assert again.first_position(lambda: {"partition_state": 4}) == first.first  # kept, not computed again
    # A checkpoint from when the lane read fewer tables: the ones it reads since start where validate stands then,
    # kept beside the others, which stay where they were.
    files = HadoopFiles(spark)
    older = {"runs": -1, "topic_configs": -1, "partition_state": 1, "broker_metrics": 2}
    files.write(str(checkpoint / "lane_start"), json.dumps(older))
    grown = LaneLog(files, str(checkpoint), reader)
    assert grown.first_position(lambda: {"partition_state": 9, "cluster_events": 3}) == {
        **older, "ack_ledger": -1, "cluster_events": 3}
    assert json.loads(files.read(str(checkpoint / "lane_start"))) == grown.first
    assert reader.start == grown.first  # where a table absent from a batch's offsets starts
    files.write(str(checkpoint / "lane_start"), json.dumps(first.first))
    ends = [{"runs": 1, "topic_configs": 0, "partition_state": 2, "broker_metrics": 3},
            {"runs": 4, "topic_configs": 0, "partition_state": 4, "broker_metrics": 4}]
    _log_offsets(checkpoint, ends)
    tables = [{"runs", "topic_configs", "partition_state", "broker_metrics"},  # topic_configs: one commit, version 0
              {"runs", "partition_state", "broker_metrics"}]
    for batch_id, start in ((0, first.first), (1, ends[0])):
        rows = again.rows(batch_id)
        if batch_id == 0:  # batch 1 starts at batch 0's end offsets, kept in memory: its file is not read again
            (checkpoint / "offsets" / "0").rename(checkpoint / "batch-0")
        assert rows.drop_columns("ingested_at").to_pylist() == reader.rows_between(start, ends[batch_id]).to_pylist()
        assert set(rows.column("ingested_at").cast(pa.int64()).to_pylist()) == {(1_700_000_000_000 + batch_id) * 1000}
        versions = {(t, v) for t, v in zip(rows.column("_table").to_pylist(), rows.column("_version").to_pylist(),
                                           strict=True)}
        assert {t for t, _ in versions} == tables[batch_id]
        assert all(start[t] < v <= ends[batch_id][t] for t, v in versions)
    with pytest.raises(LaneLogError, match=r"offsets/2 is gone: the alert lane cannot read the commits of its batch"):
        again.rows(2)
    restarted = LaneLog(HadoopFiles(spark), str(checkpoint), reader, first.first)  # nothing in memory: reads the file
    with pytest.raises(LaneLogError, match=r"offsets/0 is gone: the alert lane cannot read the commits of its batch 0"):
        restarted.rows(1)
    (checkpoint / "batch-0").rename(checkpoint / "offsets" / "0")
    again_1 = restarted.rows(1).drop_columns("ingested_at")
    assert again_1.to_pylist() == reader.rows_between(ends[0], ends[1]).to_pylist()


def _log_offsets(checkpoint: Path, ends: list[dict[str, int]]) -> None:
    """The lane's offset log as Spark writes it, batch `i` ending at `ends[i]`, stamped 1_700_000_000_000 + i ms."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    for batch_id, end in enumerate(ends):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1_700_000_000_000 + batch_id, "conf": {}}
        (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(["v1", json.dumps(meta), json.dumps(end)]))


def test_a_batch_of_reference_rows_only_is_recorded_all_the_same(bronze: Path, spark: Any, tmp_path: Path) -> None:
    """A batch holding only runs and topic_configs rows gives the rules nothing, yet its record is written: the
    recorded batch keeps up with Spark's, so a restart never replays further back than the offset log keeps."""
    lake = str(tmp_path / "lakehouse")
    shutil.copytree(bronze, lake)
    stage = build_stage(lake, "lane", LANE, "alert_lane", webhooks=False,
                        driver_max_rows=500_000, maintain_every_batches=600, log=lambda _: None)
    stage.bind("test-lane")
    checkpoint = tmp_path / "alert_lane"
    none = {td.name: -1 for td in lane_tables()}
    _log_offsets(checkpoint, [{**none, "runs": 0, "topic_configs": 0}, {**none, "runs": 1, "partition_state": 0,
                                                                          "broker_metrics": 0, "topic_configs": 0}])
    log = LaneLog(HadoopFiles(spark), str(checkpoint), BronzeLogReader(lake, lane_tables(), {}, 1000), none)
    batches = LaneBatches(lane_tables(), stage, lake, 60_000_000, log, "test-query")
    batches.started.set()
    try:
        for batch_id in (0, 1):
            batches(None, batch_id)  # type: ignore[arg-type]  # the lane's batch reads its rows, not Spark's
            batches.recorder.flush()
            assert stage.versions.committed(ALERTS_STATE, lake) == batch_id
        # What hand_over tells apart: a batch without rule rows is handed over empty; a recorded batch is a replay.
        assert batches.hand_over(2, []) == HandedOver(2, [], 0, ANY)
        assert batches.hand_over(1, []) is None
    finally:
        batches.recorder.stop()
    assert {r["kind"] for r in read_rows(ALERTS_STATE, lake).to_pylist()} >= {"last_hw", "last_seen"}  # batch 1's


def _start(spark: Any, lake: str, rules: str | None, log: Callable[[str], None] = lambda _: None,
           ) -> RunningValidation:
    settings = load_settings(overrides={
        # validate beside it on one small table: the lane reads its own (every bronze row here is valid)
        "lakehouse": lake, "validate.tables": ["runs"], "validate.trigger": "live",
        "validate.max_files_per_trigger": FILES_PER_BATCH,
        "validate.wait_for_tables": "0 seconds",
        "alerts.rules": rules,
        "alerts.webhooks": rules is not None})
    return start_validation(spark, settings, log=log)


def _drain(running: RunningValidation) -> None:
    """Both queries through every bronze commit (then idle: stopped between micro-batches)."""
    assert running.lane is not None
    for q in (running.lane.query, running.query):
        q.processAllAvailable()
    for q in (running.lane.query, running.query):
        q.stop()
        assert q.exception() is None, q.exception()
    running.finish()


def _events(lake: str) -> list[dict[str, Any]]:
    return read_rows(ALERT_EVENTS, lake).to_pylist()


def _engine_on_bronze(lake: str) -> list[tuple[Any, ...]]:
    """The lane's rules over every bronze row of its tables at once, in one engine step."""
    frames = [read_rows(BRONZE_BY_NAME[t], lake).to_pandas()[["run_id", "ts", *SOURCE_COLUMNS[t]]].assign(_source=t)
              for t in LANE_TABLES]
    rows = pd.concat(frames, ignore_index=True).sort_values(["ts", "_source"], kind="stable", ignore_index=True)
    steps = AlertEngine(LANE).step(shape_union(rows))
    return sorted((t.rule, t.fingerprint, t.status, t.ts_ms, t.value) for t in steps)


KILLED_BATCH = 0   # four 10-second commits a table: batch 0 holds the faults' first transitions ...
UNRECORDED_BATCH = 1  # ... and batch 1 the last commit, the alerts resolving


def _batch_of(event_id: str) -> int:
    """The evaluation batch in an event id (`<fingerprint>-<batch>-<seq>`) or a delivery id (`<event id>@<name>`)."""
    return int(event_id.split("@")[0].split("-")[1])


class Killed(Exception):
    pass


@contextmanager
def failing_after_delivery(job: str, batch: int) -> Iterator[None]:
    """The evaluator's micro-batch `batch` fails once its transitions reached the receivers (the webhook lanes finish
    first) and before anything is recorded, as a crash there would leave it."""
    def kill() -> None:
        raise Killed(f"killed after delivering batch {batch}")

    kill_points.arm(kill_points.KillPoint(job, batch, "after_delivery", kill))
    try:
        yield
    finally:
        kill_points.arm(None)


@contextlib.contextmanager
def dying_before_record(batch: int) -> Iterator[None]:
    """The lane's record of `batch` is not written: once Spark has committed the batch, its writer fails, as the
    process dying there would leave it (tests/alerts/test_alert_lane_killed.py SIGKILLs the process; here the writer
    raises)."""
    def kill() -> None:
        raise Killed(f"killed before recording batch {batch}")

    kill_points.arm(kill_points.KillPoint("alert_lane", batch, "before_record", kill))
    try:
        yield
    finally:
        kill_points.arm(None)


def _delivered(receiver: Receiver) -> list[str]:
    return [r["json"]["isrwatchDeliveryId"] for r in receiver.delivered()]


def test_the_lane_killed_before_and_after_sparks_commit_loses_nothing_and_gives_the_engines_transitions(
        bronze: Path, spark: Any, tmp_path: Path) -> None:
    """Two crashes, then a clean run:
    1. batch 0 fails once its transitions reached the receiver and before gold.alert_events holds them (Spark's
       checkpoint and the engine's state without the batch): the next start replays it through Spark;
    2. batch 1 is committed by Spark, its transitions delivered, and its record never written (the lane writes
       records behind its batches): the next start replays it from the lane's offset log before its query starts.
    Each transition is recorded once, under the ids it was sent with; the receiver gets every routed transition,
    the killed batches' twice under the same delivery ids. Every row of this bronze passes validation
    (tests/pipeline/test_validate.py), so the lane's transitions, over micro-batches and restarts, are the engine's
    over all of them at once."""
    lake = str(tmp_path / "lakehouse")
    shutil.copytree(bronze, lake)
    receiver = Receiver().start()
    replayed: list[str] = []
    try:
        rules = rules_file(tmp_path, receiver.url)
        with failing_after_delivery("alert_lane", KILLED_BATCH):
            first = _start(spark, lake, rules)
            assert first.lane is not None
            with pytest.raises(Exception, match="killed after delivering batch"):
                first.lane.query.awaitTermination()
            first.query.stop()
            first.finish()
        sent_before = set(_delivered(receiver))
        assert sent_before and all(_batch_of(i) == KILLED_BATCH for i in sent_before)  # delivered ...
        assert not _events(lake)                                                       # ... not recorded

        with dying_before_record(UNRECORDED_BATCH), pytest.raises(RecordFailed, match="before recording batch 1"):
            _drain(_start(spark, lake, rules))
        sent_unrecorded = {i for i in _delivered(receiver) if _batch_of(i) == UNRECORDED_BATCH}
        assert sent_unrecorded                                                               # delivered ...
        assert not [e for e in _events(lake) if e["eval_batch_id"] == UNRECORDED_BATCH]     # ... not recorded
        assert (tmp_path / "lakehouse" / "_checkpoints" / "alert_lane" / "commits" / "1").exists()  # committed

        _drain(_start(spark, lake, rules, replayed.append))
    finally:
        receiver.stop()

    lane = _events(lake)
    got = sorted((e["rule"], e["fingerprint"], e["status"], int(e["ts"].timestamp() * 1000), e["value"]) for e in lane)
    assert {t[0] for t in got if t[2] == "firing"} >= {"UnderMinIsr", "AtMinIsr", "UnderReplicated"}
    assert got == _engine_on_bronze(lake)   # each transition once
    assert all(e["event_id"] == f"{e['fingerprint']}-{e['eval_batch_id']}-{e['seq']}" for e in lane)
    routed = {f"{e['event_id']}@test" for e in lane if e["status"] in ("firing", "resolved")
              and e["severity"] in ("critical", "warning")}
    ids = _delivered(receiver)
    assert set(ids) == routed                                       # none lost
    assert {i for i in ids if ids.count(i) > 1} == sent_before | sent_unrecorded  # the killed batches', same ids
    state = read_rows(ALERTS_STATE, lake).to_pylist()
    assert {r["key"].split("/", 1)[0] for r in state if r["kind"] == "alert" and r["engine"] == "lane"} == {
        t[0] for t in got}
    assert {r["engine"] for r in state if r["kind"] in ("last_hw", "last_seen")} == {"lane"}
    assert replayed == ["alert_lane: replayed batches 1..1, committed by Spark and not recorded before a stop"]


def test_a_failed_lane_started_again_beside_a_running_validate_repeats_and_loses_nothing(
        bronze: Path, spark: Any, tmp_path: Path) -> None:
    """What `pipeline run` and jobs/validate.py do when the lane's query fails (jobs/query_restarts.py): the lane
    alone is started again from its checkpoint while validate runs on. The failed batch, delivered and not
    recorded, is replayed: every transition is recorded once, the failed batch's delivered again under its ids."""
    lake = str(tmp_path / "lakehouse")
    shutil.copytree(bronze, lake)
    receiver = Receiver().start()
    try:
        rules = rules_file(tmp_path, receiver.url)
        with failing_after_delivery("alert_lane", KILLED_BATCH):
            running = _start(spark, lake, rules)
            assert running.lane is not None
            failed = running.lane.query
            with pytest.raises(Exception, match="killed after delivering batch"):
                failed.awaitTermination()
        assert running.query.isActive, "validate runs on"
        sent_before = set(_delivered(receiver))
        restarted = running.restart_lane()
        assert restarted.query is not failed and restarted.query.id == failed.id, "the same checkpoint, a new run"
        for q in (restarted.query, running.query):
            q.processAllAvailable()
        nices = stream_thread_nices(spark)
        _drain(running)
    finally:
        receiver.stop()
    lane = _events(lake)
    got = sorted((e["rule"], e["fingerprint"], e["status"], int(e["ts"].timestamp() * 1000), e["value"]) for e in lane)
    assert got and got == _engine_on_bronze(lake)   # each transition once
    ids = _delivered(receiver)
    assert set(ids) == {f"{e['event_id']}@test" for e in lane if e["status"] in ("firing", "resolved")
                        and e["severity"] in ("critical", "warning")}
    assert sent_before and {i for i in ids if ids.count(i) > 1} == sent_before
    # One JVM runs both queries; validate's batches are throughput work: its stream thread is at the tasks' priority
    # (jvm/local-master) from its first batch on, the lane's (the new run's too) at the driver's.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert nices == {"validate": min(base + 10, 19), "alert_lane": base}


def test_available_now_the_lane_evaluates_the_commits_there_at_its_start_and_stops(bronze: Path, spark: Any,
                                                                                   tmp_path: Path) -> None:
    """validate available-now: the lane reads up to the commits that existed when it started, in batches of at most
    `max_files_per_trigger` files a table, then ends by itself; its transitions are the engine's over all the rows.
    A commit landing afterwards waits for the next run."""
    lake = str(tmp_path / "lakehouse")
    shutil.copytree(bronze, lake)
    settings = load_settings(overrides={
        "lakehouse": lake, "validate.tables": ["runs"], "validate.trigger": "available-now",
        "validate.max_files_per_trigger": 1, "validate.wait_for_tables": "0 seconds",
        "alerts.webhooks": False})
    lane = lane_to_the_end(spark, settings)
    commits = max(len([n for n in (tmp_path / "lakehouse" / "bronze" / t / "_delta_log").iterdir()
                       if n.name.endswith(".json")]) for t in LANE_TABLES)
    assert lane.stage.stats.batches >= commits > 1   # one commit a table per batch
    got = sorted((e["rule"], e["fingerprint"], e["status"], int(e["ts"].timestamp() * 1000), e["value"])
                 for e in _events(lake))
    assert got and got == _engine_on_bronze(lake)
