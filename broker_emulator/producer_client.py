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


@dataclass
class Batch:
    producer: int
    p: int
    records: int
    created_ms: int
    attempts: int = 0
    backoff_until_ms: int = 0


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


@dataclass
class ProducerState:
    spec: ProducerSpec
    partitions: np.ndarray
    rng: Random
    carry: float = 0.0
    sticky: int = 0
    sticky_fill: int = 0
    queued: dict[int, list[Batch]] = field(default_factory=dict)       # partition -> unsent batches, oldest first
    in_flight: dict[int, dict[int, Request]] = field(default_factory=dict)   # leader -> unanswered requests
    down: set[int] = field(default_factory=set)     # leaders whose connection failed and is not back yet
    retries_in_flight: Counter[int] = field(default_factory=Counter)   # partition -> retried batches in flight
    ticking: bool = True


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
        """Per partition: the leader as clients last heard it from metadata."""


class ProducerClient:
    def __init__(self, sim: ClientHost) -> None:
        self.sim = sim
        self.producers: list[ProducerState] = []
        self.next_request_id = 0
        self.errors: Counter[str] = Counter()   # per error code, batches as the client saw them fail

    def add_producer(self, spec: ProducerSpec, partitions: np.ndarray, rng: Random) -> None:
        self.producers.append(ProducerState(spec, partitions, rng, sticky=rng.randrange(len(partitions))))
        self.sim.queue.schedule(spec.start_ms, "produce_tick", len(self.producers) - 1)

    # --- the application's records ---------------------------------------------------------------
    def tick(self, index: int) -> None:
        st = self.producers[index]
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
        while n > 0:
            p = int(st.partitions[st.sticky])
            take = min(n, per_batch - st.sticky_fill)
            queue = st.queued.setdefault(p, [])
            last = queue[-1] if queue else None
            if last is not None and last.attempts == 0 and last.records + take <= per_batch:
                last.records += take
            else:
                queue.append(Batch(index, p, take, now))
            self.sim.ledger.sent(p, spec.acks, take)
            n -= take
            st.sticky_fill += take
            if st.sticky_fill >= per_batch:  # adaptive sticky partitioner: switch after a full batch
                st.sticky_fill = 0
                st.sticky = st.rng.randrange(len(st.partitions))

    def send_to(self, name: str, broker: int, p: int, records: int) -> None:
        """One request of `records` for p straight to `broker`, whoever leads p: a client whose metadata is
        stale. A broker not leading p refuses it (NOT_LEADER_OR_FOLLOWER) and the batch is retried as any."""
        index = next(i for i, st in enumerate(self.producers) if st.spec.name == name)
        st = self.producers[index]
        self.sim.ledger.sent(p, st.spec.acks, records)
        self._send(index, st, broker, [Batch(index, p, records, self.sim.clock.now_ms)])

    # --- the sender --------------------------------------------------------------------------------
    def drain(self, index: int) -> None:
        """Send what may go now: per leader, up to the in-flight limit, one batch per partition a request."""
        sim = self.sim
        st = self.producers[index]
        now = sim.clock.now_ms
        self._expire(st, now)
        by_leader: dict[int, list[int]] = {}
        for p in sorted(st.queued):
            leader = int(sim.client_leader[p])
            if leader != NO_BROKER:   # no leader known: the batches wait for metadata (or their timeout)
                by_leader.setdefault(leader, []).append(p)
        for leader, ps in sorted(by_leader.items()):
            if leader in st.down:
                if not sim.brokers.accepts_requests(leader):
                    continue   # connecting to a stopped process gets no answer: nothing is sent
                st.down.discard(leader)
            flying = st.in_flight.setdefault(leader, {})
            while len(flying) < st.spec.max_in_flight:
                # A partition retrying a batch sends that batch alone until it is answered (Java's
                # shouldStopDrainBatchesForPartition, librdkafka's idempotent drain): in order, one at a time.
                batches = [q[0] for p in ps if (q := st.queued.get(p)) and q[0].backoff_until_ms <= now
                           and not st.retries_in_flight[p]]
                if not batches:
                    break
                for b in batches:
                    queue = st.queued[b.p]
                    queue.pop(0)
                    if not queue:
                        del st.queued[b.p]
                self._send(index, st, leader, batches)

    def _send(self, index: int, st: ProducerState, leader: int, batches: list[Batch]) -> None:
        sim = self.sim
        now = sim.clock.now_ms
        request = Request(self.next_request_id, index, leader, batches, len(batches))
        self.next_request_id += 1
        for b in batches:
            if b.attempts:
                request.retried.append(b.p)
                st.retries_in_flight[b.p] += 1
        st.in_flight.setdefault(leader, {})[request.request_id] = request
        sim.queue.schedule(now + sim.cfg.network_latency_ms, "produce_arrive", (leader, request))
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
        if request.dead:
            return
        if error is not None:
            request.errors[id(b)] = error
        request.undecided -= 1
        if request.undecided == 0:
            self.sim.queue.schedule(self.sim.clock.now_ms + self.sim.cfg.network_latency_ms, "produce_response",
                                    request)

    def response(self, request: Request) -> None:
        if request.dead:
            return
        st = self.producers[request.producer]
        st.in_flight[request.leader].pop(request.request_id, None)
        st.retries_in_flight.subtract(request.retried)
        for b in request.batches:
            error = request.errors.get(id(b))
            if error is not None:
                self._retry(st, b, error)
        self.drain(request.producer)

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
        for request_id in sorted(flying):
            request = flying[request_id]
            request.dead = True
            st.retries_in_flight.subtract(request.retried)
            for b in request.batches:
                self._retry(st, b, error)
