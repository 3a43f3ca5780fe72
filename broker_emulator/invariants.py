"""Invariant checkers: observers beside the model, run every metric interval and at the end.

From the TLA+ specifications of Kafka replication: leader ∈ ISR ⊆ replicas; ISR members agree with
the leader below the HW (strong ISR / log matching); a leader's HW never decreases within its epoch;
ISR ≥ min ISR ⇒ ELR empty; and no acknowledged record is lost without an unclean election or
correlated page-cache loss to explain it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.errors import InvariantViolation
from broker_emulator.state import NO_BROKER

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.events import EventLog
    from broker_emulator.ledger import Ledger
    from broker_emulator.replication import Replication
    from broker_emulator.scenario import Scenario
    from broker_emulator.state import PartitionTable


class InvariantsHost(Protocol):
    """What the checkers observe of the simulation (they change nothing), and what a failure reports."""

    @property
    def scenario(self) -> Scenario: ...
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
    def replication(self) -> Replication: ...
    def describe(self, p: int) -> str: ...


class Invariants:
    def __init__(self, sim: InvariantsHost, sample: int = 500) -> None:
        self.sim = sim
        t = sim.table
        self.prev_hw = np.zeros(t.count, np.int64)
        self.prev_epoch = np.full(t.count, -1, np.int32)
        self.sample = sample
        self.cursor = 0
        self.checks = 0

    def check(self, full: bool = False) -> None:
        sim, t = self.sim, self.sim.table
        n = t.count
        self.checks += 1
        leader = t.leader[:n]
        has = leader != NO_BROKER
        ls = np.argmax(t.replicas[:n] == leader[:, None], axis=1)
        rows = np.arange(n)
        # Leader ∈ ISR ⊆ replicas.
        bad = has & ~t.isr[rows, ls]
        if bad.any():
            self._fail("leader not in ISR", int(np.flatnonzero(bad)[0]))
        outside = (t.isr[:n] | t.elr[:n]) & (t.replicas[:n] == NO_BROKER)
        if outside.any():
            self._fail("ISR/ELR member outside the replica set", int(np.flatnonzero(outside.any(axis=1))[0]))
        # ISR >= effective min ISR => ELR empty.
        eff_min = np.minimum(t.configured_min_isr[:n], t.rf[:n])
        elr_bad = (t.isr[:n].sum(axis=1) >= eff_min) & t.elr[:n].any(axis=1)
        if elr_bad.any():
            self._fail("ELR not empty while ISR >= min ISR", int(np.flatnonzero(elr_bad)[0]))
        # A leader's HW never decreases within its epoch.
        hw = np.where(has, t.hw[rows, ls], -1)
        running = np.zeros(max(sim.brokers.ids) + 1, bool)
        for b in sim.brokers.ids:
            running[b] = sim.brokers.running(b)
        live = has & running[np.maximum(leader, 0)]
        same = live & (t.leader_epoch[:n] == self.prev_epoch) & (t.known_leader[rows, ls] == leader)
        dec = same & (hw < self.prev_hw)
        if dec.any():
            p = int(np.flatnonzero(dec)[0])
            self._fail(f"leader HW decreased from {self.prev_hw[p]} to {hw[p]}", p)
        acting = live & (t.known_leader[rows, ls] == leader)
        self.prev_hw = np.where(acting, hw, self.prev_hw)
        self.prev_epoch = np.where(acting, t.leader_epoch[:n], -1)
        self._log_matching(full)
        if full or self.checks % 30 == 0:  # it scans the whole event queue: every 30th interval is enough
            self._fetch_sessions_progress()
        if sim.ledger.unexplained:
            raise InvariantViolation(self._message("acknowledged records lost: " + sim.ledger.unexplained[0]))

    def _log_matching(self, full: bool) -> None:
        """Running ISR members that know the current epoch hold the leader's records below the HW."""
        sim, t = self.sim, self.sim.table
        if sim.cfg.truncation != "epoch":
            return  # truncating to the HW is the pre-KIP-101 protocol that breaks this on purpose
        n = t.count
        if full or n <= self.sample:
            ps = range(n)
        else:
            ps = range(self.cursor, min(self.cursor + self.sample, n))
            self.cursor = 0 if self.cursor + self.sample >= n else self.cursor + self.sample
        for p in ps:
            leader = int(t.leader[p])
            if leader == NO_BROKER:
                continue
            ls = t.slot_of(p, leader)
            if t.known_leader[p, ls] != leader or t.known_epoch[p, ls] != t.leader_epoch[p]:
                continue
            hw = int(t.hw[p, ls])
            if hw <= t.log_start[p, ls]:
                continue
            want = t.epoch_at(p, ls, hw - 1)
            for s in range(int(t.rf[p])):
                b = int(t.replicas[p, s])
                if (s == ls or not t.leader_isr[p, s] or not sim.brokers.running(b) or t.needs_truncation[p, s]
                        or t.known_epoch[p, s] != t.leader_epoch[p] or t.leo[p, s] < hw):
                    continue
                got = t.epoch_at(p, s, hw - 1)
                if got != want and t.log_start[p, s] < hw:
                    self._fail(f"log divergence below HW {hw}: leader epoch {want}, replica {b} epoch {got}", p)

    def _fetch_sessions_progress(self) -> None:
        """Every running fetch session has a next step: an event queued, a parked fetch whose wake is
        queued, or a request a paused broker holds. A session with none would never fetch again, and
        its follower could never rejoin the ISR (a liveness bug the safety checks above cannot see).
        """
        sim = self.sim
        rep = sim.replication
        steps = list(sim.queue.pending())
        for b in sim.brokers.ids:
            steps += sim.brokers.by_id[b].stalled
        ahead: set[tuple[int, int]] = set()
        for kind, payload in steps:
            if kind == "fetch_send":
                ahead.add(payload)
            elif kind == "fetch_leader":
                ahead.add((payload.follower, payload.leader))
            elif kind == "fetch_apply":
                ahead.add((payload.request.follower, payload.request.leader))
            elif kind == "fetch_wake":
                parked = rep.parked.get(payload[:2])
                if parked is not None and parked.request_id == payload[2]:
                    ahead.add(payload[:2])
            elif kind == "fetch_timeout":   # a fetch whose answer a network cut holds
                held = rep.cut_off.get(payload[0])
                if held is not None and held.request_id == payload[1]:
                    ahead.add(payload[0])
        for key in sorted(k for k, busy in rep.busy.items() if busy and k not in ahead):
            raise InvariantViolation(self._message(f"fetch session {key[0]}->{key[1]} has no next step: "
                                                   "it would never fetch again"))

    def _fail(self, what: str, p: int) -> None:
        raise InvariantViolation(self._message(f"{what} on partition {self.sim.describe(p)}"))

    def _message(self, what: str) -> str:
        sim = self.sim
        history = "\n  ".join(list(sim.events.history)[-40:])
        return (f"invariant violated at t={sim.clock.now_ms}ms: {what}\n"
                f"recent events:\n  {history}\n"
                f"reproduce: isrwatch emulate --scenario {sim.scenario.source} --seed {sim.scenario.seed}")
