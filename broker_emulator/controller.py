"""The KRaft controller: broker sessions and fencing, AlterPartition, leader elections, ELR.

Partition changes follow PartitionChangeBuilder: keep a still-valid leader; else the first replica
in assignment order that is in the target ISR and acceptable (unfenced, not shutting down); else, ISR
empty and ELR on, the first acceptable ELR member (no loss); else the last known leader (ELR on);
else, with unclean.leader.election.enable, the first acceptable replica. Unclean and last-known-leader
elections set ISR=[leader] and LeaderRecoveryState=RECOVERING until the leader reports recovery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.state import NO_BROKER, RECOVERED, RECOVERING
from schemas.bronze import UNCLEAN_ELECTIONS, BrokerStateCause, ElectionKind, EventType
from schemas.kafka_metrics import CONTROLLER_NODE_ID

if TYPE_CHECKING:
    from random import Random

    from broker_emulator.brokers import Brokers, Network
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.events import EventLog
    from broker_emulator.metrics import Metrics
    from broker_emulator.ports import ProducePort, ReplicationPort
    from broker_emulator.state import PartitionTable


class ControllerHost(Protocol):
    """What the controller uses of the simulation: the cluster, the scheduler, and metadata publication."""

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
    def network(self) -> Network: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def replication(self) -> ReplicationPort: ...
    @property
    def produce(self) -> ProducePort: ...
    @property
    def rng_timing(self) -> Random:
        """The seeded stream of timing draws (which of two racing messages arrives first)."""
    def publish(self, ps: list[int]) -> None:
        """Send a committed partition change to the brokers and clients (after metadata propagation)."""


class Controller:
    def __init__(self, sim: ControllerHost) -> None:
        self.sim = sim
        self.t = sim.table
        ids = sim.brokers.ids
        self.fenced = {b: False for b in ids}
        self.shutting_down = {b: False for b in ids}
        self.unclean_shutdown = {b: False for b in ids}
        self.last_heartbeat_ms = {b: 0 for b in ids}
        self.last_election: dict[int, tuple[int, str]] = {}
        self.balance_scheduled = False

    # --- sessions ----------------------------------------------------------------------------
    def heartbeat(self, b: int) -> None:
        """Broker b's heartbeat time: if it is running and reaches the controller, its session is renewed (and a
        fenced broker unfenced), and the session's expiry is scheduled as QuorumController does
        (rescheduleMaybeFenceStaleBrokers: a deferred event at the next session's end, not a periodic sweep)."""
        sim = self.sim
        if not (sim.brokers.running(b) and sim.network.reaches_controller(b)):
            return
        now = sim.clock.now_ms
        self.last_heartbeat_ms[b] = now
        if self.fenced[b] and not self.shutting_down[b]:
            self.unfence(b)
        sim.queue.schedule(now + sim.cfg.broker_session_timeout_ms + 1, "session_expiry", (b, now), priority=2)

    def session_expiry(self, payload: tuple[int, int]) -> None:
        """BrokerHeartbeatManager: a broker whose last heartbeat is older than the session timeout is fenced."""
        b, heartbeat_ms = payload
        if self.last_heartbeat_ms[b] == heartbeat_ms and not self.fenced[b]:
            self.fence(b, "session_timeout")

    def fence(self, b: int, cause: str) -> None:
        self.fenced[b] = True
        self.sim.events.emit(EventType.FENCED, broker_id=b, cause=cause, detail={})
        for p in self._partitions_of(b):
            self.change(p, remove=b, cause=cause)

    def unfence(self, b: int) -> None:
        self.fenced[b] = False
        self.sim.events.emit(EventType.UNFENCED, broker_id=b, cause="heartbeat", detail={})
        for p in self._partitions_of(b):
            if self.t.leader[p] == NO_BROKER:
                self.change(p, cause="broker_unfenced")

    def registered(self, b: int, unclean: bool) -> None:
        """A restarted broker registers; after an unclean shutdown it may not stay an eligible leader."""
        self.unclean_shutdown[b] = unclean
        self.shutting_down[b] = False
        if not self.fenced[b]:
            # A new incarnation before the old session expired: the old one is fenced first.
            self.fence(b, "reregistration")
        if unclean:
            for p in self._partitions_of(b):
                s = self.t.slot_of(p, b)
                if self.t.elr[p, s]:
                    self.change(p, drop_elr=b, cause="unclean_shutdown")

    def _partitions_of(self, b: int) -> list[int]:
        t = self.t
        return np.flatnonzero((t.replicas[: t.count] == b).any(axis=1)).tolist()

    def acceptable(self, b: int) -> bool:
        return not self.fenced[b] and not self.shutting_down[b]

    def broker_eligible_for_isr(self, b: int) -> bool:
        return self.acceptable(b) and self.sim.brokers.running(b)

    # --- controlled shutdown and admin elections ---------------------------------------------
    def controlled_shutdown(self, b: int) -> None:
        self.shutting_down[b] = True
        self.sim.events.emit(EventType.BROKER_STATE, broker_id=b, cause=BrokerStateCause.CONTROLLED_SHUTDOWN,
                             detail={"state": "shutting_down"})
        for p in self._partitions_of(b):
            self.change(p, remove=b, cause="controlled_shutdown")
        # The broker exits once its leaderships have moved and it has heard so.
        delay = self.sim.cfg.metadata_propagation_ms + 2 * self.sim.cfg.network_latency_ms
        self.sim.queue.schedule(self.sim.clock.now_ms + delay, "shutdown_complete", b)

    def elect_leaders(self, ps: list[int], election_type: str, cause: str = "preferred_election") -> dict[int, str]:
        """ReplicationControlManager.electLeader, per partition, with its result code: ELECTION_NOT_NEEDED when
        the preferred replica already leads (preferred) or a leader exists (unclean); else the election, or
        PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when it finds no leader to elect."""
        t = self.t
        results: dict[int, str] = {}
        for p in ps:
            if election_type == "preferred":
                preferred = int(t.replicas[p, 0])
                if t.leader[p] == preferred:
                    results[p] = "ELECTION_NOT_NEEDED"
                elif t.isr[p, 0] and self.acceptable(preferred):
                    self.change(p, force_leader=preferred, cause=cause)
                    results[p] = "NONE"
                else:
                    results[p] = "PREFERRED_LEADER_NOT_AVAILABLE"
            elif t.leader[p] != NO_BROKER:
                results[p] = "ELECTION_NOT_NEEDED"
            else:
                self.change(p, cause="admin_unclean_election", allow_unclean=True)
                results[p] = "NONE" if t.leader[p] != NO_BROKER else "ELIGIBLE_LEADERS_NOT_AVAILABLE"
        return results

    # --- auto leader rebalance ---------------------------------------------------------------
    def _maybe_schedule_balance(self, p: int | None = None) -> None:
        """QuorumController.maybeScheduleNextBalancePartitionLeaders: once some partition's leader is not its
        preferred replica (the first in assignment order), a balance is scheduled
        leader.imbalance.check.interval.seconds later, unless one already is. After a change to p only p can
        have become imbalanced, so only p is looked at (a change must not cost a scan of every partition)."""
        sim, t = self.sim, self.t
        if self.balance_scheduled or not sim.cfg.auto_leader_rebalance_enable:
            return
        n = t.count
        if p is not None and t.leader[p] == t.replicas[p, 0]:
            return
        if p is None and not (t.leader[:n] != t.replicas[:n, 0]).any():
            return
        self.balance_scheduled = True
        sim.queue.schedule(sim.clock.now_ms + sim.cfg.leader_imbalance_check_interval_seconds * 1000,
                           "balance_leaders", None, priority=5)

    def balance_leaders(self, _: object = None) -> None:
        """ReplicationControlManager.maybeBalancePartitionLeaders: a preferred election for every imbalanced
        partition (it moves only where the preferred replica is in the ISR and acceptable); the next balance
        is scheduled by the changes, or below if some partition stays imbalanced."""
        self.balance_scheduled = False
        t = self.t
        n = t.count
        self.elect_leaders(np.flatnonzero(t.leader[:n] != t.replicas[:n, 0]).tolist(), "preferred",
                           cause="auto_leader_rebalance")
        self._maybe_schedule_balance()

    # --- AlterPartition (leader-initiated ISR changes) ----------------------------------------
    def request_isr_change(self, p: int, add_slot: int | None = None, remove_slots: list[int] | None = None) -> None:
        t = self.t
        leader = int(t.leader[p])
        ls = t.slot_of(p, leader)
        target = t.leader_isr[p].copy()
        if add_slot is not None:
            target[add_slot] = True
            t.pending_add[p, add_slot] = True
        for s in remove_slots or []:
            target[s] = False
        t.alter_inflight[p] = True
        request = (p, leader, int(t.known_epoch[p, ls]), int(t.partition_epoch[p]), target,
                   "expand" if add_slot is not None else "shrink")
        self._send_alter(request)

    def _send_alter(self, request: tuple) -> None:
        sim = self.sim
        leader = request[1]
        if sim.network.reaches_controller(leader):
            sim.queue.schedule(sim.clock.now_ms + sim.cfg.network_latency_ms, "alter_partition", request)
        else:  # the AlterPartition manager retries until the controller answers
            sim.queue.schedule(sim.clock.now_ms + sim.cfg.replica_fetch_backoff_ms, "alter_retry", request)

    def alter_retry(self, request: tuple) -> None:
        if self.sim.brokers.running(request[1]):
            self._send_alter(request)

    def handle_alter(self, request: tuple) -> None:
        t = self.t
        p, leader, epoch, pepoch, target, kind = request
        ok = (t.leader[p] == leader and t.leader_epoch[p] == epoch and t.partition_epoch[p] == pepoch
              and t.recovery_state[p] == RECOVERED)
        if ok and kind == "expand":
            added = [s for s in range(int(t.rf[p])) if target[s] and not t.isr[p, s]]
            ok = all(self.acceptable(int(t.replicas[p, s])) for s in added)
        sim = self.sim
        delay = sim.cfg.network_latency_ms
        if ok:
            old = t.isr[p].copy()
            self._commit(p, target, cause="leader_" + kind, leader_initiated=True)
            reply = (p, leader, True, kind, old, int(t.partition_epoch[p]))
            # The answer and the metadata record of the change race to the leader (the controller answers once
            # the record is committed; the broker's metadata listener fetches it in parallel): the answer
            # arrives within 1.75 times the metadata's propagation, so either may come first, by the seed. The
            # answer wins about half the races (19 of 35 ms at the defaults), as on real 4.3 brokers:
            # bench/fidelity.py counted 65 of 120 ISR joins in IsrExpandsPerSec over two benches of every plan.
            delay = sim.rng_timing.randint(delay, max(delay, 7 * sim.cfg.metadata_propagation_ms // 4))
        else:
            reply = (p, leader, False, kind, t.isr[p].copy(), -1)
        sim.queue.schedule(sim.clock.now_ms + delay, "alter_reply", reply)

    def stale_leader_shrinks(self, b: int, paused_at_ms: int) -> None:
        """Broker b resumes from a pause still believing it leads partitions the controller has moved on.

        Partition.maybeShrinkIsr runs first (ReplicaManager's isr-expiration task is overdue): no follower's
        fetch reached b while it was paused, so from its view every follower has been out of sync since then,
        and once that is longer than replica.lag.time.max.ms it sends AlterPartition with its stale leader
        epoch. The controller refuses it (ReplicationControlManager: FENCED_LEADER_EPOCH or NOT_LEADER), and
        Partition.handleAlterPartitionError marks FailedIsrUpdatesPerSec on b."""
        sim, t = self.sim, self.t
        if sim.clock.now_ms - paused_at_ms <= sim.cfg.replica_lag_time_max_ms:
            return
        ps, ss = np.nonzero(t.replicas[: t.count] == b)
        for p, s in zip(ps.tolist(), ss.tolist(), strict=True):
            if t.known_leader[p, s] != b or int(t.rf[p]) < 2:
                continue
            if t.leader[p] == b and t.leader_epoch[p] == t.known_epoch[p, s]:
                continue   # still the leader: its regular check handles it
            target = np.zeros_like(t.isr[p])
            target[s] = True
            self._send_alter((p, b, int(t.known_epoch[p, s]), -1, target, "stale_shrink"))

    def alter_reply(self, reply: tuple) -> None:
        sim, t = self.sim, self.t
        p, leader, ok, kind, old, committed_epoch = reply
        if kind == "stale_shrink":   # a replaced leader's request: the partition's own state is not touched
            if sim.brokers.running(leader):
                sim.metrics.mark(leader, "FailedIsrUpdatesPerSec")
            return
        ls = t.slot_of(p, leader)
        t.alter_inflight[p] = False
        t.pending_add[p] = False
        if not ok:
            if sim.brokers.running(leader):
                sim.metrics.mark(leader, "FailedIsrUpdatesPerSec")
            return
        if t.known_leader[p, ls] == leader:
            # Partition.submitAlterPartition: when the metadata with the new ISR reached the leader first, its
            # partition state is no longer the pending one and the answer is ignored, so no IsrExpandsPerSec.
            # (Partition.scala treats a leader's shrink the same way, and one real run counted 0 of 6; the fidelity
            # plans' shrinks are the controller's, at fencing, so there is nothing to calibrate the shrink race
            # with yet: shrinks stay counted.)
            answered_first = int(t.leader_partition_epoch[p]) < committed_epoch
            t.leader_isr[p] = t.isr[p]
            self._count_isr_change(p, leader, old, t.isr[p], count_expand=answered_first)
        sim.replication.advance_hw(np.asarray([p]))
        sim.produce.complete(p)

    def _count_isr_change(self, p: int, leader: int, old: np.ndarray, new: np.ndarray,
                          count_expand: bool = True) -> None:
        sim, t = self.sim, self.t
        removed = t.members(p, old & ~new)
        added = t.members(p, new & ~old)
        if removed:
            sim.metrics.mark(leader, "IsrShrinksPerSec")
            sim.events.emit(EventType.ISR_SHRINK, broker_id=leader, p=p, cause="lag",
                            detail={"removed": removed, "isr": t.members(p, new)})
        if added:
            if count_expand:
                sim.metrics.mark(leader, "IsrExpandsPerSec")
            sim.events.emit(EventType.ISR_EXPAND, broker_id=leader, p=p, cause="caught_up",
                            detail={"added": added, "isr": t.members(p, new)})

    def recovered(self, payload: tuple[int, int]) -> None:
        p, epoch = payload
        t = self.t
        if t.leader_epoch[p] == epoch and t.recovery_state[p] == RECOVERING:
            t.recovery_state[p] = RECOVERED
            t.partition_epoch[p] += 1
            self.sim.events.emit(EventType.RECOVERY, p=p, broker_id=int(t.leader[p]), cause="leader_recovered",
                                 detail={})
            self.sim.publish([p])

    # --- the partition change builder ---------------------------------------------------------
    def change(self, p: int, *, remove: int | None = None, drop_elr: int | None = None,
               force_leader: int | None = None, allow_unclean: bool = False, cause: str) -> None:
        t = self.t
        rf = int(t.rf[p])
        target = t.isr[p].copy()
        if remove is not None:
            target[t.slot_of(p, remove)] = False
        elr_on = self.sim.cfg.eligible_leader_replicas_enable
        if not elr_on and not target[:rf].any():
            target = t.isr[p].copy()  # without ELR the ISR never empties: the last member stays listed
        self._commit(p, target, cause=cause, drop_elr=drop_elr, force_leader=force_leader,
                     allow_unclean=allow_unclean or bool(t.unclean[p]))

    def _commit(self, p: int, target: np.ndarray, *, cause: str, leader_initiated: bool = False,
                drop_elr: int | None = None, force_leader: int | None = None, allow_unclean: bool = False) -> None:
        sim, t = self.sim, self.t
        rf = int(t.rf[p])
        old_leader, old_isr, old_elr = int(t.leader[p]), t.isr[p].copy(), t.elr[p].copy()
        replicas = t.replica_list(p)
        elr_on = sim.cfg.eligible_leader_replicas_enable
        new_leader, kind = old_leader, None
        valid = (old_leader != NO_BROKER and self.acceptable(old_leader) and target[replicas.index(old_leader)]
                 and force_leader is None)
        if not valid:
            new_leader, kind = self._choose_leader(p, target, force_leader, allow_unclean, old_elr)
        if kind in (*UNCLEAN_ELECTIONS, ElectionKind.ELR):
            target = np.zeros_like(target)
            target[replicas.index(new_leader)] = True
        eff_min = int(min(t.configured_min_isr[p], rf))
        elr = np.zeros_like(old_elr)
        if elr_on and int(target[:rf].sum()) < eff_min:
            elr = (old_elr | old_isr) & ~target
            for s in range(rf):
                if elr[s] and (self.unclean_shutdown[replicas[s]] or replicas[s] == drop_elr):
                    elr[s] = False
        changed = (new_leader != old_leader or not np.array_equal(target, old_isr)
                   or not np.array_equal(elr, old_elr) or kind is not None)
        if not changed:
            return
        if elr_on:
            self._update_last_known_leader(p, old_leader, new_leader, target, old_isr)
        t.isr[p] = target
        t.elr[p] = elr
        t.partition_epoch[p] += 1
        if new_leader != old_leader or kind is not None:
            t.leader[p] = new_leader
            if new_leader != NO_BROKER:
                t.leader_epoch[p] += 1
                t.recovery_state[p] = RECOVERING if kind in UNCLEAN_ELECTIONS else RECOVERED
                self._record_election(p, new_leader, old_leader, kind or ElectionKind.CLEAN, cause)
            elif old_leader != NO_BROKER:
                t.leader_epoch[p] += 1
                sim.events.emit(EventType.ELECTION, p=p, broker_id=None, cause=ElectionKind.OFFLINE,
                                detail={"previous_leader": old_leader, "trigger": cause})
        if not leader_initiated and not np.array_equal(target, old_isr):
            sim.events.emit(EventType.ISR_CHANGE_CONTROLLER, p=p, broker_id=None, cause=cause,
                            detail={"isr": t.members(p, target), "previous_isr": t.members(p, old_isr),
                                    "elr": t.members(p, elr)})
        sim.publish([p])
        self._maybe_schedule_balance(p)

    def _update_last_known_leader(self, p: int, old_leader: int, new_leader: int, target: np.ndarray,
                                  old_isr: np.ndarray) -> None:
        """PartitionChangeBuilder.maybeUpdateLastKnownLeader (useLastKnownLeaderInBalancedRecovery, on by
        default): lastKnownElr becomes [leader] the first time the ISR empties, and is cleared when the
        partition gets or keeps a leader. It never holds the old ELR members in this mode."""
        t = self.t
        known = t.last_known_elr[p]
        rf = int(t.rf[p])
        emptied = not target[:rf].any() and not np.array_equal(target, old_isr)
        if emptied and old_leader != NO_BROKER:
            slot = t.slot_of(p, old_leader)
            if not (int(known.sum()) == 1 and known[slot]):
                known[:] = False
                known[slot] = True
        elif new_leader != NO_BROKER and known.any():
            known[:] = False

    def _choose_leader(self, p: int, target: np.ndarray, force_leader: int | None, allow_unclean: bool,
                       elr: np.ndarray) -> tuple[int, str | None]:
        t = self.t
        replicas = t.replica_list(p)
        if force_leader is not None and self.acceptable(force_leader) and target[replicas.index(force_leader)]:
            return force_leader, ElectionKind.PREFERRED
        for s, b in enumerate(replicas):
            if target[s] and self.acceptable(b):
                return b, ElectionKind.CLEAN
        if self.sim.cfg.eligible_leader_replicas_enable and not target[: len(replicas)].any():
            for s, b in enumerate(replicas):
                if elr[s] and self.acceptable(b):
                    return b, ElectionKind.ELR
            # PartitionChangeBuilder.canElectLastKnownLeader: ISR and ELR empty, lastKnownElr one member.
            known = t.last_known_elr[p, : len(replicas)]
            if not elr.any() and int(known.sum()) == 1:
                last = replicas[int(np.flatnonzero(known)[0])]
                if self.acceptable(last):
                    return last, ElectionKind.LAST_KNOWN_LEADER
        if allow_unclean:
            for b in replicas:
                if self.acceptable(b) and self.sim.brokers.running(b):
                    return b, ElectionKind.UNCLEAN
        return NO_BROKER, None

    def _record_election(self, p: int, leader: int, previous: int, kind: str, cause: str) -> None:
        sim = self.sim
        seq = sim.events.emit(EventType.ELECTION, p=p, broker_id=leader, cause=kind,
                              detail={"previous_leader": previous, "trigger": cause,
                                      "leader_epoch": int(self.t.leader_epoch[p])})
        self.last_election[p] = (seq, kind)
        sim.metrics.mark(CONTROLLER_NODE_ID, "LeaderElectionRateAndTimeMs")
        if kind in UNCLEAN_ELECTIONS:
            sim.metrics.mark(CONTROLLER_NODE_ID, "UncleanLeaderElectionsPerSec")
            delay = sim.cfg.metadata_propagation_ms + 2 * sim.cfg.network_latency_ms
            sim.queue.schedule(sim.clock.now_ms + delay, "leader_recovered", (p, int(self.t.leader_epoch[p])))
