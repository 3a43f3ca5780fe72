"""The ack ledger: ground truth of acknowledged records and which of them were later lost.

An acknowledged record is identified by its offset and the leader epoch that wrote it. When a
replica becomes leader, every acknowledged range is compared with the new leader's log: the part of a
range whose epoch the new leader does not hold at those offsets is lost — the followers will truncate
to the new leader, and no consumer will ever read it. Ranges that retention deleted are forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker_emulator.config import acks_label
from schemas.bronze import UNCLEAN_ELECTIONS, ElectionKind, EventType

if TYPE_CHECKING:
    from broker_emulator.clock import SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.events import EventLog
    from broker_emulator.ports import ControllerPort
    from broker_emulator.state import PartitionTable

# Causes under which Kafka's contract allows losing acknowledged records.
EXPLAINED_LOSS = frozenset({"unclean_election", "power_loss", "disk_loss", "truncate_to_hw", "log_divergence",
                            "stale_leader", "leader_failover"})


@dataclass
class Counters:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    lost: int = 0
    lost_by_seq: int | None = None
    lost_by: str | None = None


@dataclass
class Totals:
    sent: dict[str, int] = field(default_factory=dict)
    acked: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    lost_by: dict[str, int] = field(default_factory=dict)


class LedgerHost(Protocol):
    """What the ledger reads of the simulation to tell whether a loss is one Kafka's contract allows."""

    @property
    def clock(self) -> SimClock: ...
    @property
    def cfg(self) -> BrokerConfig: ...
    @property
    def table(self) -> PartitionTable: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def controller(self) -> ControllerPort: ...
    @property
    def data_loss_by_broker(self) -> dict[int, str]: ...
    @property
    def stale_leader_writes(self) -> dict[int, bool]: ...
    def describe(self, p: int) -> str: ...


class Ledger:
    def __init__(self, sim: LedgerHost) -> None:
        self.sim = sim
        self.ranges: dict[int, list[list[int]]] = {}   # p -> [start, end, epoch, acks]
        self.interval: dict[tuple[int, int], Counters] = {}
        self.totals = Totals()
        self.unexplained: list[str] = []

    def _c(self, p: int, acks: int) -> Counters:
        key = (p, acks)
        c = self.interval.get(key)
        if c is None:
            c = self.interval[key] = Counters()
        return c

    def _add(self, bucket: dict[str, int], acks: int | str, n: int) -> None:
        k = acks if isinstance(acks, str) else acks_label(acks)
        bucket[k] = bucket.get(k, 0) + n

    def sent(self, p: int, acks: int, n: int) -> None:
        self._c(p, acks).sent += n
        self._add(self.totals.sent, acks, n)

    def failed(self, p: int, acks: int, n: int) -> None:
        self._c(p, acks).failed += n
        self._add(self.totals.failed, acks, n)

    def acked(self, p: int, acks: int, start: int, end: int, epoch: int) -> None:
        self._c(p, acks).acked += end - start
        self._add(self.totals.acked, acks, end - start)
        ranges = self.ranges.setdefault(p, [])
        if ranges and ranges[-1][1] == start and ranges[-1][2] == epoch and ranges[-1][3] == acks:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, epoch, acks])

    def check_leader(self, p: int, s: int) -> None:
        """Slot s just became leader of p: anything acknowledged that its log lacks is lost."""
        self._settle(p, [s])

    def check_all_replicas(self, p: int) -> None:
        """After power or disk loss: what no replica holds any more is lost, leader or not."""
        self._settle(p, list(range(int(self.sim.table.rf[p]))))

    def _settle(self, p: int, slots: list[int]) -> None:
        t = self.sim.table
        ranges = self.ranges.get(p)
        if not ranges:
            return
        log_start = min(int(t.log_start[p, s]) for s in slots)
        kept: list[list[int]] = []
        for start, end, epoch, acks in ranges:
            if end <= log_start:
                continue  # deleted by retention, not lost
            surv_end = start
            for s in slots:
                span = t.epoch_end(p, s, epoch)
                if span is not None and span[0] <= start:
                    surv_end = max(surv_end, min(end, span[1]))
            if surv_end < end:
                self._lost(p, slots[0] if len(slots) == 1 else self._holder(p), acks, end - surv_end)
            if surv_end > start:
                kept.append([start, surv_end, epoch, acks])
        self.ranges[p] = kept

    def _holder(self, p: int) -> int:
        """The slot to blame for a loss found on all replicas: the one that lost data most recently."""
        t = self.sim.table
        for s in range(int(t.rf[p])):
            if self.sim.data_loss_by_broker.get(int(t.replicas[p, s])):
                return s
        return 0

    def check_replica_truncation(self, p: int) -> None:
        """A replica truncated: writes a stale leader acknowledged may just have disappeared."""
        t = self.sim.table
        leader = int(t.leader[p])
        if leader >= 0:
            s = t.slot_of(p, leader)
            if t.known_leader[p, s] == leader:
                self.check_leader(p, s)

    def _lost(self, p: int, s: int, acks: int, n: int) -> None:
        sim = self.sim
        cause = self._cause(p, s, acks)
        seq = sim.events.emit(EventType.RECORDS_LOST, broker_id=int(sim.table.replicas[p, s]), p=p, cause=cause,
                              records=n, detail={"acks": acks_label(acks)})
        c = self._c(p, acks)
        c.lost += n
        c.lost_by_seq, c.lost_by = seq, cause
        self._add(self.totals.lost, acks, n)
        self.totals.lost_by[cause] = self.totals.lost_by.get(cause, 0) + n
        if cause not in EXPLAINED_LOSS:
            self.unexplained.append(f"{n} acks={acks_label(acks)} records of partition {sim.describe(p)} lost "
                                    f"at {sim.clock.now_ms} ms without an unclean election or page-cache loss")

    def _cause(self, p: int, s: int, acks: int) -> str:
        sim = self.sim
        _seq, kind = sim.controller.last_election.get(p, (-1, ElectionKind.CLEAN))
        broker = int(sim.table.replicas[p, s])
        if sim.data_loss_by_broker.get(broker):
            return sim.data_loss_by_broker[broker]  # its copy went with the page cache (or the disk)
        if kind in UNCLEAN_ELECTIONS:
            return "unclean_election"
        if sim.stale_leader_writes.get(p):
            return "stale_leader"
        if sim.cfg.truncation == "high_watermark":
            return "truncate_to_hw"
        if acks in (0, 1):
            return "leader_failover"  # acks=0/1 never waited for the followers
        if any(sim.data_loss_by_broker.get(b) for b in sim.table.replica_list(p)):
            return "power_loss"
        if sim.cfg.truncation == "kip101":
            return "log_divergence"   # the divergence KIP-279 closed: a follower kept records the leader lacks
        return "unexplained"

    def drain_interval(self) -> dict[tuple[int, int], Counters]:
        out, self.interval = self.interval, {}
        return out
