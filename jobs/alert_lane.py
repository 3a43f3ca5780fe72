"""The alert lane: the one evaluator of the rules on silver tables, a streaming query of its own.

validate's micro-batch reads seven bronze tables through Spark's Delta source, de-duplicates them in the state
store and writes silver before the next batch can start: a live batch takes seconds, and a new bronze commit waits
for the batch in flight. The lane reads only the tables the rules need (with runs and topic_configs, the context
their checks need) straight from the bronze commit logs, micro-batches back to back. Its Spark source only plans
(foundation/bronze_log.py: the commits a batch covers go to the query's offset log) and the batch reads its rows
itself (jobs/lane_log.py):

    bronze commit -> the lane's batch on the driver -> the same checks as validate (jobs/driver_checks.py) -> the
    engine on the valid rows -> the webhook lanes; behind it: gold.alert_events, gold.alerts, the engine's state
    (jobs/alert_recorder.py)

It writes nothing to silver: validate validates every table and writes silver, quarantine and silver.dq_runs. The
lane is the `lane` evaluator (jobs/alert_stage.py), exactly once: its checkpoint holds which commits each batch
read, its writes carry its app transaction, and a batch replayed after a crash reads the same commits, recomputes the
same transitions with the same ids and skips what it committed.

It runs beside validate, on a local lakehouse or an object store, live (a batch as soon as a commit lands) or, when
validate runs available-now, up to the commits that existed at its start. A first start continues from where
validate's query stands (a lakehouse from an isrwatch whose validate evaluated these rules: they neither miss nor
repeat what validate evaluated).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from foundation import kill_points, object_store
from foundation.bronze_log import NAME, BronzeLogReader, BronzeLogSource, store_option
from foundation.delta_io import open_table
from foundation.logs import logger
from foundation.settings import PipelineSettings, spark_interval
from foundation.streaming_checkpoint import ALERT_LANE_CHECKPOINT, last_committed_batch
from jobs.alert_recorder import BackgroundRecorder
from jobs.alert_stage import LANE, SOURCE_COLUMNS, AlertStage, build_stage, settle_owners, used_tables
from jobs.driver_checks import check_union_on_driver, fold_checked, new_driver_context
from jobs.lane_log import LaneLog, replay_unrecorded
from jobs.step_clock import StepClock
from jobs.streaming import wait_started
from jobs.validate_checkpoints import CheckpointMigrationError, HadoopFiles, next_version, offset_log_entry
from jobs.validate_routes import RoutedOnDriver
from pipelines.alert_config import LANE_TABLES, load_alert_config, split_by_layer
from schemas.bronze import BRONZE_BY_NAME, REFERENCE_TABLES
from schemas.table import TableDef

log = logger("alert_lane")


JOB = "alert_lane"  # in kill points (foundation/kill_points.py): alert_lane:<batch>:after_delivery


@dataclass(frozen=True)
class HandedOver:
    """A batch's transitions, handed to the webhook lanes and not yet recorded in the gold tables."""

    batch_id: int
    events: list[dict[str, Any]]
    rows: int
    began: float


@dataclass
class LaneBatches:
    """The foreachBatch body: the batch collected, checked per table, evaluated, handed over, and its record queued
    (jobs/alert_recorder.py)."""

    tables: list[TableDef]      # reference tables first: their rows feed the others' context
    stage: AlertStage
    lakehouse: str
    lookback_us: int
    log: LaneLog
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    on_steps: Callable[[int, int, list[tuple[str, float]]], None] | None = None

    def __post_init__(self) -> None:
        self.context = new_driver_context(self.lakehouse, self.tables, self.lookback_us)
        self.recorder = BackgroundRecorder(self.stage, before_write=self._before_write)
        self.rule_tables = {t for layer, t in used_tables(self.stage.config) if layer == "silver"}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """`batch` has no row (the source only plans): the batch's rows are read from its offsets (jobs/lane_log.py)."""
        wait_started(self, JOB)
        self.recorder.raise_if_failed()
        clock = StepClock()
        rows = self.log.rows(batch_id)
        if rows.num_rows == 0:
            return
        clock.lap("read")
        self.process(rows, batch_id, clock, behind=batch_id > 0)
        if self.on_steps is not None:
            self.on_steps(batch_id, rows.num_rows, clock.steps)

    def replay(self, batch_id: int) -> None:
        """A batch read again and recorded before returning (jobs/lane_log.py `replay_unrecorded`)."""
        rows = self.log.rows(batch_id)
        if rows.num_rows:
            self.process(rows, batch_id, StepClock(), behind=False)

    def process(self, collected: pa.Table, batch_id: int, clock: StepClock, behind: bool) -> None:
        """Checked, evaluated, handed over; recorded behind the batch, or before it ends. Batch 0 is recorded before
        it ends: a replay (jobs/lane_log.py) starts from the batch before's offsets."""
        routed = [r for r, _ in check_union_on_driver(collected, self.tables, batch_id, self.context)]
        clock.lap("check")
        stage = self.stage
        handed = self.hand_over(batch_id, routed)
        clock.lap("alerts handed over")
        # Every batch but a recorded replay is recorded, one without rows for the rules (only reference rows) too: the
        # recorded batch keeps up with Spark's, and a restart never replays further back than the offset log keeps.
        if handed is not None:
            record = stage.snapshot(handed.batch_id, handed.events, handed.rows, handed.began)
            clock.lap("alerts snapshot")
            if behind:
                self.recorder.submit(record)
                clock.lap("alerts record queued")
            else:
                self.recorder.flush()  # in batch order
                stage.write(record)
                clock.lap("alerts recorded")
        fold_checked(self.context, routed)

    def hand_over(self, batch_id: int, routed: list[RoutedOnDriver]) -> HandedOver | None:
        """A batch checked on the driver: its valid rows of the rules' tables (as they will be in silver) evaluated
        and the transitions handed to the webhook lanes. None: a replay the evaluator has recorded already; a batch
        with no valid row of the rules' tables is handed over empty (`rows` 0)."""
        if self.stage.applied(batch_id):
            return None  # a replay after a crash: the state loaded at start includes it
        began = time.monotonic()
        tables = {r.table: r.valid.select(["run_id", "ts", *SOURCE_COLUMNS[r.table]]).to_pandas()
                  for r in routed if r.table in self.rule_tables and r.valid is not None and r.valid.num_rows}
        rows = sum(len(t) for t in tables.values())
        return HandedOver(batch_id, self.stage.hand_over(batch_id, self.stage.step_tables(tables)) if rows else [],
                          rows, began)

    def _before_write(self, batch_id: int) -> None:
        """Kill point alert_lane:<batch>:before_record: the process dies with the batch
        committed by Spark and not recorded."""
        if kill_points.armed(JOB, batch_id, "before_record"):
            for _ in range(600):
                if batch_id in self.log.committed():
                    break
                time.sleep(0.05)
            kill_points.reached(JOB, batch_id, "before_record")


@dataclass
class RunningLane:
    query: StreamingQuery
    batches: LaneBatches

    @property
    def stage(self) -> AlertStage:
        return self.batches.stage

    def finish(self) -> None:
        """After the query stopped: the queued records written, the webhook lanes emptied and stopped. A record that
        failed is raised once both are stopped."""
        recorder = self.batches.recorder
        try:
            recorder.flush()
        finally:
            recorder.stop()
            self.stage.stop()


def app_id(query_id: str) -> str:
    """The lane's app transactions' id: its query's, which its checkpoint keeps across restarts."""
    return f"isrwatch-alert-lane/{query_id}"


def lane_tables() -> list[TableDef]:
    """What the lane reads: its rules' tables and the reference tables their checks need, reference first."""
    return [BRONZE_BY_NAME[n] for n in (*REFERENCE_TABLES, *LANE_TABLES) if n in BRONZE_BY_NAME]


def validate_position(spark: SparkSession, checkpoint: str, lakehouse: str, tables: list[TableDef]) -> dict[str, int]:
    """Per table of `tables`, the last bronze version validate's union query has fully read (absent: none), from its
    last committed offsets: where the lane starts the first time, so the rules it takes over continue where validate
    left them. A Delta source's offset names its table by id (`reservoirId`), which is how they are told apart."""
    files = HadoopFiles(spark)
    committed = last_committed_batch(files.names(f"{checkpoint}/commits"))
    if committed is None:
        return {}
    ids: dict[str, str] = {}
    for td in tables:
        table = open_table(td, lakehouse)
        if table is not None:
            ids[str(table.metadata().id)] = td.name
    position = {}
    for offset in offset_log_entry(files, f"{checkpoint}/offsets/{committed}")[1]:
        name = ids.get(str((offset or {}).get("reservoirId")))
        if name is None:
            continue
        try:
            after = next_version(offset, checkpoint)
        except CheckpointMigrationError:  # stopped inside a version: the lane reads all of it again
            after = int(offset["reservoirVersion"])
        if after is not None:
            position[name] = after - 1
    return position


def start_alert_lane(spark: SparkSession, settings: PipelineSettings, validate_checkpoint: str | None,
                     log: Callable[[str], None] = lambda m: log.info(m),
                     on_steps: Callable[[int, int, list[tuple[str, float]]], None] | None = None,
                     ) -> RunningLane | None:
    """The lane's query, started (live, or available-now as validate), or None when no rule reads a silver table. Its
    first start continues from `validate_checkpoint`'s committed offsets (None: from the first bronze commit)."""
    a = settings.alerts
    silver, gold = split_by_layer(load_alert_config(a.rules), a.rules or "conf/alerts.yaml")
    if not silver.rules:
        return None
    settle_owners(settings.lakehouse, {r.name for r in gold.rules})
    stage = build_stage(settings.lakehouse, LANE, silver, JOB,
                        webhooks=a.webhooks, driver_max_rows=a.driver_max_rows,
                        maintain_every_batches=a.maintain_every_batches, log=log)
    tables = lane_tables()
    checkpoint = f"{settings.checkpoint_root.rstrip('/')}/{ALERT_LANE_CHECKPOINT}"
    v = settings.validate_
    store = object_store.current() if object_store.is_object_store(settings.lakehouse) else None
    log_ = LaneLog(HadoopFiles(spark), checkpoint,
                   BronzeLogReader(settings.lakehouse, tables, {}, v.max_files_per_trigger, store=store))
    start = log_.first_position(lambda: {} if validate_checkpoint is None
                                else validate_position(spark, validate_checkpoint, settings.lakehouse, tables))
    lookback_us = v.counter_lookback // dt.timedelta(microseconds=1)
    batches = LaneBatches(tables, stage, settings.lakehouse, lookback_us, log_, on_steps=on_steps)
    known = log_.query_id()
    if known is not None:  # batches a crash left committed and not recorded: replayed before the query starts
        stage.bind(app_id(known))
        try:
            replay_unrecorded(log_, stage, batches.replay, log)
        except BaseException:
            batches.recorder.stop()
            stage.stop()
            raise
    spark.dataSource.register(BronzeLogSource)
    # The source only plans (rows=false): each batch reads its own rows from the offsets Spark logged for it.
    reader = (spark.readStream.format(NAME).option("lakehouse", settings.lakehouse)
              .option("tables", ",".join(td.name for td in tables)).option("start", json.dumps(start))
              .option("max_files", str(v.max_files_per_trigger)).option("rows", "false"))
    if store is not None:
        reader = reader.option("store", store_option(store))
    writer = reader.load().writeStream.queryName(JOB).foreachBatch(batches).option("checkpointLocation", checkpoint)
    writer = (writer.trigger(availableNow=True) if v.trigger == "available-now"
              else writer.trigger(processingTime=spark_interval(a.lane_trigger_interval)))
    query = writer.start()
    batches.query_id = str(query.id)
    stage.bind(app_id(str(query.id)))
    batches.started.set()
    return RunningLane(query, batches)
