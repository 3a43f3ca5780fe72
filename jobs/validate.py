"""Streaming validation: bronze Delta tables -> silver / quarantine / silver.dq_runs, exactly once.

    spark-submit [--master …] --jars <delta jars> jobs/validate.py [--lakehouse URI] [--trigger …]

One streaming query per bronze table. Each micro-batch gets an ingestion timestamp (the batch's own,
replayed identically after a restart), is de-duplicated on the table's natural key within
`dedup_window`, enriched with the context its expectations need, and split: rows passing every
expectation go to silver, the others to quarantine with the failed expectations and offending values;
Great Expectations validates the batch and its verdict goes to silver.dq_runs.

Exactly once: the Delta source's offsets and the dedup state live in the query's checkpoint, and every
sink write is marked with the query's id and the batch id (isrwatch/batch_appender.py). A batch
replayed after a crash recomputes the same rows and skips each write it already committed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from isrwatch.batch_appender import BatchAppender
from isrwatch.settings import PipelineSettings, SettingsError, interval_ms, load_settings, parse_spark_conf
from jobs.delta_tables import (
    SchemaDriftError,
    check_schema,
    create_table_if_missing,
    is_delta_table,
    wait_for_tables,
)
from pipelines.context import (
    METER_KEY,
    LastCounts,
    newest_meter_counts,
    with_previous_count,
    with_run_window,
    with_topic,
)
from pipelines.expectations import (
    FAILURES,
    VALID,
    CompiledExpectations,
    failure_counts,
    failure_counts_of_frame,
)
from pipelines.great_expectations_check import GeOutcome, SuiteValidator, arrow_to_ge_frame
from schemas.bronze import BRONZE_TABLES, RUNS, TOPIC_CONFIGS
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from schemas.table import TableDef

BRONZE_BY_NAME = {td.name: td for td in BRONZE_TABLES}


class ValidationMismatch(Exception):
    """Raised when Great Expectations and the row-level routing disagree on a batch (nothing is written)."""


def _die_here_if_asked(table: str, batch_id: int, point: str) -> None:
    """Fault injection for the exactly-once tests: ISRWATCH_KILL_AT=<table>:<batch>:<point> SIGKILLs us."""
    if os.environ.get("ISRWATCH_KILL_AT") == f"{table}:{batch_id}:{point}":
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass
class BatchStats:
    batch_id: int = -1
    rows_in: int = 0
    rows_valid: int = 0
    rows_quarantined: int = 0
    duration_ms: int = 0
    total_in: int = 0
    total_valid: int = 0
    total_quarantined: int = 0

    def describe(self) -> str:
        return f"in {self.total_in:>7}  silver {self.total_valid:>7}  quarantine {self.total_quarantined:>5}"


class BatchCheck(NamedTuple):
    """A routed micro-batch: its counts, GE's verdict, and its valid meter rows for `LastCounts.fold`."""

    rows_in: int
    rows_valid: int
    counts: dict[str, int]  # unexpected rows per expectation label (only labels with some)
    ge: GeOutcome
    valid_meters: Callable[[], Any]  # -> pandas frame (METER_KEY, ts, count; timestamps as epoch µs)


def _meters_of_arrow(valid: pa.Table) -> Any:
    """The valid meter rows of a collected batch, shaped for `LastCounts.fold`."""
    meters = valid.filter(pc.equal(valid.column("kind"), "meter")).select([*METER_KEY, "ts", "count"])
    return arrow_to_ge_frame(meters)


@dataclass
class TableValidator:
    """The foreachBatch body for one bronze table."""

    spark: SparkSession
    settings: PipelineSettings
    bronze: TableDef
    ge: SuiteValidator
    stats: BatchStats = field(default_factory=BatchStats)
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    appender: BatchAppender | None = None
    last_counts: LastCounts | None = None

    def __post_init__(self) -> None:
        self.compiled = CompiledExpectations(self.bronze.expectations)
        if "previous_count" in self.bronze.context:
            self.last_counts = LastCounts(interval_ms(self.settings.validate_.counter_lookback) * 1000)

    def path(self, td: TableDef) -> str:
        return td.path(self.settings.lakehouse)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if not self.started.wait(120):
            raise RuntimeError(f"{self.bronze.qualified_name}: query id not set")
        if self.appender is None:
            self.appender = BatchAppender(self.spark, f"isrwatch-validate/{self.bronze.name}/{self.query_id}",
                                          driver_writes=self.settings.validate_.driver_writes)
        began = time.monotonic()
        batch = batch.persist()
        try:
            self._validate(batch, batch_id, began)
        finally:
            batch.unpersist()

    def _validate(self, batch: DataFrame, batch_id: int, began: float) -> None:
        td = self.bronze
        ts = "ts" if "ts" in batch.columns else "end_ts"
        head = batch.agg(F.count(F.lit(1)).alias("n"), F.unix_micros(F.min(ts)).alias("min_ts_us"),
                         F.collect_set("run_id").alias("runs"),
                         F.unix_micros(F.max("ingested_at")).alias("at_us")).first()
        assert head is not None
        if head["n"] == 0:
            return  # watermark-only batch: nothing to write
        run_ids = sorted(r for r in head["runs"] if r is not None)
        flagged = self.compiled.with_failure_flags(self._with_context(batch, run_ids, head["min_ts_us"]))
        v = self.settings.validate_
        engine = v.ge_engine if v.ge_engine != "auto" else ("pandas" if head["n"] <= v.ge_pandas_max_rows else "spark")
        route = self._route_on_driver if engine == "pandas" else self._route_in_spark
        check = route(flagged, batch_id)
        rows_in, rows_valid, counts, outcome = check.rows_in, check.rows_valid, check.counts, check.ge
        duration_ms = int((time.monotonic() - began) * 1000)
        dq = pa.Table.from_pylist([{
            "table_name": td.name, "validate_batch_id": batch_id, "ingested_at": head["at_us"], "rows_in": rows_in,
            "rows_valid": rows_valid, "rows_quarantined": rows_in - rows_valid, "pass_rate": rows_valid / rows_in,
            "failed_expectations": [{"expectation": k, "unexpected_count": c} for k, c in sorted(counts.items())],
            "ge_success": outcome.success, "ge_evaluated_expectations": outcome.evaluated,
            "ge_successful_expectations": outcome.successful, "ge_engine": outcome.engine, "runs": run_ids,
            "batch_duration_ms": duration_ms,
        }], schema=DQ_RUNS.arrow_schema.set(2, pa.field("ingested_at", pa.int64()))).cast(DQ_RUNS.arrow_schema)
        assert self.appender is not None
        self.appender.append_rows(dq, self.path(DQ_RUNS), batch_id)
        _die_here_if_asked(td.name, batch_id, "after_dq")
        if self.last_counts is not None:  # after the batch committed: a replay must see what silver holds
            self.last_counts.fold(check.valid_meters())
        s = self.stats
        s.batch_id, s.rows_in, s.rows_valid, s.rows_quarantined = batch_id, rows_in, rows_valid, rows_in - rows_valid
        s.duration_ms = duration_ms
        s.total_in += rows_in
        s.total_valid += rows_valid
        s.total_quarantined += rows_in - rows_valid
        every = self.settings.validate_.maintain_every_batches
        if batch_id > 0 and batch_id % every == 0:
            self._maintain()

    def _verified(self, batch_id: int, counts: dict[str, int], outcome: GeOutcome) -> None:
        if outcome.unexpected != counts:
            raise ValidationMismatch(f"{self.bronze.qualified_name} batch {batch_id}: Great Expectations counted "
                                     f"{outcome.unexpected}, routing counted {counts}")

    def _route_on_driver(self, flagged: DataFrame, batch_id: int) -> BatchCheck:
        """A batch the driver can hold: collected once, through Arrow (quarantine reasons built in Spark
        for the rejected rows only); GE's pandas engine validates that frame, and silver and quarantine
        are appended from it with delta-rs: one Spark job per micro-batch after the de-duplication."""
        td, name = self.bronze, self.bronze.name
        data_columns = [c for c in flagged.columns if c not in (*self.compiled.flags, VALID)]
        rows = flagged.withColumn(FAILURES, F.when(~F.col(VALID), self.compiled.failures)).toArrow()
        outcome = self.ge.validate_frame(td, arrow_to_ge_frame(rows.select(data_columns)))
        rows_in, rows_valid, counts = failure_counts_of_frame(
            rows.select([*self.compiled.flags, VALID]).to_pandas(), td.expectations)
        self._verified(batch_id, counts, outcome)
        valid = pc.fill_null(rows.column(VALID), False)
        assert self.appender is not None
        if rows_valid:
            silver = SILVER_TABLES[name]
            self.appender.append_rows(rows.filter(valid).select(silver.arrow_schema.names).cast(silver.arrow_schema),
                                       self.path(silver), batch_id)
        _die_here_if_asked(name, batch_id, "after_silver")
        if rows_valid < rows_in:
            quarantine, rejected = QUARANTINE_TABLES[name], rows.filter(pc.invert(valid))
            rejected = (rejected.append_column("quarantined_at", rejected.column("ingested_at"))
                        .append_column("validate_batch_id", pa.array([batch_id] * len(rejected), pa.int64())))
            self.appender.append_rows(rejected.select(quarantine.arrow_schema.names).cast(quarantine.arrow_schema),
                                       self.path(quarantine), batch_id)
        _die_here_if_asked(name, batch_id, "after_quarantine")
        return BatchCheck(rows_in, rows_valid, counts, outcome, lambda: _meters_of_arrow(rows.filter(valid)))

    def _route_in_spark(self, flagged: DataFrame, batch_id: int) -> BatchCheck:
        """A batch too large for the driver: GE's Spark engine validates it where it is, and silver and
        quarantine are appended by Spark (the flags are cached: every write reads them)."""
        td, name = self.bronze, self.bronze.name
        flagged = flagged.persist()
        try:
            rows_in, rows_valid, counts = failure_counts(flagged, td.expectations)
            outcome = self.ge.validate_dataframe(td, flagged.drop(*self.compiled.flags, VALID))
            self._verified(batch_id, counts, outcome)
            silver, quarantine = SILVER_TABLES[name], QUARANTINE_TABLES[name]
            assert self.appender is not None
            if rows_valid:
                rows = flagged.where(F.col(VALID)).select(*silver.arrow_schema.names)
                self.appender.append(_few_files(rows, rows_valid), self.path(silver), batch_id)
            _die_here_if_asked(name, batch_id, "after_silver")
            if rows_valid < rows_in:
                rows = (flagged.where(~F.col(VALID))
                        .withColumn(FAILURES, self.compiled.failures)
                        .withColumn("quarantined_at", F.col("ingested_at"))
                        .withColumn("validate_batch_id", F.lit(batch_id).cast("long"))
                        .select(*quarantine.arrow_schema.names))
                self.appender.append(_few_files(rows, rows_in - rows_valid), self.path(quarantine), batch_id)
            _die_here_if_asked(name, batch_id, "after_quarantine")
            meters = (newest_meter_counts(flagged.where(F.col(VALID))).toPandas()
                      if self.last_counts is not None else None)
        finally:
            flagged.unpersist()
        return BatchCheck(rows_in, rows_valid, counts, outcome, lambda: meters)

    def _with_context(self, batch: DataFrame, run_ids: list[str], min_ts_us: int) -> DataFrame:
        out, lake = batch, self.settings.lakehouse
        if "run_window" in self.bronze.context:
            runs = (self.spark.read.format("delta").load(RUNS.path(lake)).where(F.col("run_id").isin(run_ids))
                    .select("run_id", "batch_id", "start_ts", "end_ts"))
            out = with_run_window(out, runs)
        if "topic" in self.bronze.context:
            configs = (self.spark.read.format("delta").load(TOPIC_CONFIGS.path(lake))
                       .where(F.col("run_id").isin(run_ids)).select("run_id", "topic", "partitions"))
            out = with_topic(out, configs)
        if "previous_count" in self.bronze.context:
            out = with_previous_count(out, self._meter_history(run_ids, min_ts_us))
        return out

    def _meter_history(self, run_ids: list[str], min_ts_us: int) -> DataFrame:
        assert self.last_counts is not None
        if not self.last_counts.loaded:  # the first batch after a start: what silver holds before it
            self.last_counts.fold(self._silver_counts_before(run_ids, min_ts_us))
            self.last_counts.loaded = True
        return self.last_counts.history(self.spark, min_ts_us)

    def _silver_counts_before(self, run_ids: list[str], min_ts_us: int) -> Any:
        silver_path = self.path(SILVER_TABLES[self.bronze.name])
        if not is_delta_table(self.spark, silver_path):
            return pd.DataFrame(columns=[*METER_KEY, "ts", "count"])
        lookback_us = interval_ms(self.settings.validate_.counter_lookback) * 1000
        since, before = (F.timestamp_micros(F.lit(us)) for us in (min_ts_us - lookback_us, min_ts_us))
        rows = (self.spark.read.format("delta").load(silver_path)  # ts compared directly: file skipping
                .where(F.col("run_id").isin(run_ids) & (F.col("ts") >= since) & (F.col("ts") < before)))
        return newest_meter_counts(rows).toPandas()

    def _maintain(self) -> None:
        from delta.tables import DeltaTable

        hours = self.settings.validate_.vacuum_retention_hours
        for td in (SILVER_TABLES[self.bronze.name], QUARANTINE_TABLES[self.bronze.name], DQ_RUNS):
            if is_delta_table(self.spark, self.path(td)):
                table = DeltaTable.forPath(self.spark, self.path(td))
                table.optimize().executeCompaction()
                table.vacuum(hours)


# A batch up to this many rows is written as one file per table: live batches would otherwise leave one
# small file per shuffle partition, and readers taking a file per trigger (the alerts job's catch-up)
# would see one metric interval split across micro-batches.
SINGLE_FILE_MAX_ROWS = 1_000_000


def _few_files(rows: DataFrame, count: int) -> DataFrame:
    return rows.coalesce(1) if count <= SINGLE_FILE_MAX_ROWS else rows


@dataclass
class RunningValidation:
    queries: dict[str, StreamingQuery]
    validators: dict[str, TableValidator]


def start_validation(spark: SparkSession, settings: PipelineSettings,
                     log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> RunningValidation:
    """Check schemas, then start one streaming query per configured bronze table."""
    v = settings.validate_
    tables = [BRONZE_BY_NAME[n] for n in v.tables]
    wait_for_tables(spark, {td.name: td.path(settings.lakehouse) for td in tables}, v.wait_for_tables_seconds, log)
    refs = {td.name: td for td in tables}
    for td in tables:
        refs.update({ref.name: ref for ref in (RUNS, TOPIC_CONFIGS) if ref.name in _context_tables(td)})
    for td in refs.values():  # every table a query reads must match its definition, before anything starts
        if is_delta_table(spark, td.path(settings.lakehouse)):
            check_schema(spark, td, td.path(settings.lakehouse))
    for td in (DQ_RUNS, *(t[x.name] for x in tables for t in (SILVER_TABLES, QUARANTINE_TABLES))):
        create_table_if_missing(spark, td, td.path(settings.lakehouse))
    ge = SuiteValidator()
    queries: dict[str, StreamingQuery] = {}
    validators: dict[str, TableValidator] = {}
    for td in tables:
        validator = TableValidator(spark, settings, td, ge)
        stream = (spark.readStream.format("delta").option("maxFilesPerTrigger", v.max_files_per_trigger)
                  .load(td.path(settings.lakehouse))
                  .withColumn("ingested_at", F.current_timestamp())
                  .withWatermark("ingested_at", v.dedup_window)
                  .dropDuplicatesWithinWatermark(list(td.natural_key)))
        writer = (stream.writeStream.queryName(f"validate_{td.name}").foreachBatch(validator)
                  .option("checkpointLocation", f"{settings.checkpoint_root.rstrip('/')}/validate/{td.name}"))
        writer = (writer.trigger(availableNow=True) if v.trigger == "available-now"
                  else writer.trigger(processingTime=v.trigger_interval))
        query = writer.start()
        validator.query_id = str(query.id)
        validator.started.set()
        queries[td.name], validators[td.name] = query, validator
    return RunningValidation(queries, validators)


def _context_tables(td: TableDef) -> set[str]:
    needs = set()
    if "run_window" in td.context:
        needs.add(RUNS.name)
    if "topic" in td.context:
        needs.add(TOPIC_CONFIGS.name)
    return needs


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/validate.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=None, help="pipeline settings YAML (default conf/pipeline.yaml)")
    p.add_argument("--lakehouse", default=None, help="lakehouse root: path or Hadoop URI (overrides the config)")
    p.add_argument("--checkpoints", default=None, help="checkpoint root (default <lakehouse>/_checkpoints)")
    p.add_argument("--tables", default=None, help="comma-separated bronze tables (default: all)")
    p.add_argument("--trigger", choices=["live", "available-now"], default=None)
    p.add_argument("--trigger-interval", default=None, help="live micro-batch interval, e.g. '1 second'")
    p.add_argument("--ge-engine", choices=["auto", "pandas", "spark"], default=None)
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--wait-for-tables", type=float, default=None, help="seconds to wait for bronze tables")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark setting for a session this job builds (repeatable)")
    return p


def settings_from_args(args: argparse.Namespace) -> PipelineSettings:
    spark_conf = parse_spark_conf(args.conf)
    settings = load_settings(args.config, {
        "lakehouse": args.lakehouse, "checkpoints": args.checkpoints,
        "validate.tables": args.tables.split(",") if args.tables else None,
        "validate.trigger": args.trigger, "validate.trigger_interval": args.trigger_interval,
        "validate.ge_engine": args.ge_engine, "validate.max_files_per_trigger": args.max_files_per_trigger,
        "validate.wait_for_tables_seconds": args.wait_for_tables,
    })
    settings.spark.update(spark_conf)
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    from isrwatch.spark import build_spark_session

    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
    except SettingsError as e:
        print(f"validate: {e}", file=sys.stderr)
        return 2
    spark = build_spark_session("isrwatch-validate", conf=settings.spark)
    try:
        running = start_validation(spark, settings)
    except (SchemaDriftError, FileNotFoundError) as e:
        print(f"validate: {e}", file=sys.stderr)
        return 2
    v = settings.validate_
    print(f"validate: {len(running.queries)} queries ({', '.join(running.queries)}), trigger {v.trigger}",
          file=sys.stderr)
    failed = False
    try:
        for name, query in running.queries.items():
            query.awaitTermination()
            if query.exception() is not None:
                failed = True
                print(f"validate: {name} failed: {query.exception()}", file=sys.stderr)
    except KeyboardInterrupt:
        for query in running.queries.values():
            query.stop()
        print("validate: stopped; checkpoints are consistent, a restart resumes", file=sys.stderr)
        return 130
    for name, validator in running.validators.items():
        s = validator.stats
        print(f"validate: {name}: {s.total_in} rows in, {s.total_valid} to silver, "
              f"{s.total_quarantined} quarantined", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
