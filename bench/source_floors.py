"""What the shape of validate's streaming source costs a live micro-batch, before any check: the floor under the
alert latency (bench/alert_latency.py).

    python bench/source_floors.py [--seconds 90] [--trigger '1 second']

One emulator run of the default scenario at live pace writes bronze; one after another, in one Spark session, a
streaming query per source shape reads it from the current versions on, and its foreachBatch only collects the
micro-batch to the driver through Arrow (what validate's driver route does first):
- partition_state: one bronze table;
- partition_state + broker_metrics: the two tables the latency bench's rules read;
- seven tables: validate's union of every bronze table (jobs/validate_source.py `bronze_rows`);
- seven, de-duplicated: validate's own source (`bronze_union`: the union de-duplicated in the state store);
- seven, de-duplicated, cached: as validate takes it (persisted on disk and counted, then collected).
Per shape: from a bronze commit (its JSON's modification time) to its rows on the driver, p50 / p95; Spark's
phases; the body's own time; and what addBatch spends outside the body (Spark hands the batch over).
The first `--warm-up` seconds of each query are left out (code generation, the first batches).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.delta_log import new_commits
from bench.percentiles import percentile
from foundation.bronze_log import added_paths
from foundation.settings import load_settings, spark_interval
from foundation.spark import build_spark_session
from jobs.validate_source import bronze_rows
from schemas.bronze import BROKER_METRICS, BRONZE_TABLES, PARTITION_STATE

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "conf" / "scenarios" / "default.yaml"


@dataclass
class Shape:
    name: str
    tables: list[str]
    dedup: bool = False
    cached: bool = False


SHAPES = [
    Shape("partition_state", [PARTITION_STATE.name]),
    Shape("partition_state + broker_metrics", [PARTITION_STATE.name, BROKER_METRICS.name]),
    Shape("seven tables", [td.name for td in BRONZE_TABLES]),
    Shape("seven, de-duplicated", [td.name for td in BRONZE_TABLES], dedup=True),
    Shape("seven, de-duplicated, cached", [td.name for td in BRONZE_TABLES], dedup=True, cached=True),
]


@dataclass
class Committed:
    """When each bronze data file's commit became visible (its JSON's modification time), read as commits come."""

    lake: str
    versions: dict[str, int] = field(default_factory=dict)
    at: dict[str, float] = field(default_factory=dict)  # data file (local path) -> commit time

    def latest(self, table: str) -> int:
        self.refresh()
        return self.versions.get(table, -1)

    def of_file(self, path: str) -> float | None:
        if path not in self.at:
            self.refresh()
        return self.at.get(path)

    def refresh(self) -> None:
        """Read the commits made since the last look."""
        for td in BRONZE_TABLES:
            table = f"{self.lake}/bronze/{td.name}"
            for version, adds in new_commits(table, self.versions.get(td.name, -1)):
                when = os.stat(f"{table}/_delta_log/{version:020d}.json").st_mtime
                self.at.update(dict.fromkeys(added_paths(table, adds), when))
                self.versions[td.name] = version


def measure(spark: SparkSession, lake: str, shape: Shape, committed: Committed, seconds: float, warm_up: float,
            trigger: str, work: Path) -> dict[str, float]:
    settings = load_settings(overrides={"lakehouse": lake})
    tables = [td for td in BRONZE_TABLES if td.name in shape.tables]
    starting = {td.name: max(committed.latest(td.name), 0) for td in tables}  # its one commit falls in the warm-up
    frame: DataFrame = bronze_rows(spark, settings, tables, starting).withColumn("_file", F.input_file_name())
    if shape.dedup:
        frame = (frame.withWatermark("ingested_at", spark_interval(settings.validate_.dedup_window))
                 .dropDuplicatesWithinWatermark(["_table", "_key"]))
    began, began_wall = time.monotonic(), time.time()
    latency: list[float] = []
    body: list[float] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        entered = time.monotonic()
        if shape.cached:
            batch = batch.persist(StorageLevel.DISK_ONLY)
            batch.count()
        rows = batch.select("_file").toArrow()
        now, wall = time.monotonic(), time.time()
        if shape.cached:
            batch.unpersist()
        if now - began < warm_up or rows.num_rows == 0:
            return
        body.append(now - entered)
        for f in set(rows.column("_file").to_pylist()):
            at = committed.of_file(f.removeprefix("file://").removeprefix("file:"))
            if at is not None:
                latency.append(wall - at)

    checkpoint = work / "checkpoints" / shape.name.replace(" ", "_").replace(",", "")
    query = (frame.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime=trigger).start())
    time.sleep(seconds)
    # Stopped between micro-batches: one interrupted mid-batch logs Spark's errors (broadcasts, the batch's thread).
    deadline = time.monotonic() + 60
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    failed = query.exception()
    query.stop()
    if failed is not None:
        raise SystemExit(f"source floors: the {shape.name} query failed: {failed}")
    warm = began_wall + warm_up
    progress = [p for p in query.recentProgress
                if p["numInputRows"] and datetime.fromisoformat(p["timestamp"]).timestamp() >= warm]

    def phases(k: str) -> float:
        return percentile([p["durationMs"].get(k, 0) for p in progress], 50)

    return {"batches": len(body), "latency_p50": percentile(latency, 50), "latency_p95": percentile(latency, 95),
            "trigger": phases("triggerExecution"), "latestOffset": phases("latestOffset"),
            "getBatch": phases("getBatch"), "addBatch": phases("addBatch"), "body": percentile(body, 50) * 1000}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=90, help="each shape's query runs this long")
    p.add_argument("--warm-up", type=float, default=25, help="each query's first seconds, left out")
    p.add_argument("--trigger", default="1 second", help="processing-time trigger (validate's default)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="isrwatch-source-floors-"))
    lake = str(work / "lakehouse")
    duration = int(len(SHAPES) * (args.seconds + 15) + 60)
    emulator = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(SCENARIO),
                                 "--lakehouse", lake, "--quiet", "--pace", "live", "--duration", f"{duration}s"],
                                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        spark = build_spark_session("isrwatch-source-floors")
        deadline = time.monotonic() + 120
        while not all((Path(lake) / "bronze" / td.name / "_delta_log").exists() for td in BRONZE_TABLES):
            if time.monotonic() > deadline or emulator.poll() is not None:
                raise SystemExit("source floors: the emulator wrote no bronze tables")
            time.sleep(0.5)
        committed = Committed(lake)
        results = []
        for i, shape in enumerate(SHAPES, 1):
            print(f"  [{i}/{len(SHAPES)}] {shape.name}: {args.seconds:.0f} s", file=sys.stderr, flush=True)
            results.append((shape, measure(spark, lake, shape, committed, args.seconds, args.warm_up,
                                           args.trigger, work)))
    finally:
        emulator.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nbronze commit -> a live micro-batch's rows on the driver, by source shape; trigger {args.trigger}, "
          f"the emulator at live pace on the same 2 cores; ms at p50 unless said")
    print(f"\n  {'source':<34} {'batches':>7} {'commit->rows p50 s':>18} {'p95 s':>6} {'trigger':>8} "
          f"{'latestOffset':>12} {'getBatch':>8} {'addBatch':>8} {'body':>6} {'outside body':>12}")
    base = results[0][1]["latency_p50"]
    for shape, r in results:
        print(f"  {shape.name:<34} {r['batches']:>7} {r['latency_p50']:>18.2f} {r['latency_p95']:>6.2f} "
              f"{r['trigger']:>8.0f} {r['latestOffset']:>12.0f} {r['getBatch']:>8.0f} {r['addBatch']:>8.0f} "
              f"{r['body']:>6.0f} {r['addBatch'] - r['body']:>12.0f}   x{r['latency_p50'] / base:.1f}")


if __name__ == "__main__":
    main()
