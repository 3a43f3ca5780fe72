"""Follower fetching, the leader's follower tracking, high watermark and ISR shrink/expand.

One fetch session per (follower broker, leader broker) carries all partitions of that pair, as
Kafka's replica fetcher threads do. A request is processed at the leader (update follower state,
lastCaughtUpTimeMs, ISR expansion, HW), long-polls up to replica.fetch.wait.max.ms when there is no
data, and its response is applied at the follower. All requests (or responses) due in the same
millisecond are processed as one vector. The session members and the request and response types
are in `fetch_session`.

A session holds a few to a few hundred partitions, so NumPy's per-call overhead, not the element
work, is the cost: the vector steps gather [partition, slot] state through the table's flat views
with precomputed flat indices and test masks with `np.count_nonzero` (a third of `ndarray.any()`),
and batches of a few entries (steady state) go to the entry-by-entry twins in `fetch_entries`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.fetch_cut import CutFetches
from broker_emulator.fetch_entries import (
    SMALL_BATCH,
    advance_hw_entries,
    apply_entries,
    distinct_small,
    respond_entries,
    track_entries,
)
from broker_emulator.fetch_session import FetchRequest, FetchResponse, SessionMembers, session_members
from broker_emulator.state import NO_BROKER
from schemas.bronze import EventType

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers, Network
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.events import EventLog
    from broker_emulator.ledger import Ledger
    from broker_emulator.logs import Logs
    from broker_emulator.ports import ControllerPort, ProducePort
    from broker_emulator.state import PartitionTable

I64_MAX = np.iinfo(np.int64).max


class ReplicationHost(Protocol):
    """What the fetch loop uses of the simulation: the cluster, the scheduler, the logs and its two peers."""

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
    def ledger(self) -> Ledger: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def controller(self) -> ControllerPort: ...
    @property
    def produce(self) -> ProducePort: ...


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique for the few values of one fetch or produce: a Python set is several times cheaper."""
    return np.asarray(sorted(set(values.tolist())), np.int64)


class Replication(CutFetches):
    def __init__(self, sim: ReplicationHost) -> None:
        self.sim = sim
        self.t = sim.table
        self.busy: dict[tuple[int, int], bool] = {}
        self.parked: dict[tuple[int, int], FetchRequest] = {}
        self.cut_off: dict[tuple[int, int], FetchRequest] = {}   # parked when the network was cut: no answer yet
        self._sessions: dict[int, dict[int, SessionMembers]] = {}
        self._broker_replicas: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._request_ids = 0
        self.session_fetch_ms: dict[tuple[int, int], int] = {}
        # Per partition: the most records one fetch response carries (replica.fetch.max.bytes, at least one).
        self.max_fetch_records = np.ones(0, np.int64)

    # --- session membership ---------------------------------------------------------------------
    def topology_changed(self) -> None:
        self._broker_replicas.clear()
        self._sessions.clear()
        self.max_fetch_records = np.maximum(self.sim.cfg.replica_fetch_max_bytes // self.t.record_bytes, 1)

    def view_changed(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def _replicas_of(self, broker_id: int) -> tuple[np.ndarray, np.ndarray]:
        if broker_id not in self._broker_replicas:
            t = self.t
            ps, ss = np.nonzero(t.replicas[: t.count] == broker_id)
            self._broker_replicas[broker_id] = (ps.astype(np.int64), ss.astype(np.int64))
        return self._broker_replicas[broker_id]

    def sessions_of(self, follower: int) -> dict[int, SessionMembers]:
        """Leader broker -> the partitions (with slots) that `follower` fetches from it."""
        cached = self._sessions.get(follower)
        if cached is None:
            ps, ss = self._replicas_of(follower)
            cached = session_members(self.t, follower, ps, ss)
            self._sessions[follower] = cached
        return cached

    def start_sessions(self, follower: int) -> None:
        """Start the fetch loop of every session of `follower` that is not already running."""
        for leader in sorted(self.sessions_of(follower)):
            key = (follower, leader)
            if not self.busy.get(key):
                self.busy[key] = True
                self.sim.queue.schedule(self.sim.clock.now_ms, "fetch_send", key)

    # --- follower side: send ----------------------------------------------------------------------
    def send(self, key: tuple[int, int]) -> None:
        sim, t = self.sim, self.t
        follower, leader = key
        if not sim.brokers.running(follower):
            self.busy[key] = False
            return
        members = self.sessions_of(follower).get(leader)
        if members is None or len(members[0]) == 0:
            self.busy[key] = False
            return
        if not sim.network.reachable(follower, leader) or not sim.brokers.accepts_requests(leader):
            self.retry_after_backoff(key)
            return
        flat = t.flat
        fs = members.fs
        include = flat.fetch_dirty[fs] | ~flat.isr[fs]
        ps, ss, ls = members.ps[include], members.ss[include], members.ls[include]
        fs, fl = members.fs[include], members.fl[include]
        trunc = flat.needs_truncation[fs]
        if np.count_nonzero(trunc):
            self._truncate_before_fetch(ps[trunc], ss[trunc], leader)
        self._request_ids += 1
        # Fancy indexing copies: the request keeps the offsets and epochs as of sending.
        req = FetchRequest(follower, leader, ps, ss, ls, fs, fl, flat.leo[fs], flat.known_epoch[fs],
                           self._request_ids)
        sim.queue.schedule(sim.clock.now_ms + sim.cfg.network_latency_ms + sim.cfg.request_handling_ms,
                           "fetch_leader", req)

    def _truncate_before_fetch(self, ps: np.ndarray, ss: np.ndarray, leader: int) -> None:
        """A follower of a new leader first truncates its divergent suffix (KIP-101/279), or to its HW."""
        sim, t = self.sim, self.t
        for p, s in zip(ps.tolist(), ss.tolist(), strict=True):
            t.needs_truncation[p, s] = False
            ls = t.slot_of(p, leader)
            if sim.cfg.truncation == "high_watermark":
                target = int(t.hw[p, s])
            else:
                # OffsetsForLeaderEpoch for the follower's last epoch. KIP-279 (Kafka 2.0) added the epoch the
                # leader found to the answer, and the follower also cuts to its own end of that epoch
                # (AbstractFetcherThread.getOffsetTruncationState); KIP-101 alone had only the leader's end.
                _epoch, end = t.end_offset_for_epoch(p, ls, t.last_epoch(p, s))
                if sim.cfg.truncation == "kip101":
                    target = min(end, int(t.leo[p, s]))
                else:
                    end_mine = t.end_offset_for_epoch(p, s, _epoch)[1] if _epoch >= 0 else int(t.log_start[p, s])
                    target = min(end, end_mine, int(t.leo[p, s]))
            removed = t.truncate(p, s, target)
            if removed:
                sim.events.emit(EventType.TRUNCATION, broker_id=int(t.replicas[p, s]), p=p, cause=sim.cfg.truncation,
                                records=removed, detail={"to_offset": target, "leader": leader})
                sim.ledger.check_replica_truncation(p)

    # --- leader side --------------------------------------------------------------------------------
    def at_leader(self, requests: list[FetchRequest]) -> None:
        sim, t = self.sim, self.t
        live: list[FetchRequest] = []
        for req in requests:
            if sim.brokers.running(req.leader):
                live.append(req)
            elif sim.brokers.is_paused(req.leader):
                sim.brokers.stall(req.leader, "fetch_leader", req)
            else:
                self.retry_after_backoff((req.follower, req.leader))
        if not live:
            return
        now = sim.clock.now_ms
        for req in live:
            self.session_fetch_ms[(req.follower, req.leader)] = now
        self._track(live)
        for req in live:
            if not req.enough(t, sim.cfg.replica_fetch_min_bytes):  # too little new data: long-poll
                self.parked[(req.follower, req.leader)] = req
                sim.queue.schedule(sim.clock.now_ms + sim.cfg.replica_fetch_wait_max_ms, "fetch_wake",
                                   (req.follower, req.leader, req.request_id))
            else:
                self.respond(req)

    def _track(self, requests: list[FetchRequest]) -> None:
        """Update the leader's view of the followers, lastCaughtUpTimeMs, ISR expansion and the HW."""
        if distinct_small([f for r in requests for f in r.fs.tolist()]):
            track_entries(self, requests)
            return
        sim, t = self.sim, self.t
        flat = t.flat
        now = sim.clock.now_ms
        if len(requests) == 1:
            r = requests[0]
            ps, ss, fs, fl, off, epochs = r.ps, r.ss, r.fs, r.fl, r.offsets, r.epochs
            leaders: np.ndarray | int = r.leader
        else:
            ps = np.concatenate([r.ps for r in requests])
            ss = np.concatenate([r.ss for r in requests])
            fs = np.concatenate([r.fs for r in requests])
            fl = np.concatenate([r.fl for r in requests])
            off = np.concatenate([r.offsets for r in requests])
            epochs = np.concatenate([r.epochs for r in requests])
            leaders = np.concatenate([np.full(len(r.ps), r.leader, np.int32) for r in requests])
        current = ((flat.known_leader[fl] == leaders) & (flat.known_epoch[fl] == epochs)
                   & (t.leader[ps] == leaders) & (t.leader_epoch[ps] == epochs))
        if np.count_nonzero(current) != len(current):
            ps, ss, fs, fl, off = ps[current], ss[current], fs[current], fl[current], off[current]
        if len(ps) == 0:
            return
        leader_leo = flat.leo[fl]
        caught_now = off >= leader_leo
        caught_prev = ~caught_now & (off >= flat.last_fetch_leader_leo[fs])
        flat.last_caught_up_ms[fs] = np.where(caught_now, now,
                                              np.where(caught_prev, flat.last_fetch_ms[fs],
                                                       flat.last_caught_up_ms[fs]))
        flat.last_fetch_leader_leo[fs] = leader_leo
        flat.last_fetch_ms[fs] = now
        flat.seen_leo[fs] = off
        # ISR expansion: not in the maximal ISR, caught up to HW and to the epoch start, leader recovered.
        candidates = (~(flat.leader_isr[fs] | flat.pending_add[fs]) & (off >= flat.hw[fl])
                      & (off >= t.epoch_start_offset[ps]) & ~t.alter_inflight[ps] & (t.recovery_state[ps] == 0))
        if np.count_nonzero(candidates):
            for p, s in zip(ps[candidates].tolist(), ss[candidates].tolist(), strict=True):
                if sim.controller.broker_eligible_for_isr(int(t.replicas[p, s])) and not t.alter_inflight[p]:
                    sim.controller.request_isr_change(p, add_slot=s)
        # Only partitions whose follower moved can have a higher HW now.
        moved = off > flat.hw[fl]
        if np.count_nonzero(moved):
            self.advance_hw(sorted_unique(ps[moved]))

    def advance_hw(self, ps: np.ndarray) -> None:
        """maybeIncrementLeaderHW: min LEO over the maximal ISR, frozen while under effective min ISR.

        `ps` are distinct partitions.
        """
        sim, t = self.sim, self.t
        if len(ps) <= SMALL_BATCH:
            advance_hw_entries(self, ps.tolist())
            return
        leader = t.leader[ps]
        ok = leader != NO_BROKER
        if np.count_nonzero(ok) != len(ok):
            ps, leader = ps[ok], leader[ok]
            if len(ps) == 0:
                return
        ls = np.argmax(t.replicas[ps] == leader[:, None], axis=1)
        fl = t.flat_index(ps, ls)
        leader_isr = t.leader_isr[ps]
        in_max = leader_isr | t.pending_add[ps]
        seen = t.seen_leo[ps]  # a copy (fancy indexing): the leader's own entry becomes its LEO
        seen[np.arange(len(ps)), ls] = t.flat.leo[fl]
        candidate = np.where(in_max, seen, I64_MAX).min(axis=1)
        isr_size = leader_isr.sum(axis=1)
        eff_min = np.minimum(t.configured_min_isr[ps], t.rf[ps])
        old = t.flat.hw[fl]
        move = (isr_size >= eff_min) & (candidate > old) & (candidate != I64_MAX)
        if np.count_nonzero(move):
            t.flat.hw[fl[move]] = candidate[move]
            t.fetch_dirty[ps[move]] = True
            sim.produce.hw_advanced(ps[move])

    def leader_gone(self, leader: int) -> None:
        """`leader` crashed or stopped: its connections closed, so the fetches parked there fail now.

        Their followers retry after replica.fetch.backoff.ms, as a fetcher thread does on a
        disconnect. Without this a parked fetch whose wait ends while the leader is down would be
        answered by no one, and the session would stay silent until new data reached it: on a
        partition refusing writes (ISR below min ISR) that is forever.
        """
        for key in sorted(k for k in self.parked if k[1] == leader):
            del self.parked[key]
            self.retry_after_backoff(key)
        for key in sorted(k for k in self.cut_off if k[1] == leader):
            del self.cut_off[key]
            self.retry_after_backoff(key)

    def retry_after_backoff(self, key: tuple[int, int]) -> None:
        self.sim.queue.schedule(self.sim.clock.now_ms + self.sim.cfg.replica_fetch_backoff_ms, "fetch_send", key)

    def wake(self, payload: tuple[int, int, int]) -> None:
        follower, leader, request_id = payload
        req = self.parked.get((follower, leader))
        if req is None or req.request_id != request_id:
            return
        if not self.sim.brokers.running(leader):
            if self.sim.brokers.is_paused(leader):
                self.sim.brokers.stall(leader, "fetch_wake", payload)
            return
        self.respond(req)

    def data_appended(self, leader: int, ps: np.ndarray) -> None:
        """The leader appended to `ps`: followers that were caught up stop being so.

        A caught-up follower's partitions are left out of its incremental fetches, so the leader
        records now what Kafka would have recorded at the session's last fetch: the follower was
        caught up then. Parked fetches of these followers complete with the new data (the leader's
        fetch session knows every partition of the session, not only those in the request).
        """
        t = self.t
        followers: set[int] = set()
        for p in ps.tolist():
            for s, f in enumerate(t.assignment[p]):
                if f == leader:
                    continue
                followers.add(f)
                if t.fetch_dirty[p, s]:
                    continue
                fetched = self.session_fetch_ms.get((f, leader))
                if fetched is not None and fetched > t.last_fetch_ms[p, s]:
                    t.last_caught_up_ms[p, s] = max(int(t.last_caught_up_ms[p, s]), fetched)
                    t.last_fetch_ms[p, s] = fetched
                    t.last_fetch_leader_leo[p, s] = t.seen_leo[p, s]
        t.fetch_dirty[ps] = True
        if not self.parked:
            return
        for f in sorted(followers):
            req = self.parked.get((f, leader))
            if req is not None:
                req.add_partitions(self.t, ps)
                if req.enough(self.t, self.sim.cfg.replica_fetch_min_bytes):
                    self.respond(req)

    def respond(self, req: FetchRequest) -> None:
        sim, t = self.sim, self.t
        self.parked.pop((req.follower, req.leader), None)
        delay = sim.cfg.network_latency_ms + sim.cfg.request_handling_ms + sim.brokers.fetch_delay_ms(req.follower)
        if len(req.fl) <= SMALL_BATCH:
            resp = FetchResponse(req, *respond_entries(self, req))
            sim.queue.schedule(sim.clock.now_ms + delay, "fetch_apply", resp)
            return
        flat, fl, offsets = t.flat, req.fl, req.offsets
        keep = (flat.known_leader[fl] == req.leader) & (flat.known_epoch[fl] == req.epochs)
        leader_leo = flat.leo[fl]
        ends = np.where(keep, np.minimum(leader_leo, offsets + self.max_fetch_records[req.ps]), offsets)
        ends = np.maximum(ends, offsets)
        settled = keep & (ends == offsets) & (offsets >= leader_leo) & ~flat.needs_truncation[req.fs]
        flat.fetch_dirty[req.fs[settled]] = False
        # Fancy indexing copies: the response carries the HW and log start as of now.
        resp = FetchResponse(req, keep, ends, flat.hw[fl], flat.log_start[fl])
        sim.queue.schedule(sim.clock.now_ms + delay, "fetch_apply", resp)

    # --- follower side: apply ----------------------------------------------------------------------
    def at_follower(self, responses: list[FetchResponse]) -> None:
        sim = self.sim
        live: list[FetchResponse] = []
        for resp in responses:
            req = resp.request
            if sim.brokers.running(req.follower):
                live.append(resp)
            elif sim.brokers.is_paused(req.follower):
                sim.brokers.stall(req.follower, "fetch_apply", resp)
            else:
                self.busy[(req.follower, req.leader)] = False
        if not live:
            return
        if distinct_small([f for x in live for f in x.request.fs.tolist()]):
            apply_entries(self, live)
        else:
            self._apply_vector(live)
        for resp in live:
            self.send((resp.request.follower, resp.request.leader))

    def _apply_vector(self, live: list[FetchResponse]) -> None:
        sim, t = self.sim, self.t
        flat = t.flat
        if len(live) == 1:
            r = live[0].request
            ps, ss, ls, fs, start, epochs = r.ps, r.ss, r.ls, r.fs, r.offsets, r.epochs
            leaders: np.ndarray | int = r.leader
            keep, ends, lhw, lstart = live[0].keep, live[0].ends, live[0].leader_hw, live[0].leader_log_start
        else:
            ps = np.concatenate([x.request.ps for x in live])
            ss = np.concatenate([x.request.ss for x in live])
            ls = np.concatenate([x.request.ls for x in live])
            fs = np.concatenate([x.request.fs for x in live])
            start = np.concatenate([x.request.offsets for x in live])
            epochs = np.concatenate([x.request.epochs for x in live])
            leaders = np.concatenate([np.full(len(x.request.ps), x.request.leader, np.int32) for x in live])
            keep = np.concatenate([x.keep for x in live])
            ends = np.concatenate([x.ends for x in live])
            lhw = np.concatenate([x.leader_hw for x in live])
            lstart = np.concatenate([x.leader_log_start for x in live])
        valid = (keep & (flat.known_leader[fs] == leaders) & (flat.known_epoch[fs] == epochs)
                 & (flat.leo[fs] == start) & ~flat.needs_truncation[fs])
        if np.count_nonzero(valid) != len(valid):
            ps, ss, ls, fs, start, ends, lhw, lstart = (a[valid] for a in (ps, ss, ls, fs, start, ends, lhw, lstart))
        grew = ends > start
        if np.count_nonzero(grew):
            gp, gs, gf, ge = ps[grew], ss[grew], fs[grew], ends[grew]
            sim.logs.append(gp, gs, gf, ge - start[grew])
            flat.leo[gf] = ge
            flat.fetch_dirty[gf] = True
            for p, s, lsl, e in zip(gp.tolist(), gs.tolist(), ls[grew].tolist(), ge.tolist(), strict=True):
                if t.last_epoch(p, s) != t.last_epoch(p, lsl):
                    t.copy_epochs_from(p, s, lsl, e)
        leo = flat.leo[fs]
        flat.log_start[fs] = np.maximum(flat.log_start[fs], np.minimum(lstart, leo))
        flat.hw[fs] = np.maximum(flat.hw[fs], np.minimum(lhw, leo))

    # --- ISR shrink -----------------------------------------------------------------------------------
    def check_shrinks(self) -> None:
        """Every replica.lag.time.max.ms / 2 each leader drops followers that are behind for too long."""
        sim, t = self.sim, self.t
        n = t.count
        now = sim.clock.now_ms
        leader = t.leader[:n]
        has_leader = leader != NO_BROKER
        ps = np.flatnonzero(has_leader & ~t.alter_inflight[:n])
        if len(ps) == 0:
            return
        ls = np.argmax(t.replicas[ps] == leader[ps][:, None], axis=1)
        acting = (t.known_leader[ps, ls] == leader[ps]) & (t.known_epoch[ps, ls] == t.leader_epoch[ps])
        running = np.fromiter((sim.brokers.running(int(b)) for b in leader[ps]), bool, len(ps))
        keep = acting & running
        ps, ls = ps[keep], ls[keep]
        leader_leo = t.leo[ps, ls][:, None]
        lagging = (t.leader_isr[ps] & (t.seen_leo[ps] != leader_leo)
                   & (now - t.last_caught_up_ms[ps] > sim.cfg.replica_lag_time_max_ms))
        lagging[np.arange(len(ps)), ls] = False
        rows = np.flatnonzero(lagging.any(axis=1))
        for i in rows.tolist():
            p = int(ps[i])
            slots = np.flatnonzero(lagging[i]).tolist()
            sim.controller.request_isr_change(p, remove_slots=slots)
