"""Pacing the emulator's virtual clock to wall time for `--pace live|FACTOR`."""

from __future__ import annotations

import time
from collections.abc import Callable


class LivePacer:
    """Sleeps so that virtual time advances at `factor` × wall time (1.0 = live).

    The first `wait_until` anchors its virtual time to the wall time it is called at; `clock` (seconds)
    and `sleep` are the wall clock's, replaceable in tests.
    """

    def __init__(self, factor: float, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if factor <= 0:
            raise ValueError(f"pace factor must be > 0, got {factor}")
        self.factor = factor
        self._sleep = sleep
        self._clock = clock
        self._wall0 = 0.0
        self._virt0: int | None = None

    def wait_until(self, virtual_ms: int) -> None:
        if self._virt0 is None:
            self._virt0, self._wall0 = virtual_ms, self._clock()
        due = self._wall0 + (virtual_ms - self._virt0) / 1000.0 / self.factor
        delay = due - self._clock()
        if delay > 0:
            self._sleep(delay)
