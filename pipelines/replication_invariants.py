"""Kafka's replication invariants within a partition snapshot, and the snapshot before it, as ctx_* columns of an
Arrow table (what the partition_state expectations compare).

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

from pipelines.context import OFFLINE, PARTITION_KEY, STATE_VALUES, epoch_micros, in_time_order
from pipelines.expectations import as_numpy
from schemas.expectations import (
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
)

KEY_SHIFT = 33                # key = row << 33 | (value + 2**31); a null element is 2**32
_NULL_ELEMENT = 1 << 32
_MAX_ROWS = 1 << 29        # keeps keys within int64


@dataclass(frozen=True)
class FlatList:
    """A list<int> column flattened: the parent row and key of every element, each list's length, validity."""

    parents: np.ndarray  # int64, per element
    keys: np.ndarray     # int64, per element: parent << 33 | encoded value
    values: np.ndarray   # int64, per element (null: 0; see `element_valid`)
    element_valid: np.ndarray
    lengths: np.ndarray  # int64, per row (0 for a null list)
    valid: np.ndarray    # bool, per row: the list is not null
    starts: np.ndarray   # int64, per row: index of its first element in the flat arrays


def flat_list(column: pa.ChunkedArray | pa.Array) -> FlatList:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    if n >= _MAX_ROWS:
        raise ValueError(f"a batch of {n} rows is too large for the driver route (max {_MAX_ROWS - 1})")
    parents = np.asarray(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), np.int64)
    flat = pc.list_flatten(arr)
    element_valid = np.asarray(pc.is_valid(flat).to_numpy(zero_copy_only=False), bool)
    values = as_numpy(flat, 0, np.int64)
    encoded = np.where(element_valid, values + (1 << 31), _NULL_ELEMENT)
    lengths = as_numpy(pc.list_value_length(arr), 0, np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if n else np.zeros(0, np.int64)
    return FlatList(parents, (parents << KEY_SHIFT) | encoded, values, element_valid, lengths,
                 bool_values(pc.is_valid(arr)), starts)


def bool_values(array: Any) -> np.ndarray:
    return as_numpy(array, False, bool)


def int_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values with nulls as 0, validity) of an integer column."""
    return (as_numpy(column, 0, np.int64),
            bool_values(pc.is_valid(column)))


def any_per_row(parents: np.ndarray, hits: np.ndarray, n: int) -> np.ndarray:
    return np.bincount(parents[hits], minlength=n) > 0


def flag_column(holds: np.ndarray, valid: np.ndarray) -> pa.Array:
    """A boolean column: `holds` where `valid`, null elsewhere."""
    return pa.array(holds, pa.bool_(), mask=~valid)


def _subset(a: FlatList, b: FlatList, n: int) -> pa.Array:
    missing = ~np.isin(a.keys, b.keys)
    return flag_column(~any_per_row(a.parents, missing, n), a.valid & b.valid)


def _disjoint(a: FlatList, b: FlatList, n: int) -> pa.Array:
    common = np.isin(a.keys, b.keys)
    return flag_column(~any_per_row(a.parents, common, n), a.valid & b.valid)


def leader_leos(rows: pa.Table, replicas: FlatList | None = None,
                leos: FlatList | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the leader's entry of replica_leos, where it is known) per row: the leader's first position in
    replicas, if replica_leos has a non-null entry there."""
    n = rows.num_rows
    replicas = replicas or flat_list(rows.column("replicas"))
    leos = leos or flat_list(rows.column("replica_leos"))
    leader, leader_valid = int_values(rows.column("leader"))
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
    """Add Kafka's invariants within one partition snapshot, one boolean ctx_* column each (null when an input is
    null). Lists compare as sets whose null elements are a value of their own."""
    n = rows.num_rows
    replicas, isr, elr, leos = (flat_list(rows.column(c)) for c in ("replicas", "isr", "elr", "replica_leos"))
    leader, leader_valid = int_values(rows.column("leader"))
    hw, hw_valid = int_values(rows.column("high_watermark"))
    log_start, log_start_valid = int_values(rows.column("log_start_offset"))
    offline = leader == OFFLINE

    encoded_leader = (np.arange(n, dtype=np.int64) << KEY_SHIFT) | (leader + (1 << 31))
    leader_in_isr = offline | np.isin(encoded_leader, isr.keys)
    distinct = np.bincount(np.unique(replicas.keys) >> KEY_SHIFT, minlength=n) == replicas.lengths
    leo, leo_known = leader_leos(rows, replicas, leos)
    # Online: hw < 0 fails whatever the leader's LEO; otherwise unknown without it (Spark's three-valued AND).
    hw_holds = np.where(offline, hw == OFFLINE, (hw >= 0) & (hw <= leo))
    hw_valid_flag = leader_valid & hw_valid & (offline | (hw < 0) | leo_known)
    flags = {
        CTX_ISR_SUBSET_OF_REPLICAS: _subset(isr, replicas, n),
        CTX_LEADER_IN_ISR_OR_OFFLINE: flag_column(leader_in_isr, leader_valid & isr.valid),
        CTX_ELR_DISJOINT_FROM_ISR: _disjoint(elr, isr, n),
        CTX_ELR_SUBSET_OF_REPLICAS: _subset(elr, replicas, n),
        CTX_REPLICAS_DISTINCT: flag_column(distinct, replicas.valid),
        CTX_REPLICA_LEOS_ALIGNED: flag_column(replicas.lengths == leos.lengths, replicas.valid & leos.valid),
        CTX_HW_WITHIN_LEADER_LEO: flag_column(hw_holds, hw_valid_flag),
        CTX_LOG_START_WITHIN_HW: flag_column(log_start <= hw, leader_valid & hw_valid & log_start_valid & ~offline),
    }
    for name, flag in flags.items():
        rows = rows.append_column(name, flag)
    return rows


def with_previous_state(rows: pa.Table, history: dict[tuple[Any, ...], tuple[Any, ...]],
                        seen: dict[tuple[Any, ...], tuple[Any, ...]]) -> pa.Table:
    """Add the partition's previous snapshot, where Kafka promises something about the pair:

    - ctx_previous_leader_epoch, ctx_previous_partition_epoch: the previous epochs (they never decrease);
    - ctx_previous_high_watermark: only under the same leader epoch, online both times: the previous HW,
      capped by the leader's LEO now (a leader's HW never decreases, unless its own log lost the records
      above it: power loss of an unflushed page cache, with the broker back before the controller fenced it);
    - ctx_previous_log_start_offset: under the same leader epoch, online both times (retention only moves it
      forward; a new leader has its own log start).

    The predecessor is the previous row of the partition among the rows seen so far (`seen`, updated here, then
    this table by ts) or, for the first, `history` (`LastStates.before` the batch).
    """
    keys = list(zip(*(rows.column(c).to_pylist() for c in PARTITION_KEY), strict=True))
    values = list(zip(*(rows.column(c).to_pylist() for c in STATE_VALUES), strict=True))
    ts = epoch_micros(rows.column("ts"))
    previous: list[tuple[Any, ...] | None] = [None] * rows.num_rows
    for i in in_time_order(ts):
        key = keys[i]
        previous[i] = seen[key] if key in seen else history.get(key)
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
