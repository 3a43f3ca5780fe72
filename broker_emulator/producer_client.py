"""The producer client: an accumulator per partition, an in-flight limit per leader connection, timeouts.

Modelled on the clients the fidelity bench compares against (librdkafka's `rd_kafka_toppar_producer_serve` and
`rd_kafka_broker_timeout_scan`; the Java client's `RecordAccumulator.drain` and `Sender.sendProducerData`):

- Records join their partition's newest unsent batch while it has room (sticky partitioner); each linger tick
  the sender drains what is queued.
- One produce request to a leader carries at most one batch per partition, and a connection has at most
  `max.in.flight.requests.per.connection` (5) requests unanswered: more batches wait in the accumulator.
- A batch that failed with a retriable error goes back to the head of its partition's queue, and the partition
  sends nothing until the batch's backoff has passed (`retry.backoff.ms`, doubling to `retry.backoff.max.ms`),
  then that batch alone until it is answered. So a partition whose writes keep failing costs the broker about
  one request per backoff, not one per linger.
- A request not answered within `socket.timeout.ms` (or the first batch's remaining delivery timeout, if
  sooner) fails the connection and every request in flight on it; their batches are retried. A paused broker
  never reads what it was sent after that: no burst of stale requests when it resumes. The client reconnects
  only once the broker answers again.
- A batch older than `delivery.timeout.ms` (librdkafka's `message.timeout.ms`) fails: the application's
  delivery report says so, and the ledger counts the records as not acknowledged.

- The client knows leaders from its own metadata, not the cluster's: it asks again when a broker answers
  NOT_LEADER_OR_FOLLOWER (KIP-951 puts the new leader in that answer), when a connection fails, every
  `retry.backoff.max.ms` while a partition has no reachable leader, and every `metadata.max.age.ms`. So a
  client whose requests hang at a paused leader keeps waiting for it, as librdkafka does
  (`rd_kafka_toppar_leader_unavailable`, `rd_kafka_metadata_fast_leader_query`).
- With `enable.idempotence` each batch carries its partition's sequence numbers. A head-of-line batch the leader
  refuses with OUT_OF_ORDER_SEQUENCE_NUMBER (its log lacks sequence numbers the client saw acknowledged: an
  unclean election) is fatal: every record the client holds fails and the application stops producing
  (librdkafka's `rd_kafka_handle_idempotent_Produce_error`, `rd_kafka_idemp_set_fatal_error`). A batch that
  fails for good bumps the producer epoch and renumbers what follows (`rd_kafka_idemp_drain_epoch_bump`).

Simplification: acks=0 requests are treated as the others (answered when the leader appended them), so they too
count against the in-flight limit.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field
from random import Random
from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.state import NO_BROKER

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig, ProducerSpec
    from broker_emulator.ledger import Ledger

# What the client reports for a request it gave up on itself, as librdkafka names it.
LOCAL_TIMED_OUT = "_TIMED_OUT"
LOCAL_TRANSPORT = "_TRANSPORT"          # the leader's connection closed (the broker crashed or stopped)
LOCAL_MSG_TIMED_OUT = "_MSG_TIMED_OUT"  # the delivery timeout passed: the records failed
LOCAL_FATAL = "_FATAL"                  # the idempotent producer stopped for good: what it held failed
OUT_OF_ORDER_SEQUENCE_NUMBER = "OUT_OF_ORDER_SEQUENCE_NUMBER"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
IDEMPOTENT_MAX_IN_FLIGHT = 5   # librdkafka's RD_KAFKA_IDEMP_MAX_INFLIGHT


@dataclass
class Batch:
    producer: int
    p: int
    records: int
    created_ms: int
    attempts: int = 0
    backoff_until_ms: int = 0
    first_seq: int = -1      # idempotent producers: the sequence number of its first record (-1: not yet sent)
    producer_epoch: int = 0  # the producer epoch first_seq belongs to

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.records - 1


@dataclass
class Request:
    request_id: int
    producer: int
    leader: int
    batches: list[Batch]
    undecided: int                                  # batches the leader has not answered for yet
    retried: list[int] = field(default_factory=list)       # partitions whose batch here is a retry
    errors: dict[int, str] = field(default_factory=dict)   # id(batch) -> the error the leader answered
    dead: bool = False                              # the client gave up on it (its connection failed)
    connection: tuple[int, int, int] = (0, 0, 0)    # (producer, leader, how many times that connection failed)


@dataclass
class ProducerState:
    spec: ProducerSpec
    partitions: np.ndarray
    rng: Random
    carry: float = 0.0
    sticky: int = 0
    sticky_fill: int = 0
    sticky_since_ms: int = 0
    queued: dict[int, list[Batch]] = field(default_factory=dict)       # partition -> unsent batches, oldest first
    in_flight: dict[int, dict[int, Request]] = field(default_factory=dict)   # leader -> unanswered requests
    down: set[int] = field(default_factory=set)     # leaders whose connection failed and is not back yet
    retries_in_flight: Counter[int] = field(default_factory=Counter)   # partition -> retried batches in flight
    ticking: bool = True
    leaders: dict[int, int] = field(default_factory=dict)   # partition -> its leader, as this client's metadata says
    refresh_at_ms: int | None = None                        # when this client's next metadata answer arrives
    producer_epoch: int = 0
    next_seq: dict[int, int] = field(default_factory=dict)      # partition -> the next sequence number to assign
    next_ack_seq: dict[int, int] = field(default_factory=dict)  # partition -> the first not yet acknowledged
    fatal: bool = False
    records_in_flight: Counter[int] = field(default_factory=Counter)   # partition -> records sent, unanswered
    reconnects: Counter[int] = field(default_factory=Counter)          # leader -> connections that failed


class ClientHost(Protocol):
    """What the producers use of the simulation."""

    @property
    def clock(self) -> SimClock: ...
    @property
    def queue(self) -> EventQueue: ...
    @property
    def cfg(self) -> BrokerConfig: ...
    @property
    def brokers(self) -> Brokers: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def client_leader(self) -> np.ndarray:
        """Per partition: the leader as the brokers' metadata has it now, which is what a client's metadata
        request is answered."""


class ProducerClient:
    def __init__(self, sim: ClientHost) -> None:
        self.sim = sim
        self.producers: list[ProducerState] = []
        self.next_request_id = 0
        self.errors: Counter[str] = Counter()   # per error code, batches as the client saw them fail

    def add_producer(self, spec: ProducerSpec, partitions: np.ndarray, rng: Random) -> None:
        st = ProducerState(spec, partitions, rng, sticky=rng.randrange(len(partitions)))
        self.producers.append(st)
        index = len(self.producers) - 1
        self.sim.queue.schedule(spec.start_ms, "produce_tick", index)
        # The client's first metadata request, answered as it starts.
        self._refresh(index, st, max(0, spec.start_ms - self.sim.clock.now_ms))

    # --- the client's metadata ---------------------------------------------------------------------
    def _refresh(self, index: int, st: ProducerState, delay_ms: int | None = None) -> None:
        """Ask for metadata; the answer (the cluster's as the brokers publish it) arrives after a round trip."""
        if delay_ms is None:
            delay_ms = 2 * self.sim.cfg.network_latency_ms
        at = self.sim.clock.now_ms + delay_ms
        if st.refresh_at_ms is None or at < st.refresh_at_ms:
            st.refresh_at_ms = at
            self.sim.queue.schedule(at, "producer_metadata", (index, at))

    def metadata_answered(self, key: tuple[int, int]) -> None:
        index, at = key
        st = self.producers[index]
        if st.refresh_at_ms != at:
            return   # superseded by an earlier answer
        st.refresh_at_ms = None
        sim = self.sim
        st.leaders = {p: int(sim.client_leader[p]) for p in st.partitions.tolist()}
        if st.fatal:
            return
        unreachable = any(leader == NO_BROKER or (leader in st.down and not sim.brokers.accepts_requests(leader))
                          for leader in st.leaders.values())
        busy = st.ticking or any(st.in_flight.values())
        if unreachable and busy:
            self._refresh(index, st, st.spec.retry_backoff_max_ms)
        elif busy:
            self._refresh(index, st, st.spec.metadata_max_age_ms)
        self.drain(index)

    # --- the application's records ---------------------------------------------------------------
    def tick(self, index: int) -> None:
        st = self.producers[index]
        if st.fatal:
            st.ticking = False
            return
        spec = st.spec
        now = self.sim.clock.now_ms
        if spec.stop_ms is None or now < spec.stop_ms:
            self._accumulate(index, st, now)
        self.drain(index)
        # After stop_ms the client keeps sending what it holds (as a flush does), then goes quiet.
        st.ticking = spec.stop_ms is None or now < spec.stop_ms or bool(st.queued)
        if st.ticking:
            self.sim.queue.schedule(now + spec.linger_ms, "produce_tick", index)

    def _accumulate(self, index: int, st: ProducerState, now: int) -> None:
        spec = st.spec
        st.carry += spec.rate_per_s * spec.linger_ms / 1000.0
        n = int(st.carry)
        st.carry -= n
        per_batch = max(1, spec.batch_size // spec.record_bytes)
        if spec.sticky_linger_ms is not None and now - st.sticky_since_ms >= spec.sticky_linger_ms:
            # librdkafka's sticky partitioner: a new partition every sticky.partitioning.linger.ms.
            st.sticky = st.rng.randrange(len(st.partitions))
            st.sticky_since_ms = now
        while n > 0:
            p = int(st.partitions[st.sticky])
            take = min(n, per_batch - st.sticky_fill if spec.sticky_linger_ms is None else per_batch)
            queue = st.queued.setdefault(p, [])
            last = queue[-1] if queue else None
            if last is not None and last.attempts == 0 and last.records + take <= per_batch:
                last.records += take
            else:
                queue.append(Batch(index, p, take, now))
            self.sim.ledger.sent(p, spec.acks, take)
            n -= take
            st.sticky_fill += take
            if st.sticky_fill >= per_batch and spec.sticky_linger_ms is None:
                # The Java client's adaptive sticky partitioner: switch after a full batch.
                st.sticky_fill = 0
                st.sticky = st.rng.randrange(len(st.partitions))

    def send_to(self, name: str, broker: int, p: int, records: int) -> None:
        """One request of `records` for p straight to `broker`, whoever leads p: a client whose metadata is
        stale. A broker not leading p refuses it (NOT_LEADER_OR_FOLLOWER) and the batch is retried as any."""
        index = next(i for i, st in enumerate(self.producers) if st.spec.name == name)
        st = self.producers[index]
        self.sim.ledger.sent(p, st.spec.acks, records)
        self._send(index, st, broker, [Batch(index, p, records, self.sim.clock.now_ms)])

    def oldest_waiting_ms(self) -> dict[tuple[int, int], int]:
        """(partition, acks) -> when the oldest record still waiting for its answer was produced (virtual ms): held
        in an accumulator or in flight to its leader. A batch's first record is its oldest."""
        oldest: dict[tuple[int, int], int] = {}

        def waits(key: tuple[int, int], created_ms: int) -> None:
            oldest[key] = min(oldest.get(key, created_ms), created_ms)

        for st in self.producers:
            acks = st.spec.acks
            for p, queue in st.queued.items():
                if queue:
                    waits((p, acks), queue[0].created_ms)   # the queue is in age order
            for requests in st.in_flight.values():
                for request in requests.values():
                    for b in request.batches:
                        waits((b.p, acks), b.created_ms)
        return oldest

    # --- the sender --------------------------------------------------------------------------------
    def drain(self, index: int) -> None:
        """Send what may go now: per leader, up to the in-flight limit, one batch per partition a request."""
        sim = self.sim
        st = self.producers[index]
        if st.fatal:
            return
        now = sim.clock.now_ms
        self._expire(st, now)
        by_leader: dict[int, list[int]] = {}
        for p in sorted(st.queued):
            leader = st.leaders.get(p, NO_BROKER)
            if leader != NO_BROKER:   # no leader known: the batches wait for metadata (or their timeout)
                by_leader.setdefault(leader, []).append(p)
            else:
                self._refresh(index, st, st.spec.retry_backoff_max_ms)
        for leader, ps in sorted(by_leader.items()):
            if leader in st.down:
                if not sim.brokers.accepts_requests(leader):
                    # Connecting to a stopped process gets no answer: nothing is sent, and the client keeps
                    # asking who leads instead.
                    self._refresh(index, st, st.spec.retry_backoff_max_ms)
                    continue
                st.down.discard(leader)
            flying = st.in_flight.setdefault(leader, {})
            while len(flying) < st.spec.max_in_flight:
                # A partition retrying a batch sends that batch alone until it is answered (Java's
                # shouldStopDrainBatchesForPartition, librdkafka's idempotent drain): in order, one at a time.
                batches = [q[0] for p in ps if (q := st.queued.get(p)) and q[0].backoff_until_ms <= now
                           and not st.retries_in_flight[p] and self._may_add(st, p)]
                if not batches:
                    break
                for b in batches:
                    queue = st.queued[b.p]
                    queue.pop(0)
                    if not queue:
                        del st.queued[b.p]
                self._send(index, st, leader, batches)

    @staticmethod
    def _may_add(st: ProducerState, p: int) -> bool:
        """librdkafka's idempotent producer sends a partition's next batch only while fewer than
        RD_KAFKA_IDEMP_MAX_INFLIGHT (5) of its records are in flight (`rd_kafka_toppar_producer_serve` compares
        `rktp_msgs_inflight`, a record count): at 500 records/s that is one or two requests per partition."""
        return not st.spec.idempotent or st.records_in_flight[p] < IDEMPOTENT_MAX_IN_FLIGHT

    def _send(self, index: int, st: ProducerState, leader: int, batches: list[Batch]) -> None:
        sim = self.sim
        now = sim.clock.now_ms
        request = Request(self.next_request_id, index, leader, batches, len(batches),
                          connection=(index, leader, st.reconnects[leader]))
        self.next_request_id += 1
        for b in batches:
            st.records_in_flight[b.p] += b.records
            if st.spec.idempotent and (b.first_seq < 0 or b.producer_epoch != st.producer_epoch):
                # Numbered when first sent (the Java client's drain does the same), renumbered after an epoch bump.
                b.first_seq = st.next_seq.get(b.p, 0)
                b.producer_epoch = st.producer_epoch
                st.next_seq[b.p] = b.first_seq + b.records
                st.next_ack_seq.setdefault(b.p, b.first_seq)
            if b.attempts:
                request.retried.append(b.p)
                st.retries_in_flight[b.p] += 1
        st.in_flight.setdefault(leader, {})[request.request_id] = request
        sim.queue.schedule(now + sim.cfg.network_latency_ms + sim.cfg.request_handling_ms, "produce_arrive",
                           (leader, request))
        # librdkafka: a ProduceRequest times out after the lesser of socket.timeout.ms and the first batch's
        # remaining delivery timeout.
        oldest = min(b.created_ms for b in batches)
        timeout = min(st.spec.socket_timeout_ms, max(1, oldest + st.spec.delivery_timeout_ms - now))
        sim.queue.schedule(now + timeout, "produce_request_timeout", (index, leader, request.request_id))

    def _expire(self, st: ProducerState, now: int) -> None:
        limit = st.spec.delivery_timeout_ms
        for p in sorted(st.queued):
            queue = st.queued[p]
            while queue and now - queue[0].created_ms >= limit:
                self._fail(st, queue.pop(0), LOCAL_MSG_TIMED_OUT)
            if not queue:
                del st.queued[p]

    def _fail(self, st: ProducerState, b: Batch, error: str) -> None:
        self.errors[error] += 1
        self.sim.ledger.failed(b.p, st.spec.acks, b.records)
        if st.spec.idempotent and b.first_seq >= 0 and b.producer_epoch == st.producer_epoch:
            # A numbered batch that will never be written leaves a gap: bump the epoch, and renumber what follows
            # from 0 (the broker takes sequence 0 of a new epoch).
            st.producer_epoch += 1
            st.next_seq.clear()
            st.next_ack_seq.clear()

    @staticmethod
    def _release(st: ProducerState, request: Request) -> None:
        for b in request.batches:
            st.records_in_flight[b.p] -= b.records

    def _go_fatal(self, index: int, st: ProducerState) -> None:
        """librdkafka's fatal idempotence error: the producer is unusable; everything it holds fails, and the
        application (as the fidelity bench's does) stops producing."""
        st.fatal = True
        st.ticking = False
        for p in sorted(st.queued):
            for b in st.queued[p]:
                self._fail(st, b, LOCAL_FATAL)
        st.queued.clear()
        for leader in sorted(st.in_flight):
            for request_id in sorted(st.in_flight[leader]):
                request = st.in_flight[leader][request_id]
                request.dead = True
                for b in request.batches:
                    self._fail(st, b, LOCAL_FATAL)
        st.in_flight.clear()
        st.retries_in_flight.clear()
        st.records_in_flight.clear()

    def _retry(self, st: ProducerState, b: Batch, error: str) -> None:
        """Back to the head of its partition's queue (in age order), to wait out its backoff."""
        self.errors[error] += 1
        b.attempts += 1
        now = self.sim.clock.now_ms
        if now - b.created_ms >= st.spec.delivery_timeout_ms or b.attempts > st.spec.retries:
            self._fail(st, b, LOCAL_MSG_TIMED_OUT)
            return
        # Exponential backoff with ±20 % jitter (KIP-580; librdkafka does the same since 2.3).
        backoff = min(st.spec.retry_backoff_ms * 2 ** (b.attempts - 1), st.spec.retry_backoff_max_ms)
        b.backoff_until_ms = now + max(1, int(backoff * st.rng.uniform(0.8, 1.2)))
        bisect.insort_right(st.queued.setdefault(b.p, []), b, key=lambda q: q.created_ms)
        if not st.ticking:   # a stopped producer's tick ended: it resumes to send the retry
            st.ticking = True
            self.sim.queue.schedule(b.backoff_until_ms, "produce_tick", b.producer)

    # --- answers -----------------------------------------------------------------------------------
    def decided(self, request: Request, b: Batch, error: str | None) -> None:
        """The leader answered for batch b of `request` (None: written). The response leaves once every batch
        of the request is answered for, as a delayed produce completes the whole request."""
        request.undecided -= 1
        if request.dead:
            return
        if error is not None:
            request.errors[id(b)] = error
        if request.undecided == 0:
            self.sim.queue.schedule(self.sim.clock.now_ms + self.sim.cfg.network_latency_ms, "produce_response",
                                    request)

    def response(self, request: Request) -> None:
        if request.dead:
            return
        index = request.producer
        st = self.producers[index]
        st.in_flight[request.leader].pop(request.request_id, None)
        st.retries_in_flight.subtract(request.retried)
        self._release(st, request)
        for i, b in enumerate(request.batches):
            error = request.errors.get(id(b))
            if error is None:
                if b.first_seq >= 0 and b.producer_epoch == st.producer_epoch:
                    st.next_ack_seq[b.p] = max(st.next_ack_seq.get(b.p, 0), b.last_seq + 1)
            elif error == OUT_OF_ORDER_SEQUENCE_NUMBER and b.first_seq == st.next_ack_seq.get(b.p):
                # Head of line: the leader lacks sequence numbers this client saw acknowledged.
                self.errors[error] += 1
                self.sim.ledger.failed(b.p, st.spec.acks, b.records)
                for rest in request.batches[i + 1:]:
                    if id(rest) in request.errors:
                        self._fail(st, rest, LOCAL_FATAL)
                self._go_fatal(index, st)
                return
            else:
                if error == NOT_LEADER_OR_FOLLOWER:
                    # KIP-951: the answer names the partition's current leader, which the client takes at once
                    # (librdkafka's rd_kafka_handle_Produce_metadata_update); it refreshes the rest as well.
                    st.leaders[b.p] = int(self.sim.client_leader[b.p])
                    self._refresh(index, st)
                self._retry(st, b, error)
        self.drain(index)

    def request_timeout(self, key: tuple[int, int, int]) -> None:
        index, leader, request_id = key
        st = self.producers[index]
        if request_id in st.in_flight.get(leader, {}):
            self._connection_failed(index, leader, LOCAL_TIMED_OUT)

    def broker_gone(self, b: int) -> None:
        """b crashed or stopped: every connection to it closes, and what was in flight on them is retried."""
        for index, st in enumerate(self.producers):
            if st.in_flight.get(b):
                self._connection_failed(index, b, LOCAL_TRANSPORT)

    def refused(self, request: Request) -> None:
        """The request reached a broker that is not running: the connection is refused."""
        if not request.dead:
            self._connection_failed(request.producer, request.leader, LOCAL_TRANSPORT)

    def _connection_failed(self, index: int, leader: int, error: str) -> None:
        st = self.producers[index]
        flying = st.in_flight.pop(leader, {})
        st.down.add(leader)
        st.reconnects[leader] += 1
        self._refresh(index, st)
        for request_id in sorted(flying):
            request = flying[request_id]
            request.dead = True
            st.retries_in_flight.subtract(request.retried)
            self._release(st, request)
            for b in request.batches:
                self._retry(st, b, error)
