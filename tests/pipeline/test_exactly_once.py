"""Exactly once: validate is SIGKILLed mid-stream (a real subprocess), restarted from its checkpoint, and
silver ends up equal to bronze row for row. Also: the job runs under pyspark's own spark-submit."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from isrwatch.spark import delta_jars
from schemas.bronze import BROKER_METRICS, RUNS, TOPIC_CONFIGS
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from tests.pipeline.helpers import emulate, rows

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "validate.py"


@pytest.fixture(scope="module")
def bronze_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("template") / "lakehouse"
    emulate(str(lake), flush_every_intervals=7)  # 3 bronze commits per table: a micro-batch each
    return lake


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, **extra}
    env.pop("ISRWATCH_KILL_AT", None)
    env.update(extra)
    return env


def _validate_cmd(lake: Path) -> list[str]:
    return [sys.executable, str(JOB), "--lakehouse", str(lake), "--tables", "broker_metrics",
            "--conf", "spark.sql.shuffle.partitions=2",
            "--trigger", "available-now", "--max-files-per-trigger", "1", "--wait-for-tables", "0"]


def _table(td: Any, lake: Path) -> list[dict[str, Any]]:
    return DeltaTable(td.path(str(lake))).to_pyarrow_table().to_pylist()


def _restart_and_check(lake: Path) -> None:
    restarted = subprocess.run(_validate_cmd(lake), env=_env(), cwd=ROOT, capture_output=True, text=True,
                               timeout=600)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    _assert_silver_is_bronze(lake)


def _dq_rows(lake: Path) -> int:
    try:
        return len(_table(DQ_RUNS, lake))
    except Exception:  # not created yet, or its first commit is still being written
        return 0


def _assert_silver_is_bronze(lake: Path) -> None:
    names = BROKER_METRICS.arrow_schema.names
    bronze = sorted(tuple(r[c] for c in names) for r in rows(BROKER_METRICS, str(lake)))
    silver = sorted(tuple(r[c] for c in names) for r in _table(SILVER_TABLES["broker_metrics"], lake))
    assert len(silver) == len(bronze)
    assert silver == bronze
    assert _table(QUARANTINE_TABLES["broker_metrics"], lake) == []
    dq = _table(DQ_RUNS, lake)
    batch_ids = [d["validate_batch_id"] for d in dq]
    assert len(batch_ids) == len(set(batch_ids)), "a batch's dq record was written twice"
    assert sum(d["rows_in"] for d in dq) == len(bronze)


@pytest.mark.parametrize("kill_at", [
    "broker_metrics:1:after_silver",  # silver committed, quarantine and dq_runs not: replay skips silver
    pytest.param("broker_metrics:2:after_dq", marks=pytest.mark.slow),  # all written, batch not committed
])
def test_sigkill_at_a_write_boundary_then_restart(bronze_template: Path, tmp_path: Path, kill_at: str) -> None:
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_template, lake)
    killed = subprocess.run(_validate_cmd(lake), env=_env(ISRWATCH_KILL_AT=kill_at), cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    batch = int(kill_at.split(":")[1])
    partial = _table(DQ_RUNS, lake)
    assert len(partial) == (batch + 1 if kill_at.endswith("after_dq") else batch)
    _restart_and_check(lake)


def test_sigkill_from_outside_while_batches_run_then_restart(bronze_template: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_template, lake)
    proc = subprocess.Popen(_validate_cmd(lake), env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
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


def test_runs_under_the_spark_submit_script_shipped_with_pyspark(bronze_template: Path, tmp_path: Path) -> None:
    lake = tmp_path / "lakehouse"
    shutil.copytree(bronze_template, lake)
    spark_submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(spark_submit), "--master", "local[2]", "--jars", ",".join(delta_jars()),
           "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
           "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
           "--conf", "spark.sql.shuffle.partitions=2",
           str(JOB), "--lakehouse", f"file://{lake}", "--tables", "runs,topic_configs", "--trigger", "available-now"]
    done = subprocess.run(cmd, env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    n_runs = len(rows(RUNS, str(lake)))
    assert n_runs == 3  # flushes at 7 s and 14 s, and the final one at 20 s
    # spark-submit forwards the Python driver's stdout and stderr to its own stdout
    summary = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("validate:")]
    assert f"validate: runs: {n_runs} rows in, {n_runs} to silver, 0 quarantined" in summary, summary
    for td in (RUNS, TOPIC_CONFIGS):
        assert len(_table(SILVER_TABLES[td.name], lake)) == len(rows(td, str(lake))) > 0
