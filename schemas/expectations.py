"""Expectation specs: Great Expectations expectations declared as data, next to each table's schema.

A spec names a GE 1.x expectation type and its kwargs; `schemas.suites` turns a table's specs into a
real `great_expectations.ExpectationSuite`, and `pipelines.validation` compiles the same specs into
Spark column predicates to route each row. Keeping the specs as plain data lets the emulator import
table definitions without importing Great Expectations.

Some checks need context a single row does not carry (the run's time window from `bronze.runs`, the
topic's partition count from `bronze.topic_configs`, a meter's previous count). The validation
pipeline adds those as `ctx_*` columns before validating; the specs compare against them with GE's
built-in column-pair expectations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Context columns the validation pipeline adds to a batch (see pipelines/context.py).
CTX_RUN_START_TS = "ctx_run_start_ts"          # start_ts of the row's run in bronze.runs
CTX_BATCH_END_TS = "ctx_batch_end_ts"          # end_ts of the row's (run_id, batch_id) in bronze.runs
CTX_TOPIC_PARTITIONS = "ctx_topic_partitions"  # the topic's partition count in bronze.topic_configs
CTX_TOPIC_KNOWN = "ctx_topic_known"            # false when a row names a topic topic_configs lacks
CTX_PREVIOUS_COUNT = "ctx_previous_count"      # the meter's previous cumulative count, same process

SUPPORTED_TYPES = (
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_be_json_parseable",
    "expect_column_pair_values_a_to_be_greater_than_b",
)


@dataclass(frozen=True)
class Expect:
    """One GE expectation: its snake_case type and kwargs (hashable, so tables stay frozen)."""

    type: str
    kwargs: tuple[tuple[str, Any], ...]

    def __post_init__(self) -> None:
        if self.type not in SUPPORTED_TYPES:
            raise ValueError(f"expectation type {self.type!r} is not one of {SUPPORTED_TYPES}")

    @property
    def args(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.kwargs}

    @property
    def columns(self) -> tuple[str, ...]:
        a = self.args
        return (a["column"],) if "column" in a else (a["column_A"], a["column_B"])

    @property
    def label(self) -> str:
        """Stable, readable id used in quarantine reasons and dq_runs, e.g. `values_between(value>=0)`."""
        a = self.args
        match self.type:
            case "expect_column_values_to_not_be_null":
                return f"not_null({a['column']})"
            case "expect_column_values_to_be_between":
                lo = "" if a.get("min_value") is None else f"{a['min_value']}<="
                hi = "" if a.get("max_value") is None else f"<={a['max_value']}"
                return f"between({lo}{a['column']}{hi})"
            case "expect_column_values_to_be_in_set":
                return f"in_set({a['column']})"
            case "expect_column_values_to_be_json_parseable":
                return f"json({a['column']})"
            case _:
                op = ">=" if a.get("or_equal") else ">"
                return f"pair({a['column_A']}{op}{a['column_B']})"


def _spec(type_: str, **kwargs: Any) -> Expect:
    return Expect(type_, tuple(sorted((k, tuple(v) if isinstance(v, list | set | frozenset) else v)
                                      for k, v in kwargs.items())))


def not_null(*cols: str) -> tuple[Expect, ...]:
    return tuple(_spec("expect_column_values_to_not_be_null", column=c) for c in cols)


def between(col: str, min_value: float | None = None, max_value: float | None = None) -> Expect:
    if min_value is None and max_value is None:
        raise ValueError(f"between({col}): give min_value or max_value")
    kwargs: dict[str, Any] = {"column": col}
    if min_value is not None:
        kwargs["min_value"] = min_value
    if max_value is not None:
        kwargs["max_value"] = max_value
    return _spec("expect_column_values_to_be_between", **kwargs)


def in_set(col: str, values: list[Any] | tuple[Any, ...]) -> Expect:
    return _spec("expect_column_values_to_be_in_set", column=col, value_set=sorted(values, key=str))


def json_parseable(col: str) -> Expect:
    return _spec("expect_column_values_to_be_json_parseable", column=col)


def a_at_least_b(a: str, b: str) -> Expect:
    """column A >= column B on every row where both are present."""
    return _spec("expect_column_pair_values_a_to_be_greater_than_b", column_A=a, column_B=b, or_equal=True,
                 ignore_row_if="either_value_is_missing")


def a_greater_than_b(a: str, b: str) -> Expect:
    return _spec("expect_column_pair_values_a_to_be_greater_than_b", column_A=a, column_B=b, or_equal=False,
                 ignore_row_if="either_value_is_missing")


def within_run() -> tuple[Expect, ...]:
    """The row's timestamp lies in its run: after the run's start, not after its batch's end."""
    return (*not_null(CTX_RUN_START_TS, CTX_BATCH_END_TS),
            a_at_least_b("ts", CTX_RUN_START_TS), a_at_least_b(CTX_BATCH_END_TS, "ts"))


def partition_in_topic() -> tuple[Expect, ...]:
    """Foreign key: the topic exists in topic_configs and the partition is below its partition count."""
    return (in_set(CTX_TOPIC_KNOWN, [True]), a_greater_than_b(CTX_TOPIC_PARTITIONS, "partition"))


def counter_not_decreasing() -> Expect:
    """A meter's cumulative count never goes down within one broker process."""
    return a_at_least_b("count", CTX_PREVIOUS_COUNT)
