"""Expectation specs: Great Expectations expectations declared as data, next to each table's schema.

A spec names a GE 1.x expectation type and its kwargs; `schemas.suites` turns a table's specs into a
real `great_expectations.ExpectationSuite` (the record of each run), and `pipelines.expectations` evaluates
the same specs on each row to route it. Keeping the specs as plain data lets the emulator import
table definitions without importing Great Expectations.

Some checks need context a single row does not carry (the run's time window from `bronze.runs`, the
topic's partition count from `bronze.topic_configs`, a meter's previous count). The validation
pipeline adds those as `ctx_*` columns before validating; the specs compare against them with GE's
built-in column-pair expectations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

# Context columns the validation pipeline adds to a batch (jobs/validate_routes.py TableContext).
CTX_RUN_START_TS = "ctx_run_start_ts"          # start_ts of the row's run in bronze.runs
CTX_BATCH_END_TS = "ctx_batch_end_ts"          # end_ts of the row's (run_id, batch_id) in bronze.runs
CTX_TOPIC_PARTITIONS = "ctx_topic_partitions"  # the topic's partition count in bronze.topic_configs
CTX_TOPIC_KNOWN = "ctx_topic_known"            # false when a row names a topic topic_configs lacks
CTX_PREVIOUS_COUNT = "ctx_previous_count"      # the meter's previous cumulative count, same process
# Broker registry (bronze.runs.broker_ids / controller_ids): every broker id a row names is one of the run's.
CTX_BROKERS_KNOWN = "ctx_brokers_known"
# Kafka's replication invariants within one partition_state row (pipelines/replication_invariants.py).
CTX_ISR_SUBSET_OF_REPLICAS = "ctx_isr_subset_of_replicas"
CTX_LEADER_IN_ISR_OR_OFFLINE = "ctx_leader_in_isr_or_offline"
CTX_ELR_DISJOINT_FROM_ISR = "ctx_elr_disjoint_from_isr"
CTX_ELR_SUBSET_OF_REPLICAS = "ctx_elr_subset_of_replicas"
CTX_REPLICAS_DISTINCT = "ctx_replicas_distinct"
CTX_REPLICA_LEOS_ALIGNED = "ctx_replica_leos_aligned"
CTX_HW_WITHIN_LEADER_LEO = "ctx_high_watermark_within_leader_leo"
CTX_LOG_START_WITHIN_HW = "ctx_log_start_offset_within_high_watermark"
# The same partition's previous snapshot (null where Kafka promises nothing about the pair).
CTX_PREVIOUS_LEADER_EPOCH = "ctx_previous_leader_epoch"
CTX_PREVIOUS_PARTITION_EPOCH = "ctx_previous_partition_epoch"
CTX_PREVIOUS_HIGH_WATERMARK = "ctx_previous_high_watermark"
CTX_PREVIOUS_LOG_START_OFFSET = "ctx_previous_log_start_offset"

SUPPORTED_TYPES = (
    "expect_column_values_to_not_be_null",
    "expect_column_values_to_be_between",
    "expect_column_values_to_be_in_set",
    "expect_column_values_to_be_json_parseable",
    "expect_column_pair_values_a_to_be_greater_than_b",
)


@dataclass(frozen=True)
class Expect:
    """One GE expectation: its snake_case type and kwargs (hashable, so tables stay frozen).

    `name`, when given, is the label instead of the one derived from the type and columns: an invariant
    checked through a computed `ctx_*` flag is reported by what it means (`isr_subset_of_replicas`), not
    as `in_set(ctx_…)`.
    """

    type: str
    kwargs: tuple[tuple[str, Any], ...]
    name: str | None = None

    def __post_init__(self) -> None:
        if self.type not in SUPPORTED_TYPES:
            raise ValueError(f"expectation type {self.type!r} is not one of {SUPPORTED_TYPES}")
        if self.name is not None and not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"expectation name {self.name!r}: expected snake_case letters, digits and '_'")

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
        if self.name is not None:
            return self.name
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


def named(e: Expect, name: str) -> Expect:
    """`e` reported under `name` in quarantine reasons and dq_runs."""
    return replace(e, name=name)


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


def brokers_known() -> Expect:
    """Every broker id the row names is in its run's broker registry (bronze.runs.broker_ids)."""
    return named(in_set(CTX_BROKERS_KNOWN, [True]), "broker_ids_known")


def replication_invariants() -> tuple[Expect, ...]:
    """Kafka's invariants within one partition snapshot (KAFKA_SEMANTICS.md), each under its own name."""
    flags = (
        (CTX_ISR_SUBSET_OF_REPLICAS, "isr_subset_of_replicas"),
        (CTX_LEADER_IN_ISR_OR_OFFLINE, "leader_in_isr_or_offline"),
        (CTX_ELR_DISJOINT_FROM_ISR, "elr_disjoint_from_isr"),
        (CTX_ELR_SUBSET_OF_REPLICAS, "elr_subset_of_replicas"),
        (CTX_REPLICAS_DISTINCT, "replicas_distinct"),
        (CTX_REPLICA_LEOS_ALIGNED, "replica_leos_aligned_with_replicas"),
        (CTX_HW_WITHIN_LEADER_LEO, "high_watermark_within_leader_leo"),
        (CTX_LOG_START_WITHIN_HW, "log_start_offset_within_high_watermark"),
    )
    return tuple(named(in_set(flag, [True]), name) for flag, name in flags)


def partition_history_monotonic() -> tuple[Expect, ...]:
    """What Kafka guarantees between two snapshots of a partition (the context leaves the others null)."""
    return (
        named(a_at_least_b("leader_epoch", CTX_PREVIOUS_LEADER_EPOCH), "leader_epoch_not_decreasing"),
        named(a_at_least_b("partition_epoch", CTX_PREVIOUS_PARTITION_EPOCH), "partition_epoch_not_decreasing"),
        named(a_at_least_b("high_watermark", CTX_PREVIOUS_HIGH_WATERMARK),
              "high_watermark_not_decreasing_in_leader_epoch"),
        named(a_at_least_b("log_start_offset", CTX_PREVIOUS_LOG_START_OFFSET),
              "log_start_offset_not_decreasing_in_leader_epoch"),
    )


@dataclass(frozen=True)
class BrokerRefs:
    """The columns of a table naming brokers: an int32 id or a list of them.

    Each id must be in the row's run registry: `bronze.runs.broker_ids`, and `controller_ids` too when
    `controllers` (the active controller reports its metrics under its own node id). A negative scalar
    names no broker (Kafka's -1, e.g. an offline partition's leader); other expectations say where that
    is allowed. A null element of a list names no known broker.
    """

    columns: tuple[str, ...]
    controllers: bool = False
