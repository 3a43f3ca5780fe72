"""The canary's read-back side (its consumer thread): each record read is placed in the partition's ledger, which
says whether it confirms an acknowledgement, shows a loss or a duplicate; refused positions and re-reads are
handled before each poll. A part of `collector.canary.Canary`, kept apart for its size: it works on the
canary's state under the canary's lock.

The records come from a `LeaderReader` (collector/canary_fetch.py): Fetch requests to each partition's leader
over one connection per broker, without a consumer group, from the offsets kept here. A dead or paused broker
holds up the partitions it leads and no other."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

from collector.canary_fetch import Fetched, LeaderReader
from collector.canary_state import CanaryRecord, CanaryState, Duplicate, LostRecords, ReadOutcome, decode_value
from collector.canary_topic import CanaryConfig, wall_ms

log = logging.getLogger("collector.canary")

POLL_S = 0.2   # the longest the consumer thread waits for answers before it looks at re-reads again


@dataclass
class Counters:
    """What one canary partition counted in the current interval."""

    sent: int = 0
    acked: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    confirmed: int = 0
    lost: list[LostRecords] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    unverified: int = 0
    consumer_resets: int = 0
    preferred_elections: int = 0
    acked_without_offset: int = 0
    produce_ms: list[int] = field(default_factory=list)
    round_trip_ms: list[int] = field(default_factory=list)


class ReadBack:
    """The consumer thread's work; `Canary` sets every attribute below."""

    config: CanaryConfig
    _lock: threading.Lock
    _closing: threading.Event
    _reader: LeaderReader | None
    _positions: dict[int, int]        # (consumer thread) partition -> the next offset to read
    _state: CanaryState | None
    _counters: dict[int, Counters]
    _in_flight: dict[int, dict[int, int]]
    _read_early: dict[int, dict[int, list[tuple[int, int]]]]
    _unplaced: dict[int, dict[int, tuple[int, int]]]
    _seeks: dict[int, int]
    _resets: set[int]
    _unassigned: set[int]
    _duplicates_seen: set[tuple[int, int, int]]

    def rescan(self, partition: int) -> None:
        """Read the partition again from its oldest remembered record: its leader changed, and the new leader's log
        may be shorter. The reader finds a truncation by itself only while its position is past the new log's end
        (OFFSET_OUT_OF_RANGE); a reader slower than the new leader's first writes (a loaded machine) finds its
        position valid again and would never look back at the records it had read before."""
        with self._lock:
            if self._state is not None:
                self._rescan(partition)

    def _rescan(self, partition: int) -> None:
        """(lock held) Read the partition again from its oldest remembered record: evidence of a truncation
        may concern any remembered record, read back or not."""
        assert self._state is not None
        first = self._state.ledger(partition).first_offset
        if first is not None:
            self._seeks[partition] = min(self._seeks.get(partition, first), first)

    def _consume_loop(self) -> None:
        assert self._reader is not None
        while not self._closing.is_set():
            self._reposition()
            with self._lock:
                refused = set(self._resets)
            reading = {p: offset for p, offset in self._positions.items() if p not in refused}
            polled = self._reader.poll(reading, refused, timeout_s=POLL_S)
            now = wall_ms()
            with self._lock:
                for fetched in polled.fetched:
                    self._on_fetched(fetched, now)
                for p, offset in polled.refused.items():
                    if self._positions.get(p) == offset and p not in self._resets:
                        self._resets.add(p)
                        self._counters[p].consumer_resets += 1
                for p, (log_start, log_end) in polled.ranges.items():
                    if p in self._resets:
                        self._resets.discard(p)
                        self._place_refused(p, log_start, log_end)

    def _on_fetched(self, fetched: Fetched, now: int) -> None:
        """(lock held) A fetch's records, unless the partition was moved elsewhere since it was asked."""
        p = fetched.partition
        if self._positions.get(p) != fetched.fetched_offset:
            return
        for offset, value in fetched.records:
            self._on_record(p, offset, value, now)
        self._positions[p] = fetched.next_offset

    def _place_refused(self, p: int, log_start: int, log_end: int) -> None:
        """(lock held) Kafka refused the partition's position (OFFSET_OUT_OF_RANGE): read again from the oldest
        remembered record, or where the consumer was, within the log as it is now."""
        assert self._state is not None
        ledger = self._state.ledger(p)
        self._counters[p].unverified += ledger.forget_below(log_start)  # deleted by retention, not lost
        first = ledger.first_offset
        target = first if first is not None else min(ledger.read_next or log_end, log_end)
        self._seeks[p] = max(log_start, min(self._seeks.get(p, target), target))

    def _on_record(self, p: int, offset: int, value: bytes | None, now: int) -> None:
        """(lock held) The consumer read `value` at `offset` of partition p."""
        assert self._state is not None
        if p not in self._counters:
            return
        record = decode_value(value)
        if record is None or record.instance_id != self._state.instance_id or record.partition != p:
            record = None
        elif record.seq in self._in_flight[p]:
            # Read before its acknowledgement was handled (the leader answers the fetch and the produce when
            # the high watermark passes it): judged when the acknowledgement comes.
            self._read_early[p].setdefault(record.seq, []).append((offset, now))
            self._state.ledger(p).read_next = offset + 1
            return
        self._state.ledger(p).read_next = offset + 1
        unplaced = None if record is None else self._unplaced[p].pop(record.seq, None)
        if record is not None and unplaced is not None:
            self._place_and_read(p, offset, record, *unplaced, now)
        else:
            self._apply_read(p, offset, record, now)

    def _place_and_read(self, p: int, offset: int, record: CanaryRecord, acked_ms: int, leader: int,
                        read_ms: int) -> None:
        """(lock held) An acknowledgement without an offset, and the read that gives it one."""
        assert self._state is not None
        if not self._state.ledger(p).place(offset, record.seq, acked_ms, leader):
            self._counters[p].unverified += 1   # read where the ledger's order has no room for it: not watched
        self._apply_read(p, offset, record, read_ms)

    def _apply_read(self, p: int, offset: int, record: CanaryRecord | None, read_ms: int) -> None:
        """(lock held) The consumer read `record` (None: not one of this canary's) at `offset` at `read_ms`."""
        assert self._state is not None
        result = self._state.ledger(p).read(offset, None if record is None else record.seq, read_ms)
        c = self._counters[p]
        if result.outcome is ReadOutcome.CONFIRMED and record is not None:
            c.confirmed += 1
            c.round_trip_ms.append(read_ms - record.produce_ms)
        elif result.outcome is ReadOutcome.OTHER_RECORD:
            c.lost.extend(result.lost)
            self._rescan(p)
        dup = result.duplicate
        if dup is not None and (p, dup.seq, dup.read_offset) not in self._duplicates_seen:
            self._duplicates_seen.add((p, dup.seq, dup.read_offset))
            c.duplicates.append(dup)

    def _reposition(self) -> None:
        """(consumer thread) Apply the pending re-reads and place the partitions whose first record is known."""
        assert self._state is not None
        with self._lock:
            seeks, self._seeks = self._seeks, {}
            for p in list(self._unassigned):
                first = self._state.ledger(p).first_offset
                if first is not None:
                    seeks[p] = min(seeks.get(p, first), first)
                    self._unassigned.discard(p)
        self._positions.update(seeks)
