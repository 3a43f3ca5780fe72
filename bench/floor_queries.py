"""The floors validate's executor route is compared with: one streaming micro-batch that does only part of its work.

    python bench/floor_queries.py passthrough|dedup --lake DIR --master URL [--partitions N] [--driver-memory M]

- passthrough: broker_metrics copied to another Delta table, nothing else;
- dedup: validate's own source (jobs/validate.py `bronze_union` over broker_metrics and runs: the union, the
  natural keys, the de-duplication in the state store), the micro-batch cached on disk and counted, as validate
  does before it routes anything, timed inside the micro-batch as validate times that step.
Prints the seconds (passthrough: Spark's triggerExecution of the micro-batches) on its last line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from foundation.settings import load_settings
from foundation.spark import build_spark_session
from jobs.validate import bronze_union
from schemas.bronze import BROKER_METRICS, RUNS

EXECUTOR_MEMORY = "4g"


SPENT: list[float] = []  # seconds inside each micro-batch of the dedup floor


def _cached_count(batch: DataFrame, _batch_id: int) -> None:
    """What validate does first with its micro-batch, timed as validate times that step (jobs/step_clock.py)."""
    began = time.monotonic()
    batch = batch.persist(StorageLevel.DISK_ONLY)
    if batch.count():
        SPENT.append(time.monotonic() - began)
    batch.unpersist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=["passthrough", "dedup"])
    p.add_argument("--lake", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--driver-memory", default="2g")
    args = p.parse_args()
    spark = build_spark_session(f"isrwatch-bench-floor-{args.kind}", master=args.master,
                                conf={"spark.sql.shuffle.partitions": str(args.partitions),
                                      "spark.executor.memory": EXECUTOR_MEMORY,
                                      "spark.driver.memory": args.driver_memory})
    lake = Path(args.lake)
    if args.kind == "passthrough":
        writer = (spark.readStream.format("delta").option("maxFilesPerTrigger", 100000)
                  .load(BROKER_METRICS.path(str(lake))).writeStream.format("delta"))
        target = str(lake / "floor")
    else:
        settings = load_settings(overrides={"lakehouse": str(lake), "validate.max_files_per_trigger": 100000})
        writer = bronze_union(spark, settings, [RUNS, BROKER_METRICS], {}).writeStream.foreachBatch(_cached_count)
        target = None
    query = (writer.option("checkpointLocation", str(lake / f"_floor_{args.kind}_ckpt"))
             .trigger(availableNow=True).start(target))
    query.awaitTermination()
    if args.kind == "dedup":
        print(sum(SPENT))
    else:
        batches = [q for q in query.recentProgress if q["numInputRows"] > 0]
        print(sum(q["durationMs"]["triggerExecution"] for q in batches) / 1000)


if __name__ == "__main__":
    main()
