"""Alert latency side by side: isrwatch against Prometheus + Alertmanager, fed by the same bronze commits.

    make bench-alert-latency        # once: Debian's prometheus and prometheus-alertmanager, then this
    .venv/bin/python bench/alert_latency.py [--runs 4] [--duration 3m] [--validate-trigger '10 seconds']

ONE live run. The emulator writes `--runs` runs of the default scenario at live pace into one lakehouse, one
after the other (a new cluster each, seeds 1, 2, …). Two systems watch the same bronze tables:
- isrwatch: `isrwatch pipeline run --jobs validate,alerts` with the shipped settings and rules (UnderReplicated
  without its `for`), delivering to a webhook receiver in this process: the four rules here are the alert lane's,
  one streaming query over the bronze commit logs from the commit to the POST. `--validate-trigger` sets validate's
  trigger interval for the run;
- the peer: an exporter in this process tails the bronze Delta logs every 50 ms (each new commit's files read
  with pyarrow) and serves the newest partition states and broker gauges; Prometheus 2.42 scrapes it and
  evaluates equivalent rules every second (no `for`), Alertmanager 0.25 (`group_wait: 0s`, one group per alert)
  delivers to the same receiver.
The incidents come from bronze, not from either system: the same tail evaluates each rule's condition on every
new commit, and an incident of a rule and entity begins at the commit that makes the condition true after it
was false, at the moment that commit became visible to the tail. For each rule class the bench prints the
incidents, each system's caught and missed, p50/p95/max from that commit to the system's webhook POST, the
notifications that matched no incident, and the isrwatch/peer ratios; then Spark's phases of isrwatch's
micro-batches and validate's own steps inside them (the progress log). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from bench.api_server import free_port
from bench.batch_phases import breakdown
from bench.bronze_tail import TAIL_EVERY_S, BronzeTail, Exporter, Incident
from bench.emulator_process import DEFAULT_SCENARIO, start_emulator
from bench.percentiles import percentile
from bench.process_cpu import tree_cpu_seconds
from foundation.delta_io import read_rows
from jobs.progress_log import read_progress
from pipelines.alertmanager import ATTEMPT_HEADER, DELIVERY_ID_FIELD
from schemas.gold import ALERT_EVENTS, DELIVERIES, DeliveryOutcome
from tests.alerts.receiver import Receiver

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = DEFAULT_SCENARIO
RULES = ("UnderMinIsr", "UnderReplicated", "OfflinePartitions", "UncleanLeaderElection")
PARTITION_RULES = ("UnderMinIsr", "UnderReplicated")
WARM_UP_SEED = 4242
PROMETHEUS = "prometheus"
ALERTMANAGER = "prometheus-alertmanager"   # Debian's name for Alertmanager's binary

# The peer's rules: conf/alerts.yaml's conditions in PromQL over the exporter's series (no `for`). The cluster
# rules sum over brokers, as isrwatch's cluster-scope rules do (aggregate: sum).
PEER_RULES = {
    "UnderMinIsr": "bronze_partition_isr_size < bronze_partition_effective_min_isr and bronze_partition_offline == 0",
    "UnderReplicated": "bronze_partition_isr_size < bronze_partition_replication_factor "
                       "and bronze_partition_offline == 0",
    "OfflinePartitions": "sum by (cluster) (bronze_offline_partitions_count) > 0",
    "UncleanLeaderElection": "sum by (cluster) (bronze_unclean_leader_elections_rate) > 0",
}


# ---- the processes ---------------------------------------------------------------------------------------------

def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.loads(r.read() or b"null") if "json" in r.headers.get("Content-Type", "") else r.read()


def _wait(what: str, ready: Any, timeout_s: float, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{what}: {p.args!r} exited with {p.returncode}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what}: not ready within {timeout_s:.0f} s")


@contextmanager
def peer(work: Path, exporter: str, receiver: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Alertmanager, then Prometheus scraping `exporter` and alerting through it; both stopped on exit."""
    for binary in (PROMETHEUS, ALERTMANAGER):
        if shutil.which(binary) is None:
            raise SystemExit(f"{binary} is not installed: run `make bench-alert-latency` (installs Debian's "
                             "prometheus and prometheus-alertmanager)")
    am_port, prom_port = free_port(), free_port()
    (work / "alertmanager.yml").write_text(yaml.safe_dump({
        "route": {"receiver": "bench", "group_by": ["..."], "group_wait": "0s", "group_interval": "1s",
                  "repeat_interval": "4h"},
        "receivers": [{"name": "bench", "webhook_configs": [{"url": receiver, "send_resolved": True}]}]}))
    (work / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "isrwatch-equivalents", "interval": "1s",
                                                                "rules": [{"alert": name, "expr": expr}
                                                                          for name, expr in PEER_RULES.items()]}]}))
    host, path = exporter.removeprefix("http://").split("/", 1)
    (work / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(work / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [{"job_name": "bronze", "metrics_path": f"/{path}",
                            "static_configs": [{"targets": [host]}]}]}))
    logs = (work / "alertmanager.log").open("wb"), (work / "prometheus.log").open("wb")
    procs = [
        subprocess.Popen([ALERTMANAGER, f"--config.file={work / 'alertmanager.yml'}",
                          f"--storage.path={work / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}",
                          "--cluster.listen-address="], stdout=logs[0], stderr=subprocess.STDOUT),
        subprocess.Popen([PROMETHEUS, f"--config.file={work / 'prometheus.yml'}",
                          f"--storage.tsdb.path={work / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                         stdout=logs[1], stderr=subprocess.STDOUT)]
    try:
        _wait("alertmanager", lambda: _get(f"http://127.0.0.1:{am_port}/-/ready"), 60, procs)
        up = f"http://127.0.0.1:{prom_port}/api/v1/query?query=up"
        _wait("prometheus scraping the exporter",
              lambda: any(r["value"][1] == "1" for r in _get(up)["data"]["result"]), 60, procs)
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in logs:
            log.close()


@contextmanager
def isrwatch(work: Path, lake: str, receiver: str, validate_trigger: str | None) -> Iterator[subprocess.Popen[bytes]]:
    """`isrwatch pipeline run --jobs validate,alerts`, live, with the shipped rules delivering to `receiver`
    (UnderReplicated without its `for`, as the peer's rules have none); stopped with Ctrl-C on exit."""
    rules = yaml.safe_load((ROOT / "conf" / "alerts.yaml").read_text())
    for rule in rules["rules"]:
        if rule["name"] in RULES:
            rule.pop("for", None)
    rules["receivers"] = [{"name": "bench", "url": receiver, "backoff_initial": "50ms"}]
    (work / "alerts.yaml").write_text(yaml.safe_dump(rules))
    config = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
    if validate_trigger is not None:
        config["validate"]["trigger_interval"] = validate_trigger
    (work / "pipeline.yaml").write_text(yaml.safe_dump(config))
    log = (work / "pipeline.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "pipeline", "run", "--jobs", "validate,alerts",
                             "--config", str(work / "pipeline.yaml"),
                             "--lakehouse", lake, "--rules", str(work / "alerts.yaml"), "--trigger", "live",
                             "--status-every", "60", "--progress-log", str(work / "progress.jsonl")],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    try:
        # Warm: validate has caught up with the warm-up cluster (plans compiled, every table's suite built): it has
        # run a micro-batch with rows, and no query has read a row for 5 s. (Spark reports a micro-batch without rows
        # only now and then, so their absence is the sign.) The alerts job holds the rules on gold tables, which no
        # job writes here: it reads nothing.
        def caught_up() -> bool:
            progress = read_progress(work / "progress.jsonl") if (work / "progress.jsonl").exists() else []
            with_rows = [p for p in progress if p.get("numInputRows", 0) > 0]
            if "validate" not in {p["name"] for p in with_rows}:
                return False
            ended = max(datetime.fromisoformat(p["timestamp"]).timestamp() + p["durationMs"]["triggerExecution"] / 1000
                        for p in with_rows)
            return time.time() - ended > 5

        _wait("isrwatch caught up with the warm-up run", caught_up, 600, [proc])
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


# ---- matching ----------------------------------------------------------------------------------------------------

def _entity(rule: str, labels: dict[str, str]) -> tuple[str, ...]:
    if rule in PARTITION_RULES:
        return labels.get("cluster", ""), labels.get("topic", ""), labels.get("partition", "")
    return (labels.get("cluster", ""),)


Caught = tuple[Incident, dict[str, Any]]   # an incident and the notification that caught it


@dataclass
class Scores:
    delays: list[float] = field(default_factory=list)
    hits: list[Caught] = field(default_factory=list)
    missed: int = 0
    already_firing: int = 0     # the system's alert for the entity still firing from before: nothing new to send
    unmatched: int = 0          # firing notifications that began no incident


def score(incidents: list[Incident], arrivals: list[tuple[float, dict[str, Any]]], rule: str,
          measured_from: float) -> Scores:
    """Per incident, the first firing notification of its rule and entity from when its commit became visible
    (50 ms of slack: a system may see a commit a poll before the tail) until the entity's next incident."""
    warm_up = f"{SCENARIO.stem}-s{WARM_UP_SEED}"
    mine = sorted(((t, a) for t, a in arrivals if a["labels"].get("alertname") == rule and t >= measured_from
                   and a["labels"].get("cluster") != warm_up), key=lambda ta: ta[0])
    by_entity: dict[tuple[str, ...], list[Incident]] = {}
    for incident in incidents:
        if incident.rule == rule:
            by_entity.setdefault(incident.entity, []).append(incident)
    out, used = Scores(), set()
    for entity, its in by_entity.items():
        notes = [(i, t, a) for i, (t, a) in enumerate(mine) if _entity(rule, a["labels"]) == entity]
        for n, incident in enumerate(its):
            until = its[n + 1].began if n + 1 < len(its) else float("inf")
            hit = next(((i, t) for i, t, a in notes
                        if a["status"] == "firing" and incident.began - TAIL_EVERY_S <= t < until), None)
            if hit is not None:
                used.add(hit[0])
                out.delays.append(hit[1] - incident.began)
                out.hits.append((incident, mine[hit[0]][1]))
                continue
            before = [a["status"] for _i, t, a in notes if t < incident.began]
            if before and before[-1] == "firing":
                out.already_firing += 1
            else:
                out.missed += 1
    out.unmatched = sum(1 for i, (_t, a) in enumerate(mine) if a["status"] == "firing" and i not in used)
    return out


def report(tail: BronzeTail, receivers: dict[str, Receiver], measured_from: float) -> list[Caught]:
    """The table; returns isrwatch's caught incidents with their notifications."""
    print(f"\n  {'rule':<22} {'incidents':>9}  {'system':<8} {'caught':>6} {'missed':>6} {'firing':>6} "
          f"{'p50 s':>6} {'p95 s':>6} {'max s':>6} {'unmatched':>9}")
    pooled: dict[str, list[float]] = {"isrwatch": [], "peer": []}
    caught: list[Caught] = []
    for rule in RULES:
        incidents = [i for i in tail.incidents if i.rule == rule]
        figures = {}
        for system in ("isrwatch", "peer"):
            s = score(tail.incidents, receivers[system].arrivals(), rule, measured_from)
            figures[system] = s
            pooled[system] += s.delays
            if system == "isrwatch":
                caught += s.hits
            timing = (f"{statistics.median(s.delays):>6.2f} {percentile(s.delays, 95):>6.2f} {max(s.delays):>6.2f}"
                      if s.delays else f"{'-':>6} {'-':>6} {'-':>6}")
            print(f"  {rule if system == 'isrwatch' else '':<22} {len(incidents) if system == 'isrwatch' else '':>9}  "
                  f"{system:<8} {len(s.delays):>6} {s.missed:>6} {s.already_firing:>6} {timing} {s.unmatched:>9}")
        mine, theirs = figures["isrwatch"].delays, figures["peer"].delays
        if mine and theirs:
            print(f"  {'':<22} {'':>9}  isrwatch/peer: p50 {statistics.median(mine) / statistics.median(theirs):.2f}x, "
                  f"p95 {percentile(mine, 95) / percentile(theirs, 95):.2f}x")
    mine, theirs = pooled["isrwatch"], pooled["peer"]
    if mine and theirs:
        print(f"  all rules: isrwatch p50 {statistics.median(mine):.2f} s, p95 {percentile(mine, 95):.2f} s; peer p50 "
              f"{statistics.median(theirs):.2f} s, p95 {percentile(theirs, 95):.2f} s; isrwatch/peer p50 "
              f"{statistics.median(mine) / statistics.median(theirs):.2f}x, p95 "
              f"{percentile(mine, 95) / percentile(theirs, 95):.2f}x")
    return caught


def where_the_time_goes(caught: list[Caught], receiver: Receiver, lake: str,
                        wall_minus_monotonic: float, progress: list[dict[str, Any]]) -> None:
    """isrwatch's delay per caught incident, in three legs: the commit visible to the tail -> the transition handed to
    the webhook lanes (gold.alert_events.evaluated_at) -> its intent journaled (gold.deliveries' `sending` row,
    written just before the POST) -> the POST arrived. The first leg split at the start of the lane's batch that
    evaluated it (its trigger, from the progress log): waiting for that batch, then the batch until the hand-over."""
    request_of = {id(a): r for r in receiver.requests for a in r["json"]["alerts"]}
    events = read_rows(ALERT_EVENTS, lake, ["event_id", "evaluated_at", "eval_batch_id"]).to_pylist()
    evaluated = {r["event_id"]: r["evaluated_at"].timestamp() for r in events}
    batch_of = {r["event_id"]: r["eval_batch_id"] for r in events}
    triggered = {p["batchId"]: datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
                 for p in progress if p.get("name") == "alert_lane" and "timestamp" in p}
    waited: list[float] = []
    in_batch: list[float] = []
    intended = {(r["delivery_id"], r["attempt"]): r["attempted_at"].timestamp()
                for r in read_rows(DELIVERIES, lake, ["delivery_id", "attempt", "outcome", "attempted_at"]).to_pylist()
                if r["outcome"] == DeliveryOutcome.SENDING}
    legs: dict[str, list[float]] = {"commit visible -> handed over": [], "handed over -> intent journaled": [],
                                    "intent journaled -> POST arrived": []}
    for incident, alert in caught:
        request = request_of[id(alert)]
        ident = request["json"][DELIVERY_ID_FIELD]
        handed = evaluated.get(ident.rsplit("@", 1)[0])
        journaled = intended.get((ident, int(request["headers"][ATTEMPT_HEADER])))
        if handed is None or journaled is None:
            continue
        arrived = request["arrived"] + wall_minus_monotonic
        legs["commit visible -> handed over"].append(handed - (incident.began + wall_minus_monotonic))
        legs["handed over -> intent journaled"].append(journaled - handed)
        legs["intent journaled -> POST arrived"].append(arrived - journaled)
        started = triggered.get(batch_of[ident.rsplit("@", 1)[0]])
        if started is not None:
            waited.append(started - (incident.began + wall_minus_monotonic))
            in_batch.append(handed - started)
    print(f"\n  isrwatch's delay in legs, ms (p50 / p95 over {len(legs['commit visible -> handed over'])} incidents): "
          + ", ".join(f"{leg} {percentile(v, 50) * 1000:.0f} / {percentile(v, 95) * 1000:.0f}"
                      for leg, v in legs.items()))
    if waited:
        print(f"  the first leg, ms (p50 / p95 over {len(waited)} incidents): commit visible -> its lane batch "
              f"triggered {percentile(waited, 50) * 1000:.0f} / {percentile(waited, 95) * 1000:.0f}, triggered -> "
              f"handed over {percentile(in_batch, 50) * 1000:.0f} / {percentile(in_batch, 95) * 1000:.0f}")


REST = "the rest (the emulator runs; this process: the tail, the exporter, the receiver)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=4, help="runs of the default scenario, one after the other")
    p.add_argument("--duration", default=None, help="each run's simulated (= wall) time, e.g. 90s (default: the "
                                                    "scenario's, 3m)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs, lakehouse)")
    p.add_argument("--validate-trigger", default=None, metavar="INTERVAL",
                   help="validate.trigger_interval for this run (default: the shipped one)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="isrwatch-bench-alert-latency-"))
    lake = str(work / "lakehouse")
    tail = BronzeTail(lake)
    exporter = Exporter(tail)
    receivers = {system: Receiver() for system in ("isrwatch", "peer")}
    for receiver in receivers.values():
        receiver.keep_alive = True  # as a receiver behind any HTTP server holds the connections POSTs reuse
        receiver.start()
    stop = threading.Event()
    began = time.monotonic()
    try:
        print(f"warming up: a short emulator run (cluster -s{WARM_UP_SEED}), isrwatch's first micro-batches, "
              "Prometheus and Alertmanager ready", flush=True)
        if start_emulator(lake, "--seed", str(WARM_UP_SEED), "--duration", "60s").wait() != 0:
            raise SystemExit("the warm-up emulator run failed")
        tail.skip_existing()
        threading.Thread(target=tail.run, args=(stop,), daemon=True).start()
        with isrwatch(work, lake, receivers["isrwatch"].url, args.validate_trigger) as ours, \
                peer(work, exporter.url("metrics"), receivers["peer"].url) as theirs:
            print(f"  ready in {time.monotonic() - began:.0f} s", flush=True)
            time.sleep(2)
            measured_from, measured_wall = time.monotonic(), time.time()
            sides = {"isrwatch (its JVM and Python workers)": [ours.pid],
                     "Prometheus + Alertmanager": [p.pid for p in theirs],
                     REST: [os.getpid()]}
            cpu_from = {side: tree_cpu_seconds(pids) for side, pids in sides.items()}
            tail.measuring = True
            for run in range(1, args.runs + 1):
                started = time.monotonic()
                extra = ("--duration", args.duration) if args.duration else ()
                if start_emulator(lake, "--seed", str(run), "--pace", "live", *extra).wait() != 0:
                    raise SystemExit(f"emulator run {run} failed")
                tail.check()
                print(f"  run {run}/{args.runs} (cluster {SCENARIO.stem}-s{run}) written in "
                      f"{time.monotonic() - started:.0f} s; {len(tail.incidents)} incidents so far", flush=True)
            time.sleep(15)   # the last commits' notifications
            cpu = {side: tree_cpu_seconds(pids) - cpu_from[side] for side, pids in sides.items()}
            wall = time.monotonic() - measured_from
        print(f"\nbronze commit -> webhook POST, {args.runs} live run(s) of {SCENARIO.name} pooled, 2 cores shared "
              f"by the emulator, isrwatch (validate + alerts), Prometheus, Alertmanager and this process")
        caught = report(tail, receivers, measured_from)
        progress = read_progress(work / "progress.jsonl")
        where_the_time_goes(caught, receivers["isrwatch"], lake, time.time() - time.monotonic(), progress)
        breakdown(progress, measured_wall)
        # the rest's tree holds the other two: what is left is its own
        cpu[REST] -= sum(v for side, v in cpu.items() if side != REST)
        print(f"\n  CPU over the measured {wall:.0f} s (2 cores): " + "; ".join(
            f"{side} {seconds:.0f} s ({seconds / wall:.2f} cores)" for side, seconds in cpu.items()))
        if ours.returncode != 0:  # a query failed during the runs: its load and its alerts are missing above
            lines = (work / "pipeline.log").read_text(errors="replace").splitlines()
            raise SystemExit(f"\nisrwatch's pipeline FAILED during the bench (exit {ours.returncode}): "
                             + " / ".join(line for line in lines if "FAILED" in line)
                             + f"\nthe figures above are not valid; its log: {work / 'pipeline.log'} (--keep keeps it)")
    finally:
        stop.set()
        exporter.http.shutdown()
        for receiver in receivers.values():
            receiver.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
