"""The floors validate's executor route is compared with: one streaming micro-batch that does only part of its work.

    python bench/floor_queries.py KIND --lake DIR --master URL [--partitions N] [--driver-memory M]
                                  [--dedup-window '10 minutes']

- passthrough: broker_metrics copied to another Delta table, nothing else;
- dedup: validate's own source (jobs/validate_source.py `bronze_union` over broker_metrics and runs: the union, the
  natural keys, the de-duplication in the state store), the micro-batch cached on disk and counted, as validate
  does before it routes anything, timed inside the micro-batch as validate times that step;
- dedup-in-memory: the same with Spark's in-memory state store (HDFSBackedStateStoreProvider, the keys on the
  executors' heaps) instead of validate's RocksDB;
- dedup-per-batch: the other design, no state store: the same rows (`bronze_rows`), de-duplicated within the
  micro-batch and then against the keys silver already holds from the last `validate.dedup_window` of ingestion
  time (an anti-join with silver, read as validate would read it), cached and counted;
- source: the same rows, not de-duplicated at all, cached and counted (what the de-duplication adds to).
Prints the seconds (passthrough: Spark's triggerExecution of the micro-batches) on its last line.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation.settings import PipelineSettings, load_settings
from foundation.spark import build_spark_session
from jobs.delta_tables import is_delta_table
from jobs.validate_source import bronze_rows, bronze_union, natural_key
from schemas.bronze import BROKER_METRICS, RUNS
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef

EXECUTOR_MEMORY = "4g"


SPENT: list[float] = []  # seconds inside each micro-batch of the dedup floor


def _cached_count(batch: DataFrame, _batch_id: int, began: float | None = None) -> None:
    """What validate does first with its micro-batch, timed as validate times that step (jobs/step_clock.py).
    `began`: when the caller began the step (a micro-batch it de-duplicated to nothing still counts)."""
    timed = began is not None
    began = time.monotonic() if began is None else began
    batch = batch.persist(StorageLevel.DISK_ONLY)
    if batch.count() or timed:
        SPENT.append(time.monotonic() - began)
    batch.unpersist()


def _recent_silver_keys(spark: SparkSession, settings: PipelineSettings, tables: list[TableDef]) -> DataFrame | None:
    """`_table`, `_key` of every silver row ingested within the de-duplication window."""
    frames = []
    for td in tables:
        path = SILVER_TABLES[td.name].path(settings.lakehouse)
        if is_delta_table(path):
            silver = spark.read.format("delta").load(path)
            frames.append(silver.where(F.col("ingested_at") >= F.current_timestamp()
                                       - F.expr(f"INTERVAL {settings.validate_.dedup_window}"))
                          .select(F.lit(td.name).alias("_table"), natural_key(td).alias("_key")))
    return functools.reduce(DataFrame.unionByName, frames) if frames else None


def _per_batch(spark: SparkSession, settings: PipelineSettings, tables: list[TableDef]
               ) -> Callable[[DataFrame, int], None]:
    def run(batch: DataFrame, batch_id: int) -> None:
        if batch.isEmpty():
            return
        began = time.monotonic()
        batch = batch.dropDuplicates(["_table", "_key"])
        recent = _recent_silver_keys(spark, settings, tables)
        if recent is not None:
            batch = batch.join(recent, ["_table", "_key"], "left_anti")
        _cached_count(batch, batch_id, began)
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=["passthrough", "dedup", "dedup-in-memory", "dedup-per-batch", "source"])
    p.add_argument("--lake", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--driver-memory", default="2g")
    p.add_argument("--dedup-window", help="validate.dedup_window for dedup-per-batch (default: the settings')")
    args = p.parse_args()
    conf = {"spark.sql.shuffle.partitions": str(args.partitions), "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.driver.memory": args.driver_memory}
    if args.kind == "dedup-in-memory":
        conf["spark.sql.streaming.stateStore.providerClass"] = (
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")
    spark = build_spark_session(f"isrwatch-bench-floor-{args.kind}", master=args.master, conf=conf)
    lake = Path(args.lake)
    overrides = {"lakehouse": str(lake), "validate.max_files_per_trigger": 100000}
    if args.dedup_window:
        overrides["validate.dedup_window"] = args.dedup_window
    settings = load_settings(overrides=overrides)
    tables = [RUNS, BROKER_METRICS]
    target = None
    if args.kind == "passthrough":
        writer = (spark.readStream.format("delta").option("maxFilesPerTrigger", 100000)
                  .load(BROKER_METRICS.path(str(lake))).writeStream.format("delta"))
        target = str(lake / "floor")
    elif args.kind in ("dedup", "dedup-in-memory"):
        writer = bronze_union(spark, settings, tables, {}).writeStream.foreachBatch(_cached_count)
    elif args.kind == "dedup-per-batch":
        writer = bronze_rows(spark, settings, tables, {}).writeStream.foreachBatch(_per_batch(spark, settings, tables))
    else:
        writer = bronze_rows(spark, settings, tables, {}).writeStream.foreachBatch(_cached_count)
    checkpoint = lake / f"_floor_{args.kind}_ckpt"
    shutil.rmtree(checkpoint, ignore_errors=True)   # each floor times the whole bronze as one fresh micro-batch
    query = (writer.option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start(target))
    query.awaitTermination()
    if args.kind != "passthrough":
        print(sum(SPENT))
    else:
        batches = [q for q in query.recentProgress if q["numInputRows"] > 0]
        print(sum(q["durationMs"]["triggerExecution"] for q in batches) / 1000)


if __name__ == "__main__":
    main()
