"""Live pacing keeps virtual time in step with wall time (scaled by the pace factor)."""

from __future__ import annotations

import pytest

from isrwatch.pacer import LivePacer


def test_pacer_sleeps_until_virtual_time_is_due() -> None:
    slept: list[float] = []
    pacer = LivePacer(10.0, sleep=slept.append)
    pacer.wait_until(5_000)  # the first call anchors virtual time to now
    pacer.wait_until(6_000)  # one virtual second at 10x is 0.1 s of wall time
    assert len(slept) == 1
    assert 0.09 < slept[0] <= 0.1


def test_pacer_rejects_a_non_positive_factor() -> None:
    with pytest.raises(ValueError, match="pace factor must be > 0"):
        LivePacer(0)
