"""bronze.ack_ledger from a real cluster: an end-to-end canary, as Xinfra Monitor and KMinion run, but exact.

The canary owns a topic with one partition led by each broker (replication factor = brokers unless set,
partition i's replicas rotated so broker i is its preferred leader, min.insync.replicas 2 unless set), creates it
if absent, and moves a partition's leadership back to its preferred leader when it has drifted for longer than
a grace period. An idempotent acks=all producer writes sequence-numbered records to every partition at a set
rate; a consumer (assign(), no group) reads them back. Per partition and interval `take_interval` reports:

- sent, acknowledged, and refused by Kafka error code (librdkafka's names mapped to Kafka's, e.g.
  NOT_LEADER_FOR_PARTITION -> NOT_LEADER_OR_FOLLOWER; local ones keep librdkafka's `_MSG_TIMED_OUT`). A record
  is counted once, under the error of its last attempt (the producer retries at most `retries` times within
  `delivery_timeout_ms`). At every instant sent == acked + failed + in flight, summed over intervals.
  librdkafka reports a retry the broker found already written (DUPLICATE_SEQUENCE_NUMBER) as delivered with no
  offset: such a record counts as acknowledged, and is watched from where the consumer reads it.
- lost: acknowledged records shown gone by evidence (an acknowledgement at or below their offset, or another
  record read at their offset; see collector/canary_state.py), with their offsets, sequence numbers, when they
  were acknowledged and the broker that led the partition then, so the collector can attribute each loss to the
  unclean election or truncation its own event stream shows.
- duplicated (a record read at an offset other than the one its acknowledgement gave). Idempotence does not
  rule it out: a SIGSTOPped leader that resumes still appends the produce requests queued on its socket after
  librdkafka timed them out, bumped its producer epoch and sent the records again under the new epoch (seen
  against the fixture cluster: the log then holds them twice). Also: read back (confirmed),
  unverified (forgotten after the horizon without being read back: not a loss), produce latency (ack - send) and
  round-trip latency (read - send), p50/p99/max in ms.

What it knows survives a restart: `save_state` writes `<lakehouse>/_collector/<cluster id>/canary_state.json`
(atomically), and a canary started on the same lakehouse reads the partitions again from the oldest record it
remembers, so it still reports the loss of records acknowledged before the restart. Call `save_state` after the
interval's bronze rows are committed: a crash between the two reports that interval's losses again (at least
once), a crash before the commit detects them again from the state saved before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from collector.canary_state import (
    CanaryInterval,
    CanaryRecord,
    CanaryState,
    Duplicate,
    LatencySummary,
    LostRecords,
    PartitionInterval,
    ReadOutcome,
    decode_value,
    encode_value,
    write_json_atomic,
)

__all__ = ["DEFAULT_TOPIC", "Canary", "CanaryConfig", "CanaryError", "CanaryInterval", "Duplicate", "LatencySummary",
           "LostRecords", "PartitionInterval", "decode_value", "encode_value", "kafka_error_name"]

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "__isrwatch_canary"
LIBRDKAFKA_LOGGER = "collector.canary.librdkafka"
# After a restart the sequence numbers continue this far above the saved next one, so that records a crashed
# canary wrote after its last save can never be taken for the new ones.
SEQ_RESTART_GAP = 1 << 32
# librdkafka error names that differ from Kafka's (Errors.java), for the codes a producer can get.
_KAFKA_NAMES = {2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 4: "INVALID_FETCH_SIZE",
                6: "NOT_LEADER_OR_FOLLOWER", 10: "MESSAGE_TOO_LARGE", 11: "STALE_CONTROLLER_EPOCH",
                17: "INVALID_TOPIC_EXCEPTION"}


class CanaryError(Exception):
    """Raised when the canary cannot set up its topic or clients, or one of its worker threads has failed."""


def kafka_error_name(error: KafkaError) -> str:
    """Kafka's name for a broker error code (librdkafka's where Kafka has none, e.g. `_MSG_TIMED_OUT`)."""
    return _KAFKA_NAMES.get(error.code(), error.name())


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
    retries: int = 1
    leader_grace_ms: int = 30_000                  # leadership off its preferred broker this long is moved back
    metadata_interval_ms: int = 1_000
    admin_timeout_ms: int = 5_000
    verify_horizon_ms: int = 3_600_000             # acknowledged records are watched this long
    client_config: Mapping[str, str] = field(default_factory=dict)  # extra librdkafka settings (security, ...)
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
        for name in ("delivery_timeout_ms", "request_timeout_ms", "leader_grace_ms", "metadata_interval_ms",
                     "admin_timeout_ms", "verify_horizon_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if "min.insync.replicas" in self.topic_config:
            raise ValueError("topic_config must not set min.insync.replicas: use min_insync_replicas")


# ---- the canary topic ------------------------------------------------------------------------------

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


# ---- the canary ----------------------------------------------------------------------------------

@dataclass
class _Counters:
    sent: int = 0
    acked: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    confirmed: int = 0
    lost: list[LostRecords] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    unverified: int = 0
    consumer_resets: int = 0
    preferred_elections: int = 0
    acked_without_offset: int = 0
    produce_ms: list[int] = field(default_factory=list)
    round_trip_ms: list[int] = field(default_factory=list)


def _quiet_logger() -> logging.Logger:
    logger = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
        logger.propagate = False
    return logger


class Canary:
    """`start()`, then once per collection interval `take_interval(now_ms)` and `save_state()`; `stop()`."""

    def __init__(self, config: CanaryConfig, lakehouse: str | os.PathLike[str]) -> None:
        if not isinstance(config, CanaryConfig):
            raise TypeError(f"config must be a CanaryConfig, got {type(config).__name__}")
        if not isinstance(lakehouse, str | os.PathLike):
            raise TypeError(f"lakehouse must be a path, got {type(lakehouse).__name__}")
        self.config = config
        self.lakehouse = Path(lakehouse)
        self._lock = threading.Lock()
        self._state: CanaryState | None = None
        self._layout: TopicLayout | None = None
        self._counters: dict[int, _Counters] = {}
        self._in_flight: dict[int, dict[int, int]] = {}   # partition -> seq -> produce wall ms
        self._read_early: dict[int, dict[int, tuple[int, int]]] = {}  # partition -> seq -> (offset, read ms)
        self._unplaced: dict[int, dict[int, tuple[int, int]]] = {}    # partition -> seq -> (acked ms, leader)
        self._leaders: dict[int, int] = {}
        self._seeks: dict[int, int] = {}                  # partition -> offset the consumer must read from
        self._resets: set[int] = set()                    # partitions whose fetch position was refused
        self._unassigned: set[int] = set()
        self._duplicates_seen: set[tuple[int, int, int]] = set()
        self._fatal: KafkaError | None = None
        self._worker_error: BaseException | None = None
        self._stop_producing = threading.Event()
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._admin: AdminClient | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._started = self._stopped = False
        self._drain_deadline = 0.0

    # ---- public ----------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        if self._state is None:
            raise CanaryError("the canary has not started: the state path needs the cluster id")
        return self.lakehouse / "_collector" / self._state.cluster_id / "canary_state.json"

    @property
    def partitions(self) -> list[int]:
        return sorted(self._counters)

    @property
    def instance_id(self) -> str:
        if self._state is None:
            raise CanaryError("the canary has not started")
        return self._state.instance_id

    def start(self) -> Canary:
        """Set up the topic, load the saved state, start producing and consuming. Raises CanaryError."""
        if self._started:
            raise CanaryError("the canary was already started")
        self._started = True
        admin = AdminClient(self._client_config())
        try:
            cluster = admin.describe_cluster(request_timeout=self._admin_s).result(timeout=self._admin_s + 1)
        except KafkaException as e:
            raise CanaryError(f"cannot describe the cluster at {self.config.bootstrap_servers}: {e}") from e
        cluster_id = str(cluster.cluster_id)
        brokers = sorted(node.id for node in cluster.nodes)
        self._layout = ensure_topic(admin, self.config, brokers, self._admin_s)
        self._state = self._load_state(cluster_id, self._layout)
        partitions = sorted(self._layout.replicas)
        for p in partitions:
            ledger = self._state.ledger(p)
            self._counters[p] = _Counters(unverified=self._counters[p].unverified if p in self._counters else 0)
            self._in_flight[p] = {}
            self._read_early[p] = {}
            self._unplaced[p] = {}
            self._leaders[p] = self._layout.leaders.get(p, -1)
            # Read again from the oldest remembered record: a restarted canary checks what it acknowledged.
            start = ledger.first_offset if ledger.first_offset is not None else ledger.read_next
            if start is None:
                self._unassigned.add(p)   # assigned at its first acknowledged offset
            else:
                self._seeks[p] = start
        self._admin = admin
        self._producer = self._new_producer()
        self._consumer = Consumer({
            **self._client_config(), "group.id": f"isrwatch-canary-{self._state.instance_id}",
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "error",
            "isolation.level": "read_uncommitted", "fetch.wait.max.ms": 100, "enable.partition.eof": False,
            "error_cb": self._on_client_error})
        assign = [TopicPartition(self.config.topic, p, self._seeks.pop(p)) for p in partitions if p in self._seeks]
        if assign:
            self._consumer.assign(assign)
        for name, target in (("produce", self._produce_loop), ("consume", self._consume_loop),
                             ("metadata", self._metadata_loop)):
            thread = threading.Thread(target=self._guarded, args=(target,), name=f"isrwatch-canary-{name}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        log.info("canary started: topic %s, partitions %s, instance %s, state %s", self.config.topic, partitions,
                 self._state.instance_id, self.state_path)
        return self

    def take_interval(self, now_ms: int) -> CanaryInterval:
        """Everything counted since the previous call, per partition; `now_ms` is the interval's end (wall
        clock, ms since the epoch). Raises CanaryError if a worker thread has failed."""
        if not isinstance(now_ms, int) or isinstance(now_ms, bool):
            raise TypeError(f"now_ms must be an int, got {type(now_ms).__name__}")
        if self._state is None:
            raise CanaryError("the canary has not started")
        if self._worker_error is not None:
            raise CanaryError(f"a canary worker failed: {self._worker_error!r}") from self._worker_error
        cutoff_ms = now_ms - self.config.verify_horizon_ms
        rows = []
        with self._lock:
            for p in self.partitions:
                ledger = self._state.ledger(p)
                c = self._counters[p]
                c.unverified += ledger.expire(cutoff_ms)
                unplaced = self._unplaced[p]
                for seq in [seq for seq, (acked_ms, _) in unplaced.items() if acked_ms < cutoff_ms]:
                    del unplaced[seq]
                    c.unverified += 1
                rows.append(PartitionInterval(
                    p, self._leaders.get(p, -1), c.sent, c.acked, sum(c.failed.values()), dict(c.failed),
                    sum(lost.count for lost in c.lost), tuple(c.lost), len(c.duplicates), tuple(c.duplicates),
                    c.confirmed, c.unverified, len(self._in_flight[p]), ledger.unconfirmed, c.consumer_resets,
                    c.preferred_elections, LatencySummary.of(c.produce_ms), LatencySummary.of(c.round_trip_ms),
                    c.acked_without_offset))
                self._counters[p] = _Counters()
        return CanaryInterval(now_ms, self.config.topic, "all", tuple(rows))

    def save_state(self) -> Path:
        """Write what the canary remembers to the lakehouse (atomically); returns the file's path."""
        if self._state is None:
            raise CanaryError("the canary has not started")
        path = self.state_path
        with self._lock:
            self._state.saved_ms = wall_ms()
            data = self._state.to_json()
        write_json_atomic(path, data)
        return path

    def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop producing, wait (up to drain_timeout_s) for the outstanding records' answers and for the
        consumer to read back what was acknowledged, then stop. Safe to call twice and from a Ctrl-C handler."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        if not self._threads:   # start() failed before the workers ran
            return
        self._drain_deadline = time.monotonic() + drain_timeout_s
        self._stop_producing.set()
        self._threads[0].join(timeout=drain_timeout_s + 5)
        while time.monotonic() < self._drain_deadline and self._worker_error is None:
            with self._lock:
                if self._state is None or not any(self._state.ledger(p).unconfirmed for p in self.partitions):
                    break
            time.sleep(0.05)
        self._closing.set()
        for thread in self._threads[1:]:
            thread.join(timeout=self._admin_s + 5)
        if self._consumer is not None:
            self._consumer.close()
        log.info("canary stopped")

    def __enter__(self) -> Canary:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- set-up ----------------------------------------------------------------------------------

    @property
    def _admin_s(self) -> float:
        return self.config.admin_timeout_ms / 1000

    def _client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.config.bootstrap_servers, "client.id": "isrwatch-canary",
                "logger": self.config.librdkafka_logger or _quiet_logger(), **self.config.client_config}

    def _new_producer(self) -> Producer:
        return Producer({
            **self._client_config(), "acks": "all", "enable.idempotence": True, "retries": self.config.retries,
            "message.timeout.ms": self.config.delivery_timeout_ms,
            "request.timeout.ms": self.config.request_timeout_ms, "linger.ms": 5,
            "error_cb": self._on_producer_error})

    def _load_state(self, cluster_id: str, layout: TopicLayout) -> CanaryState:
        path = self.lakehouse / "_collector" / cluster_id / "canary_state.json"
        state = CanaryState.load(path)
        if state is not None and (state.topic, state.topic_id) != (self.config.topic, layout.topic_id):
            # Another topic, or the topic was deleted and created again: its offsets say nothing about this one.
            log.warning("canary state %s is for topic %s (id %s), not %s (id %s): starting afresh", path,
                        state.topic, state.topic_id, self.config.topic, layout.topic_id)
            for p, ledger in state.ledgers.items():
                self._counters.setdefault(p, _Counters()).unverified += ledger.unconfirmed
            state = None
        if state is None:
            return CanaryState(cluster_id, self.config.topic, layout.topic_id, os.urandom(8).hex())
        for ledger in state.ledgers.values():
            ledger.next_seq += SEQ_RESTART_GAP
        return state

    # ---- workers ---------------------------------------------------------------------------------

    def _guarded(self, target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as e:  # surfaced by take_interval: a canary that silently stopped would lie
            log.exception("canary worker %s failed", threading.current_thread().name)
            self._worker_error = e

    def _produce_loop(self) -> None:
        period_s = 1.0 / self.config.records_per_second
        next_tick = time.monotonic()
        while not self._stop_producing.is_set():
            if self._fatal is not None:
                self._replace_producer()
            now = time.monotonic()
            if now >= next_tick:
                self._produce_one_each()
                next_tick += period_s
                if now - next_tick > 1.0:   # fell behind (a stall): carry on at the rate, do not burst
                    next_tick = now + period_s
            assert self._producer is not None
            self._producer.poll(max(0.0, min(next_tick - time.monotonic(), 0.05)))
        assert self._producer is not None
        self._producer.flush(max(0.0, self._drain_deadline - time.monotonic()))

    def _produce_one_each(self) -> None:
        assert self._state is not None and self._producer is not None
        for p in self.partitions:
            produce_ms = wall_ms()
            with self._lock:
                ledger = self._state.ledger(p)
                seq = ledger.next_seq
                ledger.next_seq += 1
                self._in_flight[p][seq] = produce_ms
                self._counters[p].sent += 1
            value = encode_value(self._state.instance_id, p, seq, produce_ms)
            try:
                self._producer.produce(self.config.topic, value, partition=p, on_delivery=self._on_delivery)
            except BufferError:
                self._fail(p, seq, "_QUEUE_FULL")
            except KafkaException as e:
                self._fail(p, seq, kafka_error_name(e.args[0]))

    def _fail(self, partition: int, seq: int, error: str) -> None:
        with self._lock:
            if self._in_flight[partition].pop(seq, None) is not None:
                self._counters[partition].failed[error] += 1

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        record = decode_value(msg.value())
        if record is None or self._state is None or record.instance_id != self._state.instance_id:
            return
        now = wall_ms()
        p = record.partition
        with self._lock:
            if self._in_flight[p].pop(record.seq, None) is None:
                return    # already counted (failed when its producer was replaced)
            read_early = self._read_early[p].pop(record.seq, None)
            c = self._counters[p]
            if err is not None:   # (read anyway: written despite the error, which acks=all allows)
                c.failed[kafka_error_name(err)] += 1
                return
            c.acked += 1
            c.produce_ms.append(now - record.produce_ms)
            offset, leader = msg.offset(), self._leaders.get(p, -1)
            if offset is None or offset < 0:
                # librdkafka reports a retry that the broker found already written (DUPLICATE_SEQUENCE_NUMBER)
                # as delivered without an offset: the record is remembered where the consumer reads it.
                c.acked_without_offset += 1
                if read_early is not None:
                    self._place_and_read(p, read_early[0], record, now, leader, read_early[1])
                else:
                    self._unplaced[p][record.seq] = (now, leader)
                return
            lost = self._state.ledger(p).acked(offset, record.seq, now, leader)
            if lost:
                c.lost.extend(lost)
                self._rescan(p)
            if read_early is not None:
                self._apply_read(p, read_early[0], record, read_early[1])

    def _on_producer_error(self, err: KafkaError) -> None:
        if err.fatal():
            # The idempotent producer gives up for good, e.g. on OUT_OF_ORDER_SEQUENCE_NUMBER after an unclean
            # election made the new leader forget the sequence numbers it had acknowledged: start a new one.
            log.warning("canary producer: fatal error %s: %s", kafka_error_name(err), err.str())
            self._fatal = err
        else:
            log.debug("canary producer: %s", err.str())

    @staticmethod
    def _on_client_error(err: KafkaError) -> None:
        log.debug("canary client: %s", err.str())

    def _replace_producer(self) -> None:
        fatal, old = self._fatal, self._producer
        assert fatal is not None and old is not None
        with contextlib.suppress(KafkaException):
            old.purge(in_queue=True, in_flight=True, blocking=False)
        old.flush(2.0)
        with self._lock:    # what the old producer never answered failed with its fatal error
            for p, in_flight in self._in_flight.items():
                self._counters[p].failed[kafka_error_name(fatal)] += len(in_flight)
                in_flight.clear()
                self._read_early[p].clear()
        self._fatal = None
        self._producer = self._new_producer()
        log.info("canary producer replaced after %s", kafka_error_name(fatal))

    def _rescan(self, partition: int) -> None:
        """(lock held) Read the partition again from its oldest remembered record: evidence of a truncation
        may concern any remembered record, read back or not."""
        assert self._state is not None
        first = self._state.ledger(partition).first_offset
        if first is not None:
            self._seeks[partition] = min(self._seeks.get(partition, first), first)

    def _consume_loop(self) -> None:
        assert self._consumer is not None
        while not self._closing.is_set():
            self._reposition()
            messages = self._consumer.consume(num_messages=500, timeout=0.2)
            if not messages:
                continue
            now = wall_ms()
            with self._lock:
                for message in messages:
                    self._on_message(message, now)

    def _on_message(self, message: Message, now: int) -> None:
        assert self._state is not None
        err, p, offset = message.error(), message.partition(), message.offset()
        if err is not None:
            if err.code() == KafkaError._AUTO_OFFSET_RESET and p is not None:
                self._resets.add(p)
                self._counters[p].consumer_resets += 1
            else:
                log.debug("canary consumer: %s", err.str())
            return
        if p is None or offset is None or p not in self._counters:
            return
        record = decode_value(message.value())
        if record is None or record.instance_id != self._state.instance_id or record.partition != p:
            record = None
        elif record.seq in self._in_flight[p]:
            # Read before its acknowledgement was handled (the leader answers the fetch and the produce when
            # the high watermark passes it): judged when the acknowledgement comes.
            self._read_early[p][record.seq] = (offset, now)
            self._state.ledger(p).read_next = offset + 1
            return
        self._state.ledger(p).read_next = offset + 1
        unplaced = None if record is None else self._unplaced[p].pop(record.seq, None)
        if record is not None and unplaced is not None:
            self._place_and_read(p, offset, record, *unplaced, now)
        else:
            self._apply_read(p, offset, record, now)

    def _place_and_read(self, p: int, offset: int, record: CanaryRecord, acked_ms: int, leader: int,
                        read_ms: int) -> None:
        """(lock held) An acknowledgement without an offset, and the read that gives it one."""
        assert self._state is not None
        if not self._state.ledger(p).place(offset, record.seq, acked_ms, leader):
            self._counters[p].unverified += 1   # read where the ledger's order has no room for it: not watched
        self._apply_read(p, offset, record, read_ms)

    def _apply_read(self, p: int, offset: int, record: CanaryRecord | None, read_ms: int) -> None:
        """(lock held) The consumer read `record` (None: not one of this canary's) at `offset` at `read_ms`."""
        assert self._state is not None
        result = self._state.ledger(p).read(offset, None if record is None else record.seq, read_ms)
        c = self._counters[p]
        if result.outcome is ReadOutcome.CONFIRMED and record is not None:
            c.confirmed += 1
            c.round_trip_ms.append(read_ms - record.produce_ms)
        elif result.outcome is ReadOutcome.OTHER_RECORD:
            c.lost.extend(result.lost)
            self._rescan(p)
        dup = result.duplicate
        if dup is not None and (p, dup.seq, dup.read_offset) not in self._duplicates_seen:
            self._duplicates_seen.add((p, dup.seq, dup.read_offset))
            c.duplicates.append(dup)

    def _reposition(self) -> None:
        """(consumer thread) Handle refused positions, pending re-reads and partitions to assign."""
        assert self._consumer is not None and self._state is not None
        topic = self.config.topic
        with self._lock:
            resets, self._resets = self._resets, set()
        for p in resets:
            try:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2.0, cached=False)
            except KafkaException as e:
                log.debug("canary consumer: watermarks of partition %d: %s", p, e)
                with self._lock:
                    self._resets.add(p)
                continue
            with self._lock:
                ledger = self._state.ledger(p)
                self._counters[p].unverified += ledger.forget_below(low)  # deleted by retention, not lost
                first = ledger.first_offset
                target = first if first is not None else min(ledger.read_next or high, high)
                self._seeks[p] = max(low, min(self._seeks.get(p, target), target))
        with self._lock:
            seeks, self._seeks = self._seeks, {}
            for p in list(self._unassigned):
                first = self._state.ledger(p).first_offset
                if first is not None:
                    seeks[p] = min(seeks.get(p, first), first)
        for p, offset in seeks.items():
            try:
                if p in self._unassigned:
                    self._consumer.incremental_assign([TopicPartition(topic, p, offset)])
                    self._unassigned.discard(p)
                else:
                    self._seek(p, offset)
            except KafkaException as e:
                log.debug("canary consumer: repositioning partition %d at %d: %s", p, offset, e)
                with self._lock:
                    self._seeks[p] = min(self._seeks.get(p, offset), offset)

    def _seek(self, p: int, offset: int) -> None:
        assert self._consumer is not None
        tp = TopicPartition(self.config.topic, p, offset)
        try:
            self._consumer.seek(tp)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._STATE:
                raise
            # Not fetching (stopped by auto.offset.reset=error after a refused position, or not started yet):
            # assign it again at the offset.
            self._consumer.incremental_unassign([TopicPartition(self.config.topic, p)])
            self._consumer.incremental_assign([tp])

    def _metadata_loop(self) -> None:
        drift_since: dict[int, float] = {}
        last_election: dict[int, float] = {}
        grace_s = self.config.leader_grace_ms / 1000
        admin = self._admin
        assert admin is not None
        while not self._closing.wait(self.config.metadata_interval_ms / 1000):
            admin.poll(0)   # serves librdkafka's log lines to the logger
            try:
                layout = metadata_layout(admin, self.config.topic, self._admin_s)
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
            with self._lock:
                self._leaders.update(layout.leaders)
                for p in elect:
                    if p in self._counters:
                        self._counters[p].preferred_elections += 1
            if elect:
                self._elect_preferred(admin, elect)

    def _elect_preferred(self, admin: AdminClient, partitions: list[int]) -> None:
        log.info("canary: moving leadership of %s %s back to the preferred leaders", self.config.topic, partitions)
        try:
            # No timeouts passed: confluent-kafka 2.16.1's elect_leaders rejects request_timeout and
            # operation_timeout (a keyword-list bug in its C binding); the wait below bounds it instead.
            future = admin.elect_leaders(ElectionType.PREFERRED,
                                         [TopicPartition(self.config.topic, p) for p in partitions])
            for tp, error in future.result(timeout=self._admin_s + 1).items():
                if error is not None:
                    log.info("canary: preferred election of partition %d: %s", tp.partition, error)
        except (KafkaException, TimeoutError) as e:
            log.info("canary: preferred election failed: %r", e)
