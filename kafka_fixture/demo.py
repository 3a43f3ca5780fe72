"""`make demo-kafka`: isrwatch watching a real Kafka cluster through a stalled broker and a crashed one.

    .venv/bin/python -m kafka_fixture.demo [--lakehouse lakehouse-kafka] [--port 8080] [--stall 40] [--down 30]

Starts the fixture's Kafka 4.3.1 cluster (1 controller + 3 brokers on 127.0.0.1, replica.lag.time.max.ms
5 s), creates two topics (`orders`: RF 3, min ISR 2, written with acks=all; `telemetry`: RF 3, min ISR 1,
unclean leader election on, written with acks=1) and produces to both, then runs `isrwatch webhook-receiver`
(its alerts are printed as they arrive), `isrwatch collect` (with the canary, every node's exporter),
`isrwatch pipeline run --trigger live` and `isrwatch serve` over one lakehouse. The faults: broker 2 is
SIGSTOPped for `--stall` s and resumed; then broker 3 is SIGKILLed, left down `--down` s and restarted. Once
the ISRs are whole again and the alerts have resolved, everything stops (every subprocess and JVM, also on
Ctrl-C or a failure) and `isrwatch sql` prints a summary. About 4 minutes on 2 cores.

The children's own output goes to `<lakehouse>/_demo/*.log`; the lakehouse is emptied at the start.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from kafka_fixture.cluster import KafkaCluster, KafkaFixtureError

ROOT = Path(__file__).resolve().parent.parent
ISRWATCH = [sys.executable, "-m", "isrwatch.cli"]
RECEIVER_PORT = 9095  # conf/alerts.yaml's receiver
PREFIX = "isrwatch demo-kafka:"
TOPICS = {
    # name: (partitions, topic config, producer acks)
    "orders": (6, {"min.insync.replicas": "2"}, "all"),
    "telemetry": (3, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}, "1"),
}
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


class DemoError(Exception):
    """Raised when a step of the demo cannot go on (a child exited, the cluster did not recover in time)."""


# ---- children ------------------------------------------------------------------------------------------

def _own_group_and_die_with_parent() -> None:
    # Between fork and exec: a process group of its own (the terminal's Ctrl-C reaches the demo only, which
    # stops the children in order) and SIGTERM when the demo dies, so no child outlives a killed demo.
    os.setpgrp()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Child:
    """An isrwatch subprocess whose output goes to a log file, the lines `echo` accepts also to our stdout."""

    def __init__(self, name: str, args: list[str], log_dir: Path, echo: Callable[[str], bool]) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.proc = subprocess.Popen([*ISRWATCH, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                     preexec_fn=_own_group_and_die_with_parent)
        self.lines: list[str] = []
        self._echo = echo
        self._log: IO[str] = open(self.log_path, "w")  # noqa: SIM115 - closed by the reader thread
        self._reader = threading.Thread(target=self._read, name=f"demo-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self._log:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                self._log.write(line)
                self._log.flush()
                if self._echo(line):
                    print(line, end="", flush=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Signal it (its own clean stop), wait, then SIGKILL; its exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._reader.join(5)
        return self.proc.returncode

    def tail(self, n: int = 15) -> str:
        return "\n".join(f"    {line}" for line in self.lines[-n:])


# ---- the producer workload -----------------------------------------------------------------------------

class Workload:
    """A confluent_kafka Producer per topic at `rate` records/s each, counting acknowledgements and errors."""

    def __init__(self, bootstrap: str, rate: float) -> None:
        from confluent_kafka import Producer

        self.rate = rate
        self.producers = {t: Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                                       "message.timeout.ms": 10000, "log_level": 0,
                                       "enable.idempotence": acks == "all"})
                          for t, (_, _, acks) in TOPICS.items()}
        self.acked = dict.fromkeys(TOPICS, 0)
        self.failed = dict.fromkeys(TOPICS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-workload", daemon=True)

    def _delivered(self, topic: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, _msg: Any) -> None:
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
        return ", ".join(f"{t} {self.acked[t]} acked / {self.failed[t]} failed" for t in TOPICS)


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


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, children: list[Child]) -> float:
    began = time.monotonic()
    while not condition():
        for child in children:
            if not child.alive():
                raise DemoError(f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}")
        if time.monotonic() - began > timeout_s:
            raise DemoError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)
    return time.monotonic() - began


def hold(seconds: float, children: list[Child]) -> None:
    deadline = time.monotonic() + seconds
    wait_for(lambda: time.monotonic() >= deadline, seconds + 5, "a pause", children)


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


def alerts_ran(lakehouse: str) -> bool:
    """The alerts job has committed a micro-batch (it creates its tables empty at start, version 0)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from schemas.gold import ALERTS_STATE

    try:
        return DeltaTable(ALERTS_STATE.path(lakehouse)).version() >= 1
    except TableNotFoundError:
        return False


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---- the demo ------------------------------------------------------------------------------------------

def run(args: argparse.Namespace, children: dict[str, Child], cluster: KafkaCluster) -> int:
    lake = str(Path(args.lakehouse).resolve())
    log_dir = Path(lake) / "_demo"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def elapsed() -> str:
        return f"[{time.monotonic() - started:5.0f} s]"

    children["receiver"] = Child("receiver", ["webhook-receiver", "--port", str(RECEIVER_PORT)], log_dir,
                                 echo=lambda line: line.startswith("webhook"))
    say(f"{elapsed()} starting Kafka 4.3.1: 1 controller + 3 brokers on 127.0.0.1, replica.lag.time.max.ms "
        f"{args.lag_ms} (this takes ~30-60 s)")
    cluster.start()
    create_topics(cluster)
    say(f"{elapsed()} 1/6 cluster up ({cluster.bootstrap_servers}); topics: " + "; ".join(
        f"{t} ({n} partitions, RF 3, " + ", ".join(f"{k}={v}" for k, v in c.items()) + f", producers acks={a})"
        for t, (n, c, a) in TOPICS.items()))
    workload = Workload(cluster.bootstrap_servers, args.rate).start()
    try:
        metrics = [arg for url in cluster.metrics_urls for arg in ("--metrics-url", url)]
        children["collect"] = Child("collect", ["collect", "--bootstrap-servers", cluster.bootstrap_servers, *metrics,
                                                "--lakehouse", lake], log_dir,
                                    echo=lambda line: not line.startswith("collect batch"))
        live = list(children.values())
        wait_for(lambda: children["collect"].saw("collect batch 1:"), 90, "the collector's first batches", live)
        children["serve"] = Child("serve", ["serve", "--lakehouse", lake, "--port", str(args.port)], log_dir,
                                  echo=lambda line: False)
        children["pipeline"] = Child("pipeline", ["pipeline", "run", "--lakehouse", lake, "--trigger", "live",
                                                  "--stop-when-idle", "10", "--status-every", "60"], log_dir,
                                     echo=lambda line: line.startswith("isrwatch pipeline:"))
        live = list(children.values())
        say(f"{elapsed()} 2/6 producing {args.rate:g} records/s to each topic; collector (with the canary), "
            f"pipeline and API starting; dashboards at http://127.0.0.1:{args.port}/")
        wait_for(lambda: alerts_ran(lake), 240, "the pipeline's alerts job to commit its first micro-batch", live)
        hold(args.healthy, live)
        say(f"{elapsed()} 3/6 healthy: {workload.describe()}; firing: {', '.join(firing_alerts(lake)) or 'none'}")

        say(f"{elapsed()} 4/6 stall: SIGSTOP broker 2 for {args.stall:g} s (a long GC pause: it stops answering, "
            f"fetching and heartbeating)")
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
        say(f"{elapsed()}     broker 3 restarted; every ISR whole again {took:.0f} s later; {workload.describe()}")

        say(f"{elapsed()} 6/6 settling: waiting up to {args.settle:g} s for the alerts to resolve")
        with contextlib.suppress(DemoError):
            wait_for(lambda: not firing_alerts(lake), args.settle, "the alerts to resolve", live)
        still = firing_alerts(lake)
    finally:
        workload.stop()
    say(f"{elapsed()} stopping: collector (its last batch), then the pipeline once it has caught up")
    collect_rc = children["collect"].stop(signal.SIGINT)
    pipeline_rc = children["pipeline"].proc.wait(120) if children["pipeline"].alive() else \
        children["pipeline"].proc.returncode
    for name in ("serve", "receiver"):
        children[name].stop()
    cluster.stop()
    say(f"{elapsed()} summary (isrwatch sql over {lake}):")
    sql = subprocess.run([*ISRWATCH, "sql", "--lakehouse", lake], input=SUMMARY_SQL, text=True, cwd=ROOT,
                         capture_output=True, timeout=300)
    print(sql.stdout, end="", flush=True)
    if sql.returncode != 0:
        print(sql.stderr, file=sys.stderr)
    ok = collect_rc == 0 and pipeline_rc == 0 and sql.returncode == 0 and not still
    alive = [c.name for c in children.values() if c.alive()] + [str(pid) for pid in cluster.running_processes()]
    say(f"{elapsed()} {'done' if ok else 'FINISHED WITH PROBLEMS'}: collector exit {collect_rc}, pipeline exit "
        f"{pipeline_rc}, sql exit {sql.returncode}; alerts firing at the end: {', '.join(still) or 'none'}; "
        f"{'still running: ' + ', '.join(alive) if alive else 'every process it started has stopped'}; logs in "
        f"{log_dir}; `.venv/bin/isrwatch serve --lakehouse {args.lakehouse}` serves the dashboards again")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kafka_fixture.demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--lakehouse", default="lakehouse-kafka", help="lakehouse root (emptied at the start)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("ISRWATCH_DEMO_PORT", "8080")),
                    help="port of `isrwatch serve` (env ISRWATCH_DEMO_PORT)")
    ap.add_argument("--rate", type=float, default=50.0, help="records/s produced to each topic")
    ap.add_argument("--healthy", type=float, default=15.0, help="seconds of healthy cluster before the faults")
    ap.add_argument("--stall", type=float, default=40.0,
                    help="seconds broker 2 stays SIGSTOPped (UnderReplicated fires after 30 s out of the ISR)")
    ap.add_argument("--down", type=float, default=30.0, help="seconds broker 3 stays killed")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds at most to wait for the alerts to resolve")
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
