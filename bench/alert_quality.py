"""Alert truth: how right and how fast isrwatch's alerts are, against the emulator's ground truth.

    .venv/bin/python bench/alert_quality.py [--scenarios conf/scenarios] [--seeds 1-10] [--live-seconds 180]

1. Quality: every shipped scenario (a folder, or one file) is emulated into one lakehouse (a cluster each,
   per seed of --seeds, else the scenario's own seed), the pipeline runs to the end (validate, posture,
   slo, alerts; available-now), and the alerts are scored per failure class (pipelines/alert_truth.py):
   writes refused, acknowledged data lost, unclean elections, offline partitions, unsafe single-copy acks,
   ISR thrash — recall, precision (a second firing/resolved pair of a rule for one incident is a false
   alert), firing pairs per incident, and detection delay in simulated time. Every rule's firings per
   alert (fingerprint) show flapping where no truth class exists.
2. Latency: the default scenario at live pace while validate and alerts run live, delivering to a
   webhook receiver in this process; for each firing alert, the wall time from the first bronze commit
   holding the sample that breached the rule to the POST's arrival (p50, p95).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
import yaml
from deltalake import DeltaTable

from bench.delta_log import new_commit_stats
from bench.emulator_process import start_emulator
from bench.percentiles import percentile
from tests.alerts.receiver import Receiver

ROOT = Path(__file__).resolve().parent.parent
TABLES = ["broker_metrics", "partition_state", "cluster_events", "ack_ledger", "topic_configs", "runs"]


def _bronze(lake: str, name: str, columns: list[str]) -> pd.DataFrame:
    return DeltaTable(f"{lake}/bronze/{name}").to_pandas(columns=columns)


def seed_list(text: str) -> list[int]:
    """'1-10', '7' or '1,4,9-11' as a list of seeds."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise argparse.ArgumentTypeError(f"expected seeds like '1-10' or '3,7', got {text!r}")
        seeds += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    return seeds


def quality(scenarios: list[Path], seeds: list[int] | None = None) -> None:
    from foundation.delta_io import read_rows
    from foundation.settings import load_settings
    from foundation.spark import build_spark_session
    from jobs.alerts import start_alerts
    from jobs.posture import start_posture
    from jobs.slo import start_slo
    from jobs.validate import start_validation
    from pipelines.alert_truth import episodes, score
    from schemas.gold import ALERT_EVENTS

    lake = tempfile.mkdtemp(prefix="isrwatch-alert-quality-")
    began = time.monotonic()
    runs = [(path, seed) for path in scenarios for seed in (seeds or [None])]
    for i, (path, seed) in enumerate(runs, 1):
        run = subprocess.run([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(path),
                              "--lakehouse", lake, "--quiet", *(["--seed", str(seed)] if seed is not None else [])],
                             cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"emulator failed on {path.name} seed {seed}: {run.stderr[-500:]}")
        print(f"quality: emulated {i}/{len(runs)}: {path.stem}{f' seed {seed}' if seed is not None else ''}",
              flush=True)
    print(f"quality: {len(runs)} clusters emulated in {time.monotonic() - began:.0f} s; running the pipeline")
    # validate and the alerts job take a live batch onto the driver: at most 8 files a batch (about what a
    # live run brings) keep ten default runs from filling the driver's heap (50 did not).
    spark = build_spark_session("isrwatch-alert-quality", master="local[2]", conf={"spark.driver.memory": "3g"})
    settings = load_settings(overrides={
        "lakehouse": lake, "validate.tables": TABLES, "validate.max_files_per_trigger": 8,
        "alerts.max_files_per_trigger": 8, **{f"{j}.trigger": "available-now" for j in
                                               ("validate", "posture", "slo", "alerts")},
        "alerts.webhooks": False, **{f"{j}.wait_for_tables": "0 seconds" for j in ("validate", "posture", "slo",
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
          f"{'precision':>9} {'pairs/incident max':>18} {'mean':>5} {'delay p50 s':>11} {'p95 s':>7} {'max s':>7}")
    for r in summary.itertuples():
        print(f"  {r.cls:<20} {r.episodes:>8} {r.detected:>8} {r.recall:>7.1%} {r.alerts:>7} {r.true_alerts:>6} "
              f"{r.precision:>9.1%} {r.pairs_max:>18.0f} {r.pairs_mean:>5.2f} {r.delay_p50_s:>11.1f} "
              f"{r.delay_p95_s:>7.1f} {r.delay_max_s:>7.1f}")
    by_rule = rule_precision(truth, events)
    print(f"  {'rule':<24} {'class':<20} {'alerts':>7} {'true':>6} {'precision':>9}")
    for r in by_rule.itertuples():
        print(f"  {r.rule:<24} {r.cls:<20} {r.alerts:>7} {r.true_alerts:>6} {r.precision:>9.1%}")
    per_alert = firings_per_alert(events)
    print(f"  {'rule':<28} {'alerts':>7} {'firings':>8} {'firings/alert max':>17} {'mean':>5} {'flapping':>8}")
    for r in per_alert.itertuples():
        print(f"  {r.rule:<28} {r.alerts:>7} {r.firings:>8} {r.max:>17} {r.mean:>5.2f} {r.flapping:>8}")
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


def firings_per_alert(events: pd.DataFrame) -> pd.DataFrame:
    """Per rule: alerts (fingerprints), firing transitions, firings per alert (max, mean), and alerts that were
    ever flapping. Flapping shows here for rules no truth class covers."""
    firing = events[events["status"] == "firing"]
    flapping = events[events["flapping"].fillna(False).astype(bool)] if "flapping" in events else events.iloc[:0]
    per = firing.groupby(["rule", "fingerprint"]).size()
    out = per.groupby(level="rule").agg(["count", "sum", "max", "mean"]).reset_index()
    out.columns = ["rule", "alerts", "firings", "max", "mean"]
    out["flapping"] = out["rule"].map(flapping.groupby("rule")["fingerprint"].nunique()).fillna(0).astype(int)
    return out.sort_values(["max", "rule"], ascending=[False, True], kind="stable")


def _utc(value: Any) -> pd.Timestamp:
    ts = pd.Timestamp(value)
    return ts.tz_convert("UTC") if ts.tzinfo else ts.tz_localize("UTC")


def _commit_times(lake: str, layer: str, stop: threading.Event, seen: list[tuple[float, pd.Timestamp]]) -> None:
    """Poll a layer: for every new commit, when it became visible and the latest event time it holds.

    Cheap on purpose (it shares the driver's interpreter with the jobs it measures): a directory listing
    per table every 20 ms, and only a new commit's own JSON is read (its files' `maxValues.ts` stats).
    """
    versions: dict[str, int] = {}
    while not stop.is_set():
        for name in ("partition_state", "broker_metrics", "ack_ledger", "cluster_events"):
            commits = new_commit_stats(f"{lake}/{layer}/{name}", versions.get(name, -1))
            now = time.monotonic()
            for version, files in commits:
                highs = [_utc(ts) for f in files if (ts := f.get("maxValues", {}).get("ts")) is not None]
                if highs:
                    seen.append((now, max(highs)))
                versions[name] = version
        time.sleep(0.02)


def latency(seconds: int) -> None:
    """Detection latency on a running pipeline: a short emulator run (another cluster) warms the queries up
    (their first micro-batch compiles the plans and builds the GE suites), then the default scenario runs at
    live pace and each firing alert is timed from the bronze commit holding its breach to its POST."""
    from foundation.settings import load_settings
    from foundation.spark import build_spark_session
    from jobs.validate import start_validation

    lake = tempfile.mkdtemp(prefix="isrwatch-alert-latency-")
    receiver = Receiver().start()
    raw = yaml.safe_load((ROOT / "conf" / "alerts.yaml").read_text())
    raw["receivers"] = [{"name": "bench", "url": receiver.url, "backoff_initial": "50ms"}]
    rules = Path(lake) / "alerts.yaml"
    rules.write_text(yaml.safe_dump(raw))
    began = time.monotonic()
    assert start_emulator(lake, "--seed", "4242", "--duration", "5s").wait() == 0
    spark = build_spark_session("isrwatch-alert-latency", master="local[2]")
    settings = load_settings(overrides={
        "lakehouse": lake, "validate.tables": TABLES, "validate.trigger_interval": "0 seconds",
        "alerts.trigger_interval": "0 seconds", "alerts.rules": str(rules)})
    # The alert lane beside validate evaluates the rules on silver tables: the alerts job, which holds the rules on
    # gold tables, has nothing to add here
    validation = start_validation(spark, settings, log=lambda _: None)
    while validation.validator.stats.batch_id < 0:
        if not validation.query.isActive:
            raise RuntimeError(f"validate stopped: {validation.query.exception()}")
        time.sleep(0.1)
    warm_s = time.monotonic() - began
    receiver.clear()  # the warm-up cluster's alerts are not measured
    seen: list[tuple[float, pd.Timestamp]] = []
    seen_silver: list[tuple[float, pd.Timestamp]] = []
    stop = threading.Event()
    threading.Thread(target=_commit_times, args=(lake, "bronze", stop, seen), daemon=True).start()
    threading.Thread(target=_commit_times, args=(lake, "silver", stop, seen_silver), daemon=True).start()
    time.sleep(0.5)  # the pollers have listed the warm-up commits
    measured_from = time.monotonic()
    emulator = start_emulator(lake, "--pace", "live", "--duration", f"{seconds}s")
    emulator.wait()
    time.sleep(20)  # let the last commits through
    batches = [p for p in validation.query.recentProgress if p["numInputRows"] > 0]
    validation.query.stop()
    validation.finish()   # GE's records, and the webhook lanes idle
    stop.set()
    commits = sorted((t, ts) for t, ts in seen if t >= measured_from)
    silver = sorted((t, ts) for t, ts in seen_silver if t >= measured_from)
    delays, to_silver = [], []
    arrivals = receiver.arrivals()
    receiver.stop()
    for arrived, alert in arrivals:
        if alert["status"] != "firing" or alert["labels"].get("cluster", "").endswith("-s4242"):
            continue
        breached = pd.Timestamp(alert["startsAt"])
        first = next((t for t, max_ts in commits if max_ts >= breached), None)
        validated = next((t for t, max_ts in silver if max_ts >= breached), None)
        if first is not None and arrived >= first:
            delays.append(arrived - first)
            if validated is not None:
                to_silver.append(validated - first)
    firing = sum(a["status"] == "firing" for _, a in arrivals)
    print(f"latency: default scenario at live pace for {seconds} s; validate (one query over {len(TABLES)} tables, "
          f"evaluating the rules on silver tables) live, 2 cores; warmed up first ({warm_s:.0f} s to its first batch)")
    if not delays:
        print("  no firing alert arrived: run longer (--live-seconds)")
        return
    print(f"  bronze commit holding the breach -> webhook POST received: p50 {statistics.median(delays):.2f} s, "
          f"p95 {percentile(delays, 95):.2f} s, max {max(delays):.2f} s over {len(delays)} of {firing} firing alerts")
    if to_silver:
        print(f"  of which bronze commit -> validated into silver: p50 {statistics.median(to_silver):.2f} s, "
              f"p95 {percentile(to_silver, 95):.2f} s")
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in batches]
    if durations:
        print(f"  validate's micro-batches: median {statistics.median(durations):.2f} s, "
              f"p95 {percentile(durations, 95):.2f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", default=str(ROOT / "conf" / "scenarios"),
                   help="a folder of scenario YAML files, or one file")
    p.add_argument("--seeds", type=seed_list, default=None,
                   help="emulate each scenario with these seeds, e.g. 1-10 (default: the scenario's own seed)")
    p.add_argument("--live-seconds", type=int, default=180, help="emulated seconds at live pace (0: skip)")
    p.add_argument("--skip-quality", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        if not args.skip_quality:
            source = Path(args.scenarios)
            quality(sorted(source.glob("*.yaml")) if source.is_dir() else [source], args.seeds)
        if args.live_seconds:
            latency(args.live_seconds)
    finally:
        from foundation.spark import stop_active_session

        stop_active_session()


if __name__ == "__main__":
    main()
