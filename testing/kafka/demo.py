"""`make demo-kafka`: isrwatch watching a real Kafka cluster through a stalled broker and a crashed one.

    .venv/bin/python -m testing.kafka.demo [--lakehouse lakehouse-kafka] [--port 8080] [--stall 50] [--down 20]

Starts `isrwatch webhook-receiver` (it prints the alerts as they arrive), `isrwatch serve` and `isrwatch pipeline
run --trigger live` over one lakehouse, and the fixture's Kafka 4.3.1 cluster (1 controller + 3 brokers on
127.0.0.1, replica.lag.time.max.ms 5 s) with two topics: `orders` (RF 3, min ISR 2, written with acks=all) and
`telemetry` (RF 3, min ISR 1, unclean leader election on, written with acks=1). A producer writes to both and
`isrwatch collect` (with the canary, every node's exporter) writes the bronze tables. Once the pipeline has
evaluated the alerts, the faults: broker 2 is SIGSTOPped for `--stall` s and resumed; then broker 3 is SIGKILLed,
left down `--down` s and restarted. When the ISRs are whole and the fault alerts have resolved, everything stops
(every subprocess and JVM, also on Ctrl-C, SIGTERM or a failure) and `isrwatch sql` prints a summary. About 4
minutes on an idle 2-core machine (Spark's start-up is most of the rest).

The children's own output goes to `<lakehouse>/_demo/*.log`; the lakehouse is emptied at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.canary_topic import wall_ms
from testing.kafka.cluster import KafkaCluster, KafkaFixtureError
from testing.kafka.processes import ISRWATCH, ROOT, Child, DemoError, hold, port_free, wait_for

RECEIVER_PORT = 9095  # conf/alerts.yaml's receiver
PREFIX = "isrwatch demo-kafka:"
TOPICS = {
    # name: (partitions, topic config, producer acks)
    "orders": (6, {"min.insync.replicas": "2"}, "all"),
    "telemetry": (3, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}, "1"),
}
# The alerts the faults raise, which resolve once the cluster has recovered. IsrThrash (a 5-minute window) and the
# Posture* alerts (a topic's configuration, e.g. telemetry's min ISR 1) keep firing by design.
FAULT_RULES = frozenset({"UnderReplicated", "AtMinIsr", "UnderMinIsr", "BrokerNotReporting", "PartitionOffline",
                         "OfflinePartitions", "ProduceNotEnoughReplicas", "SingleCopyAcks", "ActiveControllerCount"})
EXPECTED_RULES = ("UnderReplicated", "BrokerNotReporting")  # what the stall must fire (and resolve)
CAUGHT_UP_MS = 15_000  # the pipeline counts as caught up when its alerts have evaluated the last 15 s
SUMMARY_SQL = """\
SELECT rule, severity, count_if(status = 'firing') AS firings, count_if(status = 'resolved') AS resolutions, \
min(ts) AS first, max(ts) AS last FROM gold.alert_events WHERE status IN ('firing', 'resolved') \
GROUP BY rule, severity ORDER BY first;
SELECT topic, acks, sum(records_sent) AS sent, sum(records_acked) AS acked, sum(records_failed) AS refused, \
sum(records_lost) AS acked_then_lost FROM silver.ack_ledger GROUP BY topic, acks ORDER BY topic;
SELECT event_type, cause, count(*) AS events FROM silver.cluster_events GROUP BY event_type, cause \
ORDER BY event_type, cause;
SELECT topic, replication_factor AS rf, effective_min_isr AS min_isr, verdict_class, findings FROM gold.posture \
ORDER BY topic;
SELECT outcome, count(*) AS attempts FROM gold.deliveries WHERE outcome <> 'sending' GROUP BY outcome;
"""


def say(message: str) -> None:
    print(f"{PREFIX} {message}", flush=True)


# ---- the producer workload -----------------------------------------------------------------------------

class Workload:
    """A confluent_kafka Producer per topic at `rate` records/s each, counting acknowledgements and errors;
    `acks`: topic -> the producer's acks (the demo's topics by default)."""

    def __init__(self, bootstrap: str, rate: float, acks: dict[str, str] | None = None) -> None:
        from confluent_kafka import Producer

        from collector.canary_topic import quiet_librdkafka_logger

        self.rate = rate
        topics = acks if acks is not None else {t: a for t, (_, _, a) in TOPICS.items()}
        self.producers = {t: Producer({"bootstrap.servers": bootstrap, "acks": a, "linger.ms": 5,
                                       "message.timeout.ms": 10000, "logger": quiet_librdkafka_logger(),
                                       "enable.idempotence": a == "all"})
                          for t, a in topics.items()}
        self.acked = dict.fromkeys(topics, 0)
        self.failed = dict.fromkeys(topics, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-workload", daemon=True)

    def _delivered(self, topic: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                self.acked[topic] += 1
            else:
                self.failed[topic] += 1
        return on_delivery

    def _run(self) -> None:
        sent = 0
        began = time.monotonic()
        while not self._stop.is_set():
            for topic, producer in self.producers.items():
                with contextlib.suppress(BufferError):
                    producer.produce(topic, f"{topic}-{sent}".encode(), on_delivery=self._delivered(topic))
                producer.poll(0)
            sent += 1
            time.sleep(max(0.0, began + sent / self.rate - time.monotonic()))

    def start(self) -> Workload:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for producer in self.producers.values():
            producer.flush(5)

    def describe(self) -> str:
        return ", ".join(f"{t} {self.acked[t]} acked / {self.failed[t]} failed" for t in self.producers)


# ---- the cluster ---------------------------------------------------------------------------------------

def create_topics(cluster: KafkaCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics([NewTopic(t, num_partitions=n, replication_factor=3, config=config)
                                   for t, (n, config, _) in TOPICS.items()])
    for future in futures.values():
        future.result(60)


def isr_whole(cluster: KafkaCluster) -> bool:
    """Every partition of every topic (the canary's and Kafka's own too) led and with its whole ISR."""
    from confluent_kafka.admin import AdminClient

    try:
        md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0}).list_topics(timeout=5)
    except Exception:  # not answering yet: not whole
        return False
    parts = [p for t in md.topics.values() for p in t.partitions.values()]
    return bool(parts) and all(p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in parts)


def firing_alerts(lakehouse: str) -> list[str]:
    """`rule entity` of each alert firing now in gold.alerts."""
    from foundation.delta_io import read_rows
    from schemas.gold import ALERTS

    rows = read_rows(ALERTS, lakehouse, ["status", "rule", "labels"]).to_pylist()
    out = []
    for r in rows:
        if r["status"] == "firing":
            labels = dict(r["labels"])
            entity = " ".join(f"{k}={labels[k]}" for k in ("topic", "partition", "broker_id") if k in labels)
            out.append(f"{r['rule']} {entity}".strip())
    return sorted(out)


def evaluated_until_ms(lakehouse: str) -> int:
    """Event time (epoch ms) up to which the alerts job has evaluated the brokers' metrics: the newest of the
    engine's last_seen marks (gold.alerts_engine_state), 0 before its first evaluation."""
    from foundation.delta_io import read_rows
    from schemas.gold import ALERTS_STATE

    marks = [int(r["state"]) for r in read_rows(ALERTS_STATE, lakehouse, ["kind", "state"]).to_pylist()
             if r["kind"] == "last_seen" and r["state"].isdigit()]
    return max(marks, default=0)


# ---- the demo ------------------------------------------------------------------------------------------

def pipeline_config(lakehouse: str, path: Path) -> Path:
    """conf/pipeline.yaml with validate waiting longer for the bronze tables: the pipeline starts with the demo,
    so Spark's start-up overlaps Kafka's, and the collector writes its first batch only once Kafka is up."""
    import yaml

    raw = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
    raw["lakehouse"] = lakehouse
    raw.setdefault("validate", {})["wait_for_tables"] = "600 seconds"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def alert_counts(lakehouse: str) -> dict[str, tuple[int, int]]:
    """rule -> (firings, resolutions) in gold.alert_events."""
    from foundation.delta_io import read_rows
    from schemas.gold import ALERT_EVENTS

    out: dict[str, tuple[int, int]] = {}
    for r in read_rows(ALERT_EVENTS, lakehouse, ["rule", "status"]).to_pylist():
        fired, resolved = out.get(r["rule"], (0, 0))
        out[r["rule"]] = (fired + (r["status"] == "firing"), resolved + (r["status"] == "resolved"))
    return out


def run(args: argparse.Namespace, children: dict[str, Child], cluster: KafkaCluster) -> int:
    lake = str(Path(args.lakehouse).resolve())
    log_dir = Path(lake) / "_demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def elapsed() -> str:
        return f"[{time.monotonic() - started:3.0f} s]"

    def fault_alerts_firing() -> list[str]:
        return [a for a in firing_alerts(lake) if a.split()[0] in FAULT_RULES]

    children["receiver"] = Child("receiver", ["webhook-receiver", "--port", str(RECEIVER_PORT)], log_dir,
                                 echo=lambda line: line.startswith("webhook"))
    children["serve"] = Child("serve", ["serve", "--lakehouse", lake, "--port", str(args.port)], log_dir,
                              echo=lambda line: False)
    config = pipeline_config(lake, log_dir / "pipeline.yaml")
    children["pipeline"] = Child("pipeline", ["pipeline", "run", "--config", str(config), "--lakehouse", lake,
                                              "--trigger", "live", "--stop-when-idle", "5", "--status-every", "60"],
                                 log_dir, echo=lambda line: line.startswith("isrwatch pipeline:"))
    say(f"{elapsed()} webhook receiver on 127.0.0.1:{RECEIVER_PORT}, API and dashboards on "
        f"http://127.0.0.1:{args.port}/, pipeline starting (Spark); starting Kafka 4.3.1: 1 controller + 3 brokers "
        f"on 127.0.0.1, replica.lag.time.max.ms {args.lag_ms}")
    cluster.start()
    create_topics(cluster)
    say(f"{elapsed()} 1/6 Kafka up ({cluster.bootstrap_servers}); topics: " + "; ".join(
        f"{t} ({n} partitions, RF 3, " + ", ".join(f"{k}={v}" for k, v in c.items()) + f", producers acks={a})"
        for t, (n, c, a) in TOPICS.items()))
    workload = Workload(cluster.bootstrap_servers, args.rate).start()
    try:
        metrics = [arg for url in cluster.metrics_urls for arg in ("--metrics-url", url)]
        children["collect"] = Child("collect", ["collect", "--bootstrap-servers", cluster.bootstrap_servers, *metrics,
                                                "--lakehouse", lake, "--interval", f"{args.interval * 1000:.0f}ms",
                                                "--canary-rate", f"{args.canary_rate:g}"], log_dir,
                                    echo=lambda line: not line.startswith("collect batch"))
        live = list(children.values())
        wait_for(lambda: children["collect"].saw("collect batch 1:"), 90, "the collector's first batches", live)
        say(f"{elapsed()} 2/6 producing {args.rate:g} records/s to each topic; isrwatch collect writing a batch "
            f"every {args.interval:g} s (with the canary); waiting for the pipeline to catch up (Spark's first "
            f"micro-batches)")
        # Validate's first micro-batch takes every batch written while Spark was starting; then it keeps up, a few
        # seconds behind (more on 2 cores shared with four JVMs and Spark).
        wait_for(lambda: evaluated_until_ms(lake) >= wall_ms() - CAUGHT_UP_MS, 480, "the pipeline to catch up", live)
        hold(args.healthy, live)
        behind_s = (wall_ms() - evaluated_until_ms(lake)) / 1000
        say(f"{elapsed()} 3/6 pipeline caught up (alerts evaluated to {behind_s:.0f} s ago); healthy: "
            f"{workload.describe()}; alerts firing: {', '.join(firing_alerts(lake)) or 'none'} (the topics' "
            f"configuration findings)")

        say(f"{elapsed()} 4/6 stall: SIGSTOP broker 2 for {args.stall:g} s (a long GC pause: it stops answering, "
            f"fetching and heartbeating; the controller fences it after 9 s)")
        cluster.pause(2)
        hold(args.stall, live)
        cluster.resume(2)
        took = wait_for(lambda: isr_whole(cluster), 120, "every ISR whole after the stall", live)
        say(f"{elapsed()}     broker 2 resumed; every ISR whole again {took:.0f} s later; {workload.describe()}")

        say(f"{elapsed()} 5/6 crash: SIGKILL broker 3, down for {args.down:g} s, then restarted")
        cluster.kill(3)
        hold(args.down, live)
        cluster.restart(3)
        took = wait_for(lambda: isr_whole(cluster), 180, "every ISR whole after the restart", live)
        say(f"{elapsed()}     broker 3 restarted and registered; every ISR whole {took:.0f} s later; "
            f"{workload.describe()}")

        say(f"{elapsed()} 6/6 settling: waiting up to {args.settle:g} s for the pipeline to catch up and the fault "
            f"alerts to resolve")
        recovered_ms = wall_ms()
        with contextlib.suppress(DemoError):
            wait_for(lambda: evaluated_until_ms(lake) >= recovered_ms and not fault_alerts_firing(), args.settle,
                     "the fault alerts to resolve", live)
    finally:
        workload.stop()
    say(f"{elapsed()} stopping: the collector (its last batch), then the pipeline once it has caught up")
    collect_rc = children["collect"].stop(signal.SIGINT)
    pipeline_rc = children["pipeline"].proc.wait(180) if children["pipeline"].alive() else \
        children["pipeline"].proc.returncode
    still = fault_alerts_firing()
    by_design = [a for a in firing_alerts(lake) if a not in still]
    counts = alert_counts(lake)
    for name in ("serve", "receiver"):
        children[name].stop()
    cluster.stop()
    say(f"{elapsed()} summary (isrwatch sql over {lake}):")
    sql = subprocess.run([*ISRWATCH, "sql", "--lakehouse", lake], input=SUMMARY_SQL, text=True, cwd=ROOT,
                         capture_output=True, timeout=300)
    print(sql.stdout, end="", flush=True)
    if sql.returncode != 0:
        print(sql.stderr, file=sys.stderr)
    fired = {r: c for r, c in counts.items() if r in FAULT_RULES and c[0] > 0}
    missing = [r for r in EXPECTED_RULES if r not in fired]
    ok = collect_rc == 0 and pipeline_rc == 0 and sql.returncode == 0 and not still and not missing
    alive = [c.name for c in children.values() if c.alive()] + [str(pid) for pid in cluster.running_processes()]
    kinds: dict[str, int] = {}
    for a in by_design:
        kinds[a.split()[0]] = kinds.get(a.split()[0], 0) + 1
    say(f"{elapsed()} {'done' if ok else 'FINISHED WITH PROBLEMS'}: fault alerts fired/resolved "
        + (", ".join(f"{r} {f}/{n}" for r, (f, n) in sorted(fired.items())) or "none")
        + (f"; expected but never fired: {', '.join(missing)}" if missing else "")
        + f"; still firing: {', '.join(still) or 'none'}"
        + (f" (and by design {', '.join(f'{r} x{n}' for r, n in sorted(kinds.items()))}: windowed or config alerts)"
           if kinds else "")
        + f"; collector exit {collect_rc}, pipeline exit {pipeline_rc}, sql exit {sql.returncode}; "
        + (f"still running: {', '.join(alive)}" if alive else "every process it started has stopped")
        + f"; logs in {log_dir}; `.venv/bin/isrwatch serve --lakehouse {args.lakehouse}` serves the dashboards again")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testing.kafka.demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--lakehouse", default="lakehouse-kafka", help="lakehouse root (emptied at the start)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("ISRWATCH_DEMO_PORT", "8080")),
                    help="port of `isrwatch serve` (env ISRWATCH_DEMO_PORT)")
    ap.add_argument("--rate", type=float, default=20.0, help="records/s produced to each topic")
    # Four Kafka JVMs, Spark, the collector and the producers share the cores: at a 1 s interval on 2 cores the
    # pipeline's micro-batches fall minutes behind the collector.
    ap.add_argument("--interval", type=float, default=2.0, help="isrwatch collect's interval, seconds")
    ap.add_argument("--canary-rate", type=float, default=5.0, help="canary records/s per partition")
    ap.add_argument("--healthy", type=float, default=10.0, help="seconds of healthy cluster before the faults")
    ap.add_argument("--stall", type=float, default=50.0,
                    help="seconds broker 2 stays SIGSTOPped: its replicas leave the ISR after 5-9 s, and "
                         "UnderReplicated fires after 30 s out of it")
    ap.add_argument("--down", type=float, default=20.0, help="seconds broker 3 stays killed (its restart adds ~20 s)")
    ap.add_argument("--settle", type=float, default=90.0,
                    help="seconds at most to wait for the pipeline to catch up and the fault alerts to resolve")
    ap.add_argument("--lag-ms", type=int, default=5000, help="the brokers' replica.lag.time.max.ms")
    ap.add_argument("--heap", default="384m", help="heap of each Kafka JVM")
    args = ap.parse_args(argv)

    for port, what in ((RECEIVER_PORT, "the webhook receiver (conf/alerts.yaml sends there)"),
                       (args.port, "isrwatch serve (--port or ISRWATCH_DEMO_PORT picks another)")):
        if not port_free(port):
            print(f"{PREFIX} port {port} on 127.0.0.1 is taken; it is needed for {what}", file=sys.stderr)
            return 2
    lake = Path(args.lakehouse)
    if lake.exists() and any(lake.iterdir()) and not (lake / "bronze").is_dir():
        print(f"{PREFIX} {lake} exists and is not a lakehouse; pass another --lakehouse", file=sys.stderr)
        return 2
    shutil.rmtree(lake, ignore_errors=True)

    # Ctrl-C or SIGTERM: unwind through the finally below, which stops every child and every JVM.
    def interrupt(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    workdir = Path(tempfile.mkdtemp(prefix="isrwatch-demo-kafka-"))
    cluster = KafkaCluster(workdir, brokers=3, heap=args.heap,
                           broker_config={"replica.lag.time.max.ms": str(args.lag_ms)})
    children: dict[str, Child] = {}
    try:
        return run(args, children, cluster)
    except KeyboardInterrupt:
        say("interrupted: stopping every process it started")
        return 130
    except (DemoError, KafkaFixtureError) as e:
        say(f"FAILED: {e}")
        return 1
    finally:
        left = [c for c in children.values() if c.alive()]
        jvms = cluster.running_processes()
        for child in left:
            child.stop(signal.SIGINT if child.name in ("collect", "pipeline") else signal.SIGTERM)
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if left or jvms:
            say(f"stopped {', '.join(c.name for c in left) or 'no isrwatch process'} and {len(jvms)} Kafka JVMs; "
                f"still running: {[c.name for c in children.values() if c.alive()] + cluster.running_processes()}")


if __name__ == "__main__":
    sys.exit(main())
