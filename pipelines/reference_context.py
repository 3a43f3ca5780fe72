"""A row's reference context: its run's window and broker registry (bronze.runs), its topic's partition count
(bronze.topic_configs), as ctx_* columns of an Arrow table.

The reference data is kept on the driver between micro-batches: validate and the alert lane fold in the reference
rows each micro-batch carries and ask their loader (a Delta read) only when a row names a key the driver has not
seen, at most once per batch and table. A copy without a loader (`known_only`) answers from what it holds, for the
executors checking a batch too large for the driver. A row whose reference is missing gets null context (and fails
its not-null check) instead of disappearing.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.context import TS, epoch_micros
from pipelines.replication_invariants import KEY_SHIFT, any_per_row, flag_column, flat_list, int_values
from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_BROKERS_KNOWN,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
    BrokerRefs,
)

Loader = Callable[[Sequence[str]], pa.Table]  # run ids -> the reference table's rows of those runs
Reference = TypeVar("Reference", "RunWindows", "TopicPartitions", "BrokerRegistry")


def known_only(reference: Reference) -> Reference:
    """A copy that answers from what it holds and never loads (what an executor gets: no Delta read there)."""
    answered = copy.copy(reference)
    answered.loader = None
    return answered


class RunWindows:
    """Per run its start, per (run, emulator batch) its end: bronze.runs, folded on the driver.

    Bounded: past `max_batches` entries the batches seen first are dropped (a row that names one later is
    answered by the loader again).
    """

    def __init__(self, loader: Loader | None, max_batches: int = 100_000) -> None:
        if max_batches <= 0:
            raise ValueError(f"max_batches must be > 0, got {max_batches}")
        self.loader, self.max_batches = loader, max_batches
        self.starts: dict[str, int] = {}              # run_id -> min start_ts (epoch µs)
        self.ends: dict[tuple[str, int], int] = {}    # (run_id, batch_id) -> max end_ts (epoch µs)

    def fold(self, runs: pa.Table) -> None:
        """Fold in bronze.runs rows (run_id, batch_id, start_ts, end_ts)."""
        cols = [runs.column(c).to_pylist() for c in ("run_id", "batch_id")]
        starts, ends = (epoch_micros(runs.column(c)) for c in ("start_ts", "end_ts"))
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
        if wanted and self.loader is not None:
            self.fold(self.loader(sorted(wanted)))
        start = [self.starts.get(r) for r in runs]
        end = [self.ends.get((r, b)) for r, b in zip(runs, batches, strict=True)]
        return (rows.append_column(CTX_RUN_START_TS, pa.array(start, pa.int64()).cast(TS))
                .append_column(CTX_BATCH_END_TS, pa.array(end, pa.int64()).cast(TS)))


class TopicPartitions:
    """Per (run, topic) its partition count: bronze.topic_configs, folded on the driver."""

    def __init__(self, loader: Loader | None) -> None:
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
        if missing and self.loader is not None:
            self.fold(self.loader(sorted(missing)))
        counts = pa.array([self.partitions.get(k) for k in keys], pa.int32())
        known = pc.or_(pc.is_null(rows.column("topic")), pc.is_valid(counts))
        return rows.append_column(CTX_TOPIC_PARTITIONS, counts).append_column(CTX_TOPIC_KNOWN, known)


class BrokerRegistry:
    """Per run, the broker and the controller ids bronze.runs announces, folded on the driver (as `RunWindows`
    folds run windows): the reference rows of each micro-batch, and the loader on a miss."""

    def __init__(self, loader: Loader | None) -> None:
        self.loader = loader
        self.brokers: dict[str, set[int]] = {}
        self.controllers: dict[str, set[int]] = {}

    def fold(self, runs: pa.Table) -> None:
        """Fold in bronze.runs rows (run_id, broker_ids, controller_ids)."""
        for run, brokers, controllers in zip(*(runs.column(c).to_pylist()
                                               for c in ("run_id", "broker_ids", "controller_ids")), strict=True):
            if run is None:
                continue
            self.brokers.setdefault(run, set()).update(b for b in brokers or () if b is not None)
            self.controllers.setdefault(run, set()).update(c for c in controllers or () if c is not None)

    def add_columns(self, rows: pa.Table, refs: BrokerRefs) -> pa.Table:
        """Add ctx_brokers_known (pipelines.context.with_broker_registry)."""
        if not refs.columns:
            raise ValueError("refs.columns must not be empty")
        runs = rows.column("run_id").to_pylist()
        missing = {r for r in runs if r is not None and r not in self.brokers}
        if missing and self.loader is not None:
            self.fold(self.loader(sorted(missing)))
        n = rows.num_rows
        codes = {r: i for i, r in enumerate(sorted({r for r in runs if r in self.brokers}))}
        row_code = np.array([codes.get(r, -1) for r in runs], np.int64)
        registered = [np.array(sorted(self.brokers[r] | (self.controllers[r] if refs.controllers else set())),
                               np.int64) + (1 << 31) | (code << KEY_SHIFT) for r, code in codes.items()]
        known_keys = np.concatenate(registered) if registered else np.zeros(0, np.int64)
        holds, valid = np.ones(n, bool), np.ones(n, bool)  # Kleene AND over the columns: false wins over null
        for name in refs.columns:
            column = rows.column(name)
            if pa.types.is_list(column.type):
                f = flat_list(column)
                keys = (row_code[f.parents] << KEY_SHIFT) | (f.values + (1 << 31))
                unknown = ~(f.element_valid & np.isin(keys, known_keys))
                col_holds, col_valid = ~any_per_row(f.parents, unknown, n), f.valid
            else:
                values, col_valid = int_values(column)
                keys = (row_code << KEY_SHIFT) | (values + (1 << 31))
                col_holds = (values < 0) | np.isin(keys, known_keys)
            false_here = col_valid & ~col_holds
            holds &= ~false_here
            valid = (valid & col_valid) | false_here | ~holds
        has_run = row_code >= 0
        return rows.append_column(CTX_BROKERS_KNOWN, flag_column(holds, has_run & valid))
