"""The leader's produce path: acks, min ISR, purgatory. The producers themselves are producer_client.py.

Error codes are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (acks=all, ISR below the
effective min ISR, checked before the append), NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below
it while the write waited in purgatory), REQUEST_TIMED_OUT (the HW did not pass the write in time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.config import acks_label
from broker_emulator.producer_client import Batch, ClientHost, ProducerClient, Request
from schemas.kafka_metrics import PRODUCE_ERRORS

if TYPE_CHECKING:
    from broker_emulator.events import EventLog
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


@dataclass
class Pending:
    """An acks=all write waiting in the leader's purgatory for the HW to pass `required_offset`."""

    request: Request
    batch: Batch
    leader: int
    leader_slot: int
    epoch: int
    base_offset: int
    required_offset: int
    deadline_ms: int


class ProduceHost(ClientHost, Protocol):
    """What the leader's produce path uses of the simulation, beyond what the producers do."""

    @property
    def table(self) -> PartitionTable: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def replication(self) -> ReplicationPort: ...


class Produce:
    """The leader's side of produce requests; the client's side is `self.client` (producer_client.py)."""

    def __init__(self, sim: ProduceHost) -> None:
        self.sim = sim
        self.t = sim.table
        self.client = ProducerClient(sim)
        self.pending: dict[int, list[Pending]] = {}

    # --- broker side -------------------------------------------------------------------------------
    def arrive(self, payloads: list[tuple[int, Request]]) -> None:
        """Every produce request that reaches its leader in this millisecond, processed together."""
        sim = self.sim
        appended_by_leader: dict[int, list[int]] = {}
        for payload in payloads:
            leader, request = payload
            if request.dead:
                continue   # its connection failed: a broker reading it now finds the socket closed
            if sim.brokers.running(leader):
                appended_by_leader.setdefault(leader, []).extend(self._append(leader, request))
            elif sim.brokers.is_paused(leader):
                sim.brokers.stall(leader, "produce_arrive", payload)
            else:
                self.client.refused(request)
        touched: set[int] = set()
        for leader in sorted(appended_by_leader):
            if appended_by_leader[leader]:
                ps = sorted(set(appended_by_leader[leader]))
                sim.replication.data_appended(leader, np.asarray(ps, np.int64))
                touched.update(ps)
        if touched:
            sim.replication.advance_hw(np.asarray(sorted(touched), np.int64))

    def _append(self, leader: int, request: Request) -> list[int]:
        sim, t = self.sim, self.t
        appended: list[int] = []
        for b in request.batches:
            spec = self.client.producers[b.producer].spec
            s = t.slot_of(b.p, leader)
            if s < 0 or t.known_leader[b.p, s] != leader:
                self._error(leader, request, b, NOT_LEADER_OR_FOLLOWER)
                continue
            if spec.acks == -1:
                eff_min = int(min(t.configured_min_isr[b.p], t.rf[b.p]))
                if np.count_nonzero(t.leader_isr[b.p]) < eff_min:
                    self._error(leader, request, b, NOT_ENOUGH_REPLICAS)
                    continue
            base = int(t.leo[b.p, s])
            sim.logs.append_leader(b.p, s, b.records)
            sim.metrics.messages_in(leader, b.records, b.records * spec.record_bytes)
            appended.append(b.p)
            if spec.acks in (0, 1):
                sim.ledger.acked(b.p, spec.acks, base, base + b.records, sim.table.last_epoch(b.p, s))
                self.client.decided(request, b, None)
            else:
                entry = Pending(request, b, leader, s, int(t.known_epoch[b.p, s]), base, base + b.records,
                                sim.clock.now_ms + spec.request_timeout_ms)
                self.pending.setdefault(b.p, []).append(entry)
                sim.queue.schedule(entry.deadline_ms, "produce_timeout", b.p, priority=7)
        return appended

    def _error(self, broker: int, request: Request, b: Batch, error: str) -> None:
        """The leader answers `error` for b: counted in its ErrorsPerSec (per partition, as Kafka's
        ProduceResponse.errorCounts does) even when the client has already given the request up."""
        sim = self.sim
        spec = self.client.producers[b.producer].spec
        sim.metrics.produce_error(broker, error)
        sim.events.emit("produce_rejected", broker_id=broker, p=b.p, cause=error, records=b.records,
                        detail={"acks": acks_label(spec.acks), "producer": spec.name, "attempt": b.attempts})
        self.client.decided(request, b, error)

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
            if not sim.brokers.running(e.leader) and not sim.brokers.is_paused(e.leader):
                continue   # the leader's process is gone: no answer (the client retries on the closed connection)
            if t.known_leader[p, s] != e.leader or t.known_epoch[p, s] != e.epoch:
                self._error(e.leader, e.request, e.batch, NOT_LEADER_OR_FOLLOWER)
            elif t.hw[p, s] >= e.required_offset:
                maximal = np.count_nonzero(t.leader_isr[p] | t.pending_add[p])
                eff_min = int(min(t.configured_min_isr[p], t.rf[p]))
                if maximal >= eff_min:
                    if not e.request.dead:   # written and replicated, but the client never hears of it
                        sim.ledger.acked(p, -1, e.base_offset, e.required_offset, e.epoch)
                    self.client.decided(e.request, e.batch, None)
                else:
                    self._error(e.leader, e.request, e.batch, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            elif now >= e.deadline_ms:
                self._error(e.leader, e.request, e.batch, REQUEST_TIMED_OUT)
            else:
                still.append(e)
        if still:
            self.pending[p] = still
        else:
            self.pending.pop(p, None)

    def leadership_changed(self, p: int) -> None:
        if p in self.pending:
            self.complete(p)
