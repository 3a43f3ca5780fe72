"""A lakehouse on an S3-compatible object store (issue 24, item 1): s3proxy on loopback, as AWS S3 would be.

delta-rs writers (the emulator's bronze sink) and readers (the API's reader) take the store's settings from the
environment; the validate job, a Spark application, reads and writes the same `s3a://` root through S3A.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake.exceptions import DeltaError

from broker_emulator.scenario import parse_scenario
from broker_emulator.simulation import Simulation
from collector.collect_loop import CollectSettings
from foundation import object_store
from foundation.bronze_sink import DeltaSink
from foundation.delta_io import AppVersions, ensure_table, read_rows
from foundation.object_store import ObjectStore, storage_options
from foundation.settings import SettingsError, load_settings
from isrwatch.cli import main
from lakehouse_read.reader import LakehouseReader
from object_store_fixture import S3Proxy
from schemas.bronze import BRONZE_TABLES, RUNS
from schemas.gold import ALERT_EVENTS
from schemas.gold_durability import POSTURE, SLO_STATUS
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef
from tests.lakes import LOSE_TWO

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "lose-two-s3"


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
        assert object_store.current() == ObjectStore("http://127.0.0.1:9000", "x-1", path_style=True)
        with pytest.raises(SettingsError, match=r"storage.endpoint: '127.0.0.1:9000': .*http://host:port"):
            load_settings(overrides={"storage.endpoint": "127.0.0.1:9000"})
    finally:
        object_store.use(None)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Proxy]:
    with S3Proxy(tmp_path_factory.mktemp("s3proxy")) as server:
        yield server


@pytest.fixture
def on_store(s3: S3Proxy, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Proxy]:
    """This process pointed at the store the way a user points theirs: the AWS SDK's variables."""
    for key, value in s3.environment.items():
        monkeypatch.setenv(key, value)
    object_store.use(None)
    yield s3
    object_store.use(None)


@pytest.fixture(scope="module")
def local_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = str(tmp_path_factory.mktemp("local") / "lakehouse")
    Simulation(parse_scenario(LOSE_TWO, "<test>"), DeltaSink(lake, RUN_ID)).run()
    return lake


def _sorted_rows(td: TableDef, lake: str) -> list[tuple[Any, ...]]:
    table = read_rows(td, lake)
    return sorted(tuple(str(v) for v in row.values()) for row in table.to_pylist())


def test_the_emulator_writes_bronze_to_the_store_and_the_api_reader_finds_and_reads_it(
        on_store: S3Proxy, local_lake: str) -> None:
    lake = on_store.uri("emulated")
    Simulation(parse_scenario(LOSE_TWO, "<test>"), DeltaSink(lake, RUN_ID)).run()
    # Through the store: the objects are under the server's folder for the bucket, not on a local path.
    assert (on_store.folder / "data" / "lake" / "emulated" / "bronze" / "runs" / "_delta_log").is_dir()
    for td in BRONZE_TABLES:
        assert _sorted_rows(td, lake) == _sorted_rows(td, local_lake), td.name
    reader = LakehouseReader(lake)
    assert reader.tables() == sorted(td.qualified_name for td in BRONZE_TABLES)
    assert reader.read("bronze.runs").num_rows == len(read_rows(RUNS, local_lake)) > 0


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


@pytest.mark.spark
def test_the_pipeline_reads_and_writes_the_store_validate_through_s3a_and_gold_through_delta_rs(
        on_store: S3Proxy, local_lake: str) -> None:
    """`isrwatch pipeline run` (validate, posture, slo, alerts) over bronze the emulator wrote to the store:
    Spark with S3A (jvm/s3) turns it into silver there, every row once, its checkpoints beside it; the gold
    jobs read silver through S3A and write gold with delta-rs, conditional puts and all."""
    lake = on_store.uri("pipeline")
    Simulation(parse_scenario(LOSE_TWO, "<test>"), DeltaSink(lake, RUN_ID)).run()
    done = subprocess.run(
        [sys.executable, "-m", "isrwatch.cli", "pipeline", "run", "--lakehouse", lake, "--trigger", "available-now",
         "--no-webhooks", "--status-every", "600", "--conf", "spark.sql.shuffle.partitions=2"],
        cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "isrwatch pipeline: 4 queries (validate, posture, slo, alerts)" in done.stderr, done.stderr[-3000:]
    for bronze in BRONZE_TABLES:
        names = bronze.arrow_schema.names
        got = sorted(tuple(str(r[c]) for c in names) for r in read_rows(SILVER_TABLES[bronze.name], lake).to_pylist())
        assert got == sorted(tuple(str(r[c]) for c in names) for r in read_rows(bronze, local_lake).to_pylist()), (
            bronze.name)
    assert (on_store.folder / "data" / "lake" / "pipeline" / "_checkpoints").is_dir()
    assert [r["topic"] for r in read_rows(POSTURE, lake).to_pylist()] == ["orders"]
    assert read_rows(SLO_STATUS, lake).num_rows > 0
    # Broker 2 down 30 s, then broker 3 for 8 s: its partitions at min ISR, then below it.
    fired = {e["rule"] for e in read_rows(ALERT_EVENTS, lake).to_pylist() if e["status"] == "firing"}
    assert {"AtMinIsr", "UnderMinIsr"} <= fired, fired


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
