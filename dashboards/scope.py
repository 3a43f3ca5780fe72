"""What a dashboard looks at: one cluster and a time window ending at that cluster's latest data.

The window ends at the latest snapshot in silver.partition_state (event time on the emulator's virtual
clock, never the wall clock), so a finished run still shows its last half hour, and every page of one
cluster shares the same x range. Time series are reduced to at most `MAX_TIME_BUCKETS` buckets of
`bucket_seconds` each, aligned to the epoch so that the buckets of a page do not shift between refreshes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lakehouse_read.cluster_state import latest_by_cluster, newest_cluster
from lakehouse_read.reader import LakehouseReader
from schemas.bronze import TS

PARTITION_STATE = "silver.partition_state"
DEFAULT_WINDOW_MINUTES = 30
# A window may span at most the SLOs' rolling window (28 days), so a page never scans years of data.
MAX_WINDOW_MINUTES = 28 * 24 * 60
# Enough points for a chart as wide as a screen, few enough that a large cluster's page stays fast.
MAX_TIME_BUCKETS = 300


@dataclass(frozen=True)
class Scope:
    """The cluster and window a page shows; `end` is None when the cluster has no partition state yet."""

    cluster: str | None
    window_minutes: int
    end: datetime | None

    @property
    def has_data(self) -> bool:
        return self.cluster is not None and self.end is not None

    @property
    def start(self) -> datetime | None:
        return None if self.end is None else self.end - timedelta(minutes=self.window_minutes)

    @property
    def bucket_seconds(self) -> int:
        return max(1, math.ceil(self.window_minutes * 60 / MAX_TIME_BUCKETS))


def check_window_minutes(window_minutes: int | None) -> int:
    """The window to use; raises TypeError/ValueError naming `window_minutes` for a bad value."""
    if window_minutes is None:
        return DEFAULT_WINDOW_MINUTES
    if isinstance(window_minutes, bool) or not isinstance(window_minutes, int):
        raise TypeError(f"window_minutes must be an int, got {type(window_minutes).__name__}")
    if not 0 < window_minutes <= MAX_WINDOW_MINUTES:
        raise ValueError(f"window_minutes must be in 1..{MAX_WINDOW_MINUTES}, got {window_minutes}")
    return window_minutes


def resolve_scope(reader: LakehouseReader, cluster: str | None = None, window_minutes: int | None = None) -> Scope:
    """The scope of a page: the named cluster (default: the one with the latest partition state)."""
    window = check_window_minutes(window_minutes)
    if cluster is not None and not isinstance(cluster, str):
        raise TypeError(f"cluster must be a str, got {type(cluster).__name__}")
    # The newest snapshot per cluster, from Delta file statistics, remembered per table version.
    latest = latest_by_cluster(reader, PARTITION_STATE)
    if cluster is None:
        cluster = newest_cluster(reader)
    return Scope(cluster, window, latest.get(cluster) if cluster is not None else None)


def ts_scalar(value: datetime) -> pa.Scalar:
    """A timestamp literal of the lakehouse's type, so a filter compares without casting the column."""
    return pa.scalar(value, type=TS)


def window_filter(scope: Scope, cluster_column: str = "run_id") -> ds.Expression:
    """Rows of the scope's cluster inside its window (only valid when `scope.has_data`)."""
    if scope.cluster is None or scope.end is None or scope.start is None:
        raise ValueError("scope has no data: check scope.has_data before filtering")
    return ((ds.field(cluster_column) == scope.cluster) & (ds.field("ts") >= ts_scalar(scope.start))
            & (ds.field("ts") <= ts_scalar(scope.end)))


def bucket_ts(table: pa.Table, scope: Scope, column: str = "ts") -> pa.Table:
    """`table` with `column` floored to the start of its time bucket."""
    floored = pc.floor_temporal(table[column], multiple=scope.bucket_seconds, unit="second")
    return table.set_column(table.schema.get_field_index(column), column, floored)
