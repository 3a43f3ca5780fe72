"""The context columns of `pipelines/context.py`, computed on the driver for a batch held as Arrow.

The reference data (bronze.runs for a row's run window, bronze.topic_configs for its topic) is kept
on the driver between micro-batches: the validate job folds in the reference rows each micro-batch
carries and asks its loader (a Delta read) only when a row names a key the driver has not seen, at
most once per batch and table. The same semantics as the Spark joins: a row whose reference is missing
gets null context (and fails its not-null check) instead of disappearing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.context import METER_KEY, LastCounts
from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_PREVIOUS_COUNT,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
)

Loader = Callable[[Sequence[str]], pa.Table]  # run ids -> the reference table's rows of those runs
TS = pa.timestamp("us", tz="UTC")


class RunWindows:
    """Per run its start, per (run, emulator batch) its end: bronze.runs, folded on the driver.

    Bounded: past `max_batches` entries the batches seen first are dropped (a row that names one later is
    answered by the loader again).
    """

    def __init__(self, loader: Loader, max_batches: int = 100_000) -> None:
        if max_batches <= 0:
            raise ValueError(f"max_batches must be > 0, got {max_batches}")
        self.loader, self.max_batches = loader, max_batches
        self.starts: dict[str, int] = {}              # run_id -> min start_ts (epoch µs)
        self.ends: dict[tuple[str, int], int] = {}    # (run_id, batch_id) -> max end_ts (epoch µs)

    def fold(self, runs: pa.Table) -> None:
        """Fold in bronze.runs rows (run_id, batch_id, start_ts, end_ts)."""
        cols = [runs.column(c).to_pylist() for c in ("run_id", "batch_id")]
        starts, ends = (_micros(runs.column(c)) for c in ("start_ts", "end_ts"))
        for run, batch, start, end in zip(*cols, starts, ends, strict=True):
            if run is None:
                continue
            if start is not None and (run not in self.starts or start < self.starts[run]):
                self.starts[run] = start
            if batch is not None and end is not None and end > self.ends.get((run, batch), end - 1):
                self.ends[(run, batch)] = end
        while len(self.ends) > self.max_batches:  # the first seen leave first: O(1) a batch, no sort
            del self.ends[next(iter(self.ends))]

    def add_columns(self, rows: pa.Table) -> pa.Table:
        """Add ctx_run_start_ts and ctx_batch_end_ts to rows carrying run_id and batch_id."""
        runs, batches = rows.column("run_id").to_pylist(), rows.column("batch_id").to_pylist()
        wanted = {r for r, b in zip(runs, batches, strict=True)
                  if r is not None and (r not in self.starts or (b is not None and (r, b) not in self.ends))}
        if wanted:
            self.fold(self.loader(sorted(wanted)))
        start = [self.starts.get(r) for r in runs]
        end = [self.ends.get((r, b)) for r, b in zip(runs, batches, strict=True)]
        return (rows.append_column(CTX_RUN_START_TS, pa.array(start, pa.int64()).cast(TS))
                .append_column(CTX_BATCH_END_TS, pa.array(end, pa.int64()).cast(TS)))


class TopicPartitions:
    """Per (run, topic) its partition count: bronze.topic_configs, folded on the driver."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.partitions: dict[tuple[str, str], int] = {}

    def fold(self, configs: pa.Table) -> None:
        """Fold in bronze.topic_configs rows (run_id, topic, partitions)."""
        for run, topic, n in zip(*(configs.column(c).to_pylist() for c in ("run_id", "topic", "partitions")),
                                 strict=True):
            if run is not None and topic is not None and n is not None:
                self.partitions[(run, topic)] = max(n, self.partitions.get((run, topic), n))

    def add_columns(self, rows: pa.Table) -> pa.Table:
        """Add ctx_topic_partitions and ctx_topic_known (false when the topic is not in topic_configs)."""
        keys = list(zip(rows.column("run_id").to_pylist(), rows.column("topic").to_pylist(), strict=True))
        missing = {r for r, t in keys if t is not None and r is not None and (r, t) not in self.partitions}
        if missing:
            self.fold(self.loader(sorted(missing)))
        counts = pa.array([self.partitions.get(k) for k in keys], pa.int32())
        known = pc.or_(pc.is_null(rows.column("topic")), pc.is_valid(counts))
        return rows.append_column(CTX_TOPIC_PARTITIONS, counts).append_column(CTX_TOPIC_KNOWN, known)


def with_previous_count(rows: pa.Table, last: LastCounts, min_ts_us: int) -> pa.Table:
    """Add ctx_previous_count: the count of the same meter of the same broker process just before.

    A row's predecessor is the previous row of its meter in the batch (by ts) or, for the first one, the
    newest count `last` knows within the look-back and before the batch (`min_ts_us`), as in
    `pipelines.context.with_previous_count`.
    """
    since = min_ts_us - last.lookback_us
    history = {k: count for k, (ts, count) in last.latest.items() if since <= ts < min_ts_us}
    runs, brokers, mbeans = (rows.column(c).to_pylist() for c in METER_KEY[:3])
    keys = list(zip(runs, brokers, mbeans, _micros(rows.column("process_start_ts")), strict=True))
    ts, counts = _micros(rows.column("ts")), rows.column("count").to_pylist()
    previous: list[Any] = [None] * rows.num_rows
    seen: dict[tuple[Any, ...], Any] = {}
    for i in sorted(range(rows.num_rows), key=lambda i: (ts[i] is None, ts[i] or 0)):
        key = keys[i]
        previous[i] = seen[key] if key in seen else history.get(key)
        seen[key] = counts[i]
    return rows.append_column(CTX_PREVIOUS_COUNT, pa.array(previous, rows.schema.field("count").type))


def _micros(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    return pc.cast(column.cast(TS), pa.int64()).to_pylist()
