"""A row's history: the previous count of its meter and the previous snapshot of its partition.

The driver keeps the newest validated value of each (`LastCounts`, `LastStates`) between micro-batches; a
micro-batch's rows are compared with their predecessor in the batch or, for the first of each key, with that
memory. The batch-side comparison runs on whatever holds the rows: the driver, or an executor's Python worker
that received every row of its keys in time order (jobs/validate_routes.py), carrying `seen` across the Arrow
batches of its partition.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.expectations import CTX_PREVIOUS_COUNT

METER_KEY = ("run_id", "broker_id", "mbean", "process_start_ts")
PARTITION_KEY = ("run_id", "topic", "partition")
# What a partition_state row is compared with in the partition's previous snapshot.
STATE_VALUES = ("leader", "leader_epoch", "partition_epoch", "high_watermark", "log_start_offset")
OFFLINE = -1  # Kafka's leader id of a partition without a leader
TS = pa.timestamp("us", tz="UTC")


class LastCounts:
    """The latest validated count of every meter, kept on the driver between micro-batches.

    Reading the previous counts back from silver costs a Delta snapshot and a scan per micro-batch;
    the validate job instead loads them from silver once (its first batch after a start, so a replayed
    batch sees exactly what silver holds) and then folds in each batch's valid meter rows. Entries older
    than the look-back are dropped, so the memory is bounded by the number of live broker processes
    times meters. A row older than a meter's newest known count is compared with nothing (not with an
    older silver row): meters arrive in order from one emulator or exporter.
    """

    def __init__(self, lookback_us: int) -> None:
        if lookback_us <= 0:
            raise ValueError(f"lookback_us must be > 0, got {lookback_us}")
        self.lookback_us = lookback_us
        self.loaded = False
        self.latest: dict[tuple[Any, ...], tuple[int, int]] = {}  # meter key -> (ts in epoch µs, count)

    def fold(self, rows: Any) -> None:
        """Fold in valid meter rows: a pandas frame with METER_KEY, `ts` and `process_start_ts` as epoch µs."""
        rows = rows.dropna(subset=["count"])  # a meter row without a count has nothing to compare
        if len(rows) == 0:
            return
        newest = rows.sort_values("ts").drop_duplicates(list(METER_KEY), keep="last")
        for key, ts, count in zip(newest[list(METER_KEY)].itertuples(index=False, name=None),
                                  newest["ts"], newest["count"], strict=True):
            key = tuple(k.item() if hasattr(k, "item") else k for k in key)  # NumPy scalars -> Python values
            known = self.latest.get(key)
            if known is None or int(ts) >= known[0]:
                self.latest[key] = (int(ts), int(count))
        horizon = max(ts for ts, _ in self.latest.values()) - self.lookback_us
        self.latest = {k: v for k, v in self.latest.items() if v[0] >= horizon}

    def before(self, before_us: int) -> dict[tuple[Any, ...], int]:
        """The newest known count per meter strictly before `before_us` and within the look-back."""
        since = before_us - self.lookback_us
        return {k: count for k, (ts, count) in self.latest.items() if since <= ts < before_us}


def with_previous_count(rows: pa.Table, history: dict[tuple[Any, ...], int],
                        seen: dict[tuple[Any, ...], Any]) -> pa.Table:
    """Add ctx_previous_count: the count the same meter of the same broker process reported just before.

    A row's predecessor is the previous row of its meter among the rows seen so far (`seen`, updated here, then this
    table by ts; a row without ts comes last) or, for the first one, `history` (`LastCounts.before` the batch).
    """
    runs, brokers, mbeans = (rows.column(c).to_pylist() for c in METER_KEY[:3])
    keys = list(zip(runs, brokers, mbeans, epoch_micros(rows.column("process_start_ts")), strict=True))
    ts, counts = epoch_micros(rows.column("ts")), rows.column("count").to_pylist()
    previous: list[Any] = [None] * rows.num_rows
    for i in in_time_order(ts):
        key = keys[i]
        previous[i] = seen[key] if key in seen else history.get(key)
        seen[key] = counts[i]
    return rows.append_column(CTX_PREVIOUS_COUNT, pa.array(previous, rows.schema.field("count").type))


def in_time_order(ts: list[int | None]) -> list[int]:
    """Row indices by ts, rows without one last (stable: ties keep their order)."""
    return sorted(range(len(ts)), key=lambda i: (ts[i] is None, ts[i] or 0))


def epoch_micros(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """A timestamp column as epoch microseconds (UTC)."""
    return pc.cast(column.cast(TS), pa.int64()).to_pylist()


def newest_meter_counts(rows: DataFrame) -> DataFrame:
    """The newest count per meter among `rows`, timestamps as epoch µs (what `LastCounts.fold` takes)."""
    newest = F.max_by(F.struct("ts", "count"), "ts")
    return (rows.where((F.col("kind") == "meter") & F.col("count").isNotNull())
            .groupBy(*METER_KEY).agg(newest.alias("n"))
            .select("run_id", "broker_id", "mbean", F.unix_micros("process_start_ts").alias("process_start_ts"),
                    F.unix_micros("n.ts").alias("ts"), F.col("n.count").alias("count")))


class LastStates:
    """The latest validated snapshot of every partition, kept on the driver between micro-batches, as
    `LastCounts` keeps meters: loaded from silver on the first batch after a start, then folded in from each
    batch's valid rows; entries older than the look-back are dropped."""

    def __init__(self, lookback_us: int) -> None:
        if lookback_us <= 0:
            raise ValueError(f"lookback_us must be > 0, got {lookback_us}")
        self.lookback_us = lookback_us
        self.loaded = False
        self.latest: dict[tuple[Any, ...], tuple[int, tuple[Any, ...]]] = {}  # key -> (ts µs, STATE_VALUES)

    def fold(self, rows: Any) -> None:
        """Fold in valid rows: a pandas frame with PARTITION_KEY, `ts` (epoch µs) and STATE_VALUES."""
        if len(rows) == 0:
            return
        newest = rows.sort_values("ts").drop_duplicates(list(PARTITION_KEY), keep="last")
        for key, ts, values in zip(newest[list(PARTITION_KEY)].itertuples(index=False, name=None), newest["ts"],
                                   newest[list(STATE_VALUES)].itertuples(index=False, name=None), strict=True):
            key = tuple(_py(k) for k in key)
            known = self.latest.get(key)
            if known is None or int(ts) >= known[0]:
                self.latest[key] = (int(ts), tuple(_py(v) for v in values))
        horizon = max(ts for ts, _ in self.latest.values()) - self.lookback_us
        self.latest = {k: v for k, v in self.latest.items() if v[0] >= horizon}

    def before(self, before_us: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        """The newest known snapshot (STATE_VALUES) per partition strictly before `before_us` and within the
        look-back."""
        since = before_us - self.lookback_us
        return {k: values for k, (ts, values) in self.latest.items() if since <= ts < before_us}


def newest_partition_states(rows: DataFrame) -> DataFrame:
    """The newest snapshot per partition among `rows`, ts as epoch µs (what `LastStates.fold` takes)."""
    newest = F.max_by(F.struct("ts", *STATE_VALUES), "ts")
    return (rows.groupBy(*PARTITION_KEY).agg(newest.alias("n"))
            .select(*PARTITION_KEY, F.unix_micros("n.ts").alias("ts"),
                    *(F.col(f"n.{c}").alias(c) for c in STATE_VALUES)))


def _py(value: Any) -> Any:
    """NumPy scalars -> Python values; pandas' missing values -> None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value
