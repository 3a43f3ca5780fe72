"""The canary's read-back side (its consumer thread): each record read is placed in the partition's ledger, which
says whether it confirms an acknowledgement, shows a loss or a duplicate; refused positions and re-reads are
handled before each poll. A part of `collector.canary.Canary`, kept apart for its size: it works on the
canary's state under the canary's lock."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from collector.canary_state import CanaryRecord, CanaryState, Duplicate, LostRecords, ReadOutcome, decode_value
from collector.canary_topic import CanaryConfig, wall_ms

log = logging.getLogger("collector.canary")


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
    _consumer: Consumer | None
    _state: CanaryState | None
    _counters: dict[int, Counters]
    _in_flight: dict[int, dict[int, int]]
    _read_early: dict[int, dict[int, list[tuple[int, int]]]]
    _unplaced: dict[int, dict[int, tuple[int, int]]]
    _seeks: dict[int, int]
    _resets: set[int]
    _unassigned: set[int]
    _duplicates_seen: set[tuple[int, int, int]]

    def _rescan(self, partition: int) -> None:
        """(lock held) Read the partition again from its oldest remembered record: evidence of a truncation
        may concern any remembered record, read back or not."""
        assert self._state is not None
        first = self._state.ledger(partition).first_offset
        if first is not None:
            self._seeks[partition] = min(self._seeks.get(partition, first), first)

    def _consume_loop(self) -> None:
        assert self._consumer is not None
        while not self._closing.is_set():
            self._reposition()
            messages = self._consumer.consume(num_messages=500, timeout=0.2)
            if not messages:
                continue
            now = wall_ms()
            with self._lock:
                for message in messages:
                    self._on_message(message, now)

    def _on_message(self, message: Message, now: int) -> None:
        assert self._state is not None
        err, p, offset = message.error(), message.partition(), message.offset()
        if err is not None:
            if err.code() == KafkaError._AUTO_OFFSET_RESET and p is not None:
                self._resets.add(p)
                self._counters[p].consumer_resets += 1
            else:
                log.debug("canary consumer: %s", err.str())
            return
        if p is None or offset is None or p not in self._counters:
            return
        record = decode_value(message.value())
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
        """(consumer thread) Handle refused positions, pending re-reads and partitions to assign."""
        assert self._consumer is not None and self._state is not None
        topic = self.config.topic
        with self._lock:
            resets, self._resets = self._resets, set()
        for p in resets:
            try:
                low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=2.0, cached=False)
            except KafkaException as e:
                log.debug("canary consumer: watermarks of partition %d: %s", p, e)
                with self._lock:
                    self._resets.add(p)
                continue
            with self._lock:
                ledger = self._state.ledger(p)
                self._counters[p].unverified += ledger.forget_below(low)  # deleted by retention, not lost
                first = ledger.first_offset
                target = first if first is not None else min(ledger.read_next or high, high)
                self._seeks[p] = max(low, min(self._seeks.get(p, target), target))
        with self._lock:
            seeks, self._seeks = self._seeks, {}
            for p in list(self._unassigned):
                first = self._state.ledger(p).first_offset
                if first is not None:
                    seeks[p] = min(seeks.get(p, first), first)
        for p, offset in seeks.items():
            try:
                if p in self._unassigned:
                    self._consumer.incremental_assign([TopicPartition(topic, p, offset)])
                    self._unassigned.discard(p)
                else:
                    self._seek(p, offset)
            except KafkaException as e:
                log.debug("canary consumer: repositioning partition %d at %d: %s", p, offset, e)
                with self._lock:
                    self._seeks[p] = min(self._seeks.get(p, offset), offset)

    def _seek(self, p: int, offset: int) -> None:
        assert self._consumer is not None
        tp = TopicPartition(self.config.topic, p, offset)
        try:
            self._consumer.seek(tp)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._STATE:
                raise
            # Not fetching (stopped by auto.offset.reset=error after a refused position, or not started yet):
            # assign it again at the offset.
            self._consumer.incremental_unassign([TopicPartition(self.config.topic, p)])
            self._consumer.incremental_assign([tp])
