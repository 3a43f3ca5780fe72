"""The one evaluation of the expectation specs (schemas/expectations.py): which rows of an Arrow table fail which
expectation, and why.

It runs wherever the rows are: on the driver for a micro-batch it collected, in the executors' Python workers
(`mapInArrow`) for one too large to collect (jobs/validate_routes.py). The semantics are Great Expectations' own:
column-value expectations other than not-null ignore nulls, the column-pair expectations skip rows where either
value is missing, json_parseable is `json.loads`. Great Expectations validates the same rows for the run's record
(silver.dq_runs); tests/pipeline/test_row_checks.py checks the counts agree. A row's
failures carry the offending value as Spark prints it (`CAST(… AS STRING)`), which is how quarantine shows values.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.expectations import Expect

FAILURES = "failures"  # the quarantine's array of (expectation, column, value)
VALID = "_valid"       # the row fails no expectation


@dataclass(frozen=True)
class Verdict:
    """Per-row outcome of a table's expectations on one batch."""

    flags: list[np.ndarray]  # one boolean array per expectation (True: the row fails it), in spec order
    valid: np.ndarray        # True: the row fails none

    def counts(self, expectations: tuple[Expect, ...]) -> dict[str, int]:
        """Unexpected rows per expectation label (only labels with some), as GE reports them."""
        return nonzero_counts(expectations, [f.sum() for f in self.flags])


def nonzero_counts(expectations: tuple[Expect, ...], counts: list[Any]) -> dict[str, int]:
    """Unexpected rows per expectation label, only labels with some (as GE reports them)."""
    return {e.label: int(c) for e, c in zip(expectations, counts, strict=True) if c}


def evaluate(rows: pa.Table, expectations: tuple[Expect, ...]) -> Verdict:
    """Which rows of `rows` fail which expectation. `rows` holds every column the specs name."""
    if not expectations:
        raise ValueError("expectations must not be empty")
    flags = [_fails(e, rows) for e in expectations]
    valid = ~np.logical_or.reduce(flags)
    return Verdict(flags, valid)


def failures(rows: pa.Table, expectations: tuple[Expect, ...], verdict: Verdict,
             which: np.ndarray) -> list[list[dict[str, str | None]]]:
    """The quarantine's `failures` entries (expectation, column, value) for the rows at indices `which`."""
    out: list[list[dict[str, str | None]]] = [[] for _ in range(len(which))]
    for e, flag in zip(expectations, verdict.flags, strict=True):
        hit = np.flatnonzero(flag[which])
        if not len(hit):
            continue
        picked = pa.array(which[hit], pa.int64())
        values = _offending_values(e, rows, picked)
        column = ",".join(e.columns)
        for slot, value in zip(hit.tolist(), values, strict=True):
            out[slot].append({"expectation": e.label, "column": column, "value": value})
    return out


def _fails(e: Expect, rows: pa.Table) -> np.ndarray:
    a = e.args
    match e.type:
        case "expect_column_values_to_not_be_null":
            return _bools(pc.is_null(rows.column(a["column"])))
        case "expect_column_values_to_be_between":
            c = rows.column(a["column"])
            out = pa.scalar(False)
            if a.get("min_value") is not None:
                out = pc.or_(out, pc.less(c, pa.scalar(a["min_value"])))
            if a.get("max_value") is not None:
                out = pc.or_(out, pc.greater(c, pa.scalar(a["max_value"])))
            return _bools(out, rows.num_rows)
        case "expect_column_values_to_be_in_set":
            c = rows.column(a["column"])
            allowed = pa.array(list(a["value_set"])).cast(c.type)
            return _bools(pc.and_(pc.is_valid(c), pc.invert(pc.is_in(c, value_set=allowed))), rows.num_rows)
        case "expect_column_values_to_be_json_parseable":
            return np.fromiter((v is not None and not _parses(v) for v in rows.column(a["column"]).to_pylist()),
                               bool, rows.num_rows)
        case "expect_column_pair_values_a_to_be_greater_than_b":
            ca, cb = rows.column(a["column_A"]), rows.column(a["column_B"])
            holds = pc.greater_equal(ca, cb) if a.get("or_equal") else pc.greater(ca, cb)
            return _bools(pc.invert(holds), rows.num_rows)
    raise ValueError(f"no Arrow evaluation for expectation type {e.type!r}")


def _bools(flags: Any, n: int | None = None) -> np.ndarray:
    """A comparison's result as a NumPy bool array: null (a missing value) counts as not failing."""
    if isinstance(flags, pa.Scalar):  # a constant (between with neither bound reached Arrow as a scalar)
        return np.full(n or 0, bool(flags.as_py()), bool)
    return as_numpy(flags, False, bool)


def as_numpy(array: pa.Array | pa.ChunkedArray, fill: Any, dtype: Any) -> np.ndarray:
    """An Arrow array as NumPy, nulls as `fill`. `pc.fill_null` is asked only when there is a null: its Python wrapper
    costs ~30 µs a call, and the checks of a live batch make hundreds of these conversions, nearly all without one."""
    if array.null_count:
        array = pc.fill_null(array, fill)
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype)


def _parses(text: str) -> bool:
    """GE's pandas engine tests json_parseable with json.loads; so do we, or the counts could differ."""
    try:
        json.loads(text)
    except (ValueError, TypeError):
        return False
    return True


def _offending_values(e: Expect, rows: pa.Table, picked: pa.Array) -> list[str | None]:
    a = e.args
    if e.type == "expect_column_values_to_not_be_null":
        return [None] * len(picked)
    if e.type == "expect_column_pair_values_a_to_be_greater_than_b":
        ca, cb = (rows.column(a[k]).take(picked).to_pylist() for k in ("column_A", "column_B"))
        return [f"{a['column_A']}={spark_text(x)}, {a['column_B']}={spark_text(y)}"
                for x, y in zip(ca, cb, strict=True)]
    return [spark_text(v) for v in rows.column(a["column"]).take(picked).to_pylist()]


def spark_text(value: Any) -> str:
    """`CAST(value AS STRING)` as Spark prints it (session time zone UTC); null as 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        return f"{text}.{value.microsecond:06d}".rstrip("0") if value.microsecond else text
    return str(value)


def _java_double(x: float) -> str:
    """Java's Double.toString: shortest digits, scientific below 1e-3 and from 1e7 on."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(x)
    mantissa, exponent = np.format_float_scientific(x, unique=True, trim="0").split("e")
    return f"{mantissa}E{int(exponent)}"
