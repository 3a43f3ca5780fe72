"""Compile expectation specs into Spark predicates, so every row learns which expectations it fails.

The semantics follow Great Expectations' own: column-value expectations other than not-null ignore
nulls, and the column-pair expectations here skip rows where either value is missing. The validate
job checks that the per-expectation counts computed here equal GE's `unexpected_count`s.

A batch is annotated with one boolean column per expectation (`_fails_<i>`) and `_valid`: cheap
columns Spark evaluates in generated code. The quarantine's `failures` array of structs, which is
expensive to build, is only assembled for the rejected rows (`CompiledExpectations.failures`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas.expectations import Expect

FAILURES = "failures"
VALID = "_valid"
_FLAG_PREFIX = "_fails_"


def _text(c: Column) -> Column:
    return F.coalesce(c.cast("string"), F.lit("null"))


def failure_of(e: Expect) -> tuple[Column, Column]:
    """(fails, offending value) for one expectation, as Spark columns."""
    a = e.args
    match e.type:
        case "expect_column_values_to_not_be_null":
            c = F.col(a["column"])
            return c.isNull(), F.lit(None).cast("string")
        case "expect_column_values_to_be_between":
            c = F.col(a["column"])
            out = F.lit(False)
            if a.get("min_value") is not None:
                out = out | (c < F.lit(a["min_value"]))
            if a.get("max_value") is not None:
                out = out | (c > F.lit(a["max_value"]))
            return c.isNotNull() & out, _text(c)
        case "expect_column_values_to_be_in_set":
            c = F.col(a["column"])
            return c.isNotNull() & ~c.isin(list(a["value_set"])), _text(c)
        case "expect_column_values_to_be_json_parseable":
            c = F.col(a["column"])
            return c.isNotNull() & F.try_parse_json(c).isNull(), _text(c)
        case "expect_column_pair_values_a_to_be_greater_than_b":
            ca, cb = F.col(a["column_A"]), F.col(a["column_B"])
            holds = (ca >= cb) if a.get("or_equal") else (ca > cb)
            value = F.concat(F.lit(f"{a['column_A']}="), _text(ca), F.lit(f", {a['column_B']}="), _text(cb))
            return ca.isNotNull() & cb.isNotNull() & ~holds, value
    raise ValueError(f"no Spark predicate for expectation type {e.type!r}")


def flag_columns(expectations: tuple[Expect, ...]) -> list[str]:
    """Names of the per-expectation failure flags `with_failure_flags` adds, in expectation order."""
    return [f"{_FLAG_PREFIX}{i}" for i in range(len(expectations))]


class CompiledExpectations:
    """A table's expectations as Spark columns, built once per job: every `F.` call is a round trip to the
    JVM, and rebuilding a suite's ~40 expressions per micro-batch cost as much driver time as a Spark job."""

    def __init__(self, expectations: tuple[Expect, ...]) -> None:
        if not expectations:
            raise ValueError("expectations must not be empty")
        self.expectations = expectations
        self.flags = flag_columns(expectations)
        self._flag_columns = [failure_of(e)[0].alias(name) for e, name in zip(expectations, self.flags, strict=True)]
        flags = [F.col(f) for f in self.flags]
        self._valid = ~F.greatest(*flags) if len(flags) > 1 else ~flags[0]
        entries = []
        for e, flag in zip(expectations, flags, strict=True):
            entry = F.struct(F.lit(e.label).alias("expectation"), F.lit(",".join(e.columns)).alias("column"),
                             failure_of(e)[1].alias("value"))
            entries.append(F.when(flag, entry))
        # array<struct<expectation, column, value>> of the expectations a flagged row fails.
        self.failures = F.array_compact(F.array(*entries))

    def with_failure_flags(self, df: DataFrame) -> DataFrame:
        """Add a boolean `_fails_<i>` per expectation and `_valid` (the row fails none of them)."""
        return df.select("*", *self._flag_columns).withColumn(VALID, self._valid)


def failure_counts(flagged: DataFrame, expectations: tuple[Expect, ...]) -> tuple[int, int, dict[str, int]]:
    """(rows, valid rows, unexpected rows per expectation label) of a `with_failure_flags` frame: one job."""
    flags = flag_columns(expectations)
    row = flagged.agg(F.count(F.lit(1)).alias("_n"), F.count_if(F.col(VALID)).alias("_v"),
                      *(F.count_if(F.col(f)).alias(f) for f in flags)).first()
    assert row is not None
    return int(row["_n"]), int(row["_v"]), nonzero_counts(expectations, [row[f] for f in flags])


def nonzero_counts(expectations: tuple[Expect, ...], counts: list[Any]) -> dict[str, int]:
    """Unexpected rows per expectation label, only labels with some (as GE reports them)."""
    return {e.label: int(c) for e, c in zip(expectations, counts, strict=True) if c}
