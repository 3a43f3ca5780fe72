"""Exactly once: validate is SIGKILLed mid-stream (a real subprocess), restarted from its checkpoint, and
silver and quarantine end up equal to bronze's valid and invalid rows, row for row. Also: the job runs under
pyspark's own spark-submit. And on these runs: quiet by default (the job's own lines only), Spark's log with
--verbose."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from foundation.spark import LOG4J2_CONFIG, delta_jars
from schemas.bronze import BROKER_METRICS
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from tests.driver_env import driver_env
from tests.kill_at import killed_at
from tests.pipeline.helpers import append, emulate, key_of, rows

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "validate.py"


@pytest.fixture(scope="module")
def bronze_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("template") / "lakehouse"
    emulate(str(lake), flush_every_intervals=7)  # 3 bronze commits per table: a micro-batch each
    return lake


@pytest.fixture(scope="module")
def bronze_with_bad_rows(bronze_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The template and a fourth broker_metrics commit (micro-batch 3): two invalid rows and a valid one."""
    lake = tmp_path_factory.mktemp("with-bad-rows") / "lakehouse"
    shutil.copytree(bronze_template, lake)
    gauge = next(r for r in rows(BROKER_METRICS, str(lake))
                 if r["name"] == "UnderReplicatedPartitions" and r["broker_id"] == 1)
    ms = timedelta(milliseconds=1)
    append(BROKER_METRICS, str(lake), [{**gauge, "ts": gauge["ts"] + ms, "value": -5.0},
                                       {**gauge, "ts": gauge["ts"] + 2 * ms, "kind": "histogram"},
                                       {**gauge, "ts": gauge["ts"] + 3 * ms}])
    return lake


def _validate_cmd(lake: Path, *extra: str) -> list[str]:
    return [sys.executable, str(JOB), "--lakehouse", str(lake), "--tables", "broker_metrics",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--trigger", "available-now", "--max-files-per-trigger", "1", "--wait-for-tables", "0", "--no-webhooks",
            *extra]


# What Spark and the JVM print at start-up and during a run that needs nobody's action: the log lines of
# Spark's default profile below ERROR, and the lines printed before or beside it.
NOISE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (WARN|INFO|DEBUG) |NativeCodeLoader|resolves to a loopback address|"
                   r"Using Spark's default log4j profile|Setting default log level|To adjust logging level|"
                   r"Using incubator modules|^WARNING: ", re.MULTILINE)


def _assert_quiet(output: str, own: str, allow: tuple[str, ...] = ()) -> None:
    assert own in output, output[-3000:]
    noise = [m.group(0) for m in NOISE.finditer(output) if m.group(0) not in allow]
    assert not noise, output[-3000:]


def _table(td: Any, lake: Path) -> list[dict[str, Any]]:
    return DeltaTable(td.path(str(lake))).to_pyarrow_table().to_pylist()


def _restart_and_check(lake: Path, invalid: int = 0) -> None:
    restarted = subprocess.run(_validate_cmd(lake), env=driver_env(), cwd=ROOT, capture_output=True, text=True,
                               timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _assert_quiet(restarted.stdout + restarted.stderr, "validate: broker_metrics: ")
    _assert_silver_is_bronze(lake, invalid)


def _rows(td: Any, lake: Path) -> int:
    try:
        return len(_table(td, lake))
    except Exception:  # not created yet, or its first commit is still being written
        return 0


def _dq_rows(lake: Path) -> int:
    return _rows(DQ_RUNS, lake)


def _assert_silver_is_bronze(lake: Path, invalid: int) -> None:
    """Each bronze row once in silver or, for the `invalid` rows (value < 0 or kind not a Kafka one), once in
    quarantine; one dq record per micro-batch, together counting every bronze row."""
    names = BROKER_METRICS.arrow_schema.names
    bronze = rows(BROKER_METRICS, str(lake))
    bad = [r for r in bronze if r["value"] < 0 or r["kind"] not in ("gauge", "meter")]
    assert len(bad) == invalid
    good = sorted(tuple(r[c] for c in names) for r in bronze if r not in bad)
    silver = sorted(tuple(r[c] for c in names) for r in _table(SILVER_TABLES["broker_metrics"], lake))
    assert len(silver) == len(good)
    assert silver == good
    quarantine = _table(QUARANTINE_TABLES["broker_metrics"], lake)
    assert len(quarantine) == invalid
    assert sorted(key_of(BROKER_METRICS, r) for r in quarantine) == sorted(key_of(BROKER_METRICS, r) for r in bad)
    dq = _table(DQ_RUNS, lake)
    batch_ids = [d["validate_batch_id"] for d in dq]
    assert len(batch_ids) == len(set(batch_ids)), "a batch's dq record was written twice"
    assert sum(d["rows_in"] for d in dq) == len(bronze)
    assert sum(d["rows_quarantined"] for d in dq) == invalid


def _kill_at(lake: Path, kill_at: str, *extra: str) -> str:
    killed = subprocess.run([*killed_at(kill_at), *_validate_cmd(lake, *extra)[1:]], env=driver_env(), cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    return killed.stderr


def test_sigkill_at_each_write_boundary_then_restart(bronze_with_bad_rows: Path, tmp_path: Path) -> None:
    """SIGKILLed at each of validate's write boundaries in turn, and in a live run whose Great Expectations worker
    had not checked a batch yet, each run restarting from the checkpoint the one before left, then run to the end:
    every bronze row once in silver or quarantine, one dq record per batch."""
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_with_bad_rows, lake)
    # Batch 1's silver committed; its quarantine, dq record and Spark's commit not: the replay skips silver.
    # With --verbose: Spark's own default logging.
    err = _kill_at(lake, "broker_metrics:1:after_silver", "--verbose")
    assert "Using Spark's default log4j profile" in err and "validate: one query over 1 tables" in err, err[-3000:]
    assert [d["validate_batch_id"] for d in _table(DQ_RUNS, lake)] == [0]
    # Batch 1 finished by the replay, batch 2 all written, Spark's commit of batch 2 not: its replay writes nothing.
    _kill_at(lake, "broker_metrics:2:after_dq")
    assert sorted(d["validate_batch_id"] for d in _table(DQ_RUNS, lake)) == [0, 1, 2]
    # Batch 3's silver row and its two quarantined rows committed, its dq record not: the replay skips both.
    _kill_at(lake, "broker_metrics:3:after_quarantine")
    assert sorted(d["validate_batch_id"] for d in _table(DQ_RUNS, lake)) == [0, 1, 2]
    assert len(_table(QUARANTINE_TABLES["broker_metrics"], lake)) == 2
    # Live: a batch hands Great Expectations and its dq record to a worker (jobs/dq_behind.py) and ends. The process
    # dies before the worker checks batch 3, which Spark has committed: the restart checks what that run left in
    # the spool, so every batch still has exactly one dq record.
    _kill_at(lake, "dq_behind:3:before_check", "--trigger", "live")
    assert sorted(d["validate_batch_id"] for d in _table(DQ_RUNS, lake)) == [0, 1, 2]
    spool = lake / "_checkpoints" / "validate" / "union" / "dq_pending"
    assert [p.name for p in spool.iterdir()] == ["000000000003"]
    _restart_and_check(lake, invalid=2)
    assert sorted(d["validate_batch_id"] for d in _table(DQ_RUNS, lake)) == [0, 1, 2, 3]
    assert list(spool.iterdir()) == []


# A slow test (make test-all): the kills at each write boundary above cover the same recovery in make test.
@pytest.mark.slow
def test_sigkill_from_outside_while_batches_run_then_restart(bronze_template: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_template, lake)
    proc = subprocess.Popen(_validate_cmd(lake), env=driver_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if _dq_rows(lake) >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the job finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 1 <= len(_table(DQ_RUNS, lake)) < 3
    _restart_and_check(lake)


def test_isrwatch_submit_runs_validate_and_a_sigterm_stops_it_between_micro_batches(bronze_template: Path,
                                                                                    tmp_path: Path) -> None:
    """`isrwatch submit` fills in spark-submit's Delta jars and settings and the venv's Python. A SIGTERM to it
    (what a process supervisor sends) reaches the Python driver, which stops its live query between
    micro-batches (exit 130); the restart, under pyspark's spark-submit script with the settings given by hand,
    then finishes with every bronze row once in silver."""
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_template, lake)
    isrwatch = Path(sys.executable).parent / "isrwatch"
    cmd = [str(isrwatch), "submit", "validate", "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2",
           "--", "--lakehouse", f"file://{lake}", "--tables", "broker_metrics", "--trigger", "live",
           "--max-files-per-trigger", "1", "--wait-for-tables", "0", "--no-webhooks"]
    env = {k: v for k, v in driver_env().items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    log = tmp_path / "submit.log"
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            # Silver, not silver.dq_runs: a live batch's dq record follows it (jobs/dq_behind.py)
            silver = SILVER_TABLES["broker_metrics"]
            while time.monotonic() < deadline and proc.poll() is None and _rows(silver, lake) < 1:
                time.sleep(0.05)
            assert proc.poll() is None, log.read_text()[-3000:]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(120) == 130, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    output = log.read_text()
    assert "isrwatch submit: SIGTERM: stopping the validate query" in output, output[-3000:]
    assert "validate: stopped; checkpoints are consistent, a restart resumes" in output, output[-3000:]
    assert 1 <= _dq_rows(lake) < 3   # three bronze commits: stopped before the last micro-batch, its records written
    before = len(_table(SILVER_TABLES["broker_metrics"], lake))
    # The restart runs under pyspark's own spark-submit script, given by hand what `isrwatch submit` fills in
    # (docs/spark-submit.md). Its --driver-java-options are the user's: given conf/log4j2.properties there, the
    # run is as quiet as when isrwatch starts the JVM itself, but for the JDK's incubator warning.
    spark_submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(spark_submit), "--master", "local[2]", "--jars", ",".join(delta_jars()),
           "--driver-java-options", f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
           "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
           "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
           "--conf", "spark.sql.shuffle.partitions=2",
           str(JOB), "--lakehouse", f"file://{lake}", "--tables", "broker_metrics", "--trigger", "available-now",
           "--wait-for-tables", "0", "--no-webhooks"]
    done = subprocess.run(cmd, env=driver_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rest = len(rows(BROKER_METRICS, str(lake))) - before
    assert rest > 0
    # spark-submit forwards the Python driver's stdout and stderr to its own stdout
    summary = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("validate:")]
    assert f"validate: broker_metrics: {rest} rows in, {rest} to silver, 0 quarantined" in summary, summary
    _assert_quiet(done.stdout + done.stderr, "validate: broker_metrics: ",
                  allow=("WARNING: ", "Using incubator modules"))
    _assert_silver_is_bronze(lake, invalid=0)
