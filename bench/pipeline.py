"""Pipeline benchmark: validate throughput (catch-up) and bronze -> silver delay (live pace).

    .venv/bin/python bench/pipeline.py [--rows 1000000] [--live-seconds 60]

1. Throughput: bronze.broker_metrics holding `--rows` rows (an emulator run, replicated under distinct
   run ids so every row is unique), validated with trigger available-now; rows/s is rows divided by
   the summed micro-batch time (start-up excluded), printed per micro-batch size.
2. Live: the emulator at live pace writes a commit per second while validate runs with its live
   trigger; a poller sees each bronze commit and the silver commit holding the same emulator batch
   and prints the delay's median and p95, with the micro-batch durations.

Each figure is printed beside the same measurement of a pass-through query (Delta source -> Delta
sink, no de-duplication, no checks, one commit per micro-batch) in the same session: the floor Spark
Structured Streaming and Delta set on this machine, and how far validate is above it.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from bench.delta_log import new_commit_stats
from bench.emulator_process import DEFAULT_SCENARIO, start_emulator
from bench.percentiles import percentile
from foundation.delta_checksum import write_with_checksum
from schemas.bronze import BROKER_METRICS, RUNS

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = DEFAULT_SCENARIO


def _passthrough(spark: Any, source: str, sink: str, checkpoint: str, *, files_per_trigger: int,
                 live: bool) -> Any:
    """The floor: the same Delta source copied to a Delta table, nothing else done per micro-batch."""
    writer = (spark.readStream.format("delta").option("maxFilesPerTrigger", files_per_trigger).load(source)
              .writeStream.format("delta").option("checkpointLocation", checkpoint))
    writer = writer.trigger(processingTime="0 seconds") if live else writer.trigger(availableNow=True)
    return writer.start(sink)


def _batch_figures(query: Any) -> tuple[int, list[float]]:
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    return sum(p["numInputRows"] for p in progress), [p["durationMs"]["triggerExecution"] / 1000 for p in progress]


def throughput(rows: int, files_per_trigger: list[int]) -> None:
    from foundation.settings import load_settings
    from foundation.spark import build_spark_session
    from jobs.validate import start_validation

    base = tempfile.mkdtemp(prefix="isrwatch-bench-")
    seed_lake = f"{base}/seed"
    assert start_emulator(seed_lake).wait() == 0
    metrics = DeltaTable(BROKER_METRICS.path(seed_lake)).to_pyarrow_table()
    runs = DeltaTable(RUNS.path(seed_lake)).to_pyarrow_table()
    copies = max(1, rows // metrics.num_rows)
    lake = f"{base}/lake"
    for i in range(copies):  # one bronze commit per copy, each a distinct run
        def renamed(t: pa.Table, i: int = i) -> pa.Table:
            return t.set_column(0, "run_id", pc.binary_join_element_wise(t["run_id"], pa.scalar(f"-copy{i}"), ""))
        write_with_checksum(BROKER_METRICS.path(lake), renamed(metrics).cast(BROKER_METRICS.landing_schema),
                            mode="append")
        write_with_checksum(RUNS.path(lake), renamed(runs).cast(RUNS.landing_schema), mode="append")
    total = copies * metrics.num_rows
    spark = build_spark_session("isrwatch-bench", master="local[2]")
    print(f"throughput: {total:,} broker_metrics rows in {copies} bronze commits (validate | pass-through floor)")
    print(f"  {'files/trigger':>13} {'batches':>8} {'rows/s':>10} {'floor rows/s':>13} {'floor/validate':>15} "
          f"{'median batch s':>15} {'floor':>6} {'p95 batch s':>12} {'floor':>6}")
    for fpt in files_per_trigger:
        settings = load_settings(overrides={
            "lakehouse": lake, "checkpoints": f"{base}/ckpt-{fpt}", "validate.tables": ["broker_metrics", "runs"],
            "validate.trigger": "available-now", "validate.max_files_per_trigger": fpt})
        for sub in ("silver", "quarantine"):
            subprocess.run(["rm", "-rf", f"{lake}/{sub}"], check=True)
        running = start_validation(spark, settings, log=lambda _: None)
        query = running.query
        query.awaitTermination()
        done, durations = _batch_figures(query)
        floor = _passthrough(spark, BROKER_METRICS.path(lake), f"{base}/copy-{fpt}", f"{base}/ckpt-copy-{fpt}",
                             files_per_trigger=fpt, live=False)
        floor.awaitTermination()
        floor_done, floor_durations = _batch_figures(floor)
        rate, floor_rate = done / sum(durations), floor_done / sum(floor_durations)
        print(f"  {fpt:>13} {len(durations):>8} {rate:>10,.0f} {floor_rate:>13,.0f} {floor_rate / rate:>14.1f}x "
              f"{statistics.median(durations):>15.2f} {statistics.median(floor_durations):>6.2f} "
              f"{percentile(durations, 95):>12.2f} {percentile(floor_durations, 95):>6.2f}")


class CommitPoller:
    """Sees each new version of a table and notes, per emulator batch id it holds, when it first appeared."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths
        self.seen: dict[str, dict[int, float]] = {name: {} for name in paths}
        self.versions: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stop.is_set():
            for name, path in self.paths.items():
                self._look(name, path)
            time.sleep(0.02)

    def _look(self, name: str, path: str) -> None:
        """A directory listing, and only a new commit's own JSON read (its files' `maxValues.batch_id`):
        the poller shares the driver's interpreter with the queries it measures."""
        commits = new_commit_stats(path, self.versions.get(name, -1))
        now = time.monotonic()
        for version, files in commits:
            self.versions[name] = version
            for hi in (f.get("maxValues", {}).get("batch_id") for f in files):
                if hi is not None:
                    for b in range(0, int(hi) + 1):
                        self.seen[name].setdefault(b, now)

    def delays(self, source: str, sink: str) -> tuple[list[float], float]:
        """Steady-state delays (emulator batches committed after the sink's first commit) and the warm-up:
        the first micro-batch pays Spark's planning and code generation once and is reported apart."""
        bronze, silver = self.seen[source], self.seen[sink]
        if not bronze or not silver:
            return [], float("nan")
        first_silver = min(silver.values())
        delays = [silver[b] - bronze[b] for b in sorted(bronze) if b in silver and bronze[b] > first_silver]
        return delays, first_silver - min(bronze.values())


LiveFigures = tuple[list[float], float, list[float]]  # delays, warm-up, micro-batch durations


def _live_run(seconds: int, start: Callable[[Any, str], list[Any]], sink: str) -> LiveFigures:
    """Emulator at live pace for `seconds` into a fresh lakehouse while `start(spark, lake)` runs queries;
    the delays from each bronze commit to the same emulator batch in `sink` (relative to the lakehouse)."""
    from foundation.spark import build_spark_session

    lake = tempfile.mkdtemp(prefix="isrwatch-bench-live-")
    emulator = start_emulator(lake, "--pace", "live", "--duration", f"{seconds}s")
    spark = build_spark_session("isrwatch-bench-live", master="local[2]")
    poller = CommitPoller({"bronze": BROKER_METRICS.path(lake), "sink": f"{lake}/{sink}"})
    queries = start(spark, lake)
    emulator.wait()
    time.sleep(10)  # let the last commits through
    _, durations = _batch_figures(queries[0])
    for q in queries:
        q.stop()
    poller.stop.set()
    delays, warm_up = poller.delays("bronze", "sink")
    return delays, warm_up, durations


def live(seconds: int) -> None:
    from foundation.settings import load_settings
    from jobs.validate import start_validation

    def validate(spark: Any, lake: str) -> list[Any]:
        settings = load_settings(overrides={"lakehouse": lake, "validate.tables": ["broker_metrics", "runs"],
                                            "validate.trigger": "live", "validate.trigger_interval": "0 seconds"})
        running = start_validation(spark, settings, log=lambda _: None)
        return [running.query]

    def passthrough(spark: Any, lake: str) -> list[Any]:
        while not os.path.exists(f"{BROKER_METRICS.path(lake)}/_delta_log"):  # the emulator's first commit
            time.sleep(0.1)
        time.sleep(0.5)
        return [_passthrough(spark, BROKER_METRICS.path(lake), f"{lake}/copy/broker_metrics",
                             f"{lake}/_checkpoints/copy", files_per_trigger=1000, live=True)]

    print(f"live pace, {seconds} s of emulator at 1 commit/s; validate (one query: broker_metrics + runs) | "
          "pass-through floor:")
    figures = {"validate": _live_run(seconds, validate, "silver/broker_metrics"),
               "floor": _live_run(seconds, passthrough, "copy/broker_metrics")}
    print(f"  {'':<10} {'delay median s':>14} {'p95 s':>7} {'n':>4} {'warm-up s':>10} "
          f"{'batch median s':>15} {'p95 s':>7}")
    for name, (delays, warm_up, durations) in figures.items():
        if not delays:
            print(f"  {name:<10} no emulator batch arrived after the first micro-batch: run longer (--live-seconds)")
            continue
        print(f"  {name:<10} {statistics.median(delays):>14.2f} {percentile(delays, 95):>7.2f} {len(delays):>4} "
              f"{warm_up:>10.1f} {statistics.median(durations):>15.2f} {percentile(durations, 95):>7.2f}")
    (v, *_), (f, *_) = figures["validate"], figures["floor"]
    if v and f:
        print(f"  validate / floor: median {statistics.median(v) / statistics.median(f):.1f}x, "
              f"p95 {percentile(v, 95) / percentile(f, 95):.1f}x")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--files-per-trigger", default="1,8", help="micro-batch sizes to compare (bronze files)")
    p.add_argument("--live-seconds", type=int, default=60)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        throughput(args.rows, [int(x) for x in args.files_per_trigger.split(",")])
        live(args.live_seconds)
    finally:
        from foundation.spark import stop_active_session

        stop_active_session()


if __name__ == "__main__":
    main()
