"""Alerts on a real Kafka cluster with the shipped settings, fault plan by fault plan: what fired, how soon after the
fault and after Kafka's own fence, what was missed, what was still firing a minute after recovery.

    .venv/bin/python bench/real_alerts.py [--exporter isrwatch|strimzi] [--runs 2] [--plans NAME,...]

The fixture cluster (testing/kafka/: Kafka 4.3.1, 1 KRaft controller + 3 brokers on loopback, racks r1-r3,
replica.lag.time.max.ms 5 s so that a follower stalled for less than the 9 s session timeout leaves the ISR by its
leader's decision, as a slow disk or network makes it do), each node exporting its metrics through the JMX
exporter agent under `--exporter`'s rules (the project's conf/jmx_exporter.yaml, or Strimzi's kafka-metrics.yaml
rules as tests/collector/data/strimzi-kafka-metrics.yaml transcribes them). Topics `orders` (RF 3, min ISR 2, 12
partitions, acks=all), `audit` (RF 2, min ISR 2, 6, acks=all), `telemetry` (RF 3, min ISR 1, unclean election on,
6, acks=1), `--rate` records/s each. Then, as a user runs them: `isrwatch collect` (default interval and timeout,
with the canary, every node's metrics URL), `isrwatch pipeline run --trigger live` (conf/pipeline.yaml) and a
webhook receiver for conf/alerts.yaml's rules. Each plan of bench/real_alert_plans.py runs `--runs` times.

Ground truth comes from the cluster itself (bench/real_alert_truth.py): the bench's own Metadata request every
200 ms (fence times, leaders and ISRs: under min ISR on an acks=all topic is a leader refusing writes), and the
faults' times. Per rule and plan it
prints: expected / fired / missed; the delay from the fault and from the fence (p50/p95, bench/percentiles.py);
alerts still firing 60 s after recovery; duplicate notifications; and per stall or kill, the first alert after the
fault (a stall or kill of the brokers of one that ended less than 30 s before is that incident going on, and has
none of its own).
Nothing is asserted; the targets are printed beside the figures. Not part of `make test`: `make
bench-real-alerts`, about 25 minutes per exporter and run on 2 cores.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.batch_phases import breakdown
from bench.collect_cluster import Probe
from bench.percentiles import percentile
from bench.real_alert_plans import AUDIT, ORDERS, PLANS, TELEMETRY, PlanContext
from bench.real_alert_truth import ClusterHistory, Expected, Fault, expected_alerts
from jobs.progress_log import read_progress
from testing.kafka.cluster import JMX_EXPORTER_CONFIG, KafkaCluster
from testing.kafka.demo import Workload, evaluated_until_ms
from testing.kafka.processes import ROOT, Child, DemoError, wait_for
from tests.alerts.receiver import Receiver

CANARY_TOPIC = "__isrwatch_canary"
TOPICS = {ORDERS: (12, 3, {"min.insync.replicas": "2"}, "all"),
          AUDIT: (6, 2, {"min.insync.replicas": "2"}, "all"),
          TELEMETRY: (6, 3, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}, "1")}
MIN_ISR = {ORDERS: 2, AUDIT: 2, TELEMETRY: 1, CANARY_TOPIC: 2}
ACKS_ALL = {CANARY_TOPIC, *(t for t, (_, _, _, acks) in TOPICS.items() if acks == "all")}
EXPORTER_RULES = {"isrwatch": JMX_EXPORTER_CONFIG,
                  "strimzi": ROOT / "tests" / "collector" / "data" / "strimzi-kafka-metrics.yaml"}
AFTER_RECOVERY_S = 60
INCIDENT_GAP_S = 30   # issue 39: faults apart by a healthy spell this long are separate incidents
THRASH_WINDOW_S = 300                   # conf/alerts.yaml's IsrThrash window
QUIET_BEFORE = ("rolling_restart",)    # plans that must not see an earlier plan's ISR changes in that window
CONFIG_RULES = ("Posture", "Slo")   # a topic's configuration or an SLO's budget: not a fault's alerts
MATCH_GRACE_S = 30                  # a firing that arrives this long after its condition ended still counts


def log(message: str) -> None:
    print(f"bench real-alerts: {message}", file=sys.stderr, flush=True)


# ---- the receiver's view -----------------------------------------------------------------------------------------

def notifications(receiver: Receiver) -> list[dict[str, Any]]:
    """Every POST received: arrival time, rule, status, labels, fingerprint, delivery id."""
    out = []
    for r in receiver.delivered():
        alert = r["json"]["alerts"][0]
        out.append({"at": r["at"], "rule": alert["labels"]["alertname"], "status": alert["status"],
                    "severity": alert["labels"].get("severity"), "labels": alert["labels"],
                    "fingerprint": alert["fingerprint"], "delivery": r["json"].get("isrwatchDeliveryId")})
    return out


def firing_at(sent: list[dict[str, Any]], at: float) -> list[dict[str, Any]]:
    """The alerts the receiver holds as firing at `at`: each fingerprint's last notification before it."""
    last: dict[str, dict[str, Any]] = {}
    for n in sorted(sent, key=lambda n: n["at"]):
        if n["at"] <= at:
            last[n["fingerprint"]] = n
    return [n for n in last.values() if n["status"] == "firing" and not n["rule"].startswith(CONFIG_RULES)]


def duplicates(sent: list[dict[str, Any]]) -> tuple[int, int]:
    """(the same delivery id received again, a notification repeating its alert's previous status)."""
    ids: dict[str, int] = defaultdict(int)
    repeated = 0
    last: dict[str, str] = {}
    for n in sorted(sent, key=lambda n: n["at"]):
        ids[n["delivery"]] += 1
        if last.get(n["fingerprint"]) == n["status"]:
            repeated += 1
        last[n["fingerprint"]] = n["status"]
    return sum(c - 1 for c in ids.values()), repeated


# ---- scoring ------------------------------------------------------------------------------------------------------

def score(plan: str, run: int, expected: list[Expected], faults: list[Fault], sent: list[dict[str, Any]],
          history: ClusterHistory, start: float, recovered: float) -> dict[str, Any]:
    """Expected alerts matched to the firings the receiver got between the plan's start and 60 s after recovery."""
    window = [n for n in sent if start <= n["at"] <= recovered + AFTER_RECOVERY_S]
    firings = [n for n in window if n["status"] == "firing"]
    rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"expected": 0, "fired": 0, "held": 0, "other": 0,
                                                           "from_fault": [], "from_fence": [], "from_shown": []})
    used: set[int] = set()
    for e in expected:
        row = rows[e.rule]
        row["expected"] += 1
        match = next((i for i, n in enumerate(firings) if i not in used and n["rule"] == e.rule
                      and e.matches(n["labels"]) and e.shown - 2 <= n["at"] <= e.until + MATCH_GRACE_S), None)
        if match is None:
            # An incident whose alert the receiver already holds as firing (the same partition under min ISR again
            # after an offline spell the collector did not see) is known to the operator: covered, with no delay.
            if any(n["rule"] == e.rule and e.matches(n["labels"]) for n in firing_at(sent, e.shown)):
                row["fired"] += 1
                row["held"] += 1
            continue
        used.add(match)
        arrived = firings[match]["at"]
        row["fired"] += 1
        fault = max((f for f in faults if f.start <= e.shown), key=lambda f: f.start, default=None)
        if fault is not None:
            row["from_fault"].append(arrived - fault.start)
            fences = [t for b in fault.brokers for t in history.fence_times(b, fault.start, e.until)]
            if fences:
                row["from_fence"].append(arrived - min(fences))
        row["from_shown"].append(arrived - e.shown)
    for i, n in enumerate(firings):
        if i not in used and not n["rule"].startswith(CONFIG_RULES):
            rows[n["rule"]]["other"] += 1
    first_alerts = []
    ended: dict[tuple[int, ...], float] = {}   # brokers -> when their last stall or kill ended
    for f in sorted((f for f in faults if f.kind in ("stall", "kill")), key=lambda f: f.start):
        # The same brokers failing again before a healthy spell of INCIDENT_GAP_S is that incident going on (the
        # follower stalling every 20 s): its alerts fired, or are held while they flap; it has no first of its own.
        same = f.brokers in ended and f.start - ended[f.brokers] < INCIDENT_GAP_S
        ended[f.brokers] = f.end
        after = [n["at"] - f.start for n in firings if n["at"] >= f.start and not n["rule"].startswith(CONFIG_RULES)]
        fences = [t for b in f.brokers for t in history.fence_times(b, f.start, f.end)]
        first_alerts.append({"kind": f.kind, "brokers": f.brokers, "same_incident": same,
                             "first_s": None if same else min(after, default=None),
                             "fence_s": (min(fences) - f.start) if fences else None})
    # Still firing 60 s after recovery and no longer true: an alert whose condition still holds then (IsrThrash counts
    # an ISR's leaves over 5 minutes) is right to fire.
    checked_at = recovered + AFTER_RECOVERY_S
    still = [n for n in firing_at(sent, checked_at)
             if not any(e.rule == n["rule"] and e.matches(n["labels"]) and e.until > checked_at for e in expected)]
    dup_ids, repeated = duplicates(window)
    critical = [n for n in firings if n["severity"] == "critical" and not n["rule"].startswith(CONFIG_RULES)]
    return {"plan": plan, "run": run, "rules": dict(rows), "first_alerts": first_alerts,
            "still_firing": sorted(f"{n['rule']} {dict(n['labels'])}" for n in still),
            "duplicate_deliveries": dup_ids, "repeated_status": repeated,
            "critical": sorted({n["rule"] for n in critical}), "critical_count": len(critical),
            "thrash": sum(n["rule"] == "IsrThrash" for n in firings), "recovery_s": recovered - start}


def report(results: list[dict[str, Any]], exporter: str) -> None:
    def p(values: list[float], q: float) -> str:
        return "-" if not values else f"{percentile(values, q):.1f}"

    print(f"\n## isrwatch on a real cluster, exporter rules: {exporter}\n")
    print("| plan | rule | expected | fired (already firing) | missed | other firings | from fault p50 / p95 s "
          "| from fence p50 / p95 s | from shown p50 / p95 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    by_plan: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results:
        for rule, row in r["rules"].items():
            agg = by_plan[r["plan"]].setdefault(rule, {"expected": 0, "fired": 0, "held": 0, "other": 0,
                                                       "from_fault": [], "from_fence": [], "from_shown": []})
            for k in ("expected", "fired", "held"):
                agg[k] += row[k]
            agg["other"] += row["other"]
            for k in ("from_fault", "from_fence", "from_shown"):
                agg[k] += row[k]
    totals: dict[str, list[float]] = defaultdict(list)
    for plan, rules in by_plan.items():
        for rule, a in sorted(rules.items()):
            print(f"| {plan} | {rule} | {a['expected']} | {a['fired']} ({a['held']}) | {a['expected'] - a['fired']} | "
                  f"{a['other']} | "
                  f"{p(a['from_fault'], 50)} / {p(a['from_fault'], 95)} | {p(a['from_fence'], 50)} / "
                  f"{p(a['from_fence'], 95)} | {p(a['from_shown'], 50)} / {p(a['from_shown'], 95)} |")
            if rule in ("UnderMinIsr", "OfflinePartitions"):
                totals["visible_from_fence"] += a["from_fence"]
    print("\n| plan | run | recovery s | still firing 60 s after | duplicate deliveries | repeated status | "
          "critical firings | IsrThrash firings | first alert after each stall/kill (s; fence s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    firsts: list[float] = []
    for r in results:
        first = "; ".join(f"{f['kind']} {list(f['brokers'])}: "
                          + ("same incident" if f["same_incident"] else
                             "none" if f["first_s"] is None else f"{f['first_s']:.1f}")
                          + ("" if f["fence_s"] is None else f" (fence {f['fence_s']:.1f})") for f in r["first_alerts"])
        firsts += [f["first_s"] for f in r["first_alerts"] if f["first_s"] is not None]
        print(f"| {r['plan']} | {r['run']} | {r['recovery_s']:.0f} | {len(r['still_firing'])} | "
              f"{r['duplicate_deliveries']} | {r['repeated_status']} | {r['critical_count']} "
              f"({', '.join(r['critical']) or '-'}) | {r['thrash']} | {first} |")
        for alert in r["still_firing"]:
            print(f"|   | still firing: {alert} |||||||")
    unalerted = sum(f["first_s"] is None and not f["same_incident"] for r in results for f in r["first_alerts"])
    expected = sum(a["expected"] for rules in by_plan.values() for a in rules.values())
    fired = sum(a["fired"] for rules in by_plan.values() for a in rules.values())
    print(f"\ntargets: recall 100 % per rule and plan: {fired}/{expected}; first alert after a stall/kill <= 4 s: "
          f"p50 {p(firsts, 50)} / p95 {p(firsts, 95)} / max {max(firsts, default=float('nan')):.1f} s"
          f" ({len(firsts)} incidents, {unalerted} with no alert at all); "
          f"UnderMinIsr/OfflinePartitions <= fence + 1.5 s at p95: {p(totals['visible_from_fence'], 95)} s; "
          f"0 still firing 60 s after recovery: {sum(len(r['still_firing']) for r in results)}; 0 duplicates: "
          f"{sum(r['duplicate_deliveries'] + r['repeated_status'] for r in results)}; rolling restart 0 critical / "
          f"0 IsrThrash: {sum(r['critical_count'] for r in results if r['plan'] == 'rolling_restart')} / "
          f"{sum(r['thrash'] for r in results if r['plan'] == 'rolling_restart')}; IsrThrash on the follower stalling "
          f"every 20 s: {sum(r['thrash'] for r in results if r['plan'] == 'follower_stalls_every_20s')}")


# ---- the run ------------------------------------------------------------------------------------------------------

COLLECT_BATCH = re.compile(r"^collect batch \d+: \d+ partitions, \d+ events, (\d+) ms")


def steps(collect_log: Path, progress_log: Path, since_wall: float) -> None:
    """Where a fault's way to the receiver goes: the collector's intervals (its log's batch lines: read the
    cluster, build rows, commit) and the pipeline's micro-batches (Spark's phases, the lane's own steps)."""
    took = [float(m.group(1)) for line in collect_log.read_text().splitlines()
            if (m := COLLECT_BATCH.match(line.strip()))]
    if took:
        print(f"\n  collector intervals: {len(took)}, ms p50 / p95 / max: {percentile(took, 50):.0f} / "
              f"{percentile(took, 95):.0f} / {max(took):.0f}")
    if progress_log.exists():
        breakdown(read_progress(progress_log), since_wall)


def create_topics(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = cluster.admin_client()
    assert isinstance(admin, AdminClient)
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=rf, config=config)
                                   for t, (n, rf, config, _) in TOPICS.items()])
    for future in futures.values():
        future.result(60)


def alerts_file(path: Path, url: str) -> Path:
    """conf/alerts.yaml as shipped, its receiver pointed at the bench's."""
    raw = yaml.safe_load((ROOT / "conf" / "alerts.yaml").read_text())
    for receiver in raw["receivers"]:
        receiver["url"] = url
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def pipeline_file(path: Path, lake: str, rules: Path, overrides: list[str]) -> Path:
    """conf/pipeline.yaml as shipped but for `overrides` (SECTION.KEY=VALUE, the value read as YAML); validate waits
    longer for the first bronze tables (Spark starts with Kafka)."""
    raw = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
    for override in overrides:
        dotted, _, value = override.partition("=")
        *sections, key = dotted.split(".")
        node = raw
        for section in sections:
            node = node[section]
        if key not in node:
            raise SystemExit(f"--set {override}: {dotted} is not a key of conf/pipeline.yaml")
        node[key] = yaml.safe_load(value)
    raw["lakehouse"] = lake
    raw["validate"]["wait_for_tables"] = "600 seconds"
    raw["alerts"]["rules"] = str(rules)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--exporter", choices=sorted(EXPORTER_RULES), default="isrwatch",
                    help="the rules the brokers' JMX exporter agent runs")
    ap.add_argument("--runs", type=int, default=2, help="runs of each plan")
    ap.add_argument("--plans", default=",".join(PLANS), help="comma-separated plans, in order")
    ap.add_argument("--rate", type=float, default=75.0, help="records/s produced to each topic")
    ap.add_argument("--heap", default="384m", help="heap of each Kafka JVM")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (lakehouse, logs)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a pipeline setting other than conf/pipeline.yaml's (repeat it), to compare with the shipped")
    args = ap.parse_args(argv)
    plans = [p.strip() for p in args.plans.split(",") if p.strip()]
    unknown = [p for p in plans if p not in PLANS]
    if unknown:
        ap.error(f"unknown plan(s) {unknown}; known: {', '.join(PLANS)}")

    work = Path(tempfile.mkdtemp(prefix="isrwatch-real-alerts-"))
    lake = str(work / "lakehouse")
    logs = work / "logs"
    logs.mkdir()
    receiver = Receiver().start()
    cluster = KafkaCluster(work / "kafka", brokers=3, racks=("r1", "r2", "r3"), heap=args.heap,
                           broker_config={"replica.lag.time.max.ms": "5000"},
                           exporter_rules=EXPORTER_RULES[args.exporter])
    children: dict[str, Child] = {}
    producers: Workload | None = None
    history: ClusterHistory | None = None
    results: list[dict[str, Any]] = []

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        rules = alerts_file(work / "alerts.yaml", receiver.url)
        children["pipeline"] = Child("pipeline", ["pipeline", "run", "--config",
                                                  str(pipeline_file(work / "pipeline.yaml", lake, rules, args.set)),
                                                  "--trigger", "live", "--status-every", "60",
                                                  "--progress-log", str(work / "progress.jsonl")], logs,
                                     echo=lambda line: False)
        log(f"starting Kafka (exporter rules: {args.exporter}) and the pipeline (Spark); work folder {work}")
        cluster.start()
        create_topics(cluster)
        probe = Probe({b: cluster.nodes[b].address for b in cluster.broker_ids()}, timeout_s=1.0)
        history = ClusterHistory(probe, [*TOPICS, CANARY_TOPIC]).start()
        producers = Workload(cluster.bootstrap_servers, args.rate,
                             {t: acks for t, (_, _, _, acks) in TOPICS.items()}).start()
        metrics = [a for n in cluster.nodes.values() if n.metrics_url for a in ("--metrics-url",
                                                                                 f"{n.node_id}={n.metrics_url}")]
        children["collect"] = Child("collect", ["collect", "--bootstrap-servers", cluster.bootstrap_servers,
                                                *metrics, "--lakehouse", lake], logs, echo=lambda line: False)
        live = list(children.values())

        def hold(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            wait_for(lambda: time.monotonic() >= deadline, seconds + 5, "a pause", live)

        def wait(condition: Any, timeout_s: float, what: str) -> None:
            wait_for(condition, timeout_s, what, live)

        wait(lambda: evaluated_until_ms(lake) >= time.time() * 1000 - 10_000 and history.whole(), 900,
             "the pipeline evaluating alerts within 10 s of now")
        hold(30)
        log("the pipeline keeps up; the plans start")
        plans_began = time.time()
        ctx = PlanContext(cluster, history, hold, wait)
        for run in range(1, args.runs + 1):
            for plan in plans:
                if plan in QUIET_BEFORE:
                    # IsrThrash counts an ISR's leaves over 5 minutes: the plans before would count in this one's.
                    last_leave = history.last_isr_leave()
                    log(f"plan {plan} waits for 5 minutes without an ISR shrink")
                    hold(max(0.0, last_leave + THRASH_WINDOW_S - time.time()))
                start = time.time()
                log(f"plan {plan}, run {run}")
                faults = PLANS[plan](ctx)
                wait(history.whole, 300, "every ISR whole again")
                recovered = max(time.time(), max(f.end for f in faults))
                hold(AFTER_RECOVERY_S + 5)
                expected = expected_alerts(history, faults, MIN_ISR, ACKS_ALL, CANARY_TOPIC, start,
                                           recovered + AFTER_RECOVERY_S)
                results.append(score(plan, run, expected, faults, notifications(receiver), history, start,
                                     recovered))
                r = results[-1]
                log(f"plan {plan}, run {run}: " + ", ".join(
                    f"{rule} {row['fired']}/{row['expected']}" for rule, row in sorted(r["rules"].items())
                    if row["expected"]) + f"; still firing after 60 s: {len(r['still_firing'])}")
        report(results, args.exporter + "".join(f", {o}" for o in args.set))
        steps(children["collect"].log_path, work / "progress.jsonl", plans_began)
        return 0
    except (DemoError, TimeoutError) as e:
        log(f"FAILED: {e}")
        if results:
            report(results, args.exporter + "".join(f", {o}" for o in args.set))
        return 1
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if producers is not None:
            producers.stop()
        if history is not None:
            history.stop()
        for name in ("collect", "pipeline"):
            if name in children:
                children[name].stop(signal.SIGINT, timeout_s=120)
        receiver.stop()
        cluster.stop()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
