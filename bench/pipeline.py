"""Pipeline benchmark: validate throughput (catch-up) and bronze -> silver delay (live pace).

    .venv/bin/python bench/pipeline.py [--rows 1000000] [--live-seconds 60]

1. Throughput: bronze.broker_metrics holding `--rows` rows (an emulator run, replicated under distinct
   run ids so every row is unique), validated with trigger available-now; rows/s is rows divided by
   the summed micro-batch time (start-up excluded), printed per micro-batch size.
2. Live: the emulator at live pace writes a commit per second while validate runs with its live
   trigger; a poller sees each bronze commit and the silver commit holding the same emulator batch
   and prints the delay's median and p95, with the micro-batch durations.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from schemas.bronze import BROKER_METRICS, RUNS

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "conf" / "scenarios" / "default.yaml"


def _emulate(lake: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(SCENARIO),
                             "--lakehouse", lake, "--quiet", *extra], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(rows: int, files_per_trigger: list[int]) -> None:
    from isrwatch.settings import load_settings
    from isrwatch.spark import build_spark_session
    from jobs.validate import start_validation

    base = tempfile.mkdtemp(prefix="isrwatch-bench-")
    seed_lake = f"{base}/seed"
    assert _emulate(seed_lake).wait() == 0
    metrics = DeltaTable(BROKER_METRICS.path(seed_lake)).to_pyarrow_table()
    runs = DeltaTable(RUNS.path(seed_lake)).to_pyarrow_table()
    copies = max(1, rows // metrics.num_rows)
    lake = f"{base}/lake"
    for i in range(copies):  # one bronze commit per copy, each a distinct run
        def renamed(t: pa.Table, i: int = i) -> pa.Table:
            return t.set_column(0, "run_id", pc.binary_join_element_wise(t["run_id"], pa.scalar(f"-copy{i}"), ""))
        write_deltalake(BROKER_METRICS.path(lake), renamed(metrics).cast(BROKER_METRICS.landing_schema), mode="append")
        write_deltalake(RUNS.path(lake), renamed(runs).cast(RUNS.landing_schema), mode="append")
    total = copies * metrics.num_rows
    spark = build_spark_session("isrwatch-bench", master="local[2]")
    print(f"throughput: {total:,} broker_metrics rows in {copies} bronze commits")
    print(f"  {'files/trigger':>13} {'batches':>8} {'rows/s':>10} {'median batch s':>15} {'p95 batch s':>12}")
    for fpt in files_per_trigger:
        settings = load_settings(overrides={
            "lakehouse": lake, "checkpoints": f"{base}/ckpt-{fpt}", "validate.tables": ["broker_metrics"],
            "validate.trigger": "available-now", "validate.max_files_per_trigger": fpt})
        for sub in ("silver", "quarantine"):
            subprocess.run(["rm", "-rf", f"{lake}/{sub}"], check=True)
        running = start_validation(spark, settings, log=lambda _: None)
        query = running.queries["broker_metrics"]
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
        done = sum(p["numInputRows"] for p in progress)
        print(f"  {fpt:>13} {len(progress):>8} {done / sum(durations):>10,.0f} {statistics.median(durations):>15.2f} "
              f"{_pct(durations, 0.95):>12.2f}")


def live(seconds: int) -> None:
    from isrwatch.settings import load_settings
    from isrwatch.spark import build_spark_session
    from jobs.validate import start_validation

    lake = tempfile.mkdtemp(prefix="isrwatch-bench-live-")
    emulator = _emulate(lake, "--pace", "live", "--duration", f"{seconds}s")
    spark = build_spark_session("isrwatch-bench-live", master="local[2]")
    settings = load_settings(overrides={"lakehouse": lake, "validate.tables": ["broker_metrics", "runs"],
                                        "validate.trigger": "live", "validate.trigger_interval": "0 seconds"})
    bronze_seen: dict[int, float] = {}
    silver_seen: dict[int, float] = {}
    stop = threading.Event()

    def batches_in(path: str, seen: dict[int, float], versions: dict[str, int]) -> None:
        try:
            table = DeltaTable(path)
        except Exception:
            return
        if table.version() == versions.get(path, -1):
            return
        versions[path] = table.version()
        now = time.monotonic()
        actions = pa.table(table.get_add_actions(flatten=True))
        highs = actions.column("max.batch_id").to_pylist() if "max.batch_id" in actions.column_names else []
        for hi in highs:
            if hi is not None:
                for b in range(0, int(hi) + 1):
                    seen.setdefault(b, now)

    def poll() -> None:
        versions: dict[str, int] = {}
        while not stop.is_set():
            batches_in(BROKER_METRICS.path(lake), bronze_seen, versions)
            batches_in(f"{lake}/silver/broker_metrics", silver_seen, versions)
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    running = start_validation(spark, settings, log=lambda _: None)
    emulator.wait()
    time.sleep(10)  # let the last commits through
    query = running.queries["broker_metrics"]
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    for q in running.queries.values():
        q.stop()
    stop.set()
    # Steady state only: emulator batches committed after validate's first silver commit (the first
    # micro-batch pays Spark's planning and code generation once; it is reported apart).
    first_silver = min(silver_seen.values()) if silver_seen else float("inf")
    warm_up = first_silver - min(bronze_seen.values()) if bronze_seen and silver_seen else float("nan")
    delays = [silver_seen[b] - bronze_seen[b] for b in sorted(bronze_seen)
              if b in silver_seen and bronze_seen[b] > first_silver]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    print(f"live pace, {seconds} s of emulator at 1 commit/s, broker_metrics + runs validated:")
    if not delays:
        print("  no emulator batch arrived after validate's first micro-batch: run longer (--live-seconds)")
        return
    print(f"  bronze commit -> rows visible in silver: median {statistics.median(delays):.2f} s, "
          f"p95 {_pct(delays, 0.95):.2f} s over {len(delays)} emulator batches after warm-up")
    print(f"  warm-up: first bronze commit -> first silver commit {warm_up:.1f} s")
    print(f"  micro-batch duration: median {statistics.median(durations):.2f} s, p95 {_pct(durations, 0.95):.2f} s "
          f"({len(durations)} batches)")
    behind = sorted(bronze_seen)[-1] - max(silver_seen) if silver_seen else None
    print(f"  emulator batches not yet in silver at the end: {behind}")


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
        from isrwatch.spark import stop_active_session

        stop_active_session()


if __name__ == "__main__":
    main()
