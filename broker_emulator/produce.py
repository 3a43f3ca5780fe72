"""The leader's produce path: acks, min ISR, purgatory. The producers themselves are producer_client.py.

Error codes are Kafka's: NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS (acks=all, ISR below the
effective min ISR, checked before the append), NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below
it while the write waited in purgatory), REQUEST_TIMED_OUT (the HW did not pass the write in time).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.config import acks_label
from broker_emulator.producer_client import Batch, ClientHost, ProducerClient, Request
from schemas.bronze import EventType
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
# Answered to idempotent producers; not among the metered codes (schemas.kafka_metrics), as Kafka's ErrorsPerSec
# for it is not collected.
OUT_OF_ORDER_SEQUENCE_NUMBER = "OUT_OF_ORDER_SEQUENCE_NUMBER"
# How many of a producer's latest batches per partition the leaders remember, to find the last one a replica
# holds. A replica that holds none of them is further behind than that: it has older state for the producer.
SEQUENCE_MEMORY = 4096
DUPLICATE_WINDOW = 5   # ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the batches a leader can answer as duplicates
ERROR_CODES = (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT)
# The metrics break these out by name (schemas.kafka_metrics): the two lists must be the same.
assert ERROR_CODES == PRODUCE_ERRORS


@dataclass(frozen=True)
class Written:
    """An idempotent producer's batch as a leader appended it: which offsets, in which epoch, which sequences."""

    base_offset: int
    end_offset: int
    epoch: int
    producer_epoch: int
    first_seq: int
    last_seq: int


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
        # (partition, producer) -> its latest batches as written; a replica's producer state is the newest it holds.
        self.written: dict[tuple[int, int], deque[Written]] = {}
        # Kafka's SocketServer reads a connection's next request only once it has answered the one before (the
        # Processor mutes the channel): a write parked in purgatory holds back everything behind it.
        self.reading: dict[tuple[int, int, int], Request] = {}         # connection -> the request being handled
        self.unread: dict[tuple[int, int, int], deque[Request]] = {}   # connection -> requests waiting behind it

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
                reading = self.reading.get(request.connection)
                if reading is not None and reading is not request:
                    self.unread.setdefault(request.connection, deque()).append(request)
                    continue
                self.reading[request.connection] = request
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
            duplicate: Written | None = None
            if spec.idempotent:
                verdict = self._check_sequence(b, s)
                if isinstance(verdict, str):
                    self._error(leader, request, b, verdict, metered=False)
                    continue
                duplicate = verdict
            if duplicate is not None:
                # Written before (the client retried a request whose answer it never got): answered with the
                # first write's offsets, as ProducerStateManager's batch metadata lets Kafka do; nothing appended.
                base, end, epoch = duplicate.base_offset, duplicate.end_offset, duplicate.epoch
            else:
                base = int(t.leo[b.p, s])
                sim.logs.append_leader(b.p, s, b.records)   # assigns the leader's epoch to its log first if new
                end, epoch = base + b.records, sim.table.last_epoch(b.p, s)
                sim.metrics.messages_in(leader, b.records, b.records * spec.record_bytes)
                appended.append(b.p)
                if spec.idempotent:
                    self.written.setdefault((b.p, b.producer), deque(maxlen=SEQUENCE_MEMORY)).append(
                        Written(base, end, epoch, b.producer_epoch, b.first_seq, b.last_seq))
            if spec.acks in (0, 1):
                sim.ledger.acked(b.p, spec.acks, base, end, epoch)
                self._answer(request, b, None)
            else:
                entry = Pending(request, b, leader, s, int(t.known_epoch[b.p, s]), base, end,
                                sim.clock.now_ms + spec.request_timeout_ms)
                self.pending.setdefault(b.p, []).append(entry)
                sim.queue.schedule(entry.deadline_ms, "produce_timeout", b.p, priority=7)
                if duplicate is not None:
                    self.complete(b.p)   # the HW may have passed the first write already
        return appended

    def _check_sequence(self, b: Batch, s: int) -> Written | str | None:
        """Kafka's ProducerAppendInfo.checkSequence against the producer state of the leader's own log (replica
        slot s): None to append, the earlier write for a duplicate, or the error to answer."""
        t = self.t
        history = self.written.get((b.p, b.producer))
        if not history:
            return None   # no state for this producer: any sequence is taken
        leo = int(t.leo[b.p, s])
        held_at = next((i for i in range(len(history) - 1, -1, -1)
                        if history[i].end_offset <= leo
                        and t.epoch_at(b.p, s, history[i].end_offset - 1) == history[i].epoch), None)
        if held_at is None:
            if len(history) < SEQUENCE_MEMORY:
                return None   # this log holds none of the producer's batches: no state
            return OUT_OF_ORDER_SEQUENCE_NUMBER
        held = history[held_at]
        # A duplicate is one of the last batches this log holds (ProducerStateEntry keeps NUM_BATCHES_TO_RETAIN, 5).
        for i in range(held_at, max(-1, held_at - DUPLICATE_WINDOW), -1):
            w = history[i]
            if (w.producer_epoch == b.producer_epoch and w.first_seq == b.first_seq and w.last_seq == b.last_seq
                    and t.epoch_at(b.p, s, w.end_offset - 1) == w.epoch):
                return w
        if b.producer_epoch != held.producer_epoch:
            return None if b.first_seq == 0 else OUT_OF_ORDER_SEQUENCE_NUMBER
        return None if b.first_seq == held.last_seq + 1 else OUT_OF_ORDER_SEQUENCE_NUMBER

    def _error(self, broker: int, request: Request, b: Batch, error: str, *, metered: bool = True) -> None:
        """The leader answers `error` for b: counted in its ErrorsPerSec (per partition, as Kafka's
        ProduceResponse.errorCounts does) even when the client has already given the request up."""
        sim = self.sim
        spec = self.client.producers[b.producer].spec
        if metered:
            sim.metrics.produce_error(broker, error)
        sim.events.emit(EventType.PRODUCE_REJECTED, broker_id=broker, p=b.p, cause=error, records=b.records,
                        detail={"acks": acks_label(spec.acks), "producer": spec.name, "attempt": b.attempts})
        self._answer(request, b, error)

    def _answer(self, request: Request, b: Batch, error: str | None) -> None:
        self.client.decided(request, b, error)
        if request.undecided == 0 and self.reading.get(request.connection) is request:
            del self.reading[request.connection]
            self._read_next(request.connection)

    def _read_next(self, connection: tuple[int, int, int]) -> None:
        """The connection's answer went out: the broker reads the request behind it, if the client still waits."""
        waiting = self.unread.get(connection)
        while waiting:
            request = waiting.popleft()
            if not request.dead:
                if not waiting:
                    del self.unread[connection]
                # Read as its own event, not from inside the answer being sent (which may be running in the
                # middle of a fetch or an HW advance); the connection is held for it meanwhile.
                self.reading[connection] = request
                self.sim.queue.schedule(self.sim.clock.now_ms + self.sim.cfg.request_handling_ms, "produce_arrive",
                                        (request.leader, request))
                return
        self.unread.pop(connection, None)

    def connections_closed(self, b: int) -> None:
        """b's process went away: its connections, and what they had not read, are gone."""
        for connection in [c for c in self.reading if c[1] == b]:
            del self.reading[connection]
        for connection in [c for c in self.unread if c[1] == b]:
            del self.unread[connection]

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
                    self._answer(e.request, e.batch, None)
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
