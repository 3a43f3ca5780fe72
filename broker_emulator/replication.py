"""Follower fetching, the leader's follower tracking, high watermark and ISR shrink/expand.

One fetch session per (follower broker, leader broker) carries all partitions of that pair, as
Kafka's replica fetcher threads do. A request is processed at the leader (update follower state,
lastCaughtUpTimeMs, ISR expansion, HW), long-polls up to replica.fetch.wait.max.ms when there is no
data, and its response is applied at the follower. All requests (or responses) due in the same
millisecond are processed as one vector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from broker_emulator.state import NO_BROKER

if TYPE_CHECKING:
    from broker_emulator.simulation import Simulation

I64_MAX = np.iinfo(np.int64).max


@dataclass
class FetchRequest:
    follower: int
    leader: int
    ps: np.ndarray        # partition indices
    ss: np.ndarray        # follower slots
    ls: np.ndarray        # leader slots
    offsets: np.ndarray   # fetch offsets (follower LEO when sent)
    epochs: np.ndarray    # follower's known leader epoch per partition
    request_id: int


@dataclass
class FetchResponse:
    request: FetchRequest
    keep: np.ndarray      # entries that were answered (leader agreed on the epoch)
    ends: np.ndarray      # new end offsets
    leader_hw: np.ndarray
    leader_log_start: np.ndarray


class Replication:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.t = sim.table
        self.busy: dict[tuple[int, int], bool] = {}
        self.parked: dict[tuple[int, int], FetchRequest] = {}
        self._sessions: dict[int, dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        self._broker_replicas: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._request_ids = 0
        self.session_fetch_ms: dict[tuple[int, int], int] = {}

    # --- session membership ---------------------------------------------------------------------
    def topology_changed(self) -> None:
        self._broker_replicas.clear()
        self._sessions.clear()

    def view_changed(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def _replicas_of(self, broker_id: int) -> tuple[np.ndarray, np.ndarray]:
        if broker_id not in self._broker_replicas:
            t = self.t
            ps, ss = np.nonzero(t.replicas[: t.count] == broker_id)
            self._broker_replicas[broker_id] = (ps.astype(np.int64), ss.astype(np.int64))
        return self._broker_replicas[broker_id]

    def sessions_of(self, follower: int) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Leader broker -> (partitions, follower slots, leader slots) that `follower` fetches from it."""
        cached = self._sessions.get(follower)
        if cached is None:
            ps, ss = self._replicas_of(follower)
            leaders = self.t.known_leader[ps, ss]
            cached = {}
            for leader in np.unique(leaders):
                if leader in (NO_BROKER, follower):
                    continue
                sel = leaders == leader
                lps = ps[sel]
                cached[int(leader)] = (lps, ss[sel], np.argmax(self.t.replicas[lps] == leader, axis=1))
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
        ps, ss, ls = members
        include = t.fetch_dirty[ps, ss] | ~t.isr[ps, ss]
        if not include.all():
            ps, ss, ls = ps[include], ss[include], ls[include]
        if not sim.network.reachable(follower, leader) or not sim.brokers.accepts_requests(leader):
            sim.queue.schedule(sim.clock.now_ms + sim.cfg.replica_fetch_backoff_ms, "fetch_send", key)
            return
        trunc = t.needs_truncation[ps, ss]
        if trunc.any():
            self._truncate_before_fetch(ps[trunc], ss[trunc], leader)
        self._request_ids += 1
        req = FetchRequest(follower, leader, ps, ss, ls, t.leo[ps, ss].copy(), t.known_epoch[ps, ss].copy(),
                           self._request_ids)
        sim.queue.schedule(sim.clock.now_ms + sim.cfg.network_latency_ms, "fetch_leader", req)

    def _truncate_before_fetch(self, ps: np.ndarray, ss: np.ndarray, leader: int) -> None:
        """A follower of a new leader first truncates its divergent suffix (KIP-101/279), or to its HW."""
        sim, t = self.sim, self.t
        for p, s in zip(ps.tolist(), ss.tolist(), strict=True):
            t.needs_truncation[p, s] = False
            ls = t.slot_of(p, leader)
            if sim.cfg.truncation == "high_watermark":
                target = int(t.hw[p, s])
            else:
                _epoch, end = t.end_offset_for_epoch(p, ls, t.last_epoch(p, s))
                end_mine = t.end_offset_for_epoch(p, s, _epoch)[1] if _epoch >= 0 else int(t.log_start[p, s])
                target = min(end, end_mine, int(t.leo[p, s]))
            removed = t.truncate(p, s, target)
            if removed:
                sim.events.emit("truncation", broker_id=int(t.replicas[p, s]), p=p, cause=sim.cfg.truncation,
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
                sim.queue.schedule(sim.clock.now_ms + sim.cfg.replica_fetch_backoff_ms, "fetch_send",
                                   (req.follower, req.leader))
        if not live:
            return
        now = sim.clock.now_ms
        for req in live:
            self.session_fetch_ms[(req.follower, req.leader)] = now
        self._track(live)
        for req in live:
            if len(req.ps) == 0 or not (t.leo[req.ps, req.ls] > req.offsets).any():
                self.parked[(req.follower, req.leader)] = req
                sim.queue.schedule(sim.clock.now_ms + sim.cfg.replica_fetch_wait_max_ms, "fetch_wake",
                                   (req.follower, req.leader, req.request_id))
            else:
                self.respond(req)

    def _track(self, requests: list[FetchRequest]) -> None:
        """Update the leader's view of the followers, lastCaughtUpTimeMs, ISR expansion and the HW."""
        sim, t = self.sim, self.t
        now = sim.clock.now_ms
        if len(requests) == 1:
            r = requests[0]
            ps, ss, ls, off, epochs = r.ps, r.ss, r.ls, r.offsets, r.epochs
            leaders: np.ndarray | int = r.leader
        else:
            ps = np.concatenate([r.ps for r in requests])
            ss = np.concatenate([r.ss for r in requests])
            ls = np.concatenate([r.ls for r in requests])
            off = np.concatenate([r.offsets for r in requests])
            epochs = np.concatenate([r.epochs for r in requests])
            leaders = np.concatenate([np.full(len(r.ps), r.leader, np.int32) for r in requests])
        current = ((t.known_leader[ps, ls] == leaders) & (t.known_epoch[ps, ls] == epochs)
                   & (t.leader[ps] == leaders) & (t.leader_epoch[ps] == epochs))
        if not current.all():
            ps, ss, ls, off = ps[current], ss[current], ls[current], off[current]
        if len(ps) == 0:
            return
        leader_leo = t.leo[ps, ls]
        caught_now = off >= leader_leo
        caught_prev = ~caught_now & (off >= t.last_fetch_leader_leo[ps, ss])
        t.last_caught_up_ms[ps, ss] = np.where(caught_now, now,
                                               np.where(caught_prev, t.last_fetch_ms[ps, ss],
                                                        t.last_caught_up_ms[ps, ss]))
        t.last_fetch_leader_leo[ps, ss] = leader_leo
        t.last_fetch_ms[ps, ss] = now
        t.seen_leo[ps, ss] = off
        # ISR expansion: not in the maximal ISR, caught up to HW and to the epoch start, leader recovered.
        candidates = (~(t.leader_isr[ps, ss] | t.pending_add[ps, ss]) & (off >= t.hw[ps, ls])
                      & (off >= t.epoch_start_offset[ps]) & ~t.alter_inflight[ps] & (t.recovery_state[ps] == 0))
        if candidates.any():
            for p, s in zip(ps[candidates].tolist(), ss[candidates].tolist(), strict=True):
                if sim.controller.broker_eligible_for_isr(int(t.replicas[p, s])) and not t.alter_inflight[p]:
                    sim.controller.request_isr_change(p, add_slot=s)
        # Only partitions whose follower moved can have a higher HW now.
        moved = off > t.hw[ps, ls]
        if moved.any():
            self.advance_hw(np.unique(ps[moved]))

    def advance_hw(self, ps: np.ndarray) -> None:
        """maybeIncrementLeaderHW: min LEO over the maximal ISR, frozen while under effective min ISR."""
        sim, t = self.sim, self.t
        if len(ps) == 0:
            return
        leader = t.leader[ps]
        ok = leader != NO_BROKER
        ps = ps[ok]
        if len(ps) == 0:
            return
        ls = np.argmax(t.replicas[ps] == t.leader[ps][:, None], axis=1)
        in_max = t.leader_isr[ps] | t.pending_add[ps]
        rows = np.arange(len(ps))
        seen = t.seen_leo[ps].copy()
        seen[rows, ls] = t.leo[ps, ls]
        candidate = np.where(in_max, seen, I64_MAX).min(axis=1)
        isr_size = t.leader_isr[ps].sum(axis=1)
        eff_min = np.minimum(t.configured_min_isr[ps], t.rf[ps])
        old = t.hw[ps, ls]
        move = (isr_size >= eff_min) & (candidate > old) & (candidate != I64_MAX)
        if move.any():
            t.hw[ps[move], ls[move]] = candidate[move]
            t.fetch_dirty[ps[move]] = True
            sim.produce.hw_advanced(ps[move])

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
        reps = t.replicas[ps]
        for i, p in enumerate(ps.tolist()):
            for s in range(int(t.rf[p])):
                f = int(reps[i, s])
                if f == leader or t.fetch_dirty[p, s]:
                    continue
                fetched = self.session_fetch_ms.get((f, leader))
                if fetched is not None and fetched > t.last_fetch_ms[p, s]:
                    t.last_caught_up_ms[p, s] = max(int(t.last_caught_up_ms[p, s]), fetched)
                    t.last_fetch_ms[p, s] = fetched
                    t.last_fetch_leader_leo[p, s] = t.seen_leo[p, s]
        t.fetch_dirty[ps] = True
        if not self.parked:
            return
        for f in np.unique(reps).tolist():
            if f in (NO_BROKER, leader):
                continue
            req = self.parked.get((f, leader))
            if req is not None:
                self._add_to_request(req, ps)
                self.respond(req)

    def _add_to_request(self, req: FetchRequest, ps: np.ndarray) -> None:
        t = self.t
        present = set(req.ps.tolist())
        add: list[tuple[int, int, int]] = []
        for p in ps.tolist():
            if p in present:
                continue
            reps = t.assignment[p]
            if req.follower in reps and t.known_leader[p, reps.index(req.follower)] == req.leader:
                add.append((p, reps.index(req.follower), reps.index(req.leader)))
        if not add:
            return
        add_ps = np.fromiter((a[0] for a in add), np.int64, len(add))
        slots = np.fromiter((a[1] for a in add), np.int64, len(add))
        req.ps = np.concatenate([req.ps, add_ps])
        req.ss = np.concatenate([req.ss, slots])
        req.ls = np.concatenate([req.ls, np.fromiter((a[2] for a in add), np.int64, len(add))])
        req.offsets = np.concatenate([req.offsets, t.leo[add_ps, slots]])
        req.epochs = np.concatenate([req.epochs, t.known_epoch[add_ps, slots]])

    def respond(self, req: FetchRequest) -> None:
        sim, t = self.sim, self.t
        self.parked.pop((req.follower, req.leader), None)
        ps, ls = req.ps, req.ls
        keep = (t.known_leader[ps, ls] == req.leader) & (t.known_epoch[ps, ls] == req.epochs)
        max_records = np.maximum(sim.cfg.replica_fetch_max_bytes // t.record_bytes[ps], 1)
        ends = np.where(keep, np.minimum(t.leo[ps, ls], req.offsets + max_records), req.offsets)
        ends = np.maximum(ends, req.offsets)
        settled = keep & (ends == req.offsets) & (req.offsets >= t.leo[ps, ls]) & ~t.needs_truncation[ps, req.ss]
        t.fetch_dirty[ps[settled], req.ss[settled]] = False
        resp = FetchResponse(req, keep, ends, t.hw[ps, ls].copy(), t.log_start[ps, ls].copy())
        delay = sim.cfg.network_latency_ms + sim.brokers.fetch_delay_ms(req.follower)
        sim.queue.schedule(sim.clock.now_ms + delay, "fetch_apply", resp)

    # --- follower side: apply ----------------------------------------------------------------------
    def at_follower(self, responses: list[FetchResponse]) -> None:
        sim, t = self.sim, self.t
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
        if len(live) == 1:
            r = live[0].request
            ps, ss, ls, start, epochs = r.ps, r.ss, r.ls, r.offsets, r.epochs
            leaders: np.ndarray | int = r.leader
            keep, ends, lhw, lstart = live[0].keep, live[0].ends, live[0].leader_hw, live[0].leader_log_start
        else:
            ps = np.concatenate([x.request.ps for x in live])
            ss = np.concatenate([x.request.ss for x in live])
            ls = np.concatenate([x.request.ls for x in live])
            start = np.concatenate([x.request.offsets for x in live])
            epochs = np.concatenate([x.request.epochs for x in live])
            leaders = np.concatenate([np.full(len(x.request.ps), x.request.leader, np.int32) for x in live])
            keep = np.concatenate([x.keep for x in live])
            ends = np.concatenate([x.ends for x in live])
            lhw = np.concatenate([x.leader_hw for x in live])
            lstart = np.concatenate([x.leader_log_start for x in live])
        valid = (keep & (t.known_leader[ps, ss] == leaders) & (t.known_epoch[ps, ss] == epochs)
                 & (t.leo[ps, ss] == start) & ~t.needs_truncation[ps, ss])
        if not valid.all():
            ps, ss, ls, start, ends, lhw, lstart = (a[valid] for a in (ps, ss, ls, start, ends, lhw, lstart))
        grew = ends > start
        if grew.any():
            gp, gs, gl, ge = ps[grew], ss[grew], ls[grew], ends[grew]
            sim.logs.append(gp, gs, ge - start[grew])
            t.leo[gp, gs] = ge
            t.fetch_dirty[gp, gs] = True
            for p, s, lsl, e in zip(gp.tolist(), gs.tolist(), gl.tolist(), ge.tolist(), strict=True):
                if t.last_epoch(p, s) != t.last_epoch(p, lsl):
                    t.copy_epochs_from(p, s, lsl, e)
        leo = t.leo[ps, ss]
        t.log_start[ps, ss] = np.maximum(t.log_start[ps, ss], np.minimum(lstart, leo))
        t.hw[ps, ss] = np.maximum(t.hw[ps, ss], np.minimum(lhw, leo))
        for resp in live:
            self.send((resp.request.follower, resp.request.leader))

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
