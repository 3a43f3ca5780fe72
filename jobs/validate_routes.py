"""How validate routes one bronze table's rows of a micro-batch to silver and quarantine.

One check (`TableContext.add`, then `pipelines.expectations.evaluate`) wherever the rows are; a large micro-batch's
small tables stay on the driver (`driver_share`), the others go to the executors:
- `check_on_driver`, then `write_routed`: the batch was collected to the driver (live batches): context and
  expectations are evaluated on that Arrow table and silver and quarantine appended from it, with no Spark job at all.
- `ExecutorRoute`: batches too large for the driver: the same check in the executors' Python workers (`mapInArrow`),
  each receiving every row of its meters or partitions in time order, with the table's context shipped from the
  driver; Spark writes.

Great Expectations validates the same rows for the run's record (silver.dq_runs): its pandas engine for rows on
the driver, its Spark engine for rows on the executors. Each route returns a `TableCheck`; the job writes the dq
record of all tables of the batch in one commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

from foundation import kill_points
from foundation.batch_appender import BatchAppender
from jobs.step_clock import StepClock
from pipelines.context import (
    METER_KEY,
    PARTITION_KEY,
    STATE_VALUES,
    LastCounts,
    LastStates,
    newest_meter_counts,
    newest_partition_states,
    with_previous_count,
)
from pipelines.expectations import FAILURES, VALID, evaluate, failures
from pipelines.great_expectations_check import GeOutcome, SuiteValidator, arrow_to_ge_frame
from pipelines.reference_context import BrokerRegistry, RunWindows, TopicPartitions, known_only
from pipelines.replication_invariants import with_previous_state, with_replication_invariants
from schemas.silver import QUARANTINE_TABLES, SILVER_TABLES
from schemas.table import TableDef

# A batch up to this many rows is written as one file per table: live batches would otherwise leave one
# small file per shuffle partition, and readers taking a file per trigger (the alerts job's catch-up)
# would see one metric interval split across micro-batches.
SINGLE_FILE_MAX_ROWS = 1_000_000
# The first step of a batch over the driver's limit, as its StepClock line names it (bench/batch_sizes.py
# prints it beside its floor).
SOURCE_STEP = "source, de-duplication and cache"
# The executor route's steps for one table, in order, as its StepClock line names them ("<table> <step>").
CONTEXT, GE, SILVER, QUARANTINE, NEWEST = ROUTE_STEPS = (
    "context and expectations", "great expectations", "silver", "quarantine", "newest values")


def driver_share(rows_per_table: dict[str, int], max_rows: int) -> set[str]:
    """The tables of a large micro-batch routed on the driver: the smallest first (by rows, then name), as many as
    fit within `max_rows` together, so the driver never holds more rows than a batch it would route whole."""
    chosen, held = set(), 0
    for name, rows in sorted(rows_per_table.items(), key=lambda kv: (kv[1], kv[0])):
        if held + rows > max_rows:
            break
        chosen.add(name)
        held += rows
    return chosen


@dataclass(frozen=True)
class TableCheck:
    """One table's share of a routed micro-batch."""

    table: str
    rows_in: int
    rows_valid: int
    counts: dict[str, int]  # unexpected rows per expectation label (only labels with some)
    ge: GeOutcome
    runs: list[str]
    valid_meters: Callable[[], Any] | None  # -> frame for `LastCounts.fold` (None: the table has no meters)
    valid_states: Callable[[], Any] | None = None  # -> frame for `LastStates.fold` (None: no partition states)


@dataclass(frozen=True)
class TableContext:
    """What one table's rows of one micro-batch are checked against: the reference data, and each meter's or
    partition's newest validated value before the batch. Picklable: the executor route ships it to Python workers."""

    td: TableDef
    run_windows: RunWindows
    topics: TopicPartitions
    brokers: BrokerRegistry
    counts_before: dict[tuple[Any, ...], int]
    states_before: dict[tuple[Any, ...], tuple[Any, ...]]

    def add(self, rows: pa.Table, seen: dict[tuple[Any, ...], Any]) -> pa.Table:
        """`rows` with the ctx_* columns its table's expectations compare. `seen`: the newest row of each meter or
        partition among the rows checked before these in the same batch (updated here)."""
        td, data = self.td, rows
        if "run_window" in td.context:
            data = self.run_windows.add_columns(data)
        if "topic" in td.context:
            data = self.topics.add_columns(data)
        if "previous_count" in td.context:
            data = with_previous_count(data, self.counts_before, seen)
        if "broker_registry" in td.context:
            assert td.broker_refs is not None
            data = self.brokers.add_columns(data, td.broker_refs)
        if "replication" in td.context:
            data = with_replication_invariants(data)
        if "previous_state" in td.context:
            data = with_previous_state(data, self.states_before, seen)
        return data

    def known_only(self, runs: list[str]) -> TableContext:
        """This context with every reference row of `runs` loaded, answering from them alone (on executors)."""
        for reference in (self.run_windows, self.topics, self.brokers):
            if reference.loader is not None:
                reference.fold(reference.loader(runs))
        return replace(self, run_windows=known_only(self.run_windows), topics=known_only(self.topics),
                       brokers=known_only(self.brokers))


@dataclass
class DriverContext:
    """Reference data the driver route keeps between micro-batches (one per job)."""

    run_windows: RunWindows
    topics: TopicPartitions
    last_counts: dict[str, LastCounts]  # bronze table -> its meters' latest counts
    silver_counts_before: Callable[[TableDef, list[str], int], Any]  # first batch after a start
    brokers: BrokerRegistry
    last_states: dict[str, LastStates]  # bronze table -> its partitions' latest snapshots
    silver_states_before: Callable[[TableDef, list[str], int], Any]  # first batch after a start

    def meter_counts(self, td: TableDef, runs: list[str], min_ts_us: int) -> LastCounts:
        """The table's known meter counts, loaded from silver (what it holds before the batch) on the first
        batch after a start, so a replayed batch compares with exactly what silver held."""
        last = self.last_counts[td.name]
        if not last.loaded:
            last.fold(self.silver_counts_before(td, runs, min_ts_us))
            last.loaded = True
        return last

    def partition_states(self, td: TableDef, runs: list[str], min_ts_us: int) -> LastStates:
        """The table's known partition snapshots, loaded from silver on the first batch after a start (as
        `meter_counts`)."""
        last = self.last_states[td.name]
        if not last.loaded:
            last.fold(self.silver_states_before(td, runs, min_ts_us))
            last.loaded = True
        return last

    def for_table(self, td: TableDef, runs: list[str], min_ts_us: int | None) -> TableContext:
        """The context of `td`'s rows of one batch (`runs`: the runs they name; `min_ts_us`: their oldest ts)."""
        counts, states = {}, {}
        if "previous_count" in td.context and min_ts_us is not None:
            counts = self.meter_counts(td, runs, min_ts_us).before(min_ts_us)
        if "previous_state" in td.context and min_ts_us is not None:
            states = self.partition_states(td, runs, min_ts_us).before(min_ts_us)
        return TableContext(td, self.run_windows, self.topics, self.brokers, counts, states)


@dataclass(frozen=True)
class RoutedOnDriver:
    """One table's rows of a batch, checked on the driver (`check_on_driver`); Great Expectations still to run."""

    td: TableDef
    rows_in: int
    rows_valid: int
    counts: dict[str, int]
    runs: list[str]
    ge_rows: pa.Table  # what GE's pandas engine validates: the rows with their context
    valid_meters: Callable[[], Any] | None
    valid_states: Callable[[], Any] | None
    valid: pa.Table | None = None     # the rows for silver, with their context (the silver alert stage's)
    rejected: pa.Table | None = None  # the rows for quarantine, with their failed expectations

    @property
    def table(self) -> str:
        return self.td.name

    def checked(self, ge: SuiteValidator) -> TableCheck:
        """With Great Expectations' verdict on the same rows, for the record."""
        outcome = ge.validate_frame(self.td, arrow_to_ge_frame(self.ge_rows))
        return TableCheck(self.td.name, self.rows_in, self.rows_valid, self.counts, outcome, self.runs,
                          self.valid_meters, self.valid_states)


def check_on_driver(td: TableDef, rows: pa.Table, batch_id: int, ctx: DriverContext) -> RoutedOnDriver:
    """Validate one table's rows of a batch held on the driver (bronze columns + ingested_at): context, expectations,
    the silver rows and the quarantined ones with their reasons; nothing written yet (`write_routed`).

    Great Expectations runs afterwards (`RoutedOnDriver.checked`), once every table of the batch is in silver: GE's
    per-expectation bookkeeping costs ~0.15 s a table.
    """
    runs = sorted(r for r in pc.unique(rows.column("run_id")).to_pylist() if r is not None)
    min_ts_us = None
    if "previous_count" in td.context or "previous_state" in td.context:
        min_ts_us = pc.cast(pc.min(rows.column("ts")), pa.int64()).as_py()
    data = ctx.for_table(td, runs, min_ts_us).add(rows, {})
    verdict = evaluate(data, td.expectations)
    rows_in, rows_valid = data.num_rows, int(verdict.valid.sum())
    valid = data.filter(pa.array(verdict.valid))
    rejected = None
    if rows_valid < rows_in:
        quarantine = QUARANTINE_TABLES[td.name]
        which = np.flatnonzero(~verdict.valid)
        taken = data.take(pa.array(which))
        reasons = pa.array(failures(data, td.expectations, verdict, which),
                           quarantine.arrow_schema.field(FAILURES).type)
        rejected = (taken.append_column(FAILURES, reasons)
                    .append_column("quarantined_at", taken.column("ingested_at"))
                    .append_column("validate_batch_id", pa.array([batch_id] * len(which), pa.int64())))
    meters = None
    if td.name in ctx.last_counts:
        def meters() -> Any:
            kept = valid.filter(pc.equal(valid.column("kind"), "meter")).select([*METER_KEY, "ts", "count"])
            return arrow_to_ge_frame(kept)
    states = None
    if td.name in ctx.last_states:
        def states() -> Any:
            return arrow_to_ge_frame(valid.select([*PARTITION_KEY, "ts", *STATE_VALUES]))
    return RoutedOnDriver(td, rows_in, rows_valid, verdict.counts(td.expectations), runs, data, meters, states, valid,
                          rejected)


def write_routed(r: RoutedOnDriver, batch_id: int, appender: BatchAppender, lakehouse: str) -> None:
    """Append a checked table's rows to silver and its rejected ones to quarantine, each once per batch."""
    if r.rows_valid:
        assert r.valid is not None
        silver = SILVER_TABLES[r.table]
        appender.append_rows(r.valid.select(silver.arrow_schema.names).cast(silver.arrow_schema),
                             silver.path(lakehouse), batch_id)
    kill_points.reached(r.table, batch_id, "after_silver")
    if r.rejected is not None:
        quarantine = QUARANTINE_TABLES[r.table]
        appender.append_rows(r.rejected.select(quarantine.arrow_schema.names).cast(quarantine.arrow_schema),
                             quarantine.path(lakehouse), batch_id)
    kill_points.reached(r.table, batch_id, "after_quarantine")


def check_partition(context: TableContext, failures_type: pa.DataType,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The executor route's check of one Spark partition (`mapInArrow`): each row with its context, `_valid` and its
    failures (null when valid). Every row of a meter or partition is in this partition, in time order, so `seen`
    carries each one's newest row from one Arrow batch to the next."""
    seen: dict[tuple[Any, ...], Any] = {}
    for batch in batches:
        data = context.add(pa.Table.from_batches([batch]), seen)
        verdict = evaluate(data, context.td.expectations)
        reasons: list[Any] = [None] * data.num_rows
        which = np.flatnonzero(~verdict.valid)
        for i, entries in zip(which.tolist(), failures(data, context.td.expectations, verdict, which), strict=True):
            reasons[i] = entries
        yield from (data.append_column(VALID, pa.array(verdict.valid))
                    .append_column(FAILURES, pa.array(reasons, failures_type)).to_batches())


@dataclass
class ExecutorRoute:
    """The route for one table's rows of a batch too large for the driver."""

    spark: SparkSession
    td: TableDef
    lakehouse: str
    ge: SuiteValidator
    ctx: DriverContext

    def route(self, rows: DataFrame, batch_id: int, appender: BatchAppender, clock: StepClock) -> TableCheck:
        td = self.td
        ts = "ts" if "ts" in rows.columns else "end_ts"
        head = rows.agg(F.unix_micros(F.min(ts)).alias("min_ts_us"), F.collect_set("run_id").alias("runs")).first()
        assert head is not None
        runs = sorted(r for r in head["runs"] if r is not None)
        context = self.ctx.for_table(td, runs, head["min_ts_us"]).known_only(runs)
        checked = self._checked(rows, context).persist(StorageLevel.DISK_ONLY)
        try:
            totals = checked.agg(F.count(F.lit(1)).alias("rows"), F.count_if(F.col(VALID)).alias("valid")).first()
            assert totals is not None
            rows_in, rows_valid = int(totals["rows"]), int(totals["valid"])
            counts = {r["expectation"]: int(r["count"]) for r in checked.where(~F.col(VALID))
                      .select(F.explode(F.col(FAILURES).getField("expectation")).alias("expectation"))
                      .groupBy("expectation").count().collect()}
            clock.lap(f"{td.name} {CONTEXT}")
            outcome = self.ge.validate_dataframe(td, checked.drop(VALID, FAILURES))
            clock.lap(f"{td.name} {GE}")
            silver, quarantine = SILVER_TABLES[td.name], QUARANTINE_TABLES[td.name]
            if rows_valid:
                valid = checked.where(F.col(VALID)).select(*silver.arrow_schema.names)
                appender.append(_few_files(valid, rows_valid), silver.path(self.lakehouse), batch_id)
            kill_points.reached(td.name, batch_id, "after_silver")
            clock.lap(f"{td.name} {SILVER}")
            if rows_valid < rows_in:
                rejected = (checked.where(~F.col(VALID))
                            .withColumn("quarantined_at", F.col("ingested_at"))
                            .withColumn("validate_batch_id", F.lit(batch_id).cast("long"))
                            .select(*quarantine.arrow_schema.names))
                appender.append(_few_files(rejected, rows_in - rows_valid), quarantine.path(self.lakehouse), batch_id)
            kill_points.reached(td.name, batch_id, "after_quarantine")
            clock.lap(f"{td.name} {QUARANTINE}")
            meters = (newest_meter_counts(checked.where(F.col(VALID))).toPandas()
                      if td.name in self.ctx.last_counts else None)
            states = (newest_partition_states(checked.where(F.col(VALID))).toPandas()
                      if td.name in self.ctx.last_states else None)
        finally:
            checked.unpersist()
        clock.lap(f"{td.name} {NEWEST}")
        return TableCheck(td.name, rows_in, rows_valid, counts, outcome, runs,
                          None if meters is None else (lambda: meters), None if states is None else (lambda: states))

    def _checked(self, rows: DataFrame, context: TableContext) -> DataFrame:
        """`rows` checked in the executors: hashed by meter or partition and sorted by ts where a row is compared
        with its predecessor, so each key's rows reach one Python worker in order."""
        key = (METER_KEY if "previous_count" in self.td.context
               else PARTITION_KEY if "previous_state" in self.td.context else None)
        if key is not None:
            rows = rows.repartition(*key).sortWithinPartitions(F.col("ts").asc_nulls_last())
        failures_type = QUARANTINE_TABLES[self.td.name].arrow_schema.field(FAILURES).type
        # The output's schema: the check applied to no rows (the context columns' types are the check's own).
        empty = to_arrow_schema(rows.schema, timezone="UTC").empty_table()
        out = (context.add(empty, {}).schema.append(pa.field(VALID, pa.bool_()))
               .append(pa.field(FAILURES, failures_type)))
        return rows.mapInArrow(partial(check_partition, context, failures_type),
                               from_arrow_schema(out, prefer_timestamp_ntz=False))


def _few_files(rows: DataFrame, count: int) -> DataFrame:
    return rows.coalesce(1) if count <= SINGLE_FILE_MAX_ROWS else rows
