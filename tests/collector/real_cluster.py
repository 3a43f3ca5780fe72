"""What the real-cluster collector tests drive a cluster with: traffic, the collector in a thread, waiting."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Producer

from collector.collect_loop import Collector
from testing.kafka import KafkaCluster

TOPIC = "orders"


@contextlib.contextmanager
def started(cluster: KafkaCluster) -> Iterator[KafkaCluster]:
    """`cluster` started, and stopped at the end whatever happened, with no JVM of it left."""
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert cluster.running_processes() == [] and cluster.leftover_process_groups() == [], \
            "every JVM the fixture started is gone"


class Load:
    """acks=1 traffic to every partition, so a stalled follower falls behind the leader's log end."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                                  "message.timeout.ms": 5000, "log_level": 0})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for p in range(6):
                with contextlib.suppress(BufferError):
                    self.producer.produce(TOPIC, b"x" * 100, partition=p)
            self.producer.poll(0.02)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.producer.flush(5)


class Running:
    """The collector in a thread, with every step's status kept."""

    def __init__(self, collector: Collector, on_step: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.collector = collector
        self.on_step = on_step
        self.steps: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.collector.run(on_step=self._step, should_stop=self.stopping.is_set)

    def _step(self, status: dict[str, Any]) -> None:
        self.steps.append({**status, "at": time.monotonic()})
        if self.on_step is not None:
            self.on_step(status)

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.collector.close()


def wait_for(condition: Any, timeout_s: float, what: str, explain: Callable[[], str] | None = None) -> None:
    """Poll `condition` until it holds; on timeout fail with `what` and what `explain` then says of the cluster."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    seen = ""
    if explain is not None:
        try:
            seen = f"; seen: {explain()}"
        except Exception as e:  # the timeout is the failure: a failed description must not hide it
            seen = f"; describing the cluster failed: {e!r}"
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{seen}")


def isr_of(cluster: KafkaCluster, topic: str = TOPIC) -> dict[int, list[int]]:
    md = cluster.admin_client().list_topics(topic, timeout=5)
    return {p: list(m.isrs) for p, m in md.topics[topic].partitions.items()}


def leaders_of(cluster: KafkaCluster, topic: str) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, ISR), as a broker's metadata says (5 s timeout)."""
    md = cluster.admin_client().list_topics(topic, timeout=5)
    return {p: (m.leader, list(m.isrs)) for p, m in sorted(md.topics[topic].partitions.items())}
