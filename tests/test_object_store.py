"""A lakehouse on an S3-compatible object store (issue 24, item 1): s3proxy on loopback, as AWS S3 would be.

delta-rs writers (the emulator's bronze sink) and readers (the API's reader) take the store's settings from the
environment; the validate job, a Spark application, reads and writes the same `s3a://` root through S3A.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from deltalake.exceptions import DeltaError

from collector.collect_loop import CollectSettings
from foundation import object_store
from foundation.delta_io import AppVersions, ensure_table, read_rows
from foundation.object_store import ObjectStore, storage_options
from foundation.settings import SettingsError, load_settings
from isrwatch.cli import main
from jobs.alerts import start_alerts
from jobs.posture import start_posture
from jobs.slo import start_slo
from jobs.step_clock import parse_steps
from jobs.validate_routes import ROUTE_STEPS, SOURCE_STEP
from lakehouse_read.reader import LakehouseReader
from schemas.api_tables import SILENCES
from schemas.bronze import BROKER_METRICS, BRONZE_TABLES, RUNS
from schemas.gold import ALERT_EVENTS, ALERTS
from schemas.gold_durability import POSTURE, POSTURE_HISTORY, SLO_STATUS, SLO_TIMESLICES
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from schemas.table import TableDef
from testing.s3proxy import S3Proxy
from testing.spark_standalone import StandaloneCluster, master_command, worker_command
from tests.api.server import TOKEN, serve, stop
from tests.driver_env import SHORT_LIVED_JVM, driver_env
from tests.emulated import emulate_into
from tests.lakes import LOSE_TWO
from tests.pipeline.test_validate import validate

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "lose-two-s3"
# The bronze tables small enough to be routed on the driver when validate's batch is over its limit.
DRIVER_TABLES = frozenset({"runs", "topic_configs", "metrics_coverage"})


def test_one_description_of_the_store_gives_delta_rs_and_spark_the_same_endpoint() -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
           "AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}
    store = ObjectStore.from_environment(env)
    assert store == ObjectStore("http://127.0.0.1:9000", "eu-west-1", path_style=True)
    assert store.delta_rs_options(env) == {
        "AWS_REGION": "eu-west-1", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "aws_conditional_put": "etag",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}
    confs = store.spark_confs()
    assert confs["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert confs["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert not any("key" in k or "secret" in k for k in confs)   # S3A reads them from the environment
    assert confs["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    # AWS itself: no endpoint, TLS, no plain-HTTP switch.
    aws = ObjectStore(region="us-east-2", path_style=False)
    assert "AWS_ENDPOINT_URL" not in aws.delta_rs_options({}) and "AWS_ALLOW_HTTP" not in aws.delta_rs_options({})
    assert "spark.hadoop.fs.s3a.endpoint" not in aws.spark_confs()
    assert storage_options("/tmp/lake/bronze/runs") is None and storage_options("file:///tmp/lake") is None


def test_the_settings_name_the_endpoint_and_refuse_a_malformed_one(tmp_path: Path) -> None:
    try:
        settings = load_settings(overrides={"lakehouse": "s3a://lake/isrwatch",
                                            "storage.endpoint": "http://127.0.0.1:9000", "storage.region": "x-1"})
        assert settings.lakehouse == "s3a://lake/isrwatch"
        settings.use_storage()  # what a job does as it starts (loading has no side effect: tests/test_settings.py)
        assert object_store.current() == ObjectStore("http://127.0.0.1:9000", "x-1", path_style=True)
        with pytest.raises(SettingsError, match=r"storage.endpoint: '127.0.0.1:9000': .*http://host:port"):
            load_settings(overrides={"storage.endpoint": "127.0.0.1:9000"})
    finally:
        object_store.use(None)


@pytest.fixture(scope="module")
def local_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = str(tmp_path_factory.mktemp("local") / "lakehouse")
    emulate_into(lake, LOSE_TWO, RUN_ID)
    return lake


def _sorted_rows(td: TableDef, lake: str) -> list[tuple[Any, ...]]:
    table = read_rows(td, lake)
    return sorted(tuple(str(v) for v in row.values()) for row in table.to_pylist())


def test_the_emulator_writes_bronze_to_the_store_and_the_api_reader_and_isrwatch_sql_read_it(
        on_store: S3Proxy, local_lake: str) -> None:
    lake = on_store.uri("emulated")
    emulate_into(lake, LOSE_TWO, RUN_ID)
    # Through the store: the objects are under the server's folder for the bucket, not on a local path.
    assert (on_store.folder / "data" / "lake" / "emulated" / "bronze" / "runs" / "_delta_log").is_dir()
    for td in BRONZE_TABLES:
        assert _sorted_rows(td, lake) == _sorted_rows(td, local_lake), td.name
    reader = LakehouseReader(lake)
    assert reader.tables() == sorted(td.qualified_name for td in BRONZE_TABLES)
    assert reader.read("bronze.runs").num_rows == len(read_rows(RUNS, local_lake)) > 0
    # `isrwatch sql` finds the tables through S3A (Spark lists the store) and queries them.
    done = subprocess.run([sys.executable, "-m", "isrwatch.cli", "sql", "--lakehouse", lake, "--format", "csv",
                           "SELECT count(*) AS n, count(DISTINCT broker_id) AS brokers FROM bronze.broker_metrics"],
                          cwd=ROOT, env=driver_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    local_metrics = read_rows(BROKER_METRICS, local_lake)
    assert done.stdout.split() == ["n,brokers", f"{local_metrics.num_rows},{len(set(local_metrics['broker_id']))}"]


RACE = TableDef("gold", "race", pa.schema([pa.field("writer", pa.int64(), False), pa.field("n", pa.int64(), False)]),
                ("writer", "n"), "three writers' appends", {"writer": "which writer", "n": "its n-th append"})


def test_concurrent_writers_of_one_table_lose_no_commit_and_write_none_twice(on_store: S3Proxy) -> None:
    """Each commit is a put that fails when its version exists (If-None-Match); the loser retries on top.
    Three writers (threads of one process) append 8 batches each through `write_once`, as the gold jobs do: on
    s3proxy delta-rs now and then raises while others commit ("found gap", "LogSegment end version": s3proxy's
    listing leaves out commit files being written) and may have committed already; the writer tries again and
    `write_once` skips a batch its app id has recorded. Every batch lands exactly once."""
    lake = on_store.uri("race")
    ensure_table(RACE, lake)
    failures: list[BaseException] = []

    def writer(w: int) -> None:
        versions = AppVersions(f"writer-{w}")
        for n in range(8):
            rows = pa.table({"writer": [w], "n": [n]}, schema=RACE.arrow_schema)
            for _attempt in range(5):
                try:
                    versions.known.clear()   # after an error, read what this app id committed
                    versions.write_once(RACE, lake, rows, n)
                    break
                except DeltaError as e:
                    failures.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    got = sorted((r["writer"], r["n"]) for r in read_rows(RACE, lake).to_pylist())
    assert got == [(w, n) for w in range(3) for n in range(8)], failures


# Columns that name a micro-batch or a wall time: they differ between any two runs of a job.
RUN_COLUMNS = {"ingested_at", "quarantined_at", "validate_batch_id", "event_id", "eval_batch_id", "seq",
               "evaluated_at", "updated_batch_id", "posture_batch_id", "slo_batch_id"}


def _table_rows(td: TableDef, lake: str) -> list[tuple[str, ...]]:
    names = [n for n in td.arrow_schema.names if n not in RUN_COLUMNS]
    return sorted(tuple(str(r[c]) for c in names) for r in read_rows(td, lake).to_pylist())


def _tasks_per_executor(event_logs: Path) -> dict[str, dict[str, int]]:
    """Per application, how many tasks each executor ran: from Spark's own event log (a folder of rolled files
    per application)."""
    ran: dict[str, dict[str, int]] = {}
    for app in sorted(event_logs.iterdir()):
        counts: dict[str, int] = {}
        name = app.name
        lines = [line for log in sorted(app.glob("events_*")) for line in log.read_text().splitlines()]
        for line in lines:
            event = json.loads(line)
            if event["Event"] == "SparkListenerApplicationStart":
                name = event["App Name"]
            elif event["Event"] == "SparkListenerTaskEnd":
                executor = event["Task Info"]["Executor ID"]
                counts[executor] = counts.get(executor, 0) + 1
        ran[name] = counts
    return ran


CLUSTER_DOC = (ROOT / "docs" / "cluster.md").read_text()
JOB_OPTIONS = {"validate": ["--wait-for-tables", "0", "--no-webhooks"], "posture": [], "slo": [],
               "alerts": ["--no-webhooks"]}


def _submit_options(job: str, master: str, lake: str, *spark_options: str,
                    job_options: tuple[str, ...] = ()) -> list[str]:
    """`isrwatch submit`'s arguments for a job on a cluster, as docs/cluster.md gives them (plus the test's
    own `spark_options` and `job_options`)."""
    return [job, "--master", master, "--executor-memory", "512m", *spark_options, "--",
            "--lakehouse", lake, "--trigger", "available-now", *JOB_OPTIONS[job], *job_options]


def test_docs_cluster_shows_the_commands_the_cluster_test_runs() -> None:
    """Every command in docs/cluster.md is one the test below runs, with the doc's addresses."""
    master = "spark://127.0.0.1:7077"
    shown = [[".venv/bin/spark-class", *master_command(7077, 8080)[1:]],
             [".venv/bin/spark-class", *worker_command(master, 1, "1g", Path("/var/lib/spark-work"), 8081)[1:]],
             *([".venv/bin/isrwatch", "submit", *_submit_options(job, master, "s3a://lake/isrwatch")]
               for job in JOB_OPTIONS)]
    for cmd in shown:
        assert f"\n{' '.join(cmd)}\n" in CLUSTER_DOC, " ".join(cmd)


@dataclass
class ClusterRuns:
    """The same jobs over the same bronze: on the standalone cluster over the store, and locally."""

    store: S3Proxy
    lake: str                               # the cluster's lakehouse, on the store
    local: str                              # the local run's
    apps: list[str]                         # the cluster's completed applications
    ran: dict[str, dict[str, int]]          # per application, tasks per executor
    said: list[str]                         # what the local validate logged


@pytest.fixture(scope="module")
def cluster_runs(spark: Any, s3: S3Proxy, local_lake: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[ClusterRuns]:
    with pytest.MonkeyPatch.context() as env:
        for key, value in s3.environment.items():
            env.setenv(key, value)
        object_store.use(None)
        try:
            yield _run_on_the_cluster_and_locally(spark, s3, local_lake, tmp_path_factory.mktemp("cluster-runs"))
        finally:
            object_store.use(None)


def _run_on_the_cluster_and_locally(spark: Any, on_store: S3Proxy, local_lake: str, tmp_path: Path) -> ClusterRuns:
    """The cluster's run and the local one at once (the test below says what they are): they share no table, and the
    cluster's jobs spend much of their time starting JVMs, which leaves this session's Spark a core. Bronze is
    written to the store first: the local run sets this process's object store (its delta-rs options) as it starts."""
    lake = on_store.uri("cluster")
    emulate_into(lake, LOSE_TWO, RUN_ID)
    with ThreadPoolExecutor(1) as pool:
        on_cluster = pool.submit(_run_on_the_cluster, lake, tmp_path)
        local, said = _run_locally(spark, local_lake, tmp_path)
        apps, ran = on_cluster.result()
    return ClusterRuns(on_store, lake, local, apps, ran, said)


def _run_on_the_cluster(lake: str, tmp_path: Path) -> tuple[list[str], dict[str, dict[str, int]]]:
    """The four jobs submitted to a standalone cluster one after the other, over the store's `lake`: the completed
    applications, and per application the tasks each executor ran (subprocesses only: nothing here reads the store)."""
    events = tmp_path / "event-logs"
    events.mkdir()
    submit = [sys.executable, "-m", "isrwatch.cli", "submit"]
    # The executors live as short as the drivers (driver_env): C1 only for them too.
    spark_options = ["--conf", "spark.sql.shuffle.partitions=2",
                     "--conf", f"spark.executor.defaultJavaOptions={SHORT_LIVED_JVM}",
                     "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir=file://{events}",
                     "--conf", "spark.eventLog.compress=false"]
    with StandaloneCluster(tmp_path / "cluster") as cluster:
        assert not any(k.startswith("AWS_") for k in cluster.environment), "the workers must not hold credentials"
        for job in JOB_OPTIONS:
            # Every alerts micro-batch on the executor route: the rules run in the worker's Python, per cluster.
            forced = ("--driver-max-rows", "0") if job == "alerts" else ()
            done = subprocess.run(
                [*submit, *_submit_options(job, cluster.master_url, lake, *spark_options, job_options=forced)],
                cwd=ROOT, env=driver_env(), capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
            if job == "alerts":  # spark-submit's PythonRunner hands the driver's stderr on as its stdout
                assert re.search(r"; ([1-9]\d*) of \1 micro-batches evaluated on the executors", done.stdout), \
                    done.stdout[-3000:]
        apps = [a["name"] for a in cluster.status()["completedapps"]]
    return apps, _tasks_per_executor(events)


def _run_locally(spark: Any, local_lake: str, tmp_path: Path) -> tuple[str, list[str]]:
    """The same jobs as on the cluster, in this session: the lakehouse and what validate logged."""
    # The same jobs, locally (this session's Spark), over the same bronze, and validate on the other route: a
    # micro-batch above `driver_max_rows` is checked in the executors and written by Spark jobs (the executor route),
    # except its smallest tables that fit within the limit together (topic_configs, metrics_coverage and runs: the
    # limit is their rows together), which are still collected and routed on the driver.
    local = str(tmp_path / "local")
    shutil.copytree(local_lake, local)
    said: list[str] = []
    small = sum(len(read_rows(td, local)) for td in BRONZE_TABLES if td.name in DRIVER_TABLES)
    validate(spark, local, tuple(td.name for td in BRONZE_TABLES), log=said.append,
             **{"validate.driver_max_rows": small, "alerts.rules": None, "alerts.webhooks": False})
    settings = load_settings(overrides={"lakehouse": local, "alerts.webhooks": False, **{
        f"{job}.{key}": value for job in ("posture", "slo", "alerts")
        for key, value in (("trigger", "available-now"), ("wait_for_tables", "0 seconds"))}})
    quiet = {"log": lambda _: None}
    starts = (lambda: start_posture(spark, settings, **quiet)[0], lambda: start_slo(spark, settings, **quiet)[0],
              lambda: start_alerts(spark, settings, **quiet).query)
    for start in starts:  # one after the other, as on the cluster: alerts reads what posture and slo wrote
        query = start()
        query.awaitTermination()
        assert query.exception() is None, query.exception()
    return local, said


@pytest.mark.spark
@pytest.mark.cluster
def test_the_jobs_submitted_to_a_standalone_cluster_over_the_store_equal_a_local_run(cluster_runs: ClusterRuns
                                                                                       ) -> None:
    """docs/cluster.md end to end: a standalone master and a worker (Spark's own classes), `isrwatch submit
    --master spark://…` of validate, posture, slo and alerts, one after the other, over bronze the emulator wrote
    to the store. The worker's executors read the store through S3A with the credentials `isrwatch submit` gave
    them in a 0600 properties file (the workers' own environment has none); the driver writes silver and gold
    with delta-rs. Silver, quarantine, posture, SLO and alert tables equal those of a local run of the same jobs
    over the same bronze in which validate took the executor route (Spark jobs check, route and write each table
    but the three smallest) and the cluster's took the driver route, while the alerts job took the executor route
    on the cluster (the rules evaluated per cluster in the worker's Python) and the driver route locally. Spark's
    event logs show the cluster's tasks ran on the worker's executor, none on the driver."""
    lake, local, said = cluster_runs.lake, cluster_runs.local, cluster_runs.said
    assert sorted(cluster_runs.apps) == sorted(f"isrwatch-{job}" for job in JOB_OPTIONS)
    assert set(cluster_runs.ran) == {f"isrwatch-{job}" for job in JOB_OPTIONS}
    for app, counts in cluster_runs.ran.items():
        assert counts and "driver" not in counts and sum(counts.values()) > 0, (app, counts)
    checkpoints = cluster_runs.store.folder / "data" / "lake" / "cluster" / "_checkpoints"
    assert (checkpoints / "validate").is_dir()
    assert (checkpoints / "alert_lane" / "commits" / "0").is_file(), "the alert lane ran on the store beside validate"
    assert {d["ge_engine"] for d in read_rows(DQ_RUNS, lake).to_pylist()} == {"pandas"}
    engines = sorted((d["table_name"], d["ge_engine"]) for d in read_rows(DQ_RUNS, local).to_pylist())
    on_driver = DRIVER_TABLES
    assert engines == sorted((t, "pandas" if t in on_driver else "spark")
                             for t in ("broker_metrics", "partition_state", "cluster_events", "ack_ledger", *on_driver))
    # The executor route says where its batch's time went, per step of every table it routed in Spark.
    steps = parse_steps("\n".join(said))
    in_spark = [t for t, engine in engines if engine == "spark"]
    assert set(steps) == {SOURCE_STEP, "tables present", "topic_configs and runs and metrics_coverage on the driver",
                          "dq record", *(f"{t} {step}" for t in in_spark for step in ROUTE_STEPS)}, said
    assert all(seconds >= 0 for seconds in steps.values()) and steps[SOURCE_STEP] > 0
    compared = [*SILVER_TABLES.values(), *QUARANTINE_TABLES.values(), POSTURE, POSTURE_HISTORY, SLO_TIMESLICES,
                SLO_STATUS, ALERT_EVENTS, ALERTS]
    for td in compared:
        assert _table_rows(td, lake) == _table_rows(td, local), td.qualified_name
    assert all(_table_rows(td, lake) for td in (POSTURE, SLO_STATUS)), "posture and slo wrote nothing to the store"
    assert len(_table_rows(SILVER_TABLES["broker_metrics"], lake)) == len(read_rows(BROKER_METRICS, local))
    # Broker 2 down 30 s, then broker 3 for 8 s: its partitions at min ISR, then below it.
    fired = {e["rule"] for e in read_rows(ALERT_EVENTS, lake).to_pylist() if e["status"] == "firing"}
    assert {"AtMinIsr", "UnderMinIsr"} <= fired, fired


SERVED = ["/api/v1/alerts?limit=1000", "/api/v1/slos", "/api/v1/topics", "/api/v1/brokers",
          "/api/v1/posture", f"/api/v1/topics/orders?cluster={RUN_ID}",
          f"/api/v1/dashboards/overview/figures?cluster={RUN_ID}"]
QUERY = ("SELECT s.rule, s.status, count(*) AS n, max(p.partition) AS top FROM gold.alert_events s "
         "JOIN silver.partition_state p ON p.run_id = s.cluster GROUP BY s.rule, s.status ORDER BY s.rule, s.status")


@pytest.mark.spark
def test_isrwatch_serve_over_the_store_answers_as_over_a_copy_on_local_disk_and_keeps_silences_there(
        cluster_runs: ClusterRuns, tmp_path: Path) -> None:
    """`isrwatch serve --lakehouse s3a://…` over the lakehouse the cluster's jobs wrote: every read route, the
    dashboards' figures and a SQL query answer exactly as a server over a byte-for-byte copy of the same objects on
    the local disk (its checkpoints left out: it says validate has not run, the store's server that nothing is
    behind); a silence created through it is stored on the store (two versions once expired)."""
    store = cluster_runs.store
    copy = tmp_path / "copy"
    shutil.copytree(store.folder / "data" / "lake" / "cluster", copy, ignore=shutil.ignore_patterns("_checkpoints"))
    on_store, store_url = serve(cluster_runs.lake, tmp_path, store.environment)
    try:
        on_disk, disk_url = serve(str(copy), tmp_path)
        try:
            with httpx.Client(base_url=store_url, timeout=60) as s, httpx.Client(base_url=disk_url, timeout=60) as d:
                ready = s.get("/readyz").json()
                assert ready["lakehouse"] == cluster_runs.lake and ready["status"] == "ready"
                assert ready["tables"] == d.get("/readyz").json()["tables"]
                # Read from the checkpoints on the store, the jobs ran to the end of bronze; the copy has none.
                assert (ready["behind"], d.get("/readyz").json()["behind"]) == ([], ["validate"])
                for route in SERVED:
                    got = s.get(route)
                    assert got.status_code == 200, (route, got.text[:2000])
                    here, there = got.json(), d.get(route).json()
                    if "notices" in here:   # a dashboard's figures: what each server says of its pipeline
                        assert here.pop("notices") == [] and there.pop("notices")[0].startswith(
                            "validate: it has not committed a batch"), route
                    assert here == there, route
                # Files read, not only the log: DataFusion scans the tables' Parquet on the store.
                served = s.post("/api/v1/query", json={"sql": QUERY})
                assert served.status_code == 200, served.text[:2000]
                answered, expected = ({k: v for k, v in r.json().items() if k != "elapsed_ms"}
                                      for r in (served, d.post("/api/v1/query", json={"sql": QUERY})))
                assert answered["rows"] and answered == expected
                auth = {"Authorization": f"Bearer {TOKEN}"}
                ends = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
                created = s.post("/api/v1/silences", headers=auth, json={
                    "matchers": [{"name": "topic", "value": "orders"}], "endsAt": ends, "createdBy": "ops",
                    "comment": "maintenance"})
                assert created.status_code == 201, created.text
                sid = created.json()["silenceID"]
                silenced = s.get("/api/v1/alerts", params={"limit": 1000}).json()["items"]
                assert silenced and all((a["silenced_by"] == [sid]) == (a["labels"].get("topic") == "orders")
                                        for a in silenced)
                assert s.delete(f"/api/v1/silences/{sid}", headers=auth).status_code == 200
        finally:
            stop(on_disk)
    finally:
        stop(on_store)
    rows = read_rows(SILENCES, cluster_runs.lake).to_pylist()   # read back through the store
    assert sorted((r["silence_id"], r["version"]) for r in rows) == [(sid, 1), (sid, 2)]
    assert not (copy / "api").exists(), "the copy on disk got no silence"


def test_the_collector_keeps_its_memory_on_a_local_disk_when_the_lakehouse_is_on_a_store(
        capsys: pytest.CaptureFixture[str]) -> None:
    on_store = CollectSettings(["127.0.0.1:9092"], "s3a://lake/isrwatch")
    with pytest.raises(ValueError, match=r"s3a://lake/isrwatch is on an object store: .* local --state-dir"):
        _ = on_store.state_root
    assert CollectSettings(["127.0.0.1:9092"], "s3a://lake/isrwatch", state_dir="/var/lib/isrwatch").state_root == (
        "/var/lib/isrwatch")
    assert CollectSettings(["127.0.0.1:9092"], "/data/lakehouse").state_root == "/data/lakehouse"
    # Refused before it connects to anything.
    assert main(["collect", "--bootstrap-servers", "127.0.0.1:1", "--lakehouse", "s3a://lake/isrwatch"]) == 2
    assert "give the collector a local --state-dir" in capsys.readouterr().err
