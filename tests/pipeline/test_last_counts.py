"""The driver's memory of each meter's last validated count (pipelines.context.LastCounts)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from pipelines.context import LastCounts

S = 1_000_000  # one second in µs
KEY_A = ("run", 1, "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", 0)
KEY_B = ("run", 2, "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec", 0)


def _rows(*rows: tuple[tuple[Any, ...], int, int]) -> pd.DataFrame:
    return pd.DataFrame([(*key, ts, count) for key, ts, count in rows],
                        columns=["run_id", "broker_id", "mbean", "process_start_ts", "ts", "count"])


def test_fold_keeps_the_newest_count_per_meter_and_forgets_beyond_the_lookback() -> None:
    counts = LastCounts(lookback_us=60 * S)
    counts.fold(_rows((KEY_A, 10 * S, 5), (KEY_A, 11 * S, 7), (KEY_B, 11 * S, 2)))
    assert counts.latest == {KEY_A: (11 * S, 7), KEY_B: (11 * S, 2)}
    counts.fold(_rows((KEY_A, 9 * S, 1)))  # late and older: the newer count stays
    assert counts.latest[KEY_A] == (11 * S, 7)
    counts.fold(_rows((KEY_A, 80 * S, 9)))  # B's last report is now more than 60 s older than the newest
    assert counts.latest == {KEY_A: (80 * S, 9)}


def test_a_meter_row_without_a_count_is_skipped_not_fatal() -> None:
    counts = LastCounts(lookback_us=60 * S)
    rows = _rows((KEY_A, 10 * S, 5), (KEY_B, 10 * S, 0))
    rows.loc[1, "count"] = None
    counts.fold(rows)
    assert counts.latest == {KEY_A: (10 * S, 5)}


def test_before_gives_counts_before_the_batch_within_the_lookback() -> None:
    counts = LastCounts(lookback_us=60 * S)
    counts.fold(_rows((KEY_A, 50 * S, 7), (KEY_B, 100 * S, 2)))
    assert counts.before(100 * S) == {KEY_A: 7}  # B is not strictly before the batch
    assert counts.before(200 * S) == {}  # A is beyond the look-back


def test_lookback_must_be_positive() -> None:
    with pytest.raises(ValueError, match="lookback_us must be > 0"):
        LastCounts(0)
