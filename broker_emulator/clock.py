"""Time for the emulator: a virtual millisecond clock driven by an event queue.

The model only ever reads `SimClock.now_ms`; pacing to wall time lives outside the package
(`isrwatch.pacer`), so nothing in the model can read the wall clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SimClock:
    now_ms: int = 0


@dataclass(order=True)
class _Entry:
    at_ms: int
    priority: int
    seq: int
    kind: str = field(compare=False)
    payload: Any = field(compare=False)


class EventQueue:
    """A heap of (time, priority, insertion sequence) — ties break deterministically, never by hash."""

    def __init__(self, clock: SimClock) -> None:
        self._heap: list[_Entry] = []
        self._seq = 0
        self.clock = clock
        self.processed = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, at_ms: int, kind: str, payload: Any = None, priority: int = 5) -> None:
        if at_ms < self.clock.now_ms:
            raise AssertionError(f"event {kind} scheduled in the past: {at_ms} < {self.clock.now_ms}")
        self._seq += 1
        heapq.heappush(self._heap, _Entry(at_ms, priority, self._seq, kind, payload))

    def next_time(self) -> int | None:
        return self._heap[0].at_ms if self._heap else None

    def pop(self) -> tuple[str, Any]:
        e = heapq.heappop(self._heap)
        self.clock.now_ms = e.at_ms
        self.processed += 1
        return e.kind, e.payload

    def pop_same(self, kind: str) -> list[Any]:
        """Pop every further event of `kind` due now, so they can be processed as one vector."""
        out = []
        while self._heap and self._heap[0].at_ms == self.clock.now_ms and self._heap[0].kind == kind:
            out.append(heapq.heappop(self._heap).payload)
            self.processed += 1
        return out
