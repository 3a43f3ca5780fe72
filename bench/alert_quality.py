"""Alert truth: how right and how fast isrwatch's alerts are, against the emulator's ground truth.

    .venv/bin/python bench/alert_quality.py [--scenarios conf/scenarios] [--live-seconds 180]

1. Quality: every shipped scenario is emulated into one lakehouse (a cluster each), the pipeline runs
   to the end (validate, posture, slo, alerts; available-now), and the alerts are scored per failure
   class (pipelines/alert_truth.py): writes refused, acknowledged data lost, unclean elections, offline
   partitions, unsafe single-copy acks — recall, precision, and detection delay in simulated time.
2. Latency: the default scenario at live pace while validate and alerts run live, delivering to a
   webhook receiver in this process; for each firing alert, the wall time from the first bronze commit
   holding the sample that breached the rule to the POST's arrival (p50, p95).
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parent.parent
TABLES = ["broker_metrics", "partition_state", "cluster_events", "ack_ledger", "topic_configs", "runs"]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _bronze(lake: str, name: str, columns: list[str]) -> pd.DataFrame:
    return DeltaTable(f"{lake}/bronze/{name}").to_pandas(columns=columns)


def quality(scenarios: list[Path]) -> None:
    from isrwatch.delta_io import read_rows
    from isrwatch.settings import load_settings
    from isrwatch.spark import build_spark_session
    from jobs.alerts import start_alerts
    from jobs.posture import start_posture
    from jobs.slo import start_slo
    from jobs.validate import start_validation
    from pipelines.alert_truth import episodes, score
    from schemas.gold import ALERT_EVENTS

    lake = tempfile.mkdtemp(prefix="isrwatch-alert-quality-")
    began = time.monotonic()
    for path in scenarios:
        run = subprocess.run([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(path),
                              "--lakehouse", lake, "--quiet"], cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"emulator failed on {path.name}: {run.stderr[-500:]}")
    print(f"quality: {len(scenarios)} scenarios emulated in {time.monotonic() - began:.0f} s; running the pipeline")
    spark = build_spark_session("isrwatch-alert-quality", master="local[2]")
    settings = load_settings(overrides={
        "lakehouse": lake, "validate.tables": TABLES, **{f"{j}.trigger": "available-now" for j in
                                                        ("validate", "posture", "slo", "alerts")},
        "alerts.webhooks": False, **{f"{j}.wait_for_tables_seconds": 0 for j in ("validate", "posture", "slo",
                                                                                  "alerts")}})
    began = time.monotonic()
    for q in start_validation(spark, settings, log=lambda _: None).queries.values():
        q.awaitTermination()
    for start in (start_posture, start_slo):
        start(spark, settings, log=lambda _: None)[0].awaitTermination()
    start_alerts(spark, settings, log=lambda _: None).query.awaitTermination()
    print(f"quality: pipeline done in {time.monotonic() - began:.0f} s")
    truth = episodes(
        _bronze(lake, "partition_state", ["run_id", "ts", "topic", "partition", "leader", "isr",
                                          "effective_min_isr", "replicas"]),
        _bronze(lake, "ack_ledger", ["run_id", "ts", "topic", "partition", "acks", "records_acked",
                                     "records_lost"]),
        _bronze(lake, "cluster_events", ["run_id", "ts", "topic", "partition", "event_type", "cause"]))
    events = read_rows(ALERT_EVENTS, lake).to_pandas()
    summary, matches = score(truth, events)
    print(f"  {'class':<20} {'episodes':>8} {'detected':>8} {'recall':>7} {'alerts':>7} {'true':>6} "
          f"{'precision':>9} {'delay p50 s':>11} {'p95 s':>7} {'max s':>7}")
    for r in summary.itertuples():
        print(f"  {r.cls:<20} {r.episodes:>8} {r.detected:>8} {r.recall:>7.1%} {r.alerts:>7} {r.true_alerts:>6} "
              f"{r.precision:>9.1%} {r.delay_p50_s:>11.1f} {r.delay_p95_s:>7.1f} {r.delay_max_s:>7.1f}")
    by_rule = rule_precision(truth, events)
    print(f"  {'rule':<24} {'class':<20} {'alerts':>7} {'true':>6} {'precision':>9}")
    for r in by_rule.itertuples():
        print(f"  {r.rule:<24} {r.cls:<20} {r.alerts:>7} {r.true_alerts:>6} {r.precision:>9.1%}")
    missed = matches[~matches["detected"]]
    for m in missed.head(10).itertuples():
        print(f"  missed: {m.cls} {m.cluster} {m.topic}-{m.partition} {m.start} .. {m.end}")


def rule_precision(truth: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Precision of each rule alone: which signals of a class are trustworthy on their own."""
    from pipelines.alert_truth import CLASSES, score

    rows = []
    for cls, rules in CLASSES.items():
        for rule in rules:
            summary, _ = score(truth, events[events["rule"] == rule])
            r = summary.set_index("cls").loc[cls]
            rows.append({"rule": rule, "cls": cls, "alerts": int(r["alerts"]), "true_alerts": int(r["true_alerts"]),
                         "precision": r["precision"]})
    return pd.DataFrame(rows)


class _Arrivals:
    """A webhook receiver recording when each alert arrived (monotonic clock of this process)."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, dict[str, Any]]] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                now = time.monotonic()
                with lock:
                    outer.arrivals += [(now, a) for a in json.loads(body)["alerts"]]
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/alerts"


def _utc(value: Any) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_convert("UTC") if ts.tzinfo else ts.tz_localize("UTC")


def _commit_times(lake: str, layer: str, stop: threading.Event, seen: list[tuple[float, pd.Timestamp]]) -> None:
    """Poll a layer: for every new commit, when it became visible and the latest event time it holds."""
    versions: dict[str, int] = {}
    while not stop.is_set():
        for name in ("partition_state", "broker_metrics", "ack_ledger", "cluster_events"):
            try:
                table = DeltaTable(f"{lake}/{layer}/{name}")
            except Exception:
                continue
            if table.version() == versions.get(name, -1):
                continue
            now = time.monotonic()
            versions[name] = table.version()
            # Appends carry ever later event times: the table's max ts is what the new commits hold.
            actions = pa.table(table.get_add_actions(flatten=True))
            if "max.ts" in actions.column_names and actions.num_rows:
                seen.append((now, _utc(pc.max(actions["max.ts"]).as_py())))
        time.sleep(0.02)


def latency(seconds: int) -> None:
    from isrwatch.alert_config import load_alert_config
    from isrwatch.settings import load_settings
    from isrwatch.spark import build_spark_session
    from jobs.alerts import start_alerts
    from jobs.validate import start_validation

    lake = tempfile.mkdtemp(prefix="isrwatch-alert-latency-")
    receiver = _Arrivals()
    raw = yaml.safe_load((ROOT / "conf" / "alerts.yaml").read_text())
    raw["receivers"] = [{"name": "bench", "url": receiver.url, "backoff_initial": "50ms"}]
    rules = Path(lake) / "alerts.yaml"
    rules.write_text(yaml.safe_dump(raw))
    seen: list[tuple[float, pd.Timestamp]] = []
    seen_silver: list[tuple[float, pd.Timestamp]] = []
    stop = threading.Event()
    threading.Thread(target=_commit_times, args=(lake, "bronze", stop, seen), daemon=True).start()
    threading.Thread(target=_commit_times, args=(lake, "silver", stop, seen_silver), daemon=True).start()
    emulator = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario",
                                 str(ROOT / "conf" / "scenarios" / "default.yaml"), "--lakehouse", lake, "--quiet",
                                 "--pace", "live", "--duration", f"{seconds}s"], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    spark = build_spark_session("isrwatch-alert-latency", master="local[2]")
    settings = load_settings(overrides={
        "lakehouse": lake, "validate.tables": TABLES, "validate.trigger_interval": "0 seconds",
        "alerts.trigger_interval": "0 seconds", "alerts.rules": str(rules)})
    validation = start_validation(spark, settings, log=lambda _: None)
    alerts = start_alerts(spark, settings, load_alert_config(rules), log=lambda _: None)
    emulator.wait()
    time.sleep(20)  # let the last commits through
    for q in [*validation.queries.values(), alerts.query]:
        q.stop()
    if alerts.dispatcher is not None:
        alerts.dispatcher.wait_idle(30)
        alerts.dispatcher.stop()
    stop.set()
    commits = sorted(seen, key=lambda s: s[0])
    silver = sorted(seen_silver, key=lambda s: s[0])
    delays, to_silver = [], []
    for arrived, alert in receiver.arrivals:
        if alert["status"] != "firing":
            continue
        breached = pd.Timestamp(alert["startsAt"])
        first = next((t for t, max_ts in commits if max_ts >= breached), None)
        validated = next((t for t, max_ts in silver if max_ts >= breached), None)
        if first is not None and arrived >= first:
            delays.append(arrived - first)
            if validated is not None:
                to_silver.append(validated - first)
    firing = sum(a["status"] == "firing" for _, a in receiver.arrivals)
    print(f"latency: default scenario at live pace for {seconds} s; validate (6 tables) and alerts live, 2 cores")
    if not delays:
        print("  no firing alert arrived: run longer (--live-seconds)")
        return
    print(f"  bronze commit holding the breach -> webhook POST received: p50 {statistics.median(delays):.2f} s, "
          f"p95 {_pct(delays, 0.95):.2f} s, max {max(delays):.2f} s over {len(delays)} of {firing} firing alerts")
    if to_silver:
        print(f"  of which bronze commit -> validated into silver: p50 {statistics.median(to_silver):.2f} s, "
              f"p95 {_pct(to_silver, 0.95):.2f} s (the rest is the alerts job and the webhook)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", default=str(ROOT / "conf" / "scenarios"), help="folder of scenario YAML files")
    p.add_argument("--live-seconds", type=int, default=180, help="emulated seconds at live pace (0: skip)")
    p.add_argument("--skip-quality", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        if not args.skip_quality:
            quality(sorted(Path(args.scenarios).glob("*.yaml")))
        if args.live_seconds:
            latency(args.live_seconds)
    finally:
        from isrwatch.spark import stop_active_session

        stop_active_session()


if __name__ == "__main__":
    main()
