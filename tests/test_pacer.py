"""Live pacing keeps virtual time in step with wall time (scaled by the pace factor), on a fake wall clock."""

from __future__ import annotations

import pytest

from foundation.pacer import LivePacer


class FakeWall:
    """A wall clock that moves only when slept on or advanced (values exact in binary floating point)."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_pacer_sleeps_until_virtual_time_is_due() -> None:
    wall = FakeWall(1000.0)
    pacer = LivePacer(4.0, sleep=wall.sleep, clock=wall.clock)
    wall.now = 1002.0  # set-up time before the run: not owed to the first interval
    pacer.wait_until(5_000)  # the first call anchors virtual 5 s to wall 1002 s
    assert wall.slept == []
    pacer.wait_until(6_000)  # one virtual second at 4x is 0.25 s of wall time
    assert wall.slept == [0.25]
    assert wall.now == 1002.25
    wall.now += 0.125  # the simulation itself took 0.125 s of the next quarter second
    pacer.wait_until(7_000)
    assert wall.slept == [0.25, 0.125]
    assert wall.now == 1002.5


def test_pacer_does_not_sleep_when_behind_and_keeps_its_schedule() -> None:
    wall = FakeWall(0.0)
    pacer = LivePacer(1.0, sleep=wall.sleep, clock=wall.clock)
    pacer.wait_until(0)
    wall.now = 3.0  # three seconds of wall time went by during one virtual second: behind
    pacer.wait_until(1_000)
    assert wall.slept == []
    pacer.wait_until(4_000)  # due at wall 4 s: the schedule stays anchored to the first call
    assert wall.slept == [1.0]
    assert wall.now == 4.0


def test_pacer_rejects_a_non_positive_factor() -> None:
    with pytest.raises(ValueError, match="pace factor must be > 0, got 0"):
        LivePacer(0)
