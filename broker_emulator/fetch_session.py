"""What a replica fetch session is made of: its members, and the request and response it exchanges.

Kept apart from `replication.py` (which moves these through the fetch loop) so that the fetch loop,
its entry-by-entry twins in `fetch_entries.py` and the types they pass around each stay small: this
module holds only the data and the few helpers that build or extend it from the partition table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from broker_emulator.state import NO_BROKER

if TYPE_CHECKING:
    from broker_emulator.state import PartitionTable


class SessionMembers(NamedTuple):
    """The partitions one follower fetches from one leader, with their slots and flat indices."""

    ps: np.ndarray        # partition indices
    ss: np.ndarray        # follower slots
    ls: np.ndarray        # leader slots
    fs: np.ndarray        # flat index of (partition, follower slot)
    fl: np.ndarray        # flat index of (partition, leader slot)


def session_members(t: PartitionTable, follower: int, ps: np.ndarray,
                    ss: np.ndarray) -> dict[int, SessionMembers]:
    """Leader broker -> the partitions (with slots) that `follower` fetches from it.

    `ps`, `ss` are the follower's replicas: (partition, slot) pairs whose broker is `follower`.
    """
    leaders = t.known_leader[ps, ss]
    sessions: dict[int, SessionMembers] = {}
    for leader in np.unique(leaders):
        if leader in (NO_BROKER, follower):
            continue
        sel = leaders == leader
        lps, lss = ps[sel], ss[sel]
        lls = np.argmax(t.replicas[lps] == leader, axis=1).astype(np.int64)
        sessions[int(leader)] = SessionMembers(lps, lss, lls, t.flat_index(lps, lss), t.flat_index(lps, lls))
    return sessions


@dataclass
class FetchRequest:
    follower: int
    leader: int
    ps: np.ndarray        # partition indices
    ss: np.ndarray        # follower slots
    ls: np.ndarray        # leader slots
    fs: np.ndarray        # flat index of (partition, follower slot)
    fl: np.ndarray        # flat index of (partition, leader slot)
    offsets: np.ndarray   # fetch offsets (follower LEO when sent)
    epochs: np.ndarray    # follower's known leader epoch per partition
    request_id: int

    def enough(self, t: PartitionTable, min_bytes: int) -> bool:
        """DelayedFetch.tryComplete: the fetch completes once the bytes past its offsets reach
        replica.fetch.min.bytes (1: any record); else it waits, up to replica.fetch.wait.max.ms."""
        new = t.flat.leo[self.fl] - self.offsets
        if min_bytes <= 1:
            return bool(np.count_nonzero(new > 0))
        return int((np.maximum(new, 0) * t.record_bytes[self.ps]).sum()) >= min_bytes

    def add_partitions(self, t: PartitionTable, ps: np.ndarray) -> None:
        """Add the partitions of `ps` this session carries but the request left out, as of now."""
        present = set(self.ps.tolist())
        add: list[tuple[int, int, int]] = []
        for p in ps.tolist():
            if p in present:
                continue
            reps = t.assignment[p]
            if self.follower in reps and t.known_leader[p, reps.index(self.follower)] == self.leader:
                add.append((p, reps.index(self.follower), reps.index(self.leader)))
        if not add:
            return
        r = t.max_rf
        add_fs = [p * r + s for p, s, _ in add]  # flat indices, as PartitionTable.flat_index
        self.ps = np.concatenate([self.ps, [p for p, _, _ in add]])
        self.ss = np.concatenate([self.ss, [s for _, s, _ in add]])
        self.ls = np.concatenate([self.ls, [ls for _, _, ls in add]])
        self.fs = np.concatenate([self.fs, add_fs])
        self.fl = np.concatenate([self.fl, [p * r + ls for p, _, ls in add]])
        self.offsets = np.concatenate([self.offsets, t.flat.leo[add_fs]])
        self.epochs = np.concatenate([self.epochs, t.flat.known_epoch[add_fs]])


@dataclass
class FetchResponse:
    request: FetchRequest
    keep: np.ndarray      # entries that were answered (leader agreed on the epoch)
    ends: np.ndarray      # new end offsets
    leader_hw: np.ndarray
    leader_log_start: np.ndarray
