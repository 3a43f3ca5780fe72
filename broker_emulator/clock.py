"""Time for the emulator: a virtual millisecond clock driven by an event queue.

The model only ever reads `SimClock.now_ms`; pacing to wall time lives outside the package
(`foundation.pacer`), so nothing in the model can read the wall clock.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any


@dataclass
class SimClock:
    now_ms: int = 0


class EventQueue:
    """A heap of (time, priority, insertion sequence) — ties break deterministically, never by hash."""

    def __init__(self, clock: SimClock) -> None:
        # (time, priority, insertion sequence, kind, payload): tuples compare natively and fast.
        self._heap: list[tuple[int, int, int, str, Any]] = []
        self._seq = 0
        self.clock = clock
        self.processed = 0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, at_ms: int, kind: str, payload: Any = None, priority: int = 5) -> None:
        if at_ms < self.clock.now_ms:
            raise AssertionError(f"event {kind} scheduled in the past: {at_ms} < {self.clock.now_ms}")
        self._seq += 1
        heapq.heappush(self._heap, (at_ms, priority, self._seq, kind, payload))

    def pending(self) -> list[tuple[str, Any]]:
        """The (kind, payload) of every scheduled event, in no particular order (for checkers)."""
        return [e[3:] for e in self._heap]

    def next_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[str, Any]:
        at_ms, _prio, _seq, kind, payload = heapq.heappop(self._heap)
        self.clock.now_ms = at_ms
        self.processed += 1
        return kind, payload

    def pop_same(self, kind: str) -> list[Any]:
        """Pop every further event of `kind` due now, so they can be processed as one vector."""
        out = []
        heap = self._heap
        while heap and heap[0][0] == self.clock.now_ms and heap[0][3] == kind:
            out.append(heapq.heappop(heap)[4])
            self.processed += 1
        return out
