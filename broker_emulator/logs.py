"""Segmented logs: appends, segment roll, flush points, page-cache writeback, retention, power loss.

Appends land in the page cache (`leo` moves, `flushed` does not). A segment roll flushes the closed
segment, as Kafka does; `flush.messages` / `flush.ms` force flushes; the OS writes a log back once it has
been dirty for `page.cache.writeback.ms` (Linux's dirty_expire_centisecs: the flusher thread, waking every
5 s, writes back the inodes first dirtied longer ago than that, whole). Power loss truncates a replica to
what was flushed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from broker_emulator.state import PartitionTable, Segment

if TYPE_CHECKING:
    from broker_emulator.clock import SimClock


class Logs:
    def __init__(self, clock: SimClock, table: PartitionTable) -> None:
        self.clock = clock
        self.t = table
        self.segment_bytes = np.zeros(0, np.int64)
        self.segment_ms = np.zeros(0, np.int64)
        self.flush_messages = np.zeros(0, np.int64)
        self.flush_ms = np.zeros(0, np.int64)
        self.retention_ms = np.zeros(0, np.int64)
        self.retention_bytes = np.zeros(0, np.int64)

    def resize(self, capacity: int) -> None:
        for name in ("segment_bytes", "segment_ms", "flush_messages", "flush_ms", "retention_ms", "retention_bytes"):
            old = getattr(self, name)
            new = np.zeros(capacity, np.int64)
            new[: len(old)] = old
            setattr(self, name, new)

    def append_leader(self, p: int, s: int, records: int) -> None:
        """The leader appends `records` in its current epoch."""
        t = self.t
        leo = int(t.leo[p, s])
        if not t.epoch_caches[p][s] or t.epoch_caches[p][s][-1][0] < t.known_epoch[p, s]:
            t.assign_epoch(p, s, int(t.known_epoch[p, s]), leo)
        self.append_one(p, s, records)
        t.leo[p, s] = leo + records

    def append_one(self, p: int, s: int, records: int) -> None:
        """The rules of append() for one (p, s), with Python scalars: one replica needs no vector."""
        t = self.t
        now = self.clock.now_ms
        leo = int(t.leo[p, s])
        add = records * int(t.record_bytes[p])
        seg_bytes = int(t.seg_bytes[p, s])
        if seg_bytes > 0 and (seg_bytes + add > self.segment_bytes[p]
                              or now - int(t.seg_created_ms[p, s]) >= self.segment_ms[p]):
            self._roll(p, s)
        t.seg_bytes[p, s] += add
        if leo + records - int(t.flushed[p, s]) >= self.flush_messages[p]:
            t.flushed[p, s] = leo + records
            t.last_flush_ms[p, s] = now
            t.dirty_since_ms[p, s] = -1
        elif t.dirty_since_ms[p, s] < 0:
            t.dirty_since_ms[p, s] = now

    def append(self, ps: np.ndarray, ss: np.ndarray, fs: np.ndarray, records: np.ndarray) -> None:
        """Account `records` appended at each (p, s)'s current LEO (the caller moves the LEO).

        `fs` is the flat index of each (p, s) (`PartitionTable.flat_index`).
        """
        t, flat, now = self.t, self.t.flat, self.clock.now_ms
        add = records * t.record_bytes[ps]
        seg_bytes = flat.seg_bytes[fs]
        roll = (seg_bytes > 0) & ((seg_bytes + add > self.segment_bytes[ps])
                                  | (now - flat.seg_created_ms[fs] >= self.segment_ms[ps]))
        if np.count_nonzero(roll):
            for i in np.flatnonzero(roll).tolist():
                self._roll(int(ps[i]), int(ss[i]))
        flat.seg_bytes[fs] += add
        # flush.messages: force a flush once this many unflushed records accumulate.
        new_leo = flat.leo[fs] + records
        force = new_leo - flat.flushed[fs] >= self.flush_messages[ps]
        if np.count_nonzero(force):
            flat.flushed[fs[force]] = new_leo[force]
            flat.last_flush_ms[fs[force]] = now
        dirtied = ~force & (flat.dirty_since_ms[fs] < 0) & (records > 0)
        flat.dirty_since_ms[fs[force]] = -1
        flat.dirty_since_ms[fs[dirtied]] = now

    def _roll(self, p: int, s: int) -> None:
        t, now = self.t, self.clock.now_ms
        base, leo = int(t.seg_base[p, s]), int(t.leo[p, s])
        t.segments[p][s].append(Segment(base, leo, int(t.seg_bytes[p, s]), int(t.seg_created_ms[p, s]), now))
        t.seg_base[p, s] = leo
        t.seg_bytes[p, s] = 0
        t.seg_created_ms[p, s] = now
        t.flushed[p, s] = max(int(t.flushed[p, s]), leo)  # Kafka flushes a segment when it rolls
        t.dirty_since_ms[p, s] = -1

    def writeback(self, running: np.ndarray, expire_ms: int) -> None:
        """Periodic (the flusher thread's wake-up): logs dirty for `expire_ms` or more are written back whole;
        flush.ms flushes the logs whose last flush is that old."""
        t, now = self.t, self.clock.now_ms
        n = t.count
        live = running[t.replicas[:n].clip(min=0)] & (t.replicas[:n] >= 0)
        dirty = t.dirty_since_ms[:n]
        expired = live & (dirty >= 0) & (now - dirty >= expire_ms)
        due = live & ((now - t.last_flush_ms[:n]) >= self.flush_ms[:n, None])
        t.flushed[:n] = np.where(expired | due, t.leo[:n], t.flushed[:n])
        t.last_flush_ms[:n] = np.where(due, now, t.last_flush_ms[:n])
        t.dirty_since_ms[:n] = np.where(expired | due, -1, dirty)

    def power_loss(self, p: int, s: int) -> int:
        """The broker lost power: everything after the flush point is gone."""
        return self.t.truncate(p, s, int(self.t.flushed[p, s]))

    def enforce_retention(self) -> list[tuple[int, int, int]]:
        """Delete closed segments past retention.ms / retention.bytes; returns (p, s, new log start)."""
        t, now = self.t, self.clock.now_ms
        changed: list[tuple[int, int, int]] = []
        for p in range(t.count):
            rms, rbytes = int(self.retention_ms[p]), int(self.retention_bytes[p])
            for s in range(int(t.rf[p])):
                segs = t.segments[p][s]
                if not segs:
                    continue
                total = sum(x.size_bytes for x in segs) + int(t.seg_bytes[p, s])
                removed = False
                # Never delete past the HW: those records are not yet committed.
                while segs and segs[0].end_offset <= t.hw[p, s] and (
                        (rms >= 0 and now - segs[0].last_append_ms > rms)
                        or (rbytes >= 0 and total - segs[0].size_bytes >= rbytes)):
                    total -= segs[0].size_bytes
                    segs.pop(0)
                    removed = True
                if removed:
                    start = segs[0].base_offset if segs else int(t.seg_base[p, s])
                    t.log_start[p, s] = max(int(t.log_start[p, s]), start)
                    cache = t.epoch_caches[p][s]
                    while len(cache) > 1 and cache[1][1] <= start:
                        cache.pop(0)
                    changed.append((p, s, start))
        return changed
