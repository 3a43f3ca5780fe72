"""`isrwatch pipeline run` end to end (in-process, on the test session's Spark) and `isrwatch webhook-receiver`."""

from __future__ import annotations

import argparse
import hashlib
import hmac
import io
import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable

from foundation.settings import load_settings
from isrwatch.cli import main
from isrwatch.pipeline_cli import Job, _watch
from isrwatch.webhook_receiver import WebhookPrinter
from jobs.progress_log import read_progress
from jobs.query_restarts import Restarts
from schemas.bronze import BRONZE_TABLES
from schemas.gold import ALERT_EVENTS, DELIVERIES
from schemas.gold_durability import POSTURE, SLO_STATUS
from schemas.silver import SILVER_TABLES
from tests.alerts.receiver import Receiver
from tests.pipeline.helpers import emulate

ROOT = Path(__file__).resolve().parents[1]


def test_available_now_runs_the_four_jobs_in_stages_and_delivers(spark: Any, tmp_path: Path, capsys: Any) -> None:
    lake = str(tmp_path / "lakehouse")
    # Broker 2 is down from 2 s to 28 s of a 30 s run: fenced, its partitions at min ISR, silent for > 15 s.
    emulate(lake, duration="30s", faults=[{"at": "2s", "kind": "crash", "broker": 2, "duration": "26s"}])
    receiver = Receiver().start()
    rules = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    rules["receivers"] = [{"name": "r", "url": receiver.url, "backoff_initial": "50ms"}]
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = main(["pipeline", "run", "--lakehouse", lake, "--trigger", "available-now", "--status-every", "600",
                     "--rules", str(tmp_path / "alerts.yaml"), "--progress-log", str(tmp_path / "progress.jsonl")])
    finally:
        receiver.stop()
    err = capsys.readouterr().err
    assert code == 0, err
    # Its SIGTERM and SIGINT handlers lasted as long as the run: this process has its own back.
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    assert "isrwatch pipeline: 5 queries (validate, alert_lane, posture, slo, alerts)" in err and "done after" in err
    n_state = DeltaTable(SILVER_TABLES["partition_state"].path(lake)).to_pyarrow_table().num_rows
    assert n_state > 0
    assert DeltaTable(POSTURE.path(lake)).to_pandas()["topic"].tolist() == ["t"]
    # Every silver interval has a status row per SLO (four SLOs), since posture/slo ran after validate.
    status = DeltaTable(SLO_STATUS.path(lake)).to_pandas()
    assert len(status) == 4 * status["ts"].nunique() and status["ts"].nunique() == n_state // 4
    events = DeltaTable(ALERT_EVENTS.path(lake)).to_pandas()
    fired = set(events.loc[events["status"] == "firing", "rule"])
    assert {"AtMinIsr", "BrokerNotReporting", "PostureRfEqualsBrokers"} <= fired, fired
    records = DeltaTable(DELIVERIES.path(lake)).to_pandas()
    delivered = records[records["outcome"] != "sending"]      # attempts end in an outcome; intents are `sending`
    assert len(delivered) > 0 and set(delivered["outcome"]) == {"delivered"}
    assert len(receiver.delivered()) == len(delivered) == (records["outcome"] == "sending").sum()
    # Every micro-batch's phases, per query, as Spark timed them.
    progress = read_progress(tmp_path / "progress.jsonl")
    with_rows = [p for p in progress if p.get("numInputRows", 0) > 0]
    assert {p["name"] for p in with_rows} == {"validate", "posture", "slo", "alerts"}
    validated = sum(p["numInputRows"] for p in with_rows if p["name"] == "validate")
    assert validated == sum(DeltaTable(td.path(lake)).to_pyarrow_table().num_rows for td in BRONZE_TABLES
                            if td.name in load_settings().validate_.tables)
    assert all(0 <= p["durationMs"]["addBatch"] <= p["durationMs"]["triggerExecution"] for p in with_rows)
    # validate's own steps of the same batches, beside Spark's phases: rows as Spark counted them, each step timed
    steps = {p["batchId"]: p for p in progress if "steps" in p}
    spark_batches = {p["batchId"]: p["numInputRows"] for p in with_rows if p["name"] == "validate"}
    assert {b: steps[b]["rows"] for b in spark_batches} == spark_batches
    named = {"collect", "check", "silver and quarantine", "great expectations", "dq record"}
    assert all(named <= set(steps[b]["steps"]) and all(s >= 0 for s in steps[b]["steps"].values())
               for b in spark_batches)


def _second_batch_fails(_frame: Any, batch_id: int) -> None:
    if batch_id >= 1:
        raise RuntimeError("the batch failed")


def _rate_query(spark: Any, folder: Path, name: str, fails: bool) -> Any:
    writer = spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.queryName(name)
    writer = writer.foreachBatch(_second_batch_fails) if fails else writer.format("noop")
    return writer.option("checkpointLocation", str(folder / name)).start()


WATCH_ARGS = argparse.Namespace(duration=300, stop_when_idle=None, status_every=600)
STATS = type("Stats", (), {"batch_id": 0, "describe": lambda self: ""})()


def test_a_failed_query_without_a_restart_stops_the_watch_naming_it(spark: Any, tmp_path: Path, capsys: Any) -> None:
    """A query down is not left for a status line to mention once a minute: the watch ends at once as failed, so
    `pipeline run` stops the others and exits 1 (a supervisor restarts it)."""
    healthy = _rate_query(spark, tmp_path, "healthy", fails=False)
    failing = _rate_query(spark, tmp_path, "failing", fails=True)
    running = [Job("validate", healthy, STATS, ()), Job("posture", failing, STATS, ())]
    try:
        outcome = _watch(running, WATCH_ARGS, time.monotonic())
        still_active = healthy.isActive
    finally:
        healthy.stop()
        failing.stop()
    assert outcome == "failed" and still_active, "the watch ended on the failure, not on the duration"
    err = capsys.readouterr().err
    assert "isrwatch pipeline: posture failed (" in err and "the batch failed" in err
    assert err.rstrip().endswith("); stopping the other queries")


def test_a_failed_lane_is_restarted_three_times_within_ten_minutes_then_the_watch_fails(
        spark: Any, tmp_path: Path, caplog: Any) -> None:
    """The alert lane's query, failed, is started again from its checkpoint (a transient: its Python worker slow to
    start); failing a fourth time within the window, it stops the watch."""
    caplog.set_level(logging.INFO, logger="isrwatch")
    healthy = _rate_query(spark, tmp_path, "healthy", fails=False)
    started: list[Any] = []

    def lane_job() -> Job:
        started.append(_rate_query(spark, tmp_path / str(len(started)), "lane", fails=True))
        return Job("alert_lane", started[-1], STATS, (), restart=lane_job)

    running = [Job("validate", healthy, STATS, ()), lane_job()]
    waits: list[float] = []

    class Recorded(Restarts):
        def wait_s(self, name: str) -> float:
            waits.append(super().wait_s(name))
            return waits[-1]

    restarts = Recorded(backoff_s=0.5)
    try:
        outcome = _watch(running, WATCH_ARGS, time.monotonic(), restarts)
        still_active = healthy.isActive
    finally:
        for query in (healthy, *started):
            query.stop()
    assert outcome == "failed" and still_active
    assert len(started) == 4 and running[1].query is started[-1], "the watch holds the lane's latest query"
    lines = [r.getMessage() for r in caplog.records if "alert_lane failed" in r.getMessage()]
    assert [line.rsplit("(", 1)[1] for line in lines[:3]] == [
        f"restart {n} of 3 allowed within 600 s)" for n in (1, 2, 3)]
    assert len(lines) == 4 and lines[3].endswith("; stopping the other queries")
    assert waits == [0.5, 1.0, 1.5], "each restart waits longer than the one before"


def test_pipeline_refuses_unknown_jobs(capsys: Any) -> None:
    assert main(["pipeline", "run", "--jobs", "validate,nope"]) == 2
    assert "unknown jobs ['nope']; known: validate, posture, slo, alerts" in capsys.readouterr().err


def _message(status: str = "firing") -> bytes:
    alert = {"status": status, "labels": {"alertname": "UnderMinIsr", "severity": "critical", "cluster": "c1",
                                          "topic": "t", "partition": "3"},
             "annotations": {"summary": "t-3: ISR 1 below min.insync.replicas 2"}}
    return json.dumps({"version": "4", "status": status, "alerts": [alert]}).encode()


@pytest.mark.parametrize(("secret", "signed_with", "body", "status", "line"), [
    (None, None, _message(), 200,
     "webhook  FIRING   critical UnderMinIsr              c1 topic=t partition=3  t-3: ISR 1 below "
     "min.insync.replicas 2"),
    ("s3cret", "s3cret", _message("resolved"), 200, "webhook  RESOLVED critical UnderMinIsr"),
    ("s3cret", "wrong", _message(), 401, "webhook  REJECTED: bad or missing X-Isrwatch-Signature"),
    (None, None, b'{"version": "3", "alerts": []}', 400, "webhook  REJECTED: not an Alertmanager version 4 payload"),
    (None, None, b"not json", 400, "webhook  REJECTED: "),
])
def test_webhook_receiver_prints_verifies_and_rejects(secret: str | None, signed_with: str | None, body: bytes,
                                                      status: int, line: str) -> None:
    out = io.StringIO()
    printer = WebhookPrinter(0, secret, out)
    try:
        signature = None if signed_with is None else \
            "sha256=" + hmac.new(signed_with.encode(), body, hashlib.sha256).hexdigest()
        assert printer.handle(body, signature) == status
    finally:
        printer.server.server_close()
    assert out.getvalue().startswith(line), out.getvalue()
    assert printer.received == (1 if status == 200 else 0)


def test_every_status_line_comes_with_a_warning_per_query_behind_bronze(spark: Any, tmp_path: Path,
                                                                          caplog: Any) -> None:
    """A live pipeline says, with its status lines, what lakehouse_read/freshness.py finds: a query behind bronze."""
    caplog.set_level(logging.INFO, logger="isrwatch")
    query = _rate_query(spark, tmp_path, "healthy", fails=False)
    job = Job("validate", query, STATS, ())
    job.status_line = lambda: "validate: status"  # type: ignore[method-assign]
    args = argparse.Namespace(duration=1.5, stop_when_idle=None, status_every=0.4)
    try:
        outcome = _watch([job], args, time.monotonic(), notices=lambda: ["validate is 5 min behind bronze: …"])
    finally:
        query.stop()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    statuses = [m for m in messages if m[1] == "validate: status"]
    warnings = [m for m in messages if m[1] == "isrwatch pipeline: validate is 5 min behind bronze: …"]
    assert outcome == "stopped after --duration" and len(statuses) >= 1
    assert {level for level, _ in warnings} == {"WARNING"} and len(warnings) == len(statuses)
