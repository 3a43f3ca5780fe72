"""How validate routes one bronze table's rows of a micro-batch to silver and quarantine.

Two routes, the same outcome (rows, verdict, reasons, writes, markers); a large micro-batch's small tables
take the driver route (`driver_share`), the others the Spark route:
- `check_on_driver`, then `write_routed`: the batch was collected to the driver (live batches): context and
  expectations are evaluated on that Arrow table and silver and quarantine appended from it, with no Spark job at all
  (pipelines/arrow_expectations.py, pipelines/driver_context.py); Great Expectations' pandas engine then
  validates the same rows.
- `SparkRoute`: batches too large for the driver: context joins and expectation flags as Spark columns,
  GE's Spark engine, Spark writes.

Each returns a `TableCheck`; the job writes the dq record of all tables of the batch in one commit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation import kill_points
from foundation.batch_appender import BatchAppender
from jobs.step_clock import StepClock
from pipelines.arrow_expectations import evaluate, failures
from pipelines.context import (
    METER_KEY,
    PARTITION_KEY,
    STATE_VALUES,
    LastCounts,
    LastStates,
    newest_meter_counts,
    newest_partition_states,
    with_broker_registry,
    with_previous_count,
    with_previous_state,
    with_replication_invariants,
    with_run_window,
    with_topic,
)
from pipelines.driver_context import RunWindows, TopicPartitions
from pipelines.driver_context import with_previous_count as with_previous_count_on_driver
from pipelines.driver_invariants import BrokerRegistry
from pipelines.driver_invariants import with_previous_state as with_previous_state_on_driver
from pipelines.driver_invariants import with_replication_invariants as with_replication_invariants_on_driver
from pipelines.expectations import FAILURES, VALID, CompiledExpectations, failure_counts
from pipelines.great_expectations_check import GeOutcome, SuiteValidator, arrow_to_ge_frame
from schemas.bronze import RUNS, TOPIC_CONFIGS
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


class ValidationMismatch(Exception):
    """Raised when Great Expectations and the row-level routing disagree on a batch (its dq record is not
    written, so the batch is replayed, and fails again, at the next start)."""


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


def verified(td: TableDef, batch_id: int, counts: dict[str, int], outcome: GeOutcome) -> None:
    if outcome.unexpected != counts:
        raise ValidationMismatch(f"{td.qualified_name} batch {batch_id}: Great Expectations counted "
                                 f"{outcome.unexpected}, routing counted {counts}")


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

    def checked(self, ge: SuiteValidator, batch_id: int) -> TableCheck:
        """GE's verdict on the same rows, which must count the same failures as the routing did."""
        outcome = ge.validate_frame(self.td, arrow_to_ge_frame(self.ge_rows))
        verified(self.td, batch_id, self.counts, outcome)
        return TableCheck(self.td.name, self.rows_in, self.rows_valid, self.counts, outcome, self.runs,
                          self.valid_meters, self.valid_states)


def check_on_driver(td: TableDef, rows: pa.Table, batch_id: int, ctx: DriverContext) -> RoutedOnDriver:
    """Validate one table's rows of a batch held on the driver (bronze columns + ingested_at): context, expectations,
    the silver rows and the quarantined ones with their reasons; nothing written yet (`write_routed`).

    The alerts on silver tables are evaluated on the valid rows before anything is written, so a webhook waits
    for no commit. Great Expectations runs afterwards (`RoutedOnDriver.checked`), once every table of the batch is
    in silver: GE's per-expectation bookkeeping costs ~0.15 s a table. A batch whose GE verdict disagrees with the
    routing still fails before its dq record is written (and again on replay).
    """
    runs = sorted(r for r in pc.unique(rows.column("run_id")).to_pylist() if r is not None)
    data = rows
    if "run_window" in td.context:
        data = ctx.run_windows.add_columns(data)
    if "topic" in td.context:
        data = ctx.topics.add_columns(data)
    if "previous_count" in td.context or "previous_state" in td.context:
        min_ts_us: int = pc.cast(pc.min(rows.column("ts")), pa.int64()).as_py()
    if "previous_count" in td.context:
        data = with_previous_count_on_driver(data, ctx.meter_counts(td, runs, min_ts_us), min_ts_us)
    if "broker_registry" in td.context:
        assert td.broker_refs is not None
        data = ctx.brokers.add_columns(data, td.broker_refs)
    if "replication" in td.context:
        data = with_replication_invariants_on_driver(data)
    if "previous_state" in td.context:
        data = with_previous_state_on_driver(data, ctx.partition_states(td, runs, min_ts_us), min_ts_us)
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


@dataclass
class SparkRoute:
    """The route for one table's rows of a batch too large for the driver."""

    spark: SparkSession
    td: TableDef
    lakehouse: str
    ge: SuiteValidator
    ctx: DriverContext  # only its meter counts: the reference tables are joined in Spark

    @cached_property
    def compiled(self) -> CompiledExpectations:
        """Built on the route's first batch: live runs may never take it (building costs ~0.2 s a table)."""
        return CompiledExpectations(self.td.expectations)

    def route(self, rows: DataFrame, batch_id: int, appender: BatchAppender, clock: StepClock) -> TableCheck:
        td = self.td
        ts = "ts" if "ts" in rows.columns else "end_ts"
        head = rows.agg(F.unix_micros(F.min(ts)).alias("min_ts_us"), F.collect_set("run_id").alias("runs")).first()
        assert head is not None
        runs = sorted(r for r in head["runs"] if r is not None)
        flagged = self.compiled.with_failure_flags(self._with_context(rows, runs, head["min_ts_us"])).persist()
        try:
            rows_in, rows_valid, counts = failure_counts(flagged, td.expectations)
            clock.lap(f"{td.name} {CONTEXT}")
            outcome = self.ge.validate_dataframe(td, flagged.drop(*self.compiled.flags, VALID))
            verified(td, batch_id, counts, outcome)
            clock.lap(f"{td.name} {GE}")
            silver, quarantine = SILVER_TABLES[td.name], QUARANTINE_TABLES[td.name]
            if rows_valid:
                valid = flagged.where(F.col(VALID)).select(*silver.arrow_schema.names)
                appender.append(_few_files(valid, rows_valid), silver.path(self.lakehouse), batch_id)
            kill_points.reached(td.name, batch_id, "after_silver")
            clock.lap(f"{td.name} {SILVER}")
            if rows_valid < rows_in:
                rejected = (flagged.where(~F.col(VALID))
                            .withColumn(FAILURES, self.compiled.failures)
                            .withColumn("quarantined_at", F.col("ingested_at"))
                            .withColumn("validate_batch_id", F.lit(batch_id).cast("long"))
                            .select(*quarantine.arrow_schema.names))
                appender.append(_few_files(rejected, rows_in - rows_valid), quarantine.path(self.lakehouse), batch_id)
            kill_points.reached(td.name, batch_id, "after_quarantine")
            clock.lap(f"{td.name} {QUARANTINE}")
            meters = (newest_meter_counts(flagged.where(F.col(VALID))).toPandas()
                      if td.name in self.ctx.last_counts else None)
            states = (newest_partition_states(flagged.where(F.col(VALID))).toPandas()
                      if td.name in self.ctx.last_states else None)
        finally:
            flagged.unpersist()
        clock.lap(f"{td.name} {NEWEST}")
        return TableCheck(td.name, rows_in, rows_valid, counts, outcome, runs,
                          None if meters is None else (lambda: meters), None if states is None else (lambda: states))

    def _with_context(self, batch: DataFrame, runs: list[str], min_ts_us: int) -> DataFrame:
        out, lake = batch, self.lakehouse
        if "run_window" in self.td.context:
            windows = (self.spark.read.format("delta").load(RUNS.path(lake)).where(F.col("run_id").isin(runs))
                       .select("run_id", "batch_id", "start_ts", "end_ts"))
            out = with_run_window(out, windows)
        if "topic" in self.td.context:
            configs = (self.spark.read.format("delta").load(TOPIC_CONFIGS.path(lake))
                       .where(F.col("run_id").isin(runs)).select("run_id", "topic", "partitions"))
            out = with_topic(out, configs)
        if "previous_count" in self.td.context:
            last = self.ctx.meter_counts(self.td, runs, min_ts_us)
            out = with_previous_count(out, last.history(self.spark, min_ts_us))
        if "broker_registry" in self.td.context:
            assert self.td.broker_refs is not None
            registry = (self.spark.read.format("delta").load(RUNS.path(lake)).where(F.col("run_id").isin(runs))
                        .select("run_id", "broker_ids", "controller_ids"))
            out = with_broker_registry(out, registry, self.td.broker_refs)
        if "replication" in self.td.context:
            out = with_replication_invariants(out)
        if "previous_state" in self.td.context:
            states = self.ctx.partition_states(self.td, runs, min_ts_us)
            out = with_previous_state(out, states.history(self.spark, min_ts_us))
        return out


def _few_files(rows: DataFrame, count: int) -> DataFrame:
    return rows.coalesce(1) if count <= SINGLE_FILE_MAX_ROWS else rows
