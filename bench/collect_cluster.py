"""bench/collect.py's cluster side: other Kafka JVMs on the machine, the bench's own Metadata probe (broker by
broker, with a timeout), creating the topics, the SIGSTOP faults with the fencing time measured beside them,
and from bronze the first commits that show them."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from collector.cluster_view import METADATA_VERSION
from collector.kafka_wire import BrokerConnection, BrokerUnavailable
from foundation.delta_io import read_rows
from schemas.bronze import CLUSTER_EVENTS, RUNS, BrokerStateCause, EventType
from testing.kafka import KafkaCluster


def log(msg: str) -> None:
    print(f"bench collect: {msg}", file=sys.stderr, flush=True)


class CollectorRun(Protocol):
    """What the faults need of the instrumented collector: when each batch began and when its commit ended."""

    started: dict[int, float]
    commit_done: dict[int, float]


# ---- the machine ---------------------------------------------------------------------------------------

def kafka_jvms() -> set[int]:
    """Pids of every Kafka broker or controller JVM on the machine (anyone's)."""
    out = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" in cmdline and cmdline[0].endswith(b"java"):
            out.add(int(entry))
    return out


def others(cluster: KafkaCluster | None) -> list[int]:
    mine = set(cluster.running_processes()) if cluster is not None else set()
    return sorted(kafka_jvms() - mine)


def wait_quiet(max_s: float, poll_s: float = 30.0) -> float:
    """Wait (polling every poll_s) up to max_s for other Kafka JVMs to go; the seconds waited."""
    began = time.monotonic()
    while (busy := others(None)) and time.monotonic() - began < max_s:
        log(f"{len(busy)} Kafka JVMs of someone else running (pids {busy}); waiting "
            f"({time.monotonic() - began:.0f} of at most {max_s:.0f} s)")
        time.sleep(poll_s)
    return time.monotonic() - began


def out_of_memory(cluster: KafkaCluster) -> list[int]:
    """Nodes whose JVM reported an OutOfMemoryError (their figures are then not the cluster's normal ones)."""
    out = []
    for node in cluster.nodes.values():
        log = node.directory / "logs" / "stdout.log"
        if log.exists() and "OutOfMemoryError" in log.read_text(errors="replace"):
            out.append(node.node_id)
    return out


# ---- the cluster as the bench sees it ------------------------------------------------------------------

class Probe:
    """Metadata requests of the bench's own, broker by broker with a timeout (librdkafka's admin client
    stalls on a SIGSTOPped broker); asks the first broker in `order` that answers."""

    def __init__(self, addresses: dict[int, str], timeout_s: float = 2.0) -> None:
        self.conns = {b: BrokerConnection(a, timeout_s) for b, a in addresses.items()}

    def metadata(self, all_topics: bool, skip: int | None = None) -> Any:
        for b, conn in sorted(self.conns.items()):
            if b == skip:
                continue
            try:
                return conn.request(MetadataRequest(topics=None if all_topics else [], allow_auto_topic_creation=False),
                                    MetadataResponse, METADATA_VERSION)
            except BrokerUnavailable:
                continue
        return None

    def topic_partitions(self, topics: list[str]) -> list[Any] | None:
        """DescribeTopicPartitions' partitions of `topics` (each with its topic's name as `topic`) from the first broker
        that answers every page, or None. Unlike Metadata v7 it carries each partition's eligible leader replicas."""
        for _, conn in sorted(self.conns.items()):
            out: list[Any] = []
            cursor = None
            try:
                while True:
                    answer = conn.request(DescribeTopicPartitionsRequest(
                        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=t) for t in topics],
                        response_partition_limit=2000, cursor=cursor), DescribeTopicPartitionsResponse, 0)
                    out += [(t.name, p) for t in answer.topics if t.error_code == 0 for p in t.partitions
                            if p.error_code == 0]
                    if answer.next_cursor is None:
                        return out
                    cursor = DescribeTopicPartitionsRequest.Cursor(topic_name=answer.next_cursor.topic_name,
                                                                   partition_index=answer.next_cursor.partition_index)
            except BrokerUnavailable:
                continue
        return None

    def brokers(self, skip: int | None = None) -> set[int] | None:
        meta = self.metadata(False, skip)
        return None if meta is None else {b.node_id for b in meta.brokers}

    def health(self, skip: int | None = None) -> tuple[int, int, int, set[int]]:
        """(partitions, with a leader, with a whole ISR, registered brokers) of the non-internal topics."""
        meta = self.metadata(True, skip)
        if meta is None:
            return 0, 0, 0, set()
        parts = [p for t in meta.topics if not t.is_internal and t.error_code == 0 for p in t.partitions]
        return (len(parts), sum(p.leader_id >= 0 for p in parts),
                sum(len(p.isr_nodes) == len(p.replica_nodes) for p in parts), {b.node_id for b in meta.brokers})

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.5) -> float:
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(poll_s)
    return time.monotonic() - began


def create_topics(cluster: KafkaCluster, probe: Probe, partitions: int, topics: int, calls: int,
                  extra_topic_config: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    per_topic = [partitions // topics + (1 if i < partitions % topics else 0) for i in range(topics)]
    new = [NewTopic(f"bench-{i:02d}", num_partitions=n, replication_factor=3,
                    config={"min.insync.replicas": "2", **extra_topic_config}) for i, n in enumerate(per_topic)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    began = time.monotonic()
    chunk = max(1, -(-len(new) // calls))
    for i in range(0, len(new), chunk):
        batch = new[i:i + chunk]
        futures = admin.create_topics(batch, request_timeout=120, operation_timeout=120)
        for future in futures.values():
            future.result(180)
        log(f"created {sum(t.num_partitions for t in batch)} partitions in {len(batch)} topics "
            f"({time.monotonic() - began:.0f} s so far)")
    del admin

    def ready() -> bool:
        total, led, whole, _ = probe.health()
        return total == partitions and led == partitions and whole == partitions

    waited = wait_until(ready, 600, f"{partitions} partitions with a leader and a whole ISR", poll_s=2)
    log(f"{partitions} partitions at RF 3 have a leader and a whole ISR ({time.monotonic() - began:.0f} s in all, "
        f"{waited:.0f} s of it waiting for leaders)")


# ---- phase 2: faults -----------------------------------------------------------------------------------

class FenceWatch:
    """Polls the broker list every 100 ms (from the other brokers) and notes when `broker` leaves it."""

    def __init__(self, probe: Probe, broker: int) -> None:
        self.probe, self.broker = probe, broker
        self.fenced_at: float | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-fence-watch", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            brokers = self.probe.brokers(skip=self.broker)
            if brokers is not None and self.broker not in brokers:
                self.fenced_at = time.monotonic()
                return
            time.sleep(0.1)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


def isr_whole(cluster: KafkaCluster, probe: Probe) -> bool:
    """Every partition led, every ISR whole, every broker registered."""
    total, led, whole, registered = probe.health()
    return total > 0 and led == total == whole and set(cluster.broker_ids()) <= registered


def one_fault(cluster: KafkaCluster, probe: Probe, run: CollectorRun, broker: int, label: str, hold_s: float,
              session_timeout_s: float) -> dict[str, Any]:
    """Wait for every ISR to be whole, SIGSTOP `broker` until it is fenced, the collector has committed a batch
    begun after that, and `hold_s` s have passed since the fence; resume it."""

    waited = wait_until(lambda: isr_whole(cluster, probe), 300, "every ISR whole again", poll_s=1)
    log(f"{label}: every ISR whole ({waited:.0f} s waited); SIGSTOP broker {broker}")
    watch = FenceWatch(probe, broker)
    paused_at = time.monotonic()
    cluster.pause(broker)
    try:
        wait_until(lambda: watch.fenced_at is not None, session_timeout_s * 3 + 10, f"broker {broker} fenced",
                   poll_s=0.1)
        assert watch.fenced_at is not None
        fenced_at = watch.fenced_at
        log(f"{label}: broker {broker} fenced after {fenced_at - paused_at:.1f} s")

        def seen_by_collector() -> bool:
            return any(run.started.get(b, 0) > fenced_at for b in list(run.commit_done))

        wait_until(seen_by_collector, 60, "a collector batch begun after the fence", poll_s=0.1)
        time.sleep(max(0.0, fenced_at + hold_s - time.monotonic()))
    finally:
        watch.stop()
        cluster.resume(broker)
    resumed_at = time.monotonic()
    log(f"{label}: broker {broker} resumed after {resumed_at - paused_at:.1f} s")
    return {"broker": broker, "paused_at": paused_at, "resumed_at": resumed_at,
            "fenced_after_s": None if watch.fenced_at is None else watch.fenced_at - paused_at}


def inject_faults(cluster: KafkaCluster, run: CollectorRun, faults: int, brokers: list[int], hold_s: float,
                  session_timeout_s: float) -> list[dict[str, Any]]:
    probe = Probe({b: cluster.nodes[b].address for b in cluster.broker_ids()})
    out = []
    try:
        for i in range(faults):
            out.append(one_fault(cluster, probe, run, brokers[i % len(brokers)], f"fault {i + 1}/{faults}", hold_s,
                                 session_timeout_s))
        waited = wait_until(lambda: isr_whole(cluster, probe), 300, "every ISR whole again", poll_s=1)
        log(f"every ISR whole again {waited:.0f} s after the last resume")
    finally:
        probe.close()
    return out


def fault_figures(lake: str, run_id: str, run: CollectorRun, faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fault, from the bronze tables: the first batch committed after the SIGSTOP whose runs summary shows
    the broker not answering (and its broker_state event), and the batch with the collector's `fenced` event."""
    runs = {r["batch_id"]: json.loads(r["summary"]) for r in read_rows(RUNS, lake).to_pylist() if r["run_id"] == run_id}
    events = [e for e in read_rows(CLUSTER_EVENTS, lake).to_pylist() if e["run_id"] == run_id]
    return [one_fault_figures(f, runs, events, run.commit_done) for f in faults]


def one_fault_figures(fault: dict[str, Any], runs: dict[int, dict[str, Any]], events: list[dict[str, Any]],
                      commit_done: dict[int, float]) -> dict[str, Any]:
    b = fault["broker"]
    batches = sorted(batch for batch, done in commit_done.items() if done > fault["paused_at"])
    silent_in = {batch for batch in batches if str(b) in runs.get(batch, {}).get("not_answering", {})}
    silent_events = {e["batch_id"] for e in events
                     if e["event_type"] == EventType.BROKER_STATE and e["broker_id"] == b
                     and e["cause"] == BrokerStateCause.NOT_ANSWERING}
    fenced_events = {e["batch_id"] for e in events if e["event_type"] == "fenced" and e["broker_id"] == b}
    silent = next((batch for batch in batches if batch in silent_in), None)
    silent_event = next((batch for batch in batches if batch in silent_events), None)
    fenced = next((batch for batch in batches if batch in fenced_events), None)
    return {**fault, "silent_batch": silent, "silent_event_batch": silent_event, "fenced_batch": fenced,
            "silent_commit_s": None if silent is None else commit_done[silent] - fault["paused_at"],
            "fenced_commit_s": None if fenced is None else commit_done[fenced] - fault["paused_at"]}
