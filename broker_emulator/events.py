"""The cluster event log: every discrete event, numbered gap-free, with a bounded recent history."""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, Any

from schemas.bronze import EventType

if TYPE_CHECKING:
    from broker_emulator.clock import SimClock
    from broker_emulator.state import PartitionTable


class EventLog:
    def __init__(self, clock: SimClock, table: PartitionTable, topic_names: list[str], history: int = 400) -> None:
        self.clock = clock
        self.t = table
        self.topic_names = topic_names  # by topic index, to name an event's partition
        self.seq = 0
        self.rows: list[tuple[Any, ...]] = []
        self.history: deque[str] = deque(maxlen=history)
        self.counts: dict[str, int] = {}

    def emit(self, event_type: EventType, *, cause: str, detail: dict[str, Any], broker_id: int | None = None,
             p: int | None = None, records: int | None = None) -> int:
        t = self.t
        seq = self.seq
        self.seq += 1
        topic = partition = epoch = None
        if p is not None:
            topic = self.topic_names[int(t.topic_index[p])]
            partition = int(t.partition_index[p])
            epoch = int(t.leader_epoch[p])
        now = self.clock.now_ms
        self.rows.append((now, seq, event_type.value, broker_id, topic, partition, epoch, cause, records,
                          json.dumps(detail, sort_keys=True, separators=(",", ":"))))
        key = f"{event_type}:{cause}"
        self.counts[key] = self.counts.get(key, 0) + 1
        where = f" {topic}-{partition}" if topic is not None else ""
        who = f" broker={broker_id}" if broker_id is not None else ""
        self.history.append(f"t={now}ms #{seq} {event_type}({cause}){where}{who}"
                            f"{'' if records is None else f' records={records}'} {detail}")
        return seq

    def drain(self) -> list[tuple[Any, ...]]:
        out, self.rows = self.rows, []
        return out
