"""Compile expectation specs into Spark predicates, so every row learns which expectations it fails.

The semantics follow Great Expectations' own: column-value expectations other than not-null ignore
nulls, and the column-pair expectations here skip rows where either value is missing. The validate
job checks that the per-expectation counts computed here equal GE's `unexpected_count`s.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from schemas.expectations import Expect

FAILURES = "failures"


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


def with_failures(df: DataFrame, expectations: tuple[Expect, ...]) -> DataFrame:
    """Add `failures`: array<struct<expectation, column, value>> of the expectations each row fails."""
    if not expectations:
        raise ValueError("expectations must not be empty")
    entries = []
    for e in expectations:
        fails, value = failure_of(e)
        entry = F.struct(F.lit(e.label).alias("expectation"), F.lit(",".join(e.columns)).alias("column"),
                         value.alias("value"))
        entries.append(F.when(fails, entry))
    return df.withColumn(FAILURES, F.array_compact(F.array(*entries)))


def failure_counts(annotated: DataFrame) -> dict[str, int]:
    """Unexpected rows per expectation label in a DataFrame produced by `with_failures`."""
    rows = (annotated.where(F.size(FAILURES) > 0)
            .select(F.explode(FAILURES).alias("f")).groupBy("f.expectation").count().collect())
    return {r["expectation"]: int(r["count"]) for r in rows}
