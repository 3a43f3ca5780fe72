"""Seconds per named step of one micro-batch: where a large batch's time went.

The executor route prints its steps when the batch ends (a catch-up batch runs for minutes, so the line is
also its progress report); bench/batch_sizes.py reads the same line to print each step beside its floor.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

_LINE = re.compile(r"^validate: batch (\d+), ([\d,]+) rows in ([\d.]+) s: (.*)$")


@dataclass
class StepClock:
    started: float = field(default_factory=time.monotonic)
    steps: list[tuple[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._last = self.started

    def lap(self, step: str) -> None:
        """The time since the previous lap (or the start) was spent in `step`."""
        now = time.monotonic()
        self.steps.append((step, now - self._last))
        self._last = now

    def line(self, batch_id: int, rows: int) -> str:
        parts = "; ".join(f"{step} {seconds:.1f} s" for step, seconds in self.steps)
        return (f"validate: batch {batch_id}, {rows:,} rows in "
                f"{time.monotonic() - self.started:.1f} s: {parts}")


def parse_steps(text: str) -> dict[str, float]:
    """The steps of the last executor-route line in `text` (a job's output), summed by name."""
    steps: dict[str, float] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            steps = {}
            for part in match.group(4).split("; "):
                step, seconds, _ = part.rsplit(" ", 2)
                steps[step] = steps.get(step, 0.0) + float(seconds)
    return steps
