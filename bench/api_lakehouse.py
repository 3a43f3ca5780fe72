"""The API benchmark's lakehouse: a simulated day of a 30-broker cluster, built once and cached in `--data`.

How it is built (`build()`), each stage skipped when an earlier run already finished it:

1. emulate: `isrwatch emulate --pace fast` of `day_scenario()` for a window of `window_hours` into
   `<data>/_window/` (a staging lakehouse the API never reads);
2. replicate: the window's bronze rows appended `hours / window_hours` times, back to back, to
   `<data>/bronze/`, one commit per emulator batch in the emulator's own order (runs, topic_configs, the
   rest), with everything time- or sequence-based shifted by the copy's start (`_shift()`), so bronze holds
   what one run of `hours` would have written, and validation sees one run with no gaps or duplicates;
3. pipeline: `isrwatch pipeline run --trigger available-now --no-webhooks` (validate, posture, slo,
   alerts) over `<data>`, with `<data>/pipeline.yaml`.

Why a window, copies and a 30 s interval rather than a 24 h emulation at 10 s (measured on this 2-core
machine, shared with other work): the emulator runs this 30-broker, 552-partition cluster at 51-59x real
time, so a day is ~26 min of emulation alone, a 4 h window ~4 min; the pipeline validated ~4-6,000 rows/s,
and a day at a 10 s metric interval is ~13 million bronze rows (~45 min of validate), at 30 s ~5.6 million.
What replication changes, also printed by bench/api.py: faults repeat with the window (each copy has the
same swarm and scripted faults, at the same offsets), and at each copy boundary the cluster returns to its
start-of-window state — leaders back to the preferred replicas (without an election row), every broker's
JMX meters reset (as after a restart: `process_start_ts` is the boundary), and the run's summary JSON in
`bronze.runs` describes the emulated window. Offsets and epochs are shifted so they keep increasing
across boundaries. The pipeline itself is the real one, unchanged.

Scenario (`day_scenario()`): 30 brokers in three zones, 16 topics / 552 partitions mixing RF 1/2/3/5 and
min ISR 1/2/3 (the posture table's rows and its traps), producers at acks 0/1/all (~3,900 records/s), three
consumer groups, and over each window a random swarm (crash, power loss, pause, network partition, slow
follower, controlled shutdown) plus scripted faults (a rolling restart of ten brokers, a zone outage, a
min.insync.replicas change and its revert). Settings that differ from Kafka's defaults, and why:
`replica.fetch.wait.max.ms` 5000 and producers' `linger.ms` 200 make the emulator ~4x faster (idle fetch
long-polls and produce ticks are most of its events) without changing what the tables hold; producers'
`delivery.timeout.ms` 30 s and `retry.backoff.max.ms` 5 s bound the retry storm of a partition below min
ISR: with the defaults (120 s, 1 s) every batch sent to it is rejected ~120 times, and one 4 h window wrote
1.46 million `produce_rejected` rows to bronze.cluster_events (8.8 million a day, two thirds of all rows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from schemas.bronze import (  # noqa: E402
    ACK_LEDGER,
    BRONZE_TABLES,
    CLUSTER_EVENTS,
    CONSUMER_PROGRESS,
    PARTITION_STATE,
    RUNS,
    TOPIC_CONFIGS,
)
from schemas.table import TableDef  # noqa: E402

BROKERS = 30
RACKS = ["az-a", "az-b", "az-c"]
SEED = 30
MANIFEST = "bench-build.json"

# name, partitions, RF, topic config, producer (acks, records/s, record bytes)
TOPICS: list[tuple[str, int, int, dict[str, Any], tuple[str | int, int, int]]] = [
    ("orders", 48, 3, {"min.insync.replicas": 2}, ("all", 400, 512)),
    ("payments", 24, 3, {"min.insync.replicas": 2}, ("all", 150, 256)),
    ("inventory", 24, 3, {"min.insync.replicas": 2}, ("all", 100, 256)),
    ("ledger", 12, 5, {"min.insync.replicas": 3}, ("all", 50, 256)),
    ("billing", 12, 3, {"min.insync.replicas": 3}, ("all", 40, 256)),          # min ISR = RF: no headroom
    ("audit", 12, 2, {"min.insync.replicas": 2}, ("all", 30, 256)),            # the RF=2 trap
    ("sessions", 32, 3, {"min.insync.replicas": 2}, ("all", 200, 200)),
    ("cdc", 32, 3, {"min.insync.replicas": 2}, ("all", 200, 400)),
    ("notifications", 16, 3, {"min.insync.replicas": 1}, (1, 100, 300)),       # min ISR 1
    ("clicks", 96, 3, {"min.insync.replicas": 2}, (1, 800, 200)),
    ("telemetry", 96, 3, {"min.insync.replicas": 1, "unclean.leader.election.enable": True}, (1, 800, 200)),
    ("logs", 64, 2, {"min.insync.replicas": 1}, (1, 500, 300)),                # RF 2, min ISR 1
    ("metrics", 48, 2, {"min.insync.replicas": 1}, (0, 400, 100)),
    ("search-index", 24, 1, {"min.insync.replicas": 1}, (1, 50, 1000)),        # no replication
    ("legacy", 6, 1, {"min.insync.replicas": 2}, ("all", 10, 256)),            # min ISR above RF: capped
    ("one-zone", 6, 3, {"min.insync.replicas": 2}, ("all", 20, 256)),          # every replica in az-a
]


def day_scenario(window_s: int, *, metric_interval_s: int = 30, swarm_faults_per_hour: float = 3.0,
                 seed: int = SEED) -> dict[str, Any]:
    """The scenario as a YAML-ready dict, `window_s` simulated seconds long. Faults are placed at fractions
    of the window and healed before its end, so the window starts and ends with a healthy cluster."""
    if window_s < 600:
        raise ValueError(f"window_s: at least 600 s, got {window_s}")
    if metric_interval_s < 1:
        raise ValueError(f"metric_interval_s: at least 1, got {metric_interval_s}")
    topics, producers = [], []
    for name, parts, rf, config, (acks, rate, size) in TOPICS:
        topic: dict[str, Any] = {"name": name, "partitions": parts, "replication.factor": rf, "config": config}
        if name == "one-zone":  # brokers 1, 4, 7, ... are az-a
            az_a = list(range(1, BROKERS + 1, len(RACKS)))
            topic["assignment"] = [[az_a[(p + i) % len(az_a)] for i in range(rf)] for p in range(parts)]
        topics.append(topic)
        producers.append({"name": f"{name}-producer", "topic": name, "acks": acks, "rate": rate,
                          "record.bytes": size, "linger.ms": 200, "delivery.timeout.ms": "30s",
                          "retry.backoff.max.ms": 5000})

    def at(fraction: float) -> str:
        return f"{int(window_s * fraction)}s"

    faults: list[dict[str, Any]] = [
        {"at": at(0.15), "kind": "rolling_restart", "brokers": list(range(1, 11)), "interval": "60s",
         "downtime": "20s"},
        {"at": at(0.40), "kind": "config_change", "topic": "audit", "set": {"min.insync.replicas": 1}},
        {"at": at(0.55), "kind": "rack_outage", "rack": "az-b", "duration": "3m"},
        {"at": at(0.60), "kind": "config_change", "topic": "audit", "set": {"min.insync.replicas": 2}},
    ]
    return {
        "name": "api-bench-day",
        "description": "bench/api.py: a 30-broker cluster; a window of its day (bench/api_lakehouse.py)",
        "seed": seed,
        "duration": f"{window_s}s",
        "metric_interval": f"{metric_interval_s}s",
        "partition_state_interval": f"{metric_interval_s}s",
        "flush_every_intervals": max(1, 600 // metric_interval_s),  # a bronze commit per 10 simulated minutes
        "start_time": "2026-01-01T00:00:00Z",
        "cluster": {"brokers": BROKERS, "racks": RACKS,
                    "config": {"replica.lag.time.max.ms": 30000, "replica.fetch.wait.max.ms": 5000}},
        "topics": topics,
        "workload": {"producers": producers,
                     "consumers": [{"group": "billing", "topic": "orders"}, {"group": "fraud", "topic": "payments"},
                                   {"group": "warehouse", "topic": "inventory"}]},
        "faults": faults,
        "swarm": {"faults": max(1, round(swarm_faults_per_hour * window_s / 3600)), "from": "60s",
                  "heal_by": f"{window_s - 300}s", "max_duration": "90s"},
    }


# -- replication ---------------------------------------------------------------------------------------
def _read(lake: str | Path, td: TableDef) -> pa.Table:
    return DeltaTable(td.path(str(lake))).to_pyarrow_table().cast(td.arrow_schema)


def _partition_key(t: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(t["topic"], pc.cast(t["partition"], pa.string()), "/").combine_chunks()


def _per_row(keys: pa.Array, table_keys: pa.Array, values: pa.Array) -> pa.Array:
    """values[i] for the i with table_keys[i] == key, per row (0 where the key is absent)."""
    idx = pc.index_in(keys, value_set=table_keys)
    return pc.fill_null(pc.take(values, idx), 0)


def _add_to_list(col: pa.ChunkedArray, per_row: pa.Array) -> pa.Array:
    arr = col.combine_chunks()
    flat = pc.list_flatten(arr)
    parents = pc.list_parent_indices(arr)
    shifted = pc.add(flat, pc.cast(pc.take(per_row, parents), flat.type))
    return pa.ListArray.from_arrays(pc.subtract(arr.offsets, arr.offsets[0]), shifted, type=arr.type)


class _Shifts:
    """What copy k adds, derived from the emulated window: k x window to every time, k x batches to batch
    ids, k x (last seq + 1) to event sequence numbers, k x (largest epoch + 1) to epochs, and per partition
    k x (largest offset + 1) to
    high watermarks, replica LEOs and consumer positions (log start offsets stay: 7-day retention deletes nothing
    within a day)."""

    def __init__(self, window: dict[str, pa.Table], window_s: int) -> None:
        runs = window["runs"]
        self.window = timedelta(seconds=window_s)
        self.batches = pc.max(runs["batch_id"]).as_py() + 1
        self.run_start = pc.min(runs["start_ts"])
        seqs = window["cluster_events"]["seq"]
        self.seqs = (pc.max(seqs).as_py() or 0) + 1
        ps = window["partition_state"]
        self.epochs = max(pc.max(ps["leader_epoch"]).as_py(), pc.max(ps["partition_epoch"]).as_py(),
                          pc.max(window["cluster_events"]["leader_epoch"]).as_py() or 0) + 1
        keys = _partition_key(ps)
        leo_max = pa.table({"k": pc.list_parent_indices(ps["replica_leos"].combine_chunks()),
                            "v": pc.list_flatten(ps["replica_leos"].combine_chunks())}
                           ).group_by("k").aggregate([("v", "max")]).sort_by("k")
        top = pc.max_element_wise(ps["high_watermark"].combine_chunks(), leo_max["v_max"])
        per_key = pa.table({"key": keys, "top": top}).group_by("key").aggregate([("top", "max")])
        self.offset_keys = per_key["key"].combine_chunks()
        self.offsets = pc.add(per_key["top_max"].combine_chunks(), 1)

    def time(self, col: pa.ChunkedArray, k: int) -> pa.ChunkedArray:
        return pc.add(col, pa.scalar(self.window * k, pa.duration("us")))

    def offsets_for(self, t: pa.Table, k: int) -> pa.Array:
        return pc.multiply(_per_row(_partition_key(t), self.offset_keys, self.offsets), k)


def _shift(td: TableDef, t: pa.Table, s: _Shifts, k: int, last_copy: bool) -> pa.Table:
    """Copy k of a window table (k = 0 is the window itself)."""
    if td is TOPIC_CONFIGS and k > 0:  # topics are created once; changes inside the window repeat
        t = t.filter(pc.not_equal(t["ts"], s.run_start))
    if td is RUNS and not last_copy:
        t = t.set_column(t.schema.get_field_index("final"), "final", pa.array([False] * t.num_rows))
    if k == 0 or t.num_rows == 0:
        return t.cast(td.arrow_schema)
    cols = {n: t[n] for n in t.column_names}
    cols["batch_id"] = pc.add(t["batch_id"], s.batches * k)
    for name in ("ts", "end_ts", "process_start_ts"):
        if name in cols:
            cols[name] = s.time(t[name], k)
    if td is CLUSTER_EVENTS:
        cols["seq"] = pc.add(t["seq"], s.seqs * k)
        cols["leader_epoch"] = pc.add(t["leader_epoch"], s.epochs * k)
    if td is ACK_LEDGER:
        cols["lost_by_event_seq"] = pc.add(t["lost_by_event_seq"], s.seqs * k)
    if td is PARTITION_STATE:
        off = s.offsets_for(t, k)
        for name in ("leader_epoch", "partition_epoch"):
            cols[name] = pc.add(t[name], s.epochs * k)
        hw = t["high_watermark"]  # an offline partition keeps -1 (validate checks HW is -1 when offline)
        cols["high_watermark"] = pc.if_else(pc.less(hw, 0), hw, pc.add(hw, off))
        cols["replica_leos"] = _add_to_list(t["replica_leos"], off)
    if td is CONSUMER_PROGRESS:
        off = s.offsets_for(t, k)
        cols["position"] = pc.add(t["position"], off)
        cols["high_watermark"] = pc.add(t["high_watermark"], off)
    return pa.table(cols).cast(td.arrow_schema)


def replicate(window_lake: Path, lake: Path, copies: int, window_s: int, log: Callable[[str], None]) -> None:
    from foundation.bronze_sink import DeltaSink

    window = {td.name: _read(window_lake, td) for td in BRONZE_TABLES}
    shifts = _Shifts(window, window_s)
    run_ids = pc.unique(window["runs"]["run_id"]).to_pylist()
    if len(run_ids) != 1:
        raise ValueError(f"{window_lake}: expected one emulator run, found {run_ids}")
    sink = DeltaSink(str(lake), run_ids[0])
    by_batch = {name: {b: t.filter(pc.equal(t["batch_id"], b)) for b in range(shifts.batches)}
                for name, t in window.items()}
    for k in range(copies):
        began = time.monotonic()
        for b in range(shifts.batches):
            tables = {td: _shift(td, by_batch[td.name][b], shifts, k, k == copies - 1) for td in BRONZE_TABLES}
            sink.write_batch(b + shifts.batches * k, {td: t for td, t in tables.items()
                                                      if t.num_rows or td is RUNS})
        log(f"  copy {k + 1}/{copies}: simulated hours {k * window_s / 3600:g}-{(k + 1) * window_s / 3600:g}, "
            f"{shifts.batches} bronze commits per table ({time.monotonic() - began:.0f} s)")


# -- the whole build ------------------------------------------------------------------------------------
def _params(hours: int, window_hours: int, metric_interval_s: int) -> dict[str, Any]:
    return {"hours": hours, "window_hours": window_hours, "metric_interval_s": metric_interval_s, "seed": SEED,
            "brokers": BROKERS, "format": 1}


def _safe_to_clear(data: Path) -> bool:
    return not data.exists() or not any(data.iterdir()) or (data / MANIFEST).exists() \
        or (data / "scenario.yaml").exists()


def build(data: Path, *, hours: int = 24, window_hours: int = 4, metric_interval_s: int = 30,
          rebuild: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build (or reuse) the lakehouse at `data`; returns its manifest (parameters, stage timings, inventory)."""
    if hours < 1 or window_hours < 1 or hours % window_hours:
        raise ValueError(f"hours: a positive multiple of window_hours ({window_hours}), got {hours}")
    params = _params(hours, window_hours, metric_interval_s)
    manifest_path = data / MANIFEST
    manifest: dict[str, Any] = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if manifest.get("params") != params or rebuild:
        if not _safe_to_clear(data):
            raise SystemExit(f"--data {data}: not empty and not a bench lakehouse (no {MANIFEST}); "
                             "refusing to delete it")
        if data.exists():
            shutil.rmtree(data)
        manifest = {"params": params, "stages": {}}
    if manifest.get("complete"):
        log(f"lakehouse: reusing {data} (built in {manifest['build_s'] / 60:.1f} min; --rebuild to build again)")
        return manifest
    data.mkdir(parents=True, exist_ok=True)
    stages: dict[str, float] = manifest["stages"]

    def save() -> None:
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")

    window_s = window_hours * 3600
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    isrwatch = str(Path(sys.executable).parent / "isrwatch")
    if "emulate" not in stages:
        scenario = data / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(day_scenario(window_s, metric_interval_s=metric_interval_s),
                                           sort_keys=False))
        window_lake = data / "_window"
        shutil.rmtree(window_lake, ignore_errors=True)
        log(f"lakehouse: emulating a {window_hours} h window of the 30-broker cluster ({scenario}) ...")
        began = time.monotonic()
        run = subprocess.run(["nice", "-n", "10", isrwatch, "emulate", "--scenario", str(scenario),
                              "--lakehouse", str(window_lake), "--pace", "fast", "--quiet",
                              "--summary-json", str(data / "window-summary.json")],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"emulator failed (exit {run.returncode}): {run.stderr.strip()[-800:]}")
        stages["emulate"] = round(time.monotonic() - began, 1)
        (data / "window-summary.txt").write_text(run.stdout)
        save()
        log(f"  done in {stages['emulate'] / 60:.1f} min; {run.stdout.strip().splitlines()[-1]}")
    if "replicate" not in stages:
        for layer in ("bronze", "silver", "quarantine", "gold", "_checkpoints"):
            shutil.rmtree(data / layer, ignore_errors=True)
        copies = hours // window_hours
        log(f"lakehouse: replicating the window {copies}x into {data / 'bronze'} ...")
        began = time.monotonic()
        replicate(data / "_window", data, copies, window_s, log)
        stages["replicate"] = round(time.monotonic() - began, 1)
        save()
    if "pipeline" not in stages:
        # conf/pipeline.yaml with the bench's changes, every section present: load_settings drops a
        # command-line override (`--trigger`, `--no-webhooks`) whose section the file lacks.
        settings = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
        settings["lakehouse"] = str(data)
        settings["checkpoints"] = None
        settings["spark"] = {**settings.get("spark", {}), "spark.driver.memory": "4g"}
        for job in ("validate", "posture", "slo", "alerts"):
            settings[job]["trigger"] = "available-now"
        # a validate micro-batch per emulated window (its bronze commits)
        settings["validate"]["max_files_per_trigger"] = window_s // 600 + 1
        settings["alerts"]["webhooks"] = False
        # The alerts job collects each micro-batch to the driver (toPandas): a day in one batch is more than
        # spark.driver.maxResultSize (1 GiB); one silver file per table (one emulated window) is ~200 MB.
        settings["alerts"]["max_files_per_trigger"] = 1
        config = data / "pipeline.yaml"
        config.write_text(yaml.safe_dump(settings, sort_keys=False))
        log(f"lakehouse: isrwatch pipeline run --trigger available-now (validate, posture, slo, alerts) "
            f"over {data} ...")
        began = time.monotonic()
        stages["pipeline"] = _pipeline(isrwatch, config, data, env, log, began)
        save()
    manifest["inventory"] = inventory(data)
    manifest["build_s"] = round(sum(stages.values()), 1)
    manifest["complete"] = True
    save()
    log(f"lakehouse: built in {manifest['build_s'] / 60:.1f} min (emulate {stages['emulate'] / 60:.1f}, "
        f"replicate {stages['replicate'] / 60:.1f}, pipeline {stages['pipeline'] / 60:.1f})")
    return manifest


def _pipeline(isrwatch: str, config: Path, data: Path, env: dict[str, str], log: Callable[[str], None],
              began: float) -> float:
    """Run the pipeline to the end, its output in <data>/pipeline.log, a progress line a minute."""
    with open(data / "pipeline.log", "a") as out:
        proc = subprocess.Popen(["nice", "-n", "10", isrwatch, "pipeline", "run", "--config", str(config),
                                 "--trigger", "available-now", "--jobs", "validate,posture,slo,alerts",
                                 "--no-webhooks", "--status-every", "30"],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        next_line = time.monotonic() + 60
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() >= next_line:
                next_line += 60
                log(f"  {(time.monotonic() - began) / 60:.0f} min: {_pipeline_state(data)}")
    if proc.returncode != 0:
        tail = (data / "pipeline.log").read_text().strip().splitlines()[-5:]
        raise SystemExit(f"pipeline failed (exit {proc.returncode}), see {data / 'pipeline.log'}:\n"
                         + "\n".join(tail))
    return round(time.monotonic() - began, 1)


def _pipeline_state(data: Path) -> str:
    """How far the pipeline is, from the tables it has written so far."""
    try:
        dq = DeltaTable(str(data / "silver" / "dq_runs")).to_pyarrow_table(columns=["rows_in"])
        validated = sum(dq["rows_in"].to_pylist())
    except TableNotFoundError:
        validated = 0
    bronze = sum((_stats(data / "bronze" / td.name) or (0, 0))[0] for td in BRONZE_TABLES)
    gold = [t for t in ("posture", "slo_status", "alerts") if (data / "gold" / t / "_delta_log").is_dir()]
    return (f"validated {validated:,} of {bronze:,} bronze rows; gold tables so far: {', '.join(gold) or 'none'}")


# -- what the lakehouse holds ---------------------------------------------------------------------------
def _stats(path: Path) -> tuple[int, int] | None:
    try:
        actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    except TableNotFoundError:
        return None
    return sum(actions["num_records"].to_pylist()), actions.num_rows


def inventory(data: Path) -> dict[str, Any]:
    tables: dict[str, dict[str, int]] = {}
    for layer in ("bronze", "silver", "quarantine", "gold"):
        base = data / layer
        for d in sorted(base.iterdir()) if base.is_dir() else []:
            st = _stats(d)
            if st is not None:
                tables[f"{layer}.{d.name}"] = {"rows": st[0], "files": st[1]}
    ps = DeltaTable(str(data / "silver" / "partition_state")).to_pyarrow_table(columns=["ts"])["ts"]
    first, last = pc.min(ps).as_py(), pc.max(ps).as_py()
    cfg = DeltaTable(str(data / "silver" / "topic_configs")).to_pyarrow_table(columns=["topic", "partition"])
    partitions = len(set(zip(cfg["topic"].to_pylist(), cfg["partition"].to_pylist(), strict=True)))
    topics = len(set(cfg["topic"].to_pylist()))
    runs = DeltaTable(str(data / "silver" / "runs")).to_pyarrow_table(columns=["run_id", "brokers"])
    alerts = DeltaTable(str(data / "gold" / "alerts")).to_pyarrow_table(columns=["status", "severity"])
    events = DeltaTable(str(data / "gold" / "alert_events")).to_pyarrow_table(columns=["status"])
    by_status = {str(r["status"]): r["count"] for r in
                 alerts.group_by("status").aggregate([("status", "count")]).rename_columns(
                     ["status", "count"]).to_pylist()}
    transitions = {str(r["status"]): r["count"] for r in
                   events.group_by("status").aggregate([("status", "count")]).rename_columns(
                       ["status", "count"]).to_pylist()}
    return {"first_ts": first.isoformat(), "last_ts": last.isoformat(),
            "simulated_hours": round((last - first).total_seconds() / 3600, 2),
            "clusters": sorted(set(runs["run_id"].to_pylist())), "brokers": max(runs["brokers"].to_pylist()),
            "topics": topics, "partitions": partitions, "tables": tables, "alerts_by_status": by_status,
            "alert_transitions": transitions}
