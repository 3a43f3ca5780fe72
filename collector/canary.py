"""bronze.ack_ledger from a real cluster: an end-to-end canary, as Xinfra Monitor and KMinion run, but exact.

The canary owns a topic with one partition led by each broker (replication factor = brokers unless set,
partition i's replicas rotated so broker i is its preferred leader, min.insync.replicas 2 unless set), creates it
if absent, and moves a partition's leadership back to its preferred leader when it has drifted for longer than
a grace period. An idempotent acks=all producer writes sequence-numbered records to every partition at a set
rate; a reader without a consumer group (Fetch requests to each leader over the collector's own per-broker
connections, collector/canary_fetch.py) reads them back from the offsets the canary remembers. Per partition and
interval `take_interval` reports:

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
- how long the oldest record still waiting for its answer has waited when the interval is taken (`unacked_for_ms`):
  a stalled ISR follower holds every acks=all write until Kafka drops it from the ISR or fences its broker, and
  this grows from the first second of the stall.

What it knows survives a restart: `save_state` writes `<state root>/_collector/<cluster id>/canary_state.json`
(atomically; the root is a local lakehouse, or the collector's `--state-dir`), and a canary started on the same
root reads the partitions again from the oldest record it remembers, so it still reports the loss of records
acknowledged before the restart. Call `save_state` after the interval's bronze rows are committed: a crash
between the two reports that interval's losses again (at least once), a crash before the commit detects them
again from the state saved before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from collector.canary_fetch import Connect, LeaderReader
from collector.canary_leaders import keep_preferred_leaders
from collector.canary_read import Counters, ReadBack
from collector.canary_state import (
    CanaryInterval,
    CanaryState,
    LatencySummary,
    PartitionInterval,
    decode_value,
    encode_value,
)
from collector.canary_topic import (
    CONSUMER_FETCH_WAIT_MS,
    SEQ_RESTART_GAP,
    CanaryConfig,
    CanaryError,
    TopicLayout,
    ensure_topic,
    kafka_error_name,
    quiet_librdkafka_logger,
    wall_ms,
)
from collector.json_file import write_json_atomic
from collector.kafka_wire import BrokerConnection

__all__ = ["Canary"]

log = logging.getLogger(__name__)

# ---- the canary ----------------------------------------------------------------------------------

class Canary(ReadBack):
    """`start()`, then once per collection interval `take_interval(now_ms)` and `save_state()`; `stop()`.

    `connect(address, timeout_s)` opens the reader's connection to a broker: the collector's own
    (`BrokerConnection`), with its TLS and SASL settings when it has any; the librdkafka clients take theirs from
    `config.client_config`."""

    def __init__(self, config: CanaryConfig, state_root: str | os.PathLike[str],
                 connect: Connect = BrokerConnection) -> None:
        if not isinstance(config, CanaryConfig):
            raise TypeError(f"config must be a CanaryConfig, got {type(config).__name__}")
        if not isinstance(state_root, str | os.PathLike):
            raise TypeError(f"state_root must be a path, got {type(state_root).__name__}")
        if not callable(connect):
            raise TypeError(f"connect must be callable (address, timeout_s) -> BrokerConnection, got "
                            f"{type(connect).__name__}")
        self.config = config
        self.state_root = Path(state_root)
        self.connect = connect
        self._lock = threading.Lock()
        self._state: CanaryState | None = None
        self._layout: TopicLayout | None = None
        self._counters: dict[int, Counters] = {}
        self._in_flight: dict[int, dict[int, int]] = {}   # partition -> seq -> produce wall ms
        # partition -> seq -> every (offset, read ms) it was read at before its acknowledgement: a retried
        # record can be in the log twice, and both copies can be read before the retry is acknowledged.
        self._read_early: dict[int, dict[int, list[tuple[int, int]]]] = {}
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
        self._reader: LeaderReader | None = None
        self._positions: dict[int, int] = {}
        self._started = self._stopped = False
        self._drain_deadline = 0.0

    # ---- public ----------------------------------------------------------------------------------

    @property
    def state_path(self) -> Path:
        if self._state is None:
            raise CanaryError("the canary has not started: the state path needs the cluster id")
        return self.state_root / "_collector" / self._state.cluster_id / "canary_state.json"

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
            self._counters[p] = Counters(unverified=self._counters[p].unverified if p in self._counters else 0)
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
        self._reader = LeaderReader(
            self.config.bootstrap_servers.split(","), self.config.topic, timeout_s=self.config.fetch_timeout_ms / 1000,
            fetch_wait_ms=CONSUMER_FETCH_WAIT_MS, metadata_interval_s=self.config.metadata_interval_ms / 1000,
            connect=self.connect)
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
                in_flight = self._in_flight[p]
                # The wait as of now, not of now_ms: the collector passes its interval's start, and a stalled
                # broker's Metadata deadline alone would make the age a second old. (A wall clock stepped back
                # must not make a wait negative.)
                unacked_for_ms = max(max(now_ms, wall_ms()) - min(in_flight.values()), 0) if in_flight else 0
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
                    c.acked_without_offset, unacked_for_ms))
                self._counters[p] = Counters()
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
        if self._reader is not None:
            self._reader.close()
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
        # socket.timeout.ms (librdkafka's default is 60 s) bounds any request to a SIGSTOPped broker, whose kernel
        # still accepts the connection: the producer writes to a partition's new leader only once its requests to
        # the old one have ended, and the admin client's Metadata requests wait too. Above the broker's own
        # request timeout, so that a live broker holding an acks=all write answers first.
        return {"bootstrap.servers": self.config.bootstrap_servers, "client.id": "isrwatch-canary",
                "socket.timeout.ms": self.config.request_timeout_ms + 1000,
                "logger": self.config.librdkafka_logger or quiet_librdkafka_logger(), **self.config.client_config}

    def _new_producer(self) -> Producer:
        return Producer({
            **self._client_config(), "acks": "all", "enable.idempotence": True, "retries": self.config.retries,
            "message.timeout.ms": self.config.delivery_timeout_ms,
            "request.timeout.ms": self.config.request_timeout_ms, "linger.ms": 5,
            "error_cb": self._on_producer_error})

    def _load_state(self, cluster_id: str, layout: TopicLayout) -> CanaryState:
        path = self.state_root / "_collector" / cluster_id / "canary_state.json"
        state = CanaryState.load(path)
        if state is not None and (state.topic, state.topic_id) != (self.config.topic, layout.topic_id):
            # Another topic, or the topic was deleted and created again: its offsets say nothing about this one.
            log.warning("canary state %s is for topic %s (id %s), not %s (id %s): starting afresh", path,
                        state.topic, state.topic_id, self.config.topic, layout.topic_id)
            for p, ledger in state.ledgers.items():
                self._counters.setdefault(p, Counters()).unverified += ledger.unconfirmed
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
            read_early = self._read_early[p].pop(record.seq, [])
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
                if read_early:   # remembered at the first copy read; any other is a duplicate of it
                    self._place_and_read(p, read_early[0][0], record, now, leader, read_early[0][1])
                    for early_offset, read_ms in read_early[1:]:
                        self._apply_read(p, early_offset, record, read_ms)
                else:
                    self._unplaced[p][record.seq] = (now, leader)
                return
            lost = self._state.ledger(p).acked(offset, record.seq, now, leader)
            if lost:
                c.lost.extend(lost)
                self._rescan(p)
            for early_offset, read_ms in read_early:
                self._apply_read(p, early_offset, record, read_ms)

    def _on_producer_error(self, err: KafkaError) -> None:
        if err.fatal():
            # The idempotent producer gives up for good, e.g. on OUT_OF_ORDER_SEQUENCE_NUMBER after an unclean
            # election made the new leader forget the sequence numbers it had acknowledged: start a new one.
            log.warning("canary producer: fatal error %s: %s", kafka_error_name(err), err.str())
            self._fatal = err
        else:
            log.debug("canary producer: %s", err.str())

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

    def _metadata_loop(self) -> None:
        assert self._admin is not None
        keep_preferred_leaders(self._admin, self.config, self._closing, self._admin_s, self._on_layout)

    def _on_layout(self, layout: TopicLayout, elected: list[int]) -> None:
        with self._lock:
            self._leaders.update(layout.leaders)
            for p in elected:
                if p in self._counters:
                    self._counters[p].preferred_elections += 1
