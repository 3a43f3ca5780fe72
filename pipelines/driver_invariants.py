"""The broker registry, Kafka's replication invariants and the previous partition snapshot, computed on the
driver for a batch held as Arrow: the same ctx_* columns, row for row, as the Spark functions of
`pipelines/context.py` (`with_broker_registry`, `with_replication_invariants`, `with_previous_state`).

List columns are compared as sets, vectorised: every element becomes an int64 key `row << 33 | value`
(a null element is a value of its own, as Spark's array_except / array_intersect / array_distinct treat it),
so a set relation per row is one `np.isin` over the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.context import OFFLINE, PARTITION_KEY, STATE_VALUES, LastStates
from pipelines.driver_context import Loader, _micros
from schemas.expectations import (
    CTX_BROKERS_KNOWN,
    CTX_ELR_DISJOINT_FROM_ISR,
    CTX_ELR_SUBSET_OF_REPLICAS,
    CTX_HW_WITHIN_LEADER_LEO,
    CTX_ISR_SUBSET_OF_REPLICAS,
    CTX_LEADER_IN_ISR_OR_OFFLINE,
    CTX_LOG_START_WITHIN_HW,
    CTX_PREVIOUS_HIGH_WATERMARK,
    CTX_PREVIOUS_LEADER_EPOCH,
    CTX_PREVIOUS_LOG_START_OFFSET,
    CTX_PREVIOUS_PARTITION_EPOCH,
    CTX_REPLICA_LEOS_ALIGNED,
    CTX_REPLICAS_DISTINCT,
    BrokerRefs,
)

_SHIFT = 33                # key = row << 33 | (value + 2**31); a null element is 2**32
_NULL_ELEMENT = 1 << 32
_MAX_ROWS = 1 << 29        # keeps keys within int64


@dataclass(frozen=True)
class _Flat:
    """A list<int> column flattened: the parent row and key of every element, each list's length, validity."""

    parents: np.ndarray  # int64, per element
    keys: np.ndarray     # int64, per element: parent << 33 | encoded value
    values: np.ndarray   # int64, per element (null: 0; see `element_valid`)
    element_valid: np.ndarray
    lengths: np.ndarray  # int64, per row (0 for a null list)
    valid: np.ndarray    # bool, per row: the list is not null
    starts: np.ndarray   # int64, per row: index of its first element in the flat arrays


def _flat(column: pa.ChunkedArray | pa.Array) -> _Flat:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    if n >= _MAX_ROWS:
        raise ValueError(f"a batch of {n} rows is too large for the driver route (max {_MAX_ROWS - 1})")
    parents = np.asarray(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(arr)
    element_valid = np.asarray(pc.is_valid(flat).to_numpy(zero_copy_only=False), bool)
    values = np.asarray(pc.fill_null(flat, 0).to_numpy(zero_copy_only=False), np.int64)
    encoded = np.where(element_valid, values + (1 << 31), _NULL_ELEMENT)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False), np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if n else np.zeros(0, np.int64)
    return _Flat(parents, (parents << _SHIFT) | encoded, values, element_valid, lengths,
                 _bools(pc.is_valid(arr)), starts)


def _bools(array: Any) -> np.ndarray:
    return np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), bool)


def _ints(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as 0, validity) of an integer column."""
    return (np.asarray(pc.fill_null(column, 0).to_numpy(zero_copy_only=False), np.int64),
            _bools(pc.is_valid(column)))


def _any_per_row(parents: np.ndarray, hits: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(parents[hits], minlength=n) > 0


def _flag(holds: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A boolean column: `holds` where `valid`, null elsewhere."""
    return pa.array(holds, pa.bool_(), mask=~valid)


def _subset(a: _Flat, b: _Flat, n: int) -> pa.Array:
    missing = ~np.isin(a.keys, b.keys)
    return _flag(~_any_per_row(a.parents, missing, n), a.valid & b.valid)


def _disjoint(a: _Flat, b: _Flat, n: int) -> pa.Array:
    common = np.isin(a.keys, b.keys)
    return _flag(~_any_per_row(a.parents, common, n), a.valid & b.valid)


def leader_leos(rows: pa.Table, replicas: _Flat | None = None,
                leos: _Flat | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the leader's entry of replica_leos, where it is known) per row: the leader's first position in
    replicas, if replica_leos has a non-null entry there (pipelines.context.leader_leo)."""
    n = rows.num_rows
    replicas = replicas or _flat(rows.column("replicas"))
    leos = leos or _flat(rows.column("replica_leos"))
    leader, leader_valid = _ints(rows.column("leader"))
    match = replicas.element_valid & leader_valid[replicas.parents] & (replicas.values == leader[replicas.parents])
    position = np.full(n, np.iinfo(np.int64).max, np.int64)
    local = np.arange(len(replicas.parents), dtype=np.int64) - replicas.starts[replicas.parents]
    np.minimum.at(position, replicas.parents[match], local[match])
    known = (position < leos.lengths) & leos.valid
    at = np.where(known, leos.starts + np.where(known, position, 0), 0)
    if len(leos.values):
        value = leos.values[np.minimum(at, len(leos.values) - 1)]
        known &= leos.element_valid[np.minimum(at, len(leos.values) - 1)]
    else:
        value = np.zeros(n, np.int64)
    return np.where(known, value, 0), known


def with_replication_invariants(rows: pa.Table) -> pa.Table:
    """Add the "replication" ctx_* flags (pipelines.context.with_replication_invariants)."""
    n = rows.num_rows
    replicas, isr, elr, leos = (_flat(rows.column(c)) for c in ("replicas", "isr", "elr", "replica_leos"))
    leader, leader_valid = _ints(rows.column("leader"))
    hw, hw_valid = _ints(rows.column("high_watermark"))
    log_start, log_start_valid = _ints(rows.column("log_start_offset"))
    offline = leader == OFFLINE

    encoded_leader = (np.arange(n, dtype=np.int64) << _SHIFT) | (leader + (1 << 31))
    leader_in_isr = offline | np.isin(encoded_leader, isr.keys)
    distinct = np.bincount(np.unique(replicas.keys) >> _SHIFT, minlength=n) == replicas.lengths
    leo, leo_known = leader_leos(rows, replicas, leos)
    # Online: hw < 0 fails whatever the leader's LEO; otherwise unknown without it (Spark's three-valued AND).
    hw_holds = np.where(offline, hw == OFFLINE, (hw >= 0) & (hw <= leo))
    hw_valid_flag = leader_valid & hw_valid & (offline | (hw < 0) | leo_known)
    flags = {
        CTX_ISR_SUBSET_OF_REPLICAS: _subset(isr, replicas, n),
        CTX_LEADER_IN_ISR_OR_OFFLINE: _flag(leader_in_isr, leader_valid & isr.valid),
        CTX_ELR_DISJOINT_FROM_ISR: _disjoint(elr, isr, n),
        CTX_ELR_SUBSET_OF_REPLICAS: _subset(elr, replicas, n),
        CTX_REPLICAS_DISTINCT: _flag(distinct, replicas.valid),
        CTX_REPLICA_LEOS_ALIGNED: _flag(replicas.lengths == leos.lengths, replicas.valid & leos.valid),
        CTX_HW_WITHIN_LEADER_LEO: _flag(hw_holds, hw_valid_flag),
        CTX_LOG_START_WITHIN_HW: _flag(log_start <= hw, leader_valid & hw_valid & log_start_valid & ~offline),
    }
    for name, flag in flags.items():
        rows = rows.append_column(name, flag)
    return rows


class BrokerRegistry:
    """Per run, the broker and the controller ids bronze.runs announces, folded on the driver (as `RunWindows`
    folds run windows): the reference rows of each micro-batch, and the loader on a miss."""

    def __init__(self, loader: Loader) -> None:
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
        if missing:
            self.fold(self.loader(sorted(missing)))
        n = rows.num_rows
        codes = {r: i for i, r in enumerate(sorted({r for r in runs if r in self.brokers}))}
        row_code = np.array([codes.get(r, -1) for r in runs], np.int64)
        registered = [np.array(sorted(self.brokers[r] | (self.controllers[r] if refs.controllers else set())),
                               np.int64) + (1 << 31) | (code << _SHIFT) for r, code in codes.items()]
        known_keys = np.concatenate(registered) if registered else np.zeros(0, np.int64)
        holds, valid = np.ones(n, bool), np.ones(n, bool)  # Kleene AND over the columns: false wins over null
        for name in refs.columns:
            column = rows.column(name)
            if pa.types.is_list(column.type):
                f = _flat(column)
                keys = (row_code[f.parents] << _SHIFT) | (f.values + (1 << 31))
                unknown = ~(f.element_valid & np.isin(keys, known_keys))
                col_holds, col_valid = ~_any_per_row(f.parents, unknown, n), f.valid
            else:
                values, col_valid = _ints(column)
                keys = (row_code << _SHIFT) | (values + (1 << 31))
                col_holds = (values < 0) | np.isin(keys, known_keys)
            false_here = col_valid & ~col_holds
            holds &= ~false_here
            valid = (valid & col_valid) | false_here | ~holds
        has_run = row_code >= 0
        return rows.append_column(CTX_BROKERS_KNOWN, _flag(holds, has_run & valid))


def with_previous_state(rows: pa.Table, last: LastStates, min_ts_us: int) -> pa.Table:
    """Add the "previous_state" ctx_* columns (pipelines.context.with_previous_state): the predecessor is
    the previous row of the partition in the batch (by ts) or, for the first, `last`'s snapshot before
    the batch within the look-back."""
    history = last.before(min_ts_us)
    keys = list(zip(*(rows.column(c).to_pylist() for c in PARTITION_KEY), strict=True))
    values = list(zip(*(rows.column(c).to_pylist() for c in STATE_VALUES), strict=True))
    ts = _micros(rows.column("ts"))
    previous: list[tuple[Any, ...] | None] = [None] * rows.num_rows
    seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for i in sorted(range(rows.num_rows), key=lambda i: (ts[i] is None, ts[i] or 0)):
        key = keys[i]
        previous[i] = seen[key] if key in seen else (history[key][1] if key in history else None)
        seen[key] = values[i]
    leo, leo_known = leader_leos(rows)
    out: dict[str, list[Any]] = {c: [] for c in (CTX_PREVIOUS_LEADER_EPOCH, CTX_PREVIOUS_PARTITION_EPOCH,
                                                 CTX_PREVIOUS_HIGH_WATERMARK, CTX_PREVIOUS_LOG_START_OFFSET)}
    for i, prev in enumerate(previous):
        p_leader, p_epoch, p_pepoch, p_hw, p_start = prev if prev is not None else (None,) * len(STATE_VALUES)
        leader, epoch = values[i][0], values[i][1]
        same = (p_epoch is not None and epoch is not None and p_epoch == epoch and p_leader is not None
                and p_leader >= 0 and leader is not None and leader >= 0)
        out[CTX_PREVIOUS_LEADER_EPOCH].append(p_epoch)
        out[CTX_PREVIOUS_PARTITION_EPOCH].append(p_pepoch)
        out[CTX_PREVIOUS_HIGH_WATERMARK].append(min(p_hw, int(leo[i])) if same and p_hw is not None
                                                and leo_known[i] else None)
        out[CTX_PREVIOUS_LOG_START_OFFSET].append(p_start if same else None)
    for name, kind in ((CTX_PREVIOUS_LEADER_EPOCH, "leader_epoch"), (CTX_PREVIOUS_PARTITION_EPOCH, "partition_epoch"),
                       (CTX_PREVIOUS_HIGH_WATERMARK, "high_watermark"),
                       (CTX_PREVIOUS_LOG_START_OFFSET, "log_start_offset")):
        rows = rows.append_column(name, pa.array(out[name], rows.schema.field(kind).type))
    return rows
