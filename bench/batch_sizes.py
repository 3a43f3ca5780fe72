"""Validate's executor route: throughput and driver peak memory per micro-batch size, local and on a cluster.

    .venv/bin/python bench/batch_sizes.py [--sizes 100000,1000000,10000000] [--where local,cluster]

For each size, a bronze lakehouse whose broker_metrics holds that many rows (copies of one emulator run under
distinct run ids, so every row is unique) is validated as ONE micro-batch by `isrwatch submit validate` with
`--driver-max-rows 50000`, the route a catch-up batch takes: broker_metrics's context and expectations in the
executors' Python workers, Great Expectations and silver writes as Spark jobs, the few runs rows on the driver.
Printed per size:
- rows/s: the batch's rows over its duration as validate records it in silver.dq_runs;
- the pass-through floor: the same Delta table copied to another by a streaming query with nothing else
  done (same master, same session settings), and validate / floor;
- peak RSS (VmHWM) of the driver's JVM and of its Python process. With `local[2]` the driver's JVM also
  runs the tasks (and gets the executor's memory, 6 GB); on the standalone cluster (one worker, 2 cores, a
  4 GB executor) they run in the worker's executor and the driver has 2 GB (`--driver-memory`);
- the batch's steps as the job itself reports them (jobs/step_clock.py), the largest first, its first step
  (source, de-duplication, cache) beside the de-duplication floor: validate's own source over the same bronze,
  cached and counted, nothing else (bench/floor_queries.py).
Then, unless --no-alerts, the alerts job over that silver as one micro-batch on each of its routes: collected
to the driver, and grouped by cluster on the executors (`--driver-max-rows 0`): seconds, transitions, driver
peak RSS. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable

from foundation.delta_checksum import write_with_checksum
from jobs.step_clock import parse_steps
from jobs.validate_routes import SOURCE_STEP
from schemas.bronze import BROKER_METRICS, RUNS
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE
from schemas.silver import DQ_RUNS, SILVER_TABLES
from testing.spark_standalone import StandaloneCluster

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "conf" / "scenarios" / "default.yaml"
RULES = ROOT / "conf" / "alerts.yaml"
CHUNK_ROWS = 1_000_000  # rows per bronze commit: large commits, as a catch-up after an outage reads them
DRIVER_MEMORY = "2g"
EXECUTOR_MEMORY = "4g"
LOGS = Path(tempfile.gettempdir()) / "isrwatch-bench-batch-sizes-logs"   # a failed run's log, kept
# Below the smallest batch's broker_metrics rows, above its runs rows: broker_metrics takes the executor route at
# every size, runs the driver route, as in a catch-up (jobs/validate_routes.py `driver_share`).
DRIVER_MAX_ROWS = 50_000
LOCAL_DRIVER_MEMORY = "6g"  # with local[2] the driver's JVM is the executor too: it gets the executor's share


def seed(base: Path) -> tuple[pa.Table, pa.Table]:
    lake = base / "seed"
    subprocess.run([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(SCENARIO), "--lakehouse",
                    str(lake), "--quiet"], cwd=ROOT, check=True)
    return (DeltaTable(BROKER_METRICS.path(str(lake))).to_pyarrow_table(),
            DeltaTable(RUNS.path(str(lake))).to_pyarrow_table())


def _renamed(table: pa.Table, copy: int) -> pa.Table:
    index = table.schema.get_field_index("run_id")
    return table.set_column(index, "run_id",
                            pc.binary_join_element_wise(table["run_id"], pa.scalar(f"-copy{copy}"), ""))


def bronze(lake: Path, rows: int, metrics: pa.Table, runs: pa.Table) -> int:
    """broker_metrics with `rows` rows (whole copies, in commits of about CHUNK_ROWS), and the copies' runs."""
    copies = max(1, round(rows / metrics.num_rows))
    per_commit = max(1, CHUNK_ROWS // metrics.num_rows)
    for first in range(0, copies, per_commit):
        batch = range(first, min(copies, first + per_commit))
        write_with_checksum(BROKER_METRICS.path(str(lake)),
                            pa.concat_tables([_renamed(metrics, i) for i in batch]).cast(BROKER_METRICS.landing_schema),
                            mode="append")
        write_with_checksum(RUNS.path(str(lake)),
                            pa.concat_tables([_renamed(runs, i) for i in batch]).cast(RUNS.landing_schema),
                            mode="append")
    return copies * metrics.num_rows


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def _is_python_driver(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return Path(argv[0].decode()).name.startswith("python") and b"pyspark.daemon" not in argv


def _peak_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


@dataclass
class PeakRss:
    """Samples the peak RSS of the spark-submit JVM (the driver's JVM) and of the Python driver it starts."""

    submit_pid: int
    jvm_kib: int = 0
    python_kib: int = 0

    def __post_init__(self) -> None:
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            for jvm in _children(self.submit_pid):
                self.jvm_kib = max(self.jvm_kib, _peak_kib(jvm) or 0)
                # The Python driver only: not Spark's Python worker daemon (local mode), nor a child the JVM spawns
                # for a shell command, which shares the JVM's memory until it execs (its VmHWM reads as the JVM's).
                for python in (c for c in _children(jvm) if _is_python_driver(c)):
                    self.python_kib = max(self.python_kib, _peak_kib(python) or 0)
            time.sleep(0.2)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def run_submit(cmd: list[str], log: Path) -> tuple[int, PeakRss]:
    """An `isrwatch submit` command with its output in `log`: its exit code and the driver's peak RSS."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                                stdout=out, stderr=subprocess.STDOUT)
        rss = PeakRss(proc.pid)
        proc.wait()
        rss.stop()
    return proc.returncode, rss


def keep(log: Path) -> Path:
    """A failed run's log, copied out of the bench's folder (removed at the end)."""
    kept = LOGS / log.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(log, kept)
    return kept


def keep_executor_logs(cluster: StandaloneCluster | None, where: str, rows: int) -> str:
    """A failed cluster run's executor logs (their own stderr: why an executor died), kept beside the job's."""
    if cluster is None:
        return ""
    kept = []
    for stderr in sorted(cluster.folder.glob("work-*/app-*/*/stderr")):
        target = LOGS / f"{where}-{rows}-{stderr.parent.parent.name}-executor-{stderr.parent.name}.stderr"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(stderr, target)
        kept.append(target.name)
    return f"; executor logs kept in {LOGS}: {', '.join(kept)}" if kept else ""


def _driver_memory(master: str, on_a_cluster: str = DRIVER_MEMORY) -> str:
    """With local[2] the driver's JVM is the executor too: it gets the executor's share."""
    return LOCAL_DRIVER_MEMORY if master.startswith("local") else on_a_cluster


class JobFailed(RuntimeError):
    """A job's run did not finish (its log is kept under LOGS)."""


@dataclass
class ValidateRun:
    rows: int
    seconds: float
    rss: PeakRss
    steps: dict[str, float]  # the job's own breakdown of the batch (jobs/step_clock.py)


def run_validate(lake: Path, master: str, executor_memory: str = EXECUTOR_MEMORY, partitions: int = 4,
                 driver_memory: str = DRIVER_MEMORY) -> ValidateRun:
    """`isrwatch submit validate` over `lake` as one micro-batch on the executor route."""
    cmd = [sys.executable, "-m", "isrwatch.cli", "submit", "validate", "--master", master,
           "--driver-memory", _driver_memory(master, driver_memory), "--executor-memory", executor_memory,
           "--conf", f"spark.sql.shuffle.partitions={partitions}", "--",
           "--lakehouse", str(lake), "--tables", "broker_metrics,runs", "--trigger", "available-now",
           "--driver-max-rows", str(DRIVER_MAX_ROWS), "--max-files-per-trigger", "100000", "--wait-for-tables", "0"]
    log = lake.parent / f"{lake.name}-validate.log"
    returncode, rss = run_submit(cmd, log)
    if returncode != 0:
        first = next((line.strip() for line in log.read_text().splitlines()
                      if "Error" in line or "Exception" in line), "no error line")
        raise JobFailed(f"exit {returncode}: {first[:200]} (log: {keep(log)})")
    dq = DeltaTable(DQ_RUNS.path(str(lake))).to_pyarrow_table().to_pylist()
    metrics = [d for d in dq if d["table_name"] == "broker_metrics"]
    if len(metrics) != 1:
        raise RuntimeError(f"expected one micro-batch, validate made {len(metrics)}")
    return ValidateRun(metrics[0]["rows_in"], metrics[0]["batch_duration_ms"] / 1000, rss,
                       parse_steps(log.read_text()))


def print_steps(steps: dict[str, float], dedup_floor: float) -> None:
    """The batch's steps, the largest first, the de-duplication beside its floor."""
    for step, seconds in sorted(steps.items(), key=lambda kv: -kv[1]):
        beside = f"   (floor: validate's source alone, {dedup_floor:.1f} s)" if step == SOURCE_STEP else ""
        print(f"  {'':>11}   {seconds:>7.1f} s  {step}{beside}", flush=True)


# The default rules that read broker_metrics alone: the bench's silver holds no other table.
BROKER_METRICS_RULES = ("OfflinePartitions", "ActiveControllerCount", "UncleanLeaderElection",
                        "ProduceNotEnoughReplicas", "BrokerNotReporting")
ALERTS_DONE = re.compile(r"alerts: (\d+) transitions, \d+ alerts firing; (\d+) of (\d+) micro-batches evaluated on "
                         r"the executors, in ([\d.]+) s")


@dataclass
class AlertsRun:
    transitions: int
    seconds: float
    on_executors: bool
    rss: PeakRss


def run_alerts(lake: Path, master: str, driver_max_rows: int, partitions: int = 4) -> AlertsRun:
    """`isrwatch submit alerts` over the silver validate wrote, as one micro-batch, on the driver route
    (`driver_max_rows` above the batch) or the executor route (0)."""
    raw = yaml.safe_load(RULES.read_text())
    raw["rules"] = [r for r in raw["rules"] if r["name"] in BROKER_METRICS_RULES]
    kept = {r["name"] for r in raw["rules"]}   # an inhibitor left out inhibits nothing
    for r in raw["rules"]:
        r["inhibited_by"] = [i for i in r.get("inhibited_by", []) if i["rule"] in kept]
    raw["receivers"] = []
    rules = lake.parent / f"{lake.name}-rules.yaml"
    rules.write_text(yaml.safe_dump(raw))
    shutil.rmtree(lake / "_checkpoints" / "alerts", ignore_errors=True)
    for table in (ALERT_EVENTS, ALERTS, ALERTS_STATE):
        shutil.rmtree(table.path(str(lake)), ignore_errors=True)
    cmd = [sys.executable, "-m", "isrwatch.cli", "submit", "alerts", "--master", master,
           "--driver-memory", _driver_memory(master), "--executor-memory", EXECUTOR_MEMORY,
           "--conf", f"spark.sql.shuffle.partitions={partitions}", "--",
           "--lakehouse", str(lake), "--rules", str(rules), "--trigger", "available-now", "--no-webhooks",
           "--max-files-per-trigger", "100000", "--driver-max-rows", str(driver_max_rows)]
    log = lake.parent / f"{lake.name}-alerts-{driver_max_rows}.log"
    returncode, rss = run_submit(cmd, log)
    done = ALERTS_DONE.search(log.read_text())
    if returncode != 0 or done is None:
        raise JobFailed(f"alerts exit {returncode} (log: {keep(log)})")
    if done.group(3) != "1":
        raise RuntimeError(f"expected one alerts micro-batch, got {done.group(3)}")
    return AlertsRun(int(done.group(1)), float(done.group(4)), done.group(2) == "1", rss)


def floor_seconds(kind: str, lake: Path, master: str, partitions: int = 4, driver_memory: str = DRIVER_MEMORY,
                  *options: str) -> float:
    """A floor (bench/floor_queries.py's KIND) over the same bronze, in a fresh JVM: seconds."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "floor_queries.py"), kind, "--lake", str(lake),
                           "--master", master, "--partitions", str(partitions),
                           "--driver-memory", _driver_memory(master, driver_memory), *options],
                          cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    if done.returncode != 0:
        raise RuntimeError(f"{kind} floor failed: {done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def dedup_designs(lake: Path, master: str, rows: int, partitions: int, driver_memory: str) -> None:
    """Validate's de-duplication against the other designs, each over the same bronze as one micro-batch cached
    and counted (bench/floor_queries.py). Run after validate: silver then holds this batch, ingested within the
    window, so the per-batch design is timed twice: with nothing in the window (the first batch of a catch-up)
    and against the whole batch (the same rows delivered again)."""
    designs = [("no de-duplication", "source"), ("RocksDB state (validate's)", "dedup"),
               ("in-memory state", "dedup-in-memory"),
               ("per batch + silver, window empty", "dedup-per-batch", "--dedup-window", "0 seconds"),
               ("per batch + silver holding the batch", "dedup-per-batch")]
    cells = []
    for label, kind, *options in designs:
        try:
            seconds = floor_seconds(kind, lake, master, partitions, driver_memory, *options)
            cells.append(f"{label} {seconds:.1f} s ({rows / seconds:,.0f} rows/s)")
        except RuntimeError as e:
            cells.append(f"{label} failed: {str(e).strip().splitlines()[-1][:200]}")
    print(f"  {'':>11}   de-duplication designs, source cached and counted: " + " | ".join(cells), flush=True)


def alerts_side_by_side(lake: Path, master: str, rows: int, partitions: int) -> None:
    """The alerts job over the validated silver as one micro-batch, on each route: seconds and driver RSS."""
    for name, limit in (("driver", rows + 1), ("executors", 0)):
        try:
            run = run_alerts(lake, master, limit, partitions)
        except JobFailed as e:
            print(f"  {'':>11} alerts on the {name}: failed: {e}", flush=True)
            continue
        assert run.on_executors == (name == "executors")
        print(f"  {'':>11} alerts on the {name:<9}: {run.seconds:>6.1f} s, {rows / run.seconds:>9,.0f} rows/s, "
              f"{run.transitions:,} transitions, driver JVM {run.rss.jvm_kib / 1024:,.0f} MiB, "
              f"driver Python {run.rss.python_kib / 1024:,.0f} MiB", flush=True)


def kill_a_worker(base: Path, bronze_lake: Path, rows: int) -> None:
    """Two workers; one is SIGKILLed (with its executor) while validate's executor-route batch runs. Spark runs
    the lost tasks again on the other worker: every bronze row reaches silver once."""
    cluster = StandaloneCluster(base / "cluster-2", workers=2, cores=1, memory="3g").start()
    lake = base / "kill-worker"
    shutil.copytree(bronze_lake, lake)
    try:
        killer = threading.Timer(30.0, lambda: cluster.kill_worker(1))
        killer.start()
        run = run_validate(lake, cluster.master_url, executor_memory="2g")
        got, seconds = run.rows, run.seconds
        killer.join()
        key = list(BROKER_METRICS.natural_key)
        silver = DeltaTable(SILVER_TABLES["broker_metrics"].path(str(lake))).to_pyarrow_table(columns=key)
        keys = silver.group_by(key).aggregate([]).num_rows
        print(f"\nworker killed 30 s into a {got:,}-row batch on 2 workers: the batch took {seconds:.1f} s; "
              f"silver holds {silver.num_rows:,} rows ({keys:,} distinct keys) of {rows:,} bronze rows", flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(lake, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="100000,1000000,10000000", help="micro-batch sizes (broker_metrics rows)")
    p.add_argument("--where", default="local,cluster", help="local ('local[2]'), cluster (standalone, 1 worker)")
    p.add_argument("--shuffle-partitions", type=int, default=4,
                   help="spark.sql.shuffle.partitions of every run (validate's de-duplication state keeps it)")
    p.add_argument("--driver-memory", default=DRIVER_MEMORY,
                   help="the driver's memory on the cluster (local[2] gets the executor's share, 6g)")
    p.add_argument("--no-alerts", dest="alerts", action="store_false",
                   help="skip the alerts job on each route after validate")
    p.add_argument("--dedup-designs", action="store_true",
                   help="then time validate's de-duplication beside the other designs (bench/floor_queries.py)")
    p.add_argument("--kill-worker-rows", type=int, default=1_000_000,
                   help="then kill one of two workers during a batch of this many rows (0: skip)")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="isrwatch-bench-sizes-"))
    try:
        metrics, runs = seed(base)
        print(f"seed: {metrics.num_rows:,} broker_metrics rows per copy of {SCENARIO.name}", flush=True)
        lakes = {}
        for size in (int(s) for s in args.sizes.split(",")):
            lake = base / f"bronze-{size}"
            lakes[bronze(lake, size, metrics, runs)] = lake
        for where in filter(None, args.where.split(",")):
            cluster = (StandaloneCluster(base / "cluster", workers=1, cores=2, memory="5g") if where == "cluster"
                       else None)
            master = cluster.start().master_url if cluster is not None else "local[2]"
            try:
                print(f"\n{where} ({master}): validate, one micro-batch on the executor route | pass-through floor")
                print(f"  {'rows':>11} {'validate s':>10} {'rows/s':>9} {'floor s':>8} {'floor rows/s':>12} "
                      f"{'validate/floor':>14} {'driver JVM peak MiB':>19} {'driver Python peak MiB':>22}",
                      flush=True)
                for rows, bronze_lake in sorted(lakes.items()):
                    lake = base / f"{where}-{rows}"
                    shutil.copytree(bronze_lake, lake)
                    try:
                        run = run_validate(lake, master, partitions=args.shuffle_partitions,
                                           driver_memory=args.driver_memory)
                    except JobFailed as e:
                        print(f"  {rows:>11,} failed: {e}{keep_executor_logs(cluster, where, rows)}", flush=True)
                        shutil.rmtree(lake)
                        continue
                    got, seconds, rss = run.rows, run.seconds, run.rss
                    floor = floor_seconds("passthrough", lake, master, args.shuffle_partitions, args.driver_memory)
                    print(f"  {got:>11,} {seconds:>10.1f} {got / seconds:>9,.0f} {floor:>8.1f} {got / floor:>12,.0f} "
                          f"{seconds / floor:>13.1f}x {rss.jvm_kib / 1024:>19,.0f} {rss.python_kib / 1024:>22,.0f}",
                          flush=True)
                    print_steps(run.steps, floor_seconds("dedup", lake, master, args.shuffle_partitions,
                                                         args.driver_memory))
                    if args.dedup_designs:
                        dedup_designs(lake, master, got, args.shuffle_partitions, args.driver_memory)
                    if args.alerts:
                        alerts_side_by_side(lake, master, got, args.shuffle_partitions)
                    shutil.rmtree(lake)
            finally:
                if cluster is not None:
                    cluster.stop()
        if args.kill_worker_rows:
            rows = bronze(base / "bronze-kill", args.kill_worker_rows, metrics, runs)
            kill_a_worker(base, base / "bronze-kill", rows)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
