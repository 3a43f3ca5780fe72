"""The canary keeps each partition's leadership on its preferred broker: one led by each broker is what lets
it watch every broker. Leadership that has drifted (the preferred replica back in the ISR) for longer than a
grace period is moved back with a preferred election, at most once per grace period per partition."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from collector.canary_topic import CanaryConfig, TopicLayout, metadata_layout

log = logging.getLogger("collector.canary")


def keep_preferred_leaders(admin: AdminClient, config: CanaryConfig, closing: threading.Event, timeout_s: float,
                           on_layout: Callable[[TopicLayout, list[int]], None]) -> None:
    """Until `closing`: every metadata interval, read the topic's layout, call `on_layout(layout, elected)` with
    the partitions about to be moved back, then elect their preferred leaders."""
    drift_since: dict[int, float] = {}
    last_election: dict[int, float] = {}
    grace_s = config.leader_grace_ms / 1000
    while not closing.wait(config.metadata_interval_ms / 1000):
        admin.poll(0)   # serves librdkafka's log lines to the logger
        try:
            layout = metadata_layout(admin, config.topic, timeout_s)
        except (KafkaException, TimeoutError) as e:
            log.debug("canary metadata: %s", e)
            continue
        if layout is None:
            continue
        now = time.monotonic()
        elect = []
        for p, leader in layout.leaders.items():
            replicas = layout.replicas.get(p, [])
            preferred = replicas[0] if replicas else -1
            if leader != preferred and preferred in layout.isr.get(p, ()):
                since = drift_since.setdefault(p, now)
                if now - since >= grace_s and now - last_election.get(p, float("-inf")) >= grace_s:
                    elect.append(p)
                    last_election[p] = now
            else:
                drift_since.pop(p, None)
        on_layout(layout, elect)
        if elect:
            elect_preferred(admin, config.topic, elect, timeout_s)


def elect_preferred(admin: AdminClient, topic: str, partitions: list[int], timeout_s: float) -> None:
    log.info("canary: moving leadership of %s %s back to the preferred leaders", topic, partitions)
    try:
        # No timeouts passed: confluent-kafka 2.16.1's elect_leaders rejects request_timeout and
        # operation_timeout (a keyword-list bug in its C binding); the wait below bounds it instead.
        future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, p) for p in partitions])
        for tp, error in future.result(timeout=timeout_s + 1).items():
            if error is not None:
                log.info("canary: preferred election of partition %d: %s", tp.partition, error)
    except (KafkaException, TimeoutError) as e:
        log.info("canary: preferred election failed: %r", e)
