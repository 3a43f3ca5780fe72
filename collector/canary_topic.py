"""The canary's settings and its topic: one partition led by each broker, created if absent, its replicas
rotated so broker i is partition i's preferred leader; Kafka's names for the errors a producer can get."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

log = logging.getLogger("collector.canary")


DEFAULT_TOPIC = "__isrwatch_canary"
LIBRDKAFKA_LOGGER = "collector.canary.librdkafka"
# After a restart the sequence numbers continue this far above the saved next one, so that records a crashed
# canary wrote after its last save can never be taken for the new ones.
SEQ_RESTART_GAP = 1 << 32
# How long a broker may hold the consumer's fetch when it has no new record (fetch_max_wait_ms).
CONSUMER_FETCH_WAIT_MS = 100
# librdkafka error names that differ from Kafka's (Errors.java), for the codes a producer can get.
_KAFKA_NAMES = {2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE",
                6: "NOT_LEADER_OR_FOLLOWER", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
                17: "INVALID_TOPIC_EXCEPTION"}


class CanaryError(Exception):
    """Raised when the canary cannot set up its topic or clients, or one of its worker threads has failed."""


def kafka_error_name(error: KafkaError) -> str:
    """Kafka's name for a broker error code (librdkafka's where Kafka has none, e.g. `_MSG_TIMED_OUT`)."""
    return _KAFKA_NAMES.get(error.code(), error.name())


def quiet_librdkafka_logger() -> logging.Logger:
    """A logger for librdkafka's lines that prints nothing (without one, librdkafka writes to file descriptor 2;
    a client still alive while its cluster stops prints a refused connection every 50 ms)."""
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class CanaryConfig:
    """The canary's settings; every duration in ms, the rate in records per second per partition."""

    bootstrap_servers: str
    topic: str = DEFAULT_TOPIC
    records_per_second: float = 10.0
    min_insync_replicas: int = 2
    replication_factor: int | None = None          # None: the number of brokers
    topic_config: Mapping[str, str] = field(default_factory=dict)   # e.g. unclean.leader.election.enable
    delivery_timeout_ms: int = 5_000               # librdkafka message.timeout.ms: a refusal is known by then
    request_timeout_ms: int = 3_000                # how long a broker may hold an acks=all produce
    fetch_timeout_ms: int = 2_000                  # how long the consumer waits for one broker's answer
    retries: int = 1
    leader_grace_ms: int = 30_000                  # leadership off its preferred broker this long is moved back
    metadata_interval_ms: int = 1_000
    admin_timeout_ms: int = 5_000
    verify_horizon_ms: int = 3_600_000             # acknowledged records are watched this long
    # extra librdkafka settings (security, ...); out of the repr: it may hold passwords and keys
    client_config: Mapping[str, str] = field(default_factory=dict, repr=False)
    librdkafka_logger: logging.Logger | None = None  # None: a quiet one (LIBRDKAFKA_LOGGER, no output)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers:
            raise ValueError(f"bootstrap_servers must be a non-empty string, got {self.bootstrap_servers!r}")
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"topic must be a non-empty string, got {self.topic!r}")
        if not self.records_per_second > 0:
            raise ValueError(f"records_per_second must be > 0, got {self.records_per_second!r}")
        if self.min_insync_replicas < 1:
            raise ValueError(f"min_insync_replicas must be >= 1, got {self.min_insync_replicas!r}")
        if self.replication_factor is not None and self.replication_factor < 1:
            raise ValueError(f"replication_factor must be >= 1 or None, got {self.replication_factor!r}")
        if self.retries < 1:
            raise ValueError(f"retries must be >= 1 (the idempotent producer needs it), got {self.retries!r}")
        for name in ("delivery_timeout_ms", "request_timeout_ms", "fetch_timeout_ms", "leader_grace_ms",
                     "metadata_interval_ms", "admin_timeout_ms", "verify_horizon_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.fetch_timeout_ms <= CONSUMER_FETCH_WAIT_MS:
            raise ValueError(f"fetch_timeout_ms must exceed the consumer's fetch wait of {CONSUMER_FETCH_WAIT_MS} ms, "
                             f"got {self.fetch_timeout_ms!r}")
        if "min.insync.replicas" in self.topic_config:
            raise ValueError("topic_config must not set min.insync.replicas: use min_insync_replicas")



@dataclass(frozen=True)
class TopicLayout:
    """The canary topic as the cluster describes it: replicas in assignment order, leader (-1: none), ISR."""

    topic_id: str
    replicas: dict[int, list[int]]
    leaders: dict[int, int]
    isr: dict[int, list[int]]


def describe_layout(admin: AdminClient, topic: str, timeout_s: float) -> TopicLayout | None:
    """The topic's layout, or None if it does not exist. Raises KafkaException or TimeoutError."""
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
    try:
        desc = future.result(timeout=timeout_s + 1)
    except KafkaException as e:
        if e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        raise
    return TopicLayout(
        str(desc.topic_id),
        {p.id: [n.id for n in p.replicas] for p in desc.partitions},
        {p.id: -1 if p.leader is None else p.leader.id for p in desc.partitions},
        {p.id: [n.id for n in p.isr] for p in desc.partitions})


def metadata_layout(client: AdminClient | Producer | Consumer, topic: str, timeout_s: float) -> TopicLayout | None:
    """The topic's layout from a Metadata request to any live broker (topic_id ''), or None if the topic is
    unknown. librdkafka sends DescribeTopics to the cluster's `controller` broker, which in KRaft is one
    broker picked at random and stalls the request when that broker is dead or paused; this does not.
    Raises KafkaException."""
    topic_meta = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if topic_meta is None or topic_meta.error is not None or not topic_meta.partitions:
        return None
    partitions = topic_meta.partitions.values()
    return TopicLayout("", {p.id: list(p.replicas) for p in partitions}, {p.id: p.leader for p in partitions},
                       {p.id: list(p.isrs) for p in partitions})


def rotated_assignment(brokers: list[int], replication_factor: int, first: int = 0) -> list[int]:
    """Replicas of the partition whose preferred leader is brokers[first]: the brokers from there on, in turn."""
    return [brokers[(first + k) % len(brokers)] for k in range(replication_factor)]


def ensure_topic(admin: AdminClient, config: CanaryConfig, brokers: list[int], timeout_s: float) -> TopicLayout:
    """Create the canary topic (partition i led by the i-th broker) or bring an existing one in line: its configs
    set, a partition added for each broker that is the preferred leader of none. Waits until every partition has
    a leader. Raises CanaryError."""
    topic = config.topic
    rf = config.replication_factor or len(brokers)
    if rf > len(brokers):
        raise CanaryError(f"replication_factor {rf} exceeds the {len(brokers)} brokers of the cluster")
    configs = {"min.insync.replicas": str(config.min_insync_replicas), **config.topic_config}
    try:
        layout = describe_layout(admin, topic, timeout_s)
        if layout is None:
            assignment = [rotated_assignment(brokers, rf, i) for i in range(len(brokers))]
            new_topic = NewTopic(topic, len(assignment), replica_assignment=assignment, config=configs)
            future = admin.create_topics([new_topic], request_timeout=timeout_s)[topic]
            try:
                future.result(timeout=timeout_s + 1)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:   # another collector was quicker
                    raise
            partitions = len(brokers)
        else:
            _set_topic_configs(admin, topic, configs, timeout_s)
            led = {replicas[0] for replicas in layout.replicas.values() if replicas}
            added = [rotated_assignment(brokers, rf, i) for i, b in enumerate(brokers) if b not in led]
            partitions = len(layout.replicas) + len(added)
            if added:
                log.info("canary topic %s: adding partitions led by %s", topic, [a[0] for a in added])
                admin.create_partitions([NewPartitions(topic, partitions, replica_assignment=added)],
                                        request_timeout=timeout_s)[topic].result(timeout=timeout_s + 1)
        deadline = time.monotonic() + 6 * timeout_s
        while True:
            layout = describe_layout(admin, topic, timeout_s)
            if layout is not None and len(layout.leaders) >= partitions and min(layout.leaders.values()) >= 0:
                return layout
            if time.monotonic() > deadline:
                raise CanaryError(f"canary topic {topic}: not every partition has a leader: {layout}")
            time.sleep(0.2)
    except (KafkaException, TimeoutError) as e:
        raise CanaryError(f"canary topic {topic}: {e!r}") from e


def _set_topic_configs(admin: AdminClient, topic: str, configs: Mapping[str, str], timeout_s: float) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    current = next(iter(admin.describe_configs([resource], request_timeout=timeout_s).values())).result(
        timeout=timeout_s + 1)
    changes = {k: v for k, v in configs.items() if k not in current or current[k].value != v}
    if changes:
        log.info("canary topic %s: setting %s", topic, changes)
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.items()]
        futures = admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                  incremental_configs=entries)],
                                                  request_timeout=timeout_s)
        next(iter(futures.values())).result(timeout=timeout_s + 1)
