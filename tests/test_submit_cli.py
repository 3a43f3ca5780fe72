"""`isrwatch submit`'s command line: what it fills in, what it leaves to the user, what it refuses."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from foundation import object_store
from isrwatch.submit_cli import ROOT, SubmitError, spark_submit_command, split_arguments, write_credentials


def _conf(cmd: list[str]) -> dict[str, str]:
    return dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--conf")


def test_delta_jars_settings_and_the_venvs_python_are_filled_in_and_the_users_options_pass_through() -> None:
    job, spark_args, job_args = split_arguments(
        ["alerts", "--master", "spark://127.0.0.1:7077", "--executor-memory=1g", "--conf", "spark.x=1",
         "--jars", "/opt/extra.jar", "--supervise", "--", "--lakehouse", "/l", "--trigger", "available-now"])
    cmd = spark_submit_command(job, spark_args, job_args, python="/venv/bin/python")
    assert cmd[0] == "/venv/bin/spark-submit"
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"
    assert cmd[cmd.index("--executor-memory") + 1] == "1g" and "--supervise" in cmd
    jars = cmd[cmd.index("--jars") + 1].split(",")
    assert any("delta-spark_4.2_2.13" in j for j in jars) and jars[-1] == "/opt/extra.jar"
    conf = _conf(cmd)
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == "/venv/bin/python"
    assert conf["spark.x"] == "1"
    assert "log4j2.properties" in cmd[cmd.index("--driver-java-options") + 1]
    assert cmd[-5:] == [str(ROOT / "jobs" / "alerts.py"), "--lakehouse", "/l", "--trigger", "available-now"]
    # A cluster's executors do not have jvm/local-master: Hadoop's own local file system and Spark's task priority stay.
    assert not {"spark.hadoop.fs.file.impl", "spark.driver.extraClassPath", "spark.plugins"} & set(conf)


def test_the_users_settings_win_and_the_master_defaults_to_local() -> None:
    cmd = spark_submit_command("validate", ["--conf", "spark.pyspark.python=/other/python",
                                            "--driver-java-options", "-Dx=1"], ["--verbose"], python=sys.executable)
    assert _conf(cmd)["spark.pyspark.python"] == "/other/python"
    assert cmd[cmd.index("--master") + 1] == "local[*]"
    # Local: Hadoop's file system without a fork per created file and the throughput work at a lower priority
    # (foundation/spark.py), unless a class path is given.
    assert _conf(cmd)["spark.hadoop.fs.file.impl"] == "isrwatch.hadoop.NioLocalFileSystem"
    assert _conf(cmd)["spark.plugins"] == "isrwatch.spark.ThroughputWorkAtLowPriority"
    assert _conf(cmd)["spark.driver.extraClassPath"].endswith("jvm/local-master/isrwatch-local-master.jar")
    own = _conf(spark_submit_command("validate", ["--driver-class-path", "/x.jar"], [], python=sys.executable))
    assert not {"spark.hadoop.fs.file.impl", "spark.plugins"} & set(own)
    assert cmd.count("--driver-java-options") == 1 and cmd[cmd.index("--driver-java-options") + 1] == "-Dx=1"


@pytest.mark.parametrize(("argv", "problem"), [
    ([], "usage: isrwatch submit JOB"),
    (["nope"], "unknown job 'nope'"),
    (["validate", "--master"], "--master: missing its value"),
    (["validate", "--conf", "novalue"], "--conf: expected KEY=VALUE, got 'novalue'"),
    (["validate", "--lakehouse", "/l", "stray"], "'stray': expected a spark-submit option (job options go after `--`)"),
])
def test_bad_arguments_are_refused_by_name(argv: list[str], problem: str) -> None:
    with pytest.raises(SubmitError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        job, spark_args, job_args = split_arguments(argv)
        spark_submit_command(job, spark_args, job_args)


def test_a_lakehouse_on_an_object_store_brings_s3a_and_the_stores_endpoint_but_no_secret(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-on-a-command-line")
    object_store.use(None)
    try:
        cmd = spark_submit_command("validate", [], ["--lakehouse=s3a://lake/isrwatch"], python=sys.executable)
        jars = cmd[cmd.index("--jars") + 1].split(",")
        assert any("hadoop-aws-" in j for j in jars) and any("delta-spark" in j for j in jars)
        conf = _conf(cmd)
        assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
        assert "not-on-a-command-line" not in " ".join(cmd)
        # The settings file's lakehouse and storage section, when the job names no --lakehouse.
        config = tmp_path / "pipeline.yaml"
        config.write_text("lakehouse: s3://lake/other\nstorage:\n  endpoint: http://127.0.0.1:9100\n")
        cmd = spark_submit_command("alerts", [], ["--config", str(config)], python=sys.executable)
        assert _conf(cmd)["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9100"
        # A local lakehouse: no S3A.
        cmd = spark_submit_command("validate", [], ["--lakehouse", "/l"], python=sys.executable)
        assert not any("hadoop-aws" in j for j in cmd[cmd.index("--jars") + 1].split(","))
        assert "spark.hadoop.fs.s3a.endpoint" not in _conf(cmd)
        assert "--extra-properties-file" not in cmd
    finally:
        object_store.use(None)


def test_executors_get_the_stores_credentials_from_a_file_only_its_owner_reads(tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": "the-key", "AWS_SECRET_ACCESS_KEY": "the-secret", "AWS_REGION": "x-1"}
    written = write_credentials(tmp_path, env)
    assert written is not None and stat.S_IMODE(written.stat().st_mode) == 0o600
    assert written.read_text().splitlines() == ["spark.hadoop.fs.s3a.access.key the-key",
                                                "spark.hadoop.fs.s3a.secret.key the-secret"]
    assert write_credentials(tmp_path / "none", {"AWS_REGION": "x-1"}) is None
    object_store.use(None)
    try:
        cmd = spark_submit_command("validate", ["--properties-file", "/etc/spark/mine.conf"],
                                   ["--lakehouse", "s3a://lake/isrwatch"], python=sys.executable, credentials=written)
        # Beside the user's own properties file, which still applies.
        assert cmd[cmd.index("--extra-properties-file") + 1] == str(written)
        assert cmd[cmd.index("--properties-file") + 1] == "/etc/spark/mine.conf"
        assert "the-secret" not in " ".join(cmd)
    finally:
        object_store.use(None)
