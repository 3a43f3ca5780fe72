"""Entry-by-entry twins of the fetch path's vector steps, for the few-entry batches of steady state.

Incremental fetch sessions leave settled partitions out, so in steady state a fetch request or
response carries one to a few partitions. NumPy then costs ~1 µs per operation and a vector step is
a dozen operations, several times the element work. Each function here applies exactly the rules of
its vector twin in `replication.py`, one (partition, slot) entry at a time with Python scalars.

The caller uses a twin only for at most SMALL_BATCH entries and no (partition, slot) twice: each
entry then reads and writes only its own slot's state (or partition state nothing in the step
writes), so doing the entries one after another equals the vector step's read-all-then-write-all.
Where a step has phases (track, then ISR expansion, then the HW), the twin keeps them in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.state import NO_BROKER

if TYPE_CHECKING:
    from broker_emulator.clock import SimClock
    from broker_emulator.fetch_session import FetchRequest, FetchResponse
    from broker_emulator.logs import Logs
    from broker_emulator.ports import ControllerPort, ProducePort
    from broker_emulator.state import PartitionTable


class FetchLoopHost(Protocol):
    """What the twins use of the simulation (through the fetch loop's `sim`)."""

    @property
    def clock(self) -> SimClock: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def controller(self) -> ControllerPort: ...
    @property
    def produce(self) -> ProducePort: ...


class FetchLoop(Protocol):
    """What the twins use of `replication.Replication`, whose module imports this one."""

    @property
    def t(self) -> PartitionTable: ...
    @property
    def sim(self) -> FetchLoopHost: ...
    @property
    def max_fetch_records(self) -> np.ndarray:
        """Per partition: the most records one fetch response carries."""
    def advance_hw(self, ps: np.ndarray) -> None: ...


SMALL_BATCH = 16  # entries; above this the vector step is cheaper
I64_MAX = int(np.iinfo(np.int64).max)


def distinct_small(flat_indices: list[int]) -> bool:
    """True when a batch is small enough for the entry twins and names no (partition, slot) twice."""
    return len(flat_indices) <= SMALL_BATCH and len(set(flat_indices)) == len(flat_indices)


def respond_entries(rep: FetchLoop, req: FetchRequest) -> tuple[np.ndarray, ...]:
    """Replication.respond's answer: (keep, ends, leader HW, leader log start) per entry."""
    flat = rep.t.flat
    max_records = rep.max_fetch_records
    leader = req.leader
    keep: list[bool] = []
    ends: list[int] = []
    hws: list[int] = []
    starts: list[int] = []
    for p, f, lf, offset, epoch in zip(req.ps.tolist(), req.fs.tolist(), req.fl.tolist(), req.offsets.tolist(),
                                       req.epochs.tolist(), strict=True):
        ok = bool(flat.known_leader[lf] == leader and flat.known_epoch[lf] == epoch)
        leader_leo = int(flat.leo[lf])
        end = max(min(leader_leo, offset + int(max_records[p])), offset) if ok else offset
        if ok and end == offset and offset >= leader_leo and not flat.needs_truncation[f]:
            flat.fetch_dirty[f] = False
        keep.append(ok)
        ends.append(end)
        hws.append(int(flat.hw[lf]))
        starts.append(int(flat.log_start[lf]))
    return (np.array(keep, bool), np.array(ends, np.int64), np.array(hws, np.int64),
            np.array(starts, np.int64))


def track_entries(rep: FetchLoop, requests: list[FetchRequest]) -> None:
    """Replication._track: follower state, lastCaughtUpTimeMs, ISR expansion, then the HW."""
    sim, t = rep.sim, rep.t
    flat = t.flat
    now = sim.clock.now_ms
    current: list[tuple[int, int, int, int, int]] = []
    for r in requests:
        leader = r.leader
        for p, s, f, lf, offset, epoch in zip(r.ps.tolist(), r.ss.tolist(), r.fs.tolist(), r.fl.tolist(),
                                              r.offsets.tolist(), r.epochs.tolist(), strict=True):
            if (flat.known_leader[lf] == leader and flat.known_epoch[lf] == epoch and t.leader[p] == leader
                    and t.leader_epoch[p] == epoch):
                current.append((p, s, f, lf, offset))
    for _p, _s, f, lf, offset in current:
        leader_leo = int(flat.leo[lf])
        if offset >= leader_leo:
            flat.last_caught_up_ms[f] = now
        elif offset >= flat.last_fetch_leader_leo[f]:
            flat.last_caught_up_ms[f] = flat.last_fetch_ms[f]
        flat.last_fetch_leader_leo[f] = leader_leo
        flat.last_fetch_ms[f] = now
        flat.seen_leo[f] = offset
    candidates = [(p, s) for p, s, f, lf, offset in current
                  if not (flat.leader_isr[f] or flat.pending_add[f]) and offset >= flat.hw[lf]
                  and offset >= t.epoch_start_offset[p] and not t.alter_inflight[p] and t.recovery_state[p] == 0]
    for p, s in candidates:
        if sim.controller.broker_eligible_for_isr(int(t.replicas[p, s])) and not t.alter_inflight[p]:
            sim.controller.request_isr_change(p, add_slot=s)
    moved = sorted({p for p, _s, _f, lf, offset in current if offset > flat.hw[lf]})
    if moved:
        rep.advance_hw(np.asarray(moved, np.int64))


def apply_entries(rep: FetchLoop, responses: list[FetchResponse]) -> None:
    """Replication.at_follower's log and HW update for responses of running followers."""
    sim, t = rep.sim, rep.t
    flat = t.flat
    valid: list[tuple[int, int, int, int, int, int, int, int]] = []
    for resp in responses:
        r = resp.request
        leader = r.leader
        for p, s, lsl, f, start, epoch, keep, end, lhw, lstart in zip(
                r.ps.tolist(), r.ss.tolist(), r.ls.tolist(), r.fs.tolist(), r.offsets.tolist(), r.epochs.tolist(),
                resp.keep.tolist(), resp.ends.tolist(), resp.leader_hw.tolist(), resp.leader_log_start.tolist(),
                strict=True):
            if (keep and flat.known_leader[f] == leader and flat.known_epoch[f] == epoch and flat.leo[f] == start
                    and not flat.needs_truncation[f]):
                valid.append((p, s, lsl, f, start, end, lhw, lstart))
    for p, s, lsl, f, start, end, _lhw, _lstart in valid:
        if end > start:
            sim.logs.append_one(p, s, end - start)
            flat.leo[f] = end
            flat.fetch_dirty[f] = True
            if t.last_epoch(p, s) != t.last_epoch(p, lsl):
                t.copy_epochs_from(p, s, lsl, end)
    for _p, _s, _lsl, f, _start, _end, lhw, lstart in valid:
        leo = int(flat.leo[f])
        flat.log_start[f] = max(int(flat.log_start[f]), min(lstart, leo))
        flat.hw[f] = max(int(flat.hw[f]), min(lhw, leo))


def advance_hw_entries(rep: FetchLoop, ps: list[int]) -> None:
    """Replication.advance_hw for a few distinct partitions."""
    t = rep.t
    moved: list[tuple[int, int, int]] = []
    for p in ps:
        leader = int(t.leader[p])
        if leader == NO_BROKER:
            continue
        leader_isr = t.leader_isr[p].tolist()
        if sum(leader_isr) < min(int(t.configured_min_isr[p]), int(t.rf[p])):
            continue  # frozen under the effective min ISR
        reps = t.assignment[p]
        ls = reps.index(leader) if leader in reps else 0  # as argmax over the replica row
        seen = t.seen_leo[p].tolist()
        seen[ls] = int(t.leo[p, ls])
        candidate = min((v for v, in_isr, adding in zip(seen, leader_isr, t.pending_add[p].tolist(), strict=True)
                         if in_isr or adding), default=I64_MAX)
        if candidate > t.hw[p, ls] and candidate != I64_MAX:
            moved.append((p, ls, candidate))
    if not moved:
        return
    for p, ls, candidate in moved:
        t.hw[p, ls] = candidate
        t.fetch_dirty[p] = True
    rep.sim.produce.hw_advanced(np.asarray([m[0] for m in moved], np.int64))
