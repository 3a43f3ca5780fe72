"""The replication state of every partition, as NumPy arrays indexed [partition] or [partition, slot].

A *slot* is a position in the partition's assignment (replicas[p, s] is a broker id, -1 past the
replication factor). The hot data-plane fields (LEO, HW, lastCaughtUpTimeMs, flush points, active
segment) are arrays so a fetch round or a metric snapshot touches thousands of partitions in a few
vector operations. Per-replica leader-epoch caches and closed segments are small Python lists: they
change only on leader changes, segment rolls and truncation.

Record identity is the leader epoch that wrote it (as in Kafka's log-matching argument): two replicas
hold the same record at offset o iff their epoch caches agree on the epoch of o.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker_emulator.config import TopicConfig

NO_BROKER = -1
RECOVERED, RECOVERING = 0, 1


@dataclass
class Segment:
    base_offset: int
    end_offset: int  # exclusive
    size_bytes: int
    created_ms: int
    last_append_ms: int


class FlatViews:
    """One-dimensional views of the hot [partition, slot] arrays, indexed by p * max_rf + s.

    A fetch touches a handful of (partition, slot) pairs; gathering them from a 1-D view with one
    precomputed index array costs a fifth of a 2-D fancy index (two index arrays broadcast per call).
    The views share memory with the table's arrays, which are allocated once and never rebound.
    """

    def __init__(self, t: PartitionTable) -> None:
        self.leo = t.leo.reshape(-1)
        self.hw = t.hw.reshape(-1)
        self.log_start = t.log_start.reshape(-1)
        self.isr = t.isr.reshape(-1)
        self.leader_isr = t.leader_isr.reshape(-1)
        self.pending_add = t.pending_add.reshape(-1)
        self.known_leader = t.known_leader.reshape(-1)
        self.known_epoch = t.known_epoch.reshape(-1)
        self.seen_leo = t.seen_leo.reshape(-1)
        self.last_caught_up_ms = t.last_caught_up_ms.reshape(-1)
        self.last_fetch_leader_leo = t.last_fetch_leader_leo.reshape(-1)
        self.last_fetch_ms = t.last_fetch_ms.reshape(-1)
        self.needs_truncation = t.needs_truncation.reshape(-1)
        self.fetch_dirty = t.fetch_dirty.reshape(-1)
        self.seg_bytes = t.seg_bytes.reshape(-1)
        self.seg_created_ms = t.seg_created_ms.reshape(-1)
        self.flushed = t.flushed.reshape(-1)
        self.last_flush_ms = t.last_flush_ms.reshape(-1)
        self.dirty_since_ms = t.dirty_since_ms.reshape(-1)
        for view in vars(self).values():
            assert view.base is not None, "a flat view must share memory with its table array"


class PartitionTable:
    """All partitions of the cluster in flat arrays; topics map to contiguous index ranges."""

    def __init__(self, capacity: int, max_rf: int) -> None:
        self.count = 0
        self.max_rf = max_rf
        p, r = capacity, max_rf
        i32, i64 = np.int32, np.int64
        self.topic_index = np.zeros(p, i32)
        self.partition_index = np.zeros(p, i32)
        self.rf = np.zeros(p, i32)
        self.replicas = np.full((p, r), NO_BROKER, i32)
        # --- controller registration (the committed truth) ---
        self.leader = np.full(p, NO_BROKER, i32)
        self.leader_epoch = np.zeros(p, i32)
        self.partition_epoch = np.zeros(p, i32)
        self.isr = np.zeros((p, r), bool)
        self.elr = np.zeros((p, r), bool)
        self.last_known_elr = np.zeros((p, r), bool)
        self.recovery_state = np.zeros(p, np.int8)
        # --- each replica's view of the registration (lags by metadata propagation) ---
        self.known_leader = np.full((p, r), NO_BROKER, i32)
        self.known_epoch = np.full((p, r), -1, i32)
        # --- leader-side partition state (valid on the acting leader) ---
        self.leader_isr = np.zeros((p, r), bool)      # committed ISR as the leader knows it
        self.pending_add = np.zeros((p, r), bool)     # expansion sent to the controller, not yet committed
        self.alter_inflight = np.zeros(p, bool)
        self.leader_partition_epoch = np.zeros(p, i32)  # the partition epoch the leader last applied from metadata
        self.epoch_start_offset = np.zeros(p, i64)    # leader LEO when it became leader
        self.seen_leo = np.zeros((p, r), i64)         # follower LEO as of its last fetch
        self.last_caught_up_ms = np.zeros((p, r), i64)
        self.last_fetch_leader_leo = np.zeros((p, r), i64)
        self.last_fetch_ms = np.zeros((p, r), i64)
        # --- each replica's log ---
        self.leo = np.zeros((p, r), i64)
        self.hw = np.zeros((p, r), i64)               # the replica's own high watermark
        self.log_start = np.zeros((p, r), i64)
        self.flushed = np.zeros((p, r), i64)
        self.dirty_since_ms = np.full((p, r), -1, i64)  # when the log's page cache was first dirtied; -1: clean
        self.last_flush_ms = np.zeros((p, r), i64)
        self.seg_base = np.zeros((p, r), i64)
        self.seg_bytes = np.zeros((p, r), i64)
        self.seg_created_ms = np.zeros((p, r), i64)
        self.needs_truncation = np.zeros((p, r), bool)
        # Incremental fetch sessions (KIP-227): a follower replica is in its next fetch request only
        # when something changed for it (new data, a new HW, truncation, not in the ISR).
        self.fetch_dirty = np.ones((p, r), bool)
        # --- per-partition constants from the topic ---
        self.record_bytes = np.full(p, 512, i64)
        self.configured_min_isr = np.ones(p, i32)
        self.unclean = np.zeros(p, bool)
        # Python-side structures, per partition then slot.
        self.epoch_caches: list[list[list[tuple[int, int]]]] = []
        self.assignment: list[list[int]] = []  # replicas as Python lists: slot lookups without NumPy
        self.segments: list[list[list[Segment]]] = []
        self.flat = FlatViews(self)

    def flat_index(self, ps: np.ndarray, ss: np.ndarray | int) -> np.ndarray:
        """Index into `self.flat` of each (partition, slot)."""
        return ps * self.max_rf + ss

    # --- topology ---------------------------------------------------------------------------
    def add_partition(self, topic_index: int, partition: int, replicas: tuple[int, ...], now_ms: int,
                      record_bytes: int) -> int:
        p = self.count
        if p >= len(self.rf):
            raise AssertionError("partition capacity exhausted")
        self.count += 1
        self.topic_index[p] = topic_index
        self.partition_index[p] = partition
        self.rf[p] = len(replicas)
        self.replicas[p, : len(replicas)] = replicas
        self.seg_created_ms[p, :] = now_ms
        self.record_bytes[p] = record_bytes
        self.epoch_caches.append([[] for _ in range(self.max_rf)])
        self.assignment.append(list(replicas))
        self.segments.append([[] for _ in range(self.max_rf)])
        return p

    def slot_of(self, p: int, broker_id: int) -> int:
        reps = self.assignment[p]
        return reps.index(broker_id) if broker_id in reps else -1

    def replica_list(self, p: int) -> list[int]:
        return list(self.assignment[p])

    def members(self, p: int, mask: np.ndarray) -> list[int]:
        """Broker ids of the slots set in a [R] mask, in assignment order."""
        return [int(self.replicas[p, s]) for s in range(int(self.rf[p])) if mask[s]]

    def effective_min_isr(self, p: int | np.ndarray) -> np.ndarray | int:
        result = np.minimum(self.configured_min_isr[p], self.rf[p])
        return int(result) if np.ndim(result) == 0 else result

    def set_topic_config(self, p: int, config: TopicConfig, broker_min_isr: int, broker_unclean: bool) -> None:
        self.configured_min_isr[p] = config.min_insync_replicas or broker_min_isr
        self.unclean[p] = (config.unclean_leader_election_enable
                           if config.unclean_leader_election_enable is not None else broker_unclean)

    # --- epoch caches -----------------------------------------------------------------------
    def last_epoch(self, p: int, s: int) -> int:
        cache = self.epoch_caches[p][s]
        return cache[-1][0] if cache else -1

    def epoch_at(self, p: int, s: int, offset: int) -> int:
        """Epoch of the record at `offset` in slot s's log, -1 if the log does not hold it."""
        if offset < self.log_start[p, s] or offset >= self.leo[p, s]:
            return -1
        found = -1
        for epoch, start in self.epoch_caches[p][s]:
            if start <= offset:
                found = epoch
            else:
                break
        return found

    def end_offset_for_epoch(self, p: int, s: int, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= `epoch`, the end offset of that epoch) in slot s's log."""
        cache = self.epoch_caches[p][s]
        for i in range(len(cache) - 1, -1, -1):
            e, _start = cache[i]
            if e <= epoch:
                end = cache[i + 1][1] if i + 1 < len(cache) else int(self.leo[p, s])
                return e, end
        return -1, int(self.log_start[p, s])

    def epoch_end(self, p: int, s: int, epoch: int) -> tuple[int, int] | None:
        """(start, end) offsets of records written in `epoch` in slot s's log, or None."""
        cache = self.epoch_caches[p][s]
        for i, (e, start) in enumerate(cache):
            if e == epoch:
                end = cache[i + 1][1] if i + 1 < len(cache) else int(self.leo[p, s])
                return start, min(end, int(self.leo[p, s]))
        return None

    def assign_epoch(self, p: int, s: int, epoch: int, start_offset: int) -> None:
        cache = self.epoch_caches[p][s]
        if cache and cache[-1][0] >= epoch:
            return
        cache.append((epoch, start_offset))

    def copy_epochs_from(self, p: int, s: int, leader_slot: int, upto: int) -> None:
        """After fetching up to `upto`, take the leader's epoch boundaries the follower lacks."""
        mine = self.epoch_caches[p][s]
        last = mine[-1][0] if mine else -1
        for epoch, start in self.epoch_caches[p][leader_slot]:
            if epoch > last and start < upto:
                mine.append((epoch, start))
                last = epoch

    # --- log mutation -----------------------------------------------------------------------
    def truncate(self, p: int, s: int, offset: int) -> int:
        """Truncate slot s's log to `offset` (exclusive end); returns records removed."""
        offset = max(offset, int(self.log_start[p, s]))
        self.fetch_dirty[p] = True
        # The epoch cache is cut even when no record goes (as UnifiedLog.truncateTo does): a broker
        # that became leader, assigned its epoch's start offset and appended nothing before losing
        # the lead holds an entry that would label the new leader's records with its epoch.
        cache = self.epoch_caches[p][s]
        while cache and cache[-1][1] >= min(offset, int(self.leo[p, s])):
            cache.pop()
        removed = int(self.leo[p, s]) - offset
        if removed <= 0:
            return 0
        self.leo[p, s] = offset
        self.hw[p, s] = min(int(self.hw[p, s]), offset)
        self.flushed[p, s] = min(int(self.flushed[p, s]), offset)
        segs = self.segments[p][s]
        while segs and segs[-1].base_offset >= offset:
            segs.pop()
        if segs and segs[-1].end_offset > offset:
            seg = segs.pop()  # the cut segment becomes the active one again
            self.seg_base[p, s] = seg.base_offset
            self.seg_bytes[p, s] = (offset - seg.base_offset) * self.record_bytes[p]
            self.seg_created_ms[p, s] = seg.created_ms
        elif self.seg_base[p, s] >= offset:
            self.seg_base[p, s] = offset
            self.seg_bytes[p, s] = 0
        else:
            self.seg_bytes[p, s] = (offset - int(self.seg_base[p, s])) * self.record_bytes[p]
        return removed

    def wipe(self, p: int, s: int) -> int:
        """Disk loss: the replica comes back with an empty log."""
        removed = int(self.leo[p, s] - self.log_start[p, s])
        self.fetch_dirty[p] = True
        for arr in (self.leo, self.hw, self.log_start, self.flushed, self.seg_base, self.seg_bytes):
            arr[p, s] = 0
        self.dirty_since_ms[p, s] = -1
        self.epoch_caches[p][s] = []
        self.segments[p][s] = []
        return removed
