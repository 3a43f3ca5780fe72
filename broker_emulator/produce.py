"""Producers (linger, sticky batching, acks, timeouts, retries) and the leader's produce path.

Error codes are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (acks=all, ISR below the
effective min ISR, checked before the append), NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below
it while the write waited in purgatory), REQUEST_TIMED_OUT (the HW did not pass the write in time).
"""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.config import ProducerSpec, acks_label
from broker_emulator.state import NO_BROKER
from schemas.kafka_metrics import PRODUCE_ERRORS

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.events import EventLog
    from broker_emulator.ledger import Ledger
    from broker_emulator.logs import Logs
    from broker_emulator.metrics import Metrics
    from broker_emulator.ports import ReplicationPort
    from broker_emulator.state import PartitionTable

NONE = "NONE"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
NOT_ENOUGH_REPLICAS = "NOT_ENOUGH_REPLICAS"
NOT_ENOUGH_REPLICAS_AFTER_APPEND = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
REQUEST_TIMED_OUT = "REQUEST_TIMED_OUT"
ERROR_CODES = (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT)
# The metrics break these out by name (schemas.kafka_metrics): the two lists must be the same.
assert ERROR_CODES == PRODUCE_ERRORS
RETRIABLE = frozenset(ERROR_CODES)


@dataclass
class Batch:
    producer: int
    p: int
    records: int
    first_sent_ms: int
    attempts: int = 0


@dataclass
class Pending:
    """An acks=all write waiting in the leader's purgatory for the HW to pass `required_offset`."""

    batch: Batch
    leader: int
    leader_slot: int
    epoch: int
    base_offset: int
    required_offset: int
    deadline_ms: int


@dataclass
class ProducerState:
    spec: ProducerSpec
    partitions: np.ndarray
    rng: Random
    carry: float = 0.0
    sticky: int = 0
    sticky_fill: int = 0


class ProduceHost(Protocol):
    """What the producers and the leader's produce path use of the simulation."""

    @property
    def clock(self) -> SimClock: ...
    @property
    def queue(self) -> EventQueue: ...
    @property
    def cfg(self) -> BrokerConfig: ...
    @property
    def table(self) -> PartitionTable: ...
    @property
    def brokers(self) -> Brokers: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def replication(self) -> ReplicationPort: ...
    @property
    def client_leader(self) -> np.ndarray:
        """Per partition: the leader as clients last heard it from metadata."""


class Produce:
    def __init__(self, sim: ProduceHost) -> None:
        self.sim = sim
        self.t = sim.table
        self.producers: list[ProducerState] = []
        self.pending: dict[int, list[Pending]] = {}

    def add_producer(self, spec: ProducerSpec, partitions: np.ndarray, rng: Random) -> None:
        state = ProducerState(spec, partitions, rng, sticky=rng.randrange(len(partitions)))
        self.producers.append(state)
        self.sim.queue.schedule(spec.start_ms, "produce_tick", len(self.producers) - 1)

    # --- client side ---------------------------------------------------------------------------
    def tick(self, index: int) -> None:
        sim = self.sim
        st = self.producers[index]
        spec = st.spec
        now = sim.clock.now_ms
        if spec.stop_ms is not None and now >= spec.stop_ms:
            return
        st.carry += spec.rate_per_s * spec.linger_ms / 1000.0
        n = int(st.carry)
        st.carry -= n
        per_batch = max(1, spec.batch_size // spec.record_bytes)
        batches: list[Batch] = []
        while n > 0:
            take = min(n, per_batch - st.sticky_fill)
            batches.append(Batch(index, int(st.partitions[st.sticky]), take, now))
            n -= take
            st.sticky_fill += take
            if st.sticky_fill >= per_batch:  # adaptive sticky partitioner: switch after a full batch
                st.sticky_fill = 0
                st.sticky = st.rng.randrange(len(st.partitions))
        self.send(batches)
        sim.queue.schedule(now + spec.linger_ms, "produce_tick", index)

    def send(self, batches: list[Batch]) -> None:
        sim = self.sim
        by_leader: dict[int, list[Batch]] = {}
        for b in batches:
            spec = self.producers[b.producer].spec
            if b.attempts == 0:
                sim.ledger.sent(b.p, spec.acks, b.records)
            leader = int(sim.client_leader[b.p])
            if leader == NO_BROKER:
                self._retry_later(b, None)
                continue
            by_leader.setdefault(leader, []).append(b)
        for leader in sorted(by_leader):
            sim.queue.schedule(sim.clock.now_ms + sim.cfg.network_latency_ms, "produce_arrive",
                               (leader, by_leader[leader]))

    def _retry_later(self, b: Batch, error: str | None) -> None:
        """Retriable errors and unreachable leaders go back to the client until delivery.timeout.ms."""
        sim = self.sim
        spec = self.producers[b.producer].spec
        b.attempts += 1
        now = sim.clock.now_ms
        if now - b.first_sent_ms >= spec.delivery_timeout_ms or b.attempts > spec.retries:
            sim.ledger.failed(b.p, spec.acks, b.records)
            return
        # Exponential backoff with ±20 % jitter, as the Java producer does since KIP-580.
        backoff = min(spec.retry_backoff_ms * 2 ** (b.attempts - 1), spec.retry_backoff_max_ms)
        jitter = self.producers[b.producer].rng.uniform(0.8, 1.2)
        sim.queue.schedule(now + max(1, int(backoff * jitter)), "produce_retry", b)

    def connection_closed(self, batches: list[Batch]) -> None:
        """The leader went down holding these (a paused broker that crashed): the client retries them."""
        for b in batches:
            self._retry_later(b, None)

    def retry(self, b: Batch) -> None:
        self.send([b])

    # --- broker side -------------------------------------------------------------------------------
    def arrive(self, payloads: list[tuple[int, list[Batch]]]) -> None:
        """Every produce request that reaches its leader in this millisecond, processed together."""
        sim = self.sim
        appended_by_leader: dict[int, list[int]] = {}
        for payload in payloads:
            leader, batches = payload
            if sim.brokers.running(leader):
                appended_by_leader.setdefault(leader, []).extend(self._append(leader, batches))
            elif sim.brokers.is_paused(leader):
                sim.brokers.stall(leader, "produce_arrive", payload)
            else:
                for b in batches:
                    self._retry_later(b, None)
        touched: set[int] = set()
        for leader in sorted(appended_by_leader):
            if appended_by_leader[leader]:
                ps = sorted(set(appended_by_leader[leader]))
                sim.replication.data_appended(leader, np.asarray(ps, np.int64))
                touched.update(ps)
        if touched:
            sim.replication.advance_hw(np.asarray(sorted(touched), np.int64))

    def _append(self, leader: int, batches: list[Batch]) -> list[int]:
        sim, t = self.sim, self.t
        appended: list[int] = []
        for b in batches:
            spec = self.producers[b.producer].spec
            s = t.slot_of(b.p, leader)
            if s < 0 or t.known_leader[b.p, s] != leader:
                self._error(leader, b, NOT_LEADER_OR_FOLLOWER)
                continue
            if spec.acks == -1:
                eff_min = int(min(t.configured_min_isr[b.p], t.rf[b.p]))
                if np.count_nonzero(t.leader_isr[b.p]) < eff_min:
                    self._error(leader, b, NOT_ENOUGH_REPLICAS)
                    continue
            base = int(t.leo[b.p, s])
            sim.logs.append_leader(b.p, s, b.records)
            sim.metrics.messages_in(leader, b.records, b.records * spec.record_bytes)
            appended.append(b.p)
            if spec.acks in (0, 1):
                sim.ledger.acked(b.p, spec.acks, base, base + b.records, sim.table.last_epoch(b.p, s))
            else:
                entry = Pending(b, leader, s, int(t.known_epoch[b.p, s]), base, base + b.records,
                                sim.clock.now_ms + spec.request_timeout_ms)
                self.pending.setdefault(b.p, []).append(entry)
                sim.queue.schedule(entry.deadline_ms, "produce_timeout", b.p, priority=7)
        return appended

    def _error(self, broker: int, b: Batch, error: str) -> None:
        sim = self.sim
        spec = self.producers[b.producer].spec
        sim.metrics.produce_error(broker, error)
        sim.events.emit("produce_rejected", broker_id=broker, p=b.p, cause=error, records=b.records,
                        detail={"acks": acks_label(spec.acks), "producer": spec.name, "attempt": b.attempts})
        self._retry_later(b, error)

    # --- purgatory -------------------------------------------------------------------------------
    def hw_advanced(self, ps: np.ndarray) -> None:
        for p in ps.tolist():
            if p in self.pending:
                self.complete(p)

    def complete(self, p: int) -> None:
        """Complete every waiting acks=all write of partition p whose fate is decided now."""
        sim, t = self.sim, self.t
        waiting = self.pending.get(p, [])
        still: list[Pending] = []
        now = sim.clock.now_ms
        for e in waiting:
            s = e.leader_slot
            if t.known_leader[p, s] != e.leader or t.known_epoch[p, s] != e.epoch:
                self._error(e.leader, e.batch, NOT_LEADER_OR_FOLLOWER)
            elif t.hw[p, s] >= e.required_offset:
                maximal = np.count_nonzero(t.leader_isr[p] | t.pending_add[p])
                eff_min = int(min(t.configured_min_isr[p], t.rf[p]))
                if maximal >= eff_min:
                    sim.ledger.acked(p, -1, e.base_offset, e.required_offset, e.epoch)
                else:
                    self._error(e.leader, e.batch, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            elif now >= e.deadline_ms:
                self._error(e.leader, e.batch, REQUEST_TIMED_OUT)
            else:
                still.append(e)
        if still:
            self.pending[p] = still
        else:
            self.pending.pop(p, None)

    def leadership_changed(self, p: int) -> None:
        if p in self.pending:
            self.complete(p)
