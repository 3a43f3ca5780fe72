"""The canary's reads: Fetch requests to each partition's leader over the collector's own per-broker connections
(collector/kafka_wire.py), without a consumer group.

librdkafka's consumer cannot run without a group: with `group.id` set it keeps a group coordinator client, which
goes on dialling the coordinator broker while that broker is dead. This reader has no group, no coordinator and no
offsets of its own: the caller says from which offset to read each partition (the canary's ledger keeps them) and
is given the records back. Every broker has its own connection and every request its own timeout, and the requests
to different brokers run side by side, so a dead or SIGSTOPped broker holds up the reading of the partitions it
leads, and no other; the others' records keep coming while it does not answer.

A partition is fetched from its leader as the last Metadata answer (asked every `metadata_interval_s` of one broker
after another until one answers) or a Fetch answer naming the new leader (KIP-951) says, the one with the higher
leader epoch winning. Fetches carry no leader epoch, so no broker fences them and nothing is checked against the
log's history: what is at the offsets asked is what the caller gets, which is what the canary's ledger judges.

The messages and the record batches are kafka-python's; only the scheduling is ours.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.record import MemoryRecords

from collector.kafka_wire import BrokerConnection, BrokerUnavailable

log = logging.getLogger("collector.canary")

FETCH_VERSION = 12          # the last version naming topics (13+ name them by id); 12+ answers with the new leader
METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 8
EARLIEST_OFFSET, LATEST_OFFSET = -2, -1
OFFSET_OUT_OF_RANGE = 1
# The answers that mean "ask another broker": this one does not lead the partition (any more, or yet).
NOT_LEADING = {3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 6: "NOT_LEADER_OR_FOLLOWER",
               9: "REPLICA_NOT_AVAILABLE", 56: "KAFKA_STORAGE_ERROR", 74: "FENCED_LEADER_EPOCH",
               75: "UNKNOWN_LEADER_EPOCH"}
PARTITION_FETCH_BYTES = 1 << 20
# A partition whose fetch failed (its broker refused the connection, or said it does not lead it) is asked again no
# sooner than this: a dead broker refuses at once, and without a pause the reader would redial it in a busy loop.
RETRY_BACKOFF_S = 0.2
# Requests run side by side, a fetch and a ListOffsets per broker and one Metadata request at a time: the threads grow
# with the brokers up to this many, and beyond it requests queue.
MAX_WORKERS = 64

Connect = Callable[[str, float], BrokerConnection]


@dataclass(frozen=True)
class Fetched:
    """What one Fetch answered for one partition: its records from `fetched_offset` on, and where to read next."""

    partition: int
    fetched_offset: int
    records: tuple[tuple[int, bytes | None], ...]   # (offset, value), in offset order
    next_offset: int


@dataclass
class Polled:
    """What came back in one `LeaderReader.poll`."""

    fetched: list[Fetched] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)   # partition -> offset refused as OFFSET_OUT_OF_RANGE
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)   # partition -> (log start, log end)


@dataclass(frozen=True)
class _Leader:
    broker: int
    epoch: int


class LeaderReader:
    """Reads the partitions of one topic from their leaders. Not thread-safe: one thread polls it (the requests
    themselves run on its own worker threads)."""

    def __init__(self, bootstrap_servers: Collection[str], topic: str, *, timeout_s: float, fetch_wait_ms: int,
                 metadata_interval_s: float, connect: Connect = BrokerConnection) -> None:
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers must name at least one broker")
        if not timeout_s * 1000 > fetch_wait_ms >= 0:
            raise ValueError(f"timeout_s ({timeout_s}) must exceed fetch_wait_ms ({fetch_wait_ms} ms), which must "
                             "be >= 0")
        self.topic = topic
        self.timeout_s = timeout_s
        self.fetch_wait_ms = fetch_wait_ms
        self.metadata_interval_s = metadata_interval_s
        self._connect = connect
        self._bootstrap = list(bootstrap_servers)
        self._addresses: dict[int, str] = {}               # broker id -> HOST:PORT, from Metadata answers
        self._leaders: dict[int, _Leader] = {}
        # Fetches have a connection per broker of their own, so that a Metadata or ListOffsets request never waits
        # behind one (a connection carries one request at a time).
        self._fetch_connections: dict[int, BrokerConnection] = {}
        self._other_connections: dict[str, BrokerConnection] = {}   # Metadata and ListOffsets, by address
        self._connections_lock = threading.Lock()
        self._closed = False
        self._pool = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="isrwatch-canary-fetch")
        # broker -> its fetch in flight, and the partitions it asks for
        self._fetching: dict[int, tuple[Future[list[tuple[int, Any]]], dict[int, int]]] = {}
        self._ranging: dict[int, tuple[Future[dict[int, tuple[int, int]]], list[int]]] = {}
        self._metadata: Future[Any] | None = None
        self._metadata_due = 0.0                            # monotonic time of the next Metadata request
        self._last_answered: str | None = None
        self._retry_at: dict[int, float] = {}               # partition -> not fetched before (monotonic time)

    def close(self) -> None:
        """Close every connection; the requests in flight end with BrokerUnavailable, unread."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._connections_lock:
            self._closed = True
            for conn in [*self._fetch_connections.values(), *self._other_connections.values()]:
                conn.close()

    def poll(self, positions: Mapping[int, int], ranges_wanted: Collection[int], timeout_s: float) -> Polled:
        """Fetch each partition of `positions` from its offset there and ask the leaders of `ranges_wanted` for
        their log start and end; wait up to `timeout_s` for answers. A fetch still in flight from an earlier poll
        may answer for an older position: `Fetched.fetched_offset` says which."""
        now = time.monotonic()
        if self._metadata is None and (now >= self._metadata_due or any(p not in self._leaders for p in
                                                                        [*positions, *ranges_wanted])):
            self._metadata = self._pool.submit(self._ask_metadata)
            self._metadata_due = now + self.metadata_interval_s
        by_leader: dict[int, dict[int, int]] = {}
        for p, offset in positions.items():
            leader = self._leaders.get(p)
            if leader is not None and leader.broker in self._addresses and self._retry_at.get(p, 0.0) <= now:
                by_leader.setdefault(leader.broker, {})[p] = offset
        for broker, wanted in by_leader.items():
            if broker not in self._fetching:
                self._fetching[broker] = (self._pool.submit(self._fetch, broker, wanted), wanted)
        ranges_by_leader: dict[int, list[int]] = {}
        for p in ranges_wanted:
            leader = self._leaders.get(p)
            if leader is not None and leader.broker in self._addresses and self._retry_at.get(p, 0.0) <= now:
                ranges_by_leader.setdefault(leader.broker, []).append(p)
        for broker, ps in ranges_by_leader.items():
            if broker not in self._ranging:
                self._ranging[broker] = (self._pool.submit(self._ranges, broker, ps), ps)

        in_flight: list[Future[Any]] = [f for f, _ in self._fetching.values()]
        in_flight += [f for f, _ in self._ranging.values()]
        if self._metadata is not None:
            in_flight.append(self._metadata)
        if in_flight:
            wait(in_flight, timeout=timeout_s, return_when=FIRST_COMPLETED)
        else:   # nothing to read yet (no partition placed, no broker known)
            time.sleep(timeout_s)
        polled = Polled()
        if self._metadata is not None and self._metadata.done():
            self._take_metadata(self._metadata)
            self._metadata = None
        self._retry_at = {p: at for p, at in self._retry_at.items() if at > now}
        for broker, (future, asked) in list(self._fetching.items()):
            if future.done():
                del self._fetching[broker]
                self._take_fetch(broker, future, asked, polled)
        for broker, (ranging, ps) in list(self._ranging.items()):
            if ranging.done():
                del self._ranging[broker]
                try:
                    polled.ranges.update(ranging.result())
                except BrokerUnavailable as e:
                    log.debug("canary reader: log ranges from broker %d: %s", broker, e)
                unanswered = [p for p in ps if p not in polled.ranges]
                if unanswered:   # its leader moved, or is gone: ask again once the Metadata has told
                    self._metadata_due = 0.0
                    self._retry_at.update(dict.fromkeys(unanswered, time.monotonic() + RETRY_BACKOFF_S))
        return polled

    # ---- answers (the polling thread) -------------------------------------------------------------

    def _take_metadata(self, future: Future[Any]) -> None:
        try:
            meta = future.result()
        except BrokerUnavailable as e:
            log.debug("canary reader: no broker answered Metadata: %s", e)
            self._metadata_due = time.monotonic() + RETRY_BACKOFF_S
            return
        self._addresses.update({b.node_id: f"{b.host}:{b.port}" for b in meta.brokers})
        for t in meta.topics:
            if t.name != self.topic or t.error_code != 0:
                continue
            for p in t.partitions:
                if p.error_code == 0 and p.leader_id >= 0:
                    self._learn_leader(p.partition_index, p.leader_id, p.leader_epoch)

    def _learn_leader(self, partition: int, broker: int, epoch: int) -> None:
        known = self._leaders.get(partition)
        if known is None or epoch >= known.epoch:
            self._leaders[partition] = _Leader(broker, epoch)

    def _take_fetch(self, broker: int, future: Future[list[tuple[int, Any]]], asked: Mapping[int, int],
                    polled: Polled) -> None:
        retry_at = time.monotonic() + RETRY_BACKOFF_S
        try:
            answers = future.result()
        except BrokerUnavailable as e:
            # Dead, paused or gone: its partitions wait for a leader elsewhere, which the Metadata asked at once
            # will show when the controller has moved them.
            log.debug("canary reader: fetch from broker %d: %s", broker, e)
            self._metadata_due = 0.0
            self._retry_at.update(dict.fromkeys(asked, retry_at))
            return
        for fetched_offset, answer in answers:
            p = answer.partition_index
            if answer.error_code == 0:
                try:
                    polled.fetched.append(decode_fetched(p, fetched_offset, answer.records))
                except ValueError as e:   # a batch failing its CRC: read again
                    log.warning("canary reader: partition %d at %d from broker %d: %s", p, fetched_offset, broker, e)
            elif answer.error_code == OFFSET_OUT_OF_RANGE:
                polled.refused[p] = fetched_offset
            elif answer.error_code in NOT_LEADING:
                hint = getattr(answer, "current_leader", None)   # (a tagged field: absent unless the broker knows)
                if hint is not None and hint.leader_id >= 0 and hint.leader_epoch >= 0:
                    self._learn_leader(p, hint.leader_id, hint.leader_epoch)
                known = self._leaders.get(p)
                if known is None or known.broker == broker:
                    self._metadata_due = 0.0   # no other leader known: ask, and wait for the answer
                    self._retry_at[p] = retry_at
                log.debug("canary reader: partition %d from broker %d: %s", p, broker, NOT_LEADING[answer.error_code])
            else:
                log.info("canary reader: partition %d from broker %d: error %d", p, broker, answer.error_code)
                self._metadata_due = 0.0
                self._retry_at[p] = retry_at

    # ---- requests (worker threads) ----------------------------------------------------------------

    def _ask_metadata(self) -> Any:
        """The topic's Metadata from the first broker that answers (the last one that did, first)."""
        addresses = list(dict.fromkeys([*([self._last_answered] if self._last_answered else []),
                                        *self._addresses.values(), *self._bootstrap]))
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)],
                                  allow_auto_topic_creation=False)
        errors = []
        for address in addresses:
            try:
                conn = self._connection(self._other_connections, address, address)
                meta = conn.request(request, MetadataResponse, METADATA_VERSION)
            except BrokerUnavailable as e:
                errors.append(str(e))
                continue
            self._last_answered = address
            return meta
        raise BrokerUnavailable("; ".join(errors))

    def _fetch(self, broker: int, positions: dict[int, int]) -> list[tuple[int, Any]]:
        """(offset asked, answer) for each partition of `positions` the broker answered for."""
        conn = self._connection(self._fetch_connections, broker, self._addresses[broker])
        fp = FetchRequest.FetchTopic.FetchPartition
        request = FetchRequest(
            replica_id=-1, max_wait_ms=self.fetch_wait_ms, min_bytes=1, max_bytes=len(positions) *
            PARTITION_FETCH_BYTES, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
            forgotten_topics_data=[], topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[
                fp(partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                   log_start_offset=-1, partition_max_bytes=PARTITION_FETCH_BYTES)
                for p, offset in sorted(positions.items())])])
        response = conn.request(request, FetchResponse, FETCH_VERSION)
        return [(positions[a.partition_index], a) for t in response.responses if t.topic == self.topic
                for a in t.partitions if a.partition_index in positions]

    def _ranges(self, broker: int, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(log start, log end) of each partition, from its leader."""
        lt = ListOffsetsRequest.ListOffsetsTopic
        address = self._addresses[broker]
        conn = self._connection(self._other_connections, address, address)
        found: dict[int, dict[int, int]] = {}
        for spec in (EARLIEST_OFFSET, LATEST_OFFSET):
            request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[lt(name=self.topic, partitions=[
                lt.ListOffsetsPartition(partition_index=p, timestamp=spec) for p in sorted(partitions)])])
            response = conn.request(request, ListOffsetsResponse, LIST_OFFSETS_VERSION)
            found[spec] = {a.partition_index: a.offset for t in response.topics for a in t.partitions
                           if a.error_code == 0}
        return {p: (found[EARLIEST_OFFSET][p], found[LATEST_OFFSET][p]) for p in partitions
                if p in found[EARLIEST_OFFSET] and p in found[LATEST_OFFSET]}

    def _connection(self, connections: dict[Any, BrokerConnection], key: int | str, address: str) -> BrokerConnection:
        with self._connections_lock:
            if self._closed:
                raise BrokerUnavailable(f"broker {address}: the canary's reader is closed")
            conn = connections.get(key)
            if conn is None or conn.address != address:   # (a broker that came back at another address)
                if conn is not None:
                    conn.close()
                conn = connections[key] = self._connect(address, self.timeout_s)
            return conn


def decode_fetched(partition: int, fetched_offset: int, data: bytes | None) -> Fetched:
    """The records of a Fetch answer at or above the offset asked (Kafka answers with whole batches, which may
    begin below it), without the control batches; the next offset is past the last whole batch. ValueError if a
    batch fails its CRC."""
    records: list[tuple[int, bytes | None]] = []
    next_offset = fetched_offset
    batches = MemoryRecords(data or b"")
    batch = batches.next_batch()
    while batch is not None:
        if not batch.validate_crc():
            raise ValueError(f"the batch at offset {batch.base_offset} fails its CRC check")
        if not batch.is_control_batch:
            records.extend((r.offset, r.value) for r in batch if r.offset >= fetched_offset)
        next_offset = max(next_offset, batch.next_offset)
        batch = batches.next_batch()
    return Fetched(partition, fetched_offset, tuple(records), next_offset)
