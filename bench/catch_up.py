"""What one micro-batch of validate's source costs when validate is N bronze commits behind.

    python bench/catch_up.py [--behind 10,100,300,900] [--pace 8]

A live collector or emulator commits a small file per bronze table per second. A micro-batch that starts N commits
behind reads N small files per table; if that takes longer than N seconds, the next batch starts further behind.
One emulator run of the default scenario writes bronze at `--pace` times wall time (a commit per interval, as live)
until the tables written every interval have more commits than the largest N. Then, per N, from N commits before
each table's newest, one Trigger.AvailableNow query (fresh checkpoint) per source, its phases as Spark reports them:
- Spark's Delta source as validate takes it (jobs/validate_source.bronze_union: every bronze table, de-duplicated in
  the state store, cached on disk and collected);
- the alert lane's bronze log source (foundation/bronze_log.BronzeLogSource) with its rows, in the same query
  shape (de-duplicated in the state store, cached, collected): the commits read on the driver with pyarrow and
  handed to Spark;
- its reader alone (BronzeLogReader.rows_between): the same commits read with pyarrow, no Spark.
Seconds per batch, and seconds per behind commit (below 1.0: a batch catches up faster than the writer commits).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation.bronze_log import NAME, BronzeLogReader, BronzeLogSource, log_versions
from foundation.settings import load_settings, spark_interval
from foundation.spark import build_spark_session
from jobs.validate_source import bronze_union
from schemas.bronze import BROKER_METRICS, BRONZE_TABLES, PARTITION_STATE

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "conf" / "scenarios" / "default.yaml"


def newest_versions(lake: str) -> dict[str, int]:
    return {td.name: (log_versions(td.path(lake)) or [-1])[-1] for td in BRONZE_TABLES}


def write_bronze(lake: str, commits: int, pace: float) -> dict[str, int]:
    """Runs the emulator until the tables written every interval have more than `commits` commits; every table's
    newest version then (the reference tables take a commit only when what they hold changes)."""
    emulator = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(SCENARIO),
                                 "--lakehouse", lake, "--quiet", "--pace", str(pace), "--duration", "24h"],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if emulator.poll() is not None:
                raise SystemExit(f"catch-up: the emulator stopped: {emulator.stderr.read() if emulator.stderr else ''}")
            versions = newest_versions(lake)
            fewest = min(versions[td.name] for td in (BROKER_METRICS, PARTITION_STATE))
            print(f"\r  writing bronze: {fewest} of {commits + 1} commits", end="", file=sys.stderr, flush=True)
            if fewest > commits:
                print(file=sys.stderr)
                return versions
            time.sleep(2)
    finally:
        emulator.kill()
        emulator.wait()


def spark_delta_union(spark: SparkSession, lake: str, start: dict[str, int]) -> DataFrame:
    return bronze_union(spark, load_settings(overrides={"lakehouse": lake}), list(BRONZE_TABLES), start)


def bronze_log_union(spark: SparkSession, lake: str, start: dict[str, int]) -> DataFrame:
    """validate's union shape over the bronze log source: `_key` from each table's struct, de-duplicated."""
    tables = list(BRONZE_TABLES)
    source = (spark.readStream.format(NAME).option("lakehouse", lake)
              .option("tables", ",".join(td.name for td in tables))
              .option("start", json.dumps({t: v - 1 for t, v in start.items()})).option("max_files", "1000000").load())
    key = F.coalesce(*[F.when(F.col("_table") == td.name, F.to_json(
        F.struct(*[F.col(f"_{td.name}.{c}").alias(c) for c in td.natural_key]),
        {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"})) for td in tables])
    window = spark_interval(load_settings(overrides={"lakehouse": lake}).validate_.dedup_window)
    return (source.withColumn("_key", key).withColumn("ingested_at", F.current_timestamp())
            .withWatermark("ingested_at", window).dropDuplicatesWithinWatermark(["_table", "_key"]))


def catch_up_batch(spark: SparkSession, frame: DataFrame, work: Path) -> dict[str, float]:
    """One available-now query over `frame` (fresh checkpoint): its batches' phases and rows."""
    rows = 0
    body_s = 0.0

    def collect(batch: DataFrame, _batch_id: int) -> None:
        nonlocal rows, body_s
        entered = time.monotonic()
        batch = batch.persist(StorageLevel.DISK_ONLY)
        batch.count()
        rows += batch.toArrow().num_rows
        batch.unpersist()
        body_s += time.monotonic() - entered

    checkpoint = work / f"checkpoint-{time.monotonic_ns()}"
    began = time.monotonic()
    query = (frame.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    total = time.monotonic() - began
    progress = [p for p in query.recentProgress if p["numInputRows"]]

    def phase(k: str) -> float:
        return sum(p["durationMs"].get(k, 0) for p in progress) / 1000

    return {"batches": len(progress), "rows": rows, "total": total, "latestOffset": phase("latestOffset"),
            "getBatch": phase("getBatch"), "addBatch": phase("addBatch"), "body": body_s}


def bronze_log_batch(lake: str, start: dict[str, int], end: dict[str, int]) -> dict[str, float]:
    reader = BronzeLogReader(lake, list(BRONZE_TABLES), {}, max_files=1_000_000)
    began = time.monotonic()
    rows = reader.rows_between({k: v - 1 for k, v in start.items()}, end).num_rows
    return {"rows": rows, "total": time.monotonic() - began}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--behind", default="10,100,300,900", help="commits behind, comma-separated")
    p.add_argument("--pace", type=float, default=8.0, help="the emulator's pace while it writes bronze")
    args = p.parse_args()
    behind = sorted(int(n) for n in args.behind.split(","))
    work = Path(tempfile.mkdtemp(prefix="isrwatch-catch-up-"))
    lake = str(work / "lakehouse")
    try:
        newest = write_bronze(lake, behind[-1], args.pace)
        spark = build_spark_session("isrwatch-catch-up")
        spark.dataSource.register(BronzeLogSource)
        for union in (spark_delta_union, bronze_log_union):  # warm-up: code generation
            catch_up_batch(spark, union(spark, lake, dict(newest)), work)
        results = []
        for i, n in enumerate(behind, 1):
            print(f"  [{i}/{len(behind)}] {n} commits behind", file=sys.stderr, flush=True)
            start = {t: max(v - n + 1, 0) for t, v in newest.items()}
            results.append((n, catch_up_batch(spark, spark_delta_union(spark, lake, start), work),
                            catch_up_batch(spark, bronze_log_union(spark, lake, start), work),
                            bronze_log_batch(lake, start, newest)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\none catch-up micro-batch over the {len(BRONZE_TABLES)} bronze tables, N commits behind each; seconds")
    print("  (query: the whole available-now query; phases summed over its batches; body: the foreachBatch)")
    for label, k in (("Spark's Delta source (validate's)", 1), ("the bronze log source, rows through Spark", 2)):
        print(f"\n  {label}")
        print(f"  {'N':>5} {'rows':>9} {'batches':>7} {'query':>7} {'latestOffset':>12} {'getBatch':>8} "
              f"{'addBatch':>8} {'body':>6} {'s/commit':>8}")
        for n, *queries in results:
            q = queries[k - 1]
            print(f"  {n:>5} {q['rows']:>9,.0f} {q['batches']:>7.0f} {q['total']:>7.2f} {q['latestOffset']:>12.2f} "
                  f"{q['getBatch']:>8.2f} {q['addBatch']:>8.2f} {q['body']:>6.2f} {q['total'] / n:>8.3f}")
    print("\n  the bronze log reader alone (pyarrow on the driver), and the two queries side by side")
    print(f"  {'N':>5} {'rows':>9} {'read s':>7} {'s/commit':>8} {'Delta/log query':>15}")
    for n, delta, log_query, reader in results:
        print(f"  {n:>5} {reader['rows']:>9,.0f} {reader['total']:>7.2f} {reader['total'] / n:>8.3f} "
              f"{delta['total'] / log_query['total']:>15.1f}")


if __name__ == "__main__":
    main()
