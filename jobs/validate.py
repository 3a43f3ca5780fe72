"""Streaming validation: bronze Delta tables -> silver / quarantine / silver.dq_runs, exactly once; beside it, the
alert lane, which evaluates the rules on silver tables on each bronze commit as it lands (jobs/alert_lane.py).

    spark-submit [--master …] --jars <delta jars> jobs/validate.py [--lakehouse URI] [--trigger …]

One streaming query over all the configured bronze tables (a union: each micro-batch carries the new
rows of every table, so the per-batch costs of Spark's streaming engine and of the commits are paid
once per trigger, not once per table). Each micro-batch gets an ingestion timestamp (the batch's own,
replayed identically after a restart), is de-duplicated on each table's natural key within
`dedup_window`, enriched with the context its expectations need, and split per table: rows passing
every expectation go to silver, the others to quarantine with the failed expectations and offending
values (jobs/validate_routes.py routes a table's rows: on the driver for a micro-batch of up to
`driver_max_rows` rows, else on the executors); Great Expectations validates the same rows for the
record, silver.dq_runs, one commit per micro-batch (behind live batches: jobs/dq_behind.py).

Exactly once: the Delta sources' offsets and the dedup state live in the query's checkpoint, and every
sink write is marked with the query's id, the table and the batch id (foundation/batch_appender.py). A
batch replayed after a crash recomputes the same rows and skips each write it already committed.
"""

from __future__ import annotations

import datetime as dt
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from foundation import kill_points
from foundation.batch_appender import BatchAppender
from foundation.logs import configure, logger
from foundation.settings import PipelineSettings, SettingsError, spark_interval
from foundation.spark import lower_calling_stream_thread
from foundation.spool import Spool
from foundation.streaming_checkpoint import VALIDATE_CHECKPOINT
from jobs import driver_signals
from jobs.alert_lane import RunningLane, start_alert_lane
from jobs.delta_tables import (
    SchemaDriftError,
    bring_bronze_up_to_date,
    check_schema,
    create_sinks_if_missing,
    is_delta_table,
    wait_for_tables,
)
from jobs.dq_behind import DqBehind, Waiting
from jobs.driver_checks import check_union_on_driver, fold_checked, new_driver_context
from jobs.ge_process import GeProcess
from jobs.query_restarts import await_validation
from jobs.step_clock import StepClock
from jobs.streaming import stop_between_batches, wait_started
from jobs.validate_args import build_parser, settings_from_args
from jobs.validate_checkpoints import continue_from_per_table_checkpoints
from jobs.validate_routes import (
    SOURCE_STEP,
    ExecutorRoute,
    RoutedOnDriver,
    TableCheck,
    driver_share,
    write_routed,
)
from jobs.validate_source import bronze_union, table_column
from pipelines.alert_rules import AlertConfigError
from pipelines.great_expectations_check import SuiteValidator, import_in_background
from schemas.bronze import BRONZE_BY_NAME, REFERENCE_TABLES, RUNS, TOPIC_CONFIGS
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from schemas.table import TableDef

log = logger("validate")


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

    def add(self, batch_id: int, rows_in: int, rows_valid: int, duration_ms: int) -> None:
        self.batch_id, self.rows_in, self.rows_valid = batch_id, rows_in, rows_valid
        self.rows_quarantined, self.duration_ms = rows_in - rows_valid, duration_ms
        self.total_in += rows_in
        self.total_valid += rows_valid
        self.total_quarantined += rows_in - rows_valid


@dataclass
class UnionValidator:
    """The foreachBatch body: split the union micro-batch per table, route each, record the verdicts."""

    spark: SparkSession
    settings: PipelineSettings
    tables: list[TableDef]  # reference tables (runs, topic_configs) first: their rows feed the others' context
    ge: SuiteValidator = field(default_factory=SuiteValidator)
    stats: BatchStats = field(default_factory=BatchStats)
    table_stats: dict[str, BatchStats] = field(default_factory=dict)
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    log: Callable[[str], None] = lambda m: log.info(m)
    # Called after each batch with its id, rows and steps (the driver route's too): the progress log's
    # breakdown of a live batch (`isrwatch pipeline run --progress-log`).
    on_steps: Callable[[int, int, list[tuple[str, float]]], None] | None = None
    behind: DqBehind | None = None  # GE and the dq record behind the batch (and a previous run's left there)
    ge_behind: bool = False         # live batches hand GE to `behind` (a live trigger)
    ge_process: GeProcess | None = None  # where `behind` runs GE

    def __post_init__(self) -> None:
        lookback_us = self.settings.validate_.counter_lookback // dt.timedelta(microseconds=1)
        self.context = new_driver_context(self.settings.lakehouse, self.tables, lookback_us)
        self.executor_routes = {td.name: ExecutorRoute(self.spark, td, self.settings.lakehouse, self.ge, self.context)
                                for td in self.tables}
        self.table_stats = {td.name: BatchStats() for td in self.tables}
        self.appenders: dict[str, BatchAppender] = {}

    def _appender(self, name: str) -> BatchAppender:
        if name not in self.appenders:
            self.appenders[name] = BatchAppender(self.spark, f"isrwatch-validate/{name}/{self.query_id}")
        return self.appenders[name]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        wait_started(self, "validate")
        # Validate is throughput work: its stream thread plans each batch behind the alert lane's (same JVM).
        lower_calling_stream_thread(self.spark)
        clock = StepClock()
        # Cached while it is counted and routed, so the source and the de-duplication run once. On disk only:
        # cached in memory, a 10M-row catch-up ran a 4 GB executor out of heap while the cache unrolled it.
        batch = batch.persist(StorageLevel.DISK_ONLY)
        try:
            rows = batch.count()
            if rows == 0:
                return  # watermark-only batch: nothing to write
            clock.lap(SOURCE_STEP)
            on_driver = rows <= self.settings.validate_.driver_max_rows
            if on_driver:
                routed = self._check_on_driver(batch, batch_id, clock)
            else:
                checks = self._split(batch, batch_id, clock)
        finally:
            batch.unpersist()
        if on_driver:
            self._write(routed, batch_id)
            clock.lap("silver and quarantine")
        if on_driver and self.behind is not None and self.ge_behind:  # a live batch ends here: GE follows
            self._after([r for r, _ in routed], batch_id, _ms_since(clock.started))
            self.behind.submit(batch_id, routed, _ms_since(clock.started))
            clock.lap("great expectations handed over")
        else:
            if on_driver:
                checks = self._checked(routed, batch_id)
                clock.lap("great expectations")
            took = _ms_since(clock.started)
            self._commit_dq([(c, at_us, batch_id, took) for c, at_us in checks], batch_id)
            self._after([c for c, _ in checks], batch_id, _ms_since(clock.started))
            clock.lap("dq record")
        if not on_driver:  # minutes of work: say where they went (live batches stay quiet)
            self.log(clock.line(batch_id, rows))
        if self.on_steps is not None:
            self.on_steps(batch_id, rows, clock.steps)

    def _check_on_driver(self, batch: DataFrame, batch_id: int,
                         clock: StepClock) -> list[tuple[RoutedOnDriver, int]]:
        """The batch collected once through Arrow and checked per table on the driver: no other Spark job. Nothing
        is written yet (`_write`)."""
        collected = batch.toArrow()
        clock.lap("collect")
        routed = check_union_on_driver(collected, self.tables, batch_id, self.context)
        clock.lap("check")
        return routed

    def _write(self, routed: list[tuple[RoutedOnDriver, int]], batch_id: int) -> None:
        """Every checked table to silver and quarantine, before Great Expectations validates any (readers wait for
        silver)."""
        for r, _ in routed:
            write_routed(r, batch_id, self._appender(r.table), self.settings.lakehouse)

    def _checked(self, routed: list[tuple[RoutedOnDriver, int]], batch_id: int) -> list[tuple[TableCheck, int]]:
        return [(r.checked(self.ge), at_us) for r, at_us in routed]

    def check_and_commit(self, group: list[Waiting]) -> None:
        """GE on a group of live batches' rows, table by table in one run each, then their dq records in one commit
        (DqBehind's worker, behind the batches). Batches whose records a previous run committed are left out."""
        lake = self.settings.lakehouse
        done = self._appender("dq_runs").last_committed(DQ_RUNS.path(lake))
        group = [g for g in group if g[0] > done]
        if not group:
            return
        if self.ge_process is None:
            self.ge_process = GeProcess()
        by_table: dict[str, list[RoutedOnDriver]] = {}
        for _, routed, _ in group:
            for r, _ in routed:
                by_table.setdefault(r.table, []).append(r)
        outcomes = self.ge_process.outcomes({t: pa.concat_tables([r.ge_rows for r in rs], promote_options="default")
                                             for t, rs in by_table.items()})
        last = group[-1][0]
        self._commit_dq([(TableCheck(r.table, r.rows_in, r.rows_valid, r.counts, outcomes[r.table], r.runs, None),
                          at_us, batch_id, duration_ms)
                         for batch_id, routed, duration_ms in group for r, at_us in routed], last)

    def _split(self, batch: DataFrame, batch_id: int, clock: StepClock) -> list[tuple[TableCheck, int]]:
        """A batch too large for the driver: its small tables that fit within `driver_max_rows` together are
        collected and checked on the driver (on the executors each costs seconds of jobs, whatever its size); every
        other table is checked on the executors, GE's Spark engine validating."""
        present = {r["_table"]: (r["rows"], r["at_us"]) for r in batch.groupBy("_table").agg(
            F.count(F.lit(1)).alias("rows"), F.unix_micros(F.max("ingested_at")).alias("at_us")).collect()}
        clock.lap("tables present")
        small = driver_share({t: n for t, (n, _) in present.items()}, self.settings.validate_.driver_max_rows)
        checks = []
        if small:
            routed = self._check_on_driver(batch.where(F.col("_table").isin(sorted(small))), batch_id, StepClock())
            self._write(routed, batch_id)
            checks = self._checked(routed, batch_id)
            clock.lap(f"{' and '.join(t.name for t in self.tables if t.name in small)} on the driver")
        for td in self.tables:
            if td.name not in present or td.name in small:
                continue
            rows = batch.where(F.col("_table") == td.name).select(f"{table_column(td.name)}.*", "ingested_at")
            check = self.executor_routes[td.name].route(rows, batch_id, self._appender(td.name), clock)
            checks.append((check, present[td.name][1]))
        return checks

    def _commit_dq(self, checks: list[tuple[TableCheck, int, int, int]], marker_batch: int) -> None:
        """One silver.dq_runs commit: a record per (table check, newest ingested_at µs, batch id, duration ms), marked
        with `marker_batch` (a batch, or the newest of a group checked behind the batches)."""
        dq = pa.Table.from_pylist([{
            "table_name": c.table, "validate_batch_id": batch_id, "ingested_at": at_us, "rows_in": c.rows_in,
            "rows_valid": c.rows_valid, "rows_quarantined": c.rows_in - c.rows_valid,
            "pass_rate": c.rows_valid / c.rows_in,
            "failed_expectations": [{"expectation": k, "unexpected_count": n} for k, n in sorted(c.counts.items())],
            "ge_success": c.ge.success, "ge_evaluated_expectations": c.ge.evaluated,
            "ge_successful_expectations": c.ge.successful, "ge_engine": c.ge.engine, "runs": c.runs,
            "batch_duration_ms": duration_ms,
        } for c, at_us, batch_id, duration_ms in checks],
            schema=DQ_RUNS.arrow_schema.set(2, pa.field("ingested_at", pa.int64())))
        self._appender("dq_runs").append_rows(dq.cast(DQ_RUNS.arrow_schema), DQ_RUNS.path(self.settings.lakehouse),
                                              marker_batch)
        for c, _, batch_id, _ in checks:
            kill_points.reached(c.table, batch_id, "after_dq")

    def _after(self, done: Sequence[TableCheck | RoutedOnDriver], batch_id: int, duration_ms: int) -> None:
        """Once the batch's rows are in silver: the driver's meter counts and partition states, the stats."""
        fold_checked(self.context, done)  # a replay after a crash reloads them from silver
        for c in done:
            self.table_stats[c.table].add(batch_id, c.rows_in, c.rows_valid, duration_ms)
        self.stats.add(batch_id, sum(c.rows_in for c in done), sum(c.rows_valid for c in done), duration_ms)
        every = self.settings.validate_.maintain_every_batches
        if batch_id > 0 and batch_id % every == 0:
            self._maintain()

    def _maintain(self) -> None:
        from delta.tables import DeltaTable

        hours = self.settings.validate_.vacuum_retention / dt.timedelta(hours=1)
        for td in (DQ_RUNS, *(t[x.name] for x in self.tables for t in (SILVER_TABLES, QUARANTINE_TABLES))):
            path = td.path(self.settings.lakehouse)
            if is_delta_table(path):
                table = DeltaTable.forPath(self.spark, path)
                table.optimize().executeCompaction()
                table.vacuum(hours)


def _ms_since(began: float) -> int:
    return int((time.monotonic() - began) * 1000)



@dataclass
class RunningValidation:
    query: StreamingQuery
    validator: UnionValidator
    lane: RunningLane | None = None  # the alert lane's query (jobs/alert_lane.py); None when no rule is on silver
    start_lane: Callable[[], RunningLane | None] | None = None

    def restart_lane(self) -> RunningLane:
        """The lane's query failed: its queued records written and its webhook lanes stopped, then the lane started
        again from its checkpoint, which replays what the failed run committed and did not record (exactly once,
        jobs/alert_lane.py)."""
        if self.lane is None or self.start_lane is None:
            raise RuntimeError("the alert lane is not running: nothing to restart")
        self.lane.finish()
        lane = self.start_lane()
        if lane is None:
            raise RuntimeError("the alert lane did not start again")
        self.lane = lane
        return lane

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        return {"validate": self.query, **({"alert_lane": self.lane.query} if self.lane is not None else {})}

    def finish(self) -> None:
        """After the query stopped: the batches still waiting for GE get their dq records."""
        if self.validator.behind is not None and not self.validator.behind.drain():
            log.info("validate: Great Expectations still running at exit: its batches are validated at the next start")
        if self.validator.ge_process is not None:
            self.validator.ge_process.close()
        if self.lane is not None:
            if self.lane.query.isActive:  # validate has ended (or failed): the lane never runs on without it
                stop_between_batches(self.lane.query)
            self.lane.finish()


def start_validation(spark: SparkSession, settings: PipelineSettings,
                     log: Callable[[str], None] = lambda m: log.info(m),
                     on_steps: Callable[[int, int, list[tuple[str, float]]], None] | None = None,
                     lane_steps: Callable[[int, int, list[tuple[str, float]]], None] | None = None,
                     ) -> RunningValidation:
    """Check schemas, then start the streaming query over every configured bronze table, and the alert lane's."""
    settings.use_storage()
    v = settings.validate_
    # Reference tables first (a stable sort keeps the configured order otherwise).
    configured = [BRONZE_BY_NAME[n] for n in dict.fromkeys(v.tables)]
    tables = sorted(configured, key=lambda td: td.name not in REFERENCE_TABLES)
    bring_bronze_up_to_date(tables, settings.lakehouse, log)
    wait_for_tables({td.name: td.path(settings.lakehouse) for td in tables}, v.wait_for_tables.total_seconds(), log)
    refs = {td.name: td for td in tables}
    for td in tables:
        refs.update({ref.name: ref for ref in (RUNS, TOPIC_CONFIGS) if ref.name in _context_tables(td)})
    for td in refs.values():  # every table a query reads must match its definition, before anything starts
        if is_delta_table(td.path(settings.lakehouse)):
            check_schema(td, td.path(settings.lakehouse))
    create_sinks_if_missing((DQ_RUNS, *(t[x.name] for x in tables for t in (SILVER_TABLES, QUARANTINE_TABLES))),
                            settings.lakehouse)
    checkpoint = f"{settings.checkpoint_root.rstrip('/')}/{VALIDATE_CHECKPOINT}"
    starting = continue_from_per_table_checkpoints(spark, settings.checkpoint_root, checkpoint,
                                                   [td.name for td in tables], log)
    validator = UnionValidator(spark, settings, tables, log=log, on_steps=on_steps)
    validator.behind = DqBehind(Spool(f"{checkpoint}/dq_pending"), validator.check_and_commit)
    validator.ge_behind = v.trigger == "live"
    # Before validate's query commits anything: the lane's first start continues from where validate stands.
    lane = start_alert_lane(spark, settings, checkpoint, log, lane_steps)
    try:
        writer = (bronze_union(spark, settings, tables, starting).writeStream.queryName("validate")
                  .foreachBatch(validator).option("checkpointLocation", checkpoint))
        writer = (writer.trigger(availableNow=True) if v.trigger == "available-now"
                  else writer.trigger(processingTime=spark_interval(v.trigger_interval)))
        query = writer.start()
    except BaseException:
        if lane is not None:
            lane.query.stop()
            lane.finish()
        raise
    validator.query_id = str(query.id)
    # Before the first batch (which waits for `started`): a previous run's batches left waiting for GE.
    try:
        validator.behind.start(BRONZE_BY_NAME)
    except BaseException:
        query.stop()
        if lane is not None:
            lane.query.stop()
            lane.finish()
        raise
    validator.started.set()
    return RunningValidation(query, validator, lane,
                             lambda: start_alert_lane(spark, settings, checkpoint, log, lane_steps))


def _context_tables(td: TableDef) -> set[str]:
    needs = set()
    if "run_window" in td.context or "broker_registry" in td.context:
        needs.add(RUNS.name)
    if "topic" in td.context:
        needs.add(TOPIC_CONFIGS.name)
    return needs

def main(argv: Sequence[str] | None = None) -> int:
    from foundation.spark import build_spark_session

    args = build_parser().parse_args(argv)
    configure(args.verbose)
    try:
        settings = settings_from_args(args)
    except SettingsError as e:
        log.error(f"validate: {e}")
        return 2
    import_in_background()
    spark = build_spark_session("isrwatch-validate", conf=settings.spark, verbose=args.verbose,
                                lakehouse=settings.lakehouse)
    with driver_signals.installed():
        try:
            running = start_validation(spark, settings)
        except (SchemaDriftError, FileNotFoundError, AlertConfigError) as e:
            log.error(f"validate: {e}")
            return 2
        v = settings.validate_
        names = ", ".join(td.name for td in running.validator.tables)
        log.info(f"validate: one query over {len(running.validator.tables)} tables ({names}), trigger {v.trigger}")
        stopped, lane_failed = await_validation(running)
        running.finish()
        if stopped:
            log.info("validate: stopped; checkpoints are consistent, a restart resumes")
            return 130
        failed = running.query.exception() is not None or lane_failed
        if running.query.exception() is not None:
            log.error(f"validate: failed: {running.query.exception()}")
        for name, s in running.validator.table_stats.items():
            log.error(f"validate: {name}: {s.total_in} rows in, {s.total_valid} to silver, "
                      f"{s.total_quarantined} quarantined")
        return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
