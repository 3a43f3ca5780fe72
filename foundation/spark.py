"""The one place that builds a SparkSession: Delta Lake from the locally fetched jars, quiet, local."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

JARS_DIR = Path(__file__).resolve().parent.parent / "jvm" / "jars"


def delta_jars() -> list[str]:
    jars = sorted(str(p) for p in JARS_DIR.glob("*.jar"))
    if not any("delta-spark" in j for j in jars):
        raise RuntimeError(f"Delta Lake jars not found in {JARS_DIR}: run `make jars`")
    return jars


def launched_by_spark_submit() -> bool:
    """True inside a driver started by `spark-submit` (its JVM hands Python a gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(app_name: str, *, master: str | None = None, conf: dict[str, str] | None = None,
                        ui: bool = False) -> SparkSession:
    """A SparkSession with Delta configured; `conf` overrides every default."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.jars": ",".join(delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.enabled": str(ui).lower(),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "2g",
        "spark.ui.showConsoleProgress": "false",
        # toPandas through Arrow (GE's pandas engine validates each micro-batch on the driver).
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Delta reconstructs a table's state (its files, its app transactions) with a Spark job of
        # `snapshotPartitions` tasks; the default 50 costs ~100 tasks per idempotent write on 2 cores,
        # 2 costs a few. Raise it on a cluster with large tables.
        "spark.databricks.delta.snapshotPartitions": "2",
        # Auto compaction would run inside a micro-batch and make its duration spiky; the jobs compact
        # their own tables every `maintain_every_batches` instead (OPTIMIZE + checkpoint + VACUUM).
        "spark.databricks.delta.autoCompact.enabled": "false",
        # Streaming state (validate's de-duplication) in RocksDB, off the JVM heap and spilled to local disk:
        # the state holds every key ingested within `dedup_window` of wall time, which in a catch-up is
        # millions of rows; Spark's default in-heap store keeps whole copies per version and ran a 4 GB driver
        # out of memory ten minutes into a day's catch-up. Changelog checkpointing commits only each batch's
        # changes. A checkpoint keeps the provider it was started with (Spark records it in the offset log).
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name)
    if launched_by_spark_submit():
        # spark-submit already chose the master and the jars; its --conf settings win over ours.
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        submitted = SparkConf()
        if "delta-spark" not in submitted.get("spark.jars", ""):
            raise RuntimeError("spark-submit needs the Delta jars: add --jars \"$(ls jvm/jars/*.jar | paste -sd,)\"")
        settings = {k: v for k, v in settings.items() if k != "spark.jars" and not submitted.contains(k)}
    elif master is not None:
        builder = builder.master(master)
    elif "spark.master" not in settings and not os.environ.get("SPARK_MASTER"):
        builder = builder.master("local[*]")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_active_session() -> None:
    """Stop the JVM before the interpreter exits (tearing it down at exit can crash it)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
