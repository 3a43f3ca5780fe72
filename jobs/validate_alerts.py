"""The rules on silver tables, evaluated by validate on the rows it has just checked.

So a bronze commit crosses one streaming query on its way to a webhook, and waits for no commit on the way: validate
checks a live micro-batch on the driver and hands the valid rows to the `silver` alert stage (jobs/alert_stage.py),
which evaluates them and hands the transitions to the webhook lanes; then silver and quarantine are written, then
the stage records the batch in the gold tables, then Great Expectations' report follows (jobs/dq_behind.py). A
catch-up batch routed by Spark is read back from silver by its `ingested_at` (every row of a micro-batch has the
batch's) and evaluated as the alerts job evaluates a large batch, cluster by cluster on the executors. With
`alerts.silver_rules_in: alerts` validate evaluates nothing and the alerts job reads silver.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation.object_store import is_object_store
from foundation.settings import PipelineSettings
from jobs.alert_stage import LANE, SILVER, SOURCE_COLUMNS, AlertStage, build_stage, claim_of, claim_state, used_tables
from jobs.delta_tables import is_delta_table
from jobs.validate_routes import RoutedOnDriver
from pipelines.alert_config import load_alert_config, split_by_layer
from pipelines.alert_rules import AlertConfig
from schemas.silver import SILVER_TABLES

JOB = "validate_alerts"  # in kill points: ISRWATCH_KILL_AT=validate_alerts:<batch>:after_delivery


def lane_on(settings: PipelineSettings) -> bool:
    """Is the alert lane (jobs/alert_lane.py) evaluating the rules on silver tables (else validate does)?"""
    a = settings.alerts
    return (a.lane and a.silver_rules_in == "validate" and settings.validate_.trigger == "live"
            and not is_object_store(settings.lakehouse))


def rule_split(settings: PipelineSettings) -> tuple[AlertConfig, AlertConfig, AlertConfig]:
    """(the lane's rules, validate's rules on silver tables, the rules on gold tables): the rules on silver tables are
    the lane's when it is on, else validate's."""
    origin = settings.alerts.rules or "conf/alerts.yaml"
    silver, gold = split_by_layer(load_alert_config(settings.alerts.rules), origin)
    if not lane_on(settings):
        return replace(silver, rules=()), silver, gold
    return silver, replace(silver, rules=()), gold


def claim_stages(settings: PipelineSettings) -> None:
    """The engine's state for validate's two stages (the silver stage's rules and the lane's), claimed in one read
    before either is built."""
    if settings.alerts.silver_rules_in != "validate":
        return
    lane, silver, gold = rule_split(settings)
    claims = [claim_of(stage, config) for stage, config in ((SILVER, silver), (LANE, lane)) if config.rules]
    if claims:
        claim_state(settings.lakehouse, {r.name for r in (*silver.rules, *lane.rules)}, {r.name for r in gold.rules},
                    claims)


def silver_stage(settings: PipelineSettings, log: Callable[[str], None]) -> AlertStage | None:
    """The stage of the rules on silver tables the alert lane does not hold, or None when the alerts job holds them
    or there are none."""
    a = settings.alerts
    if a.silver_rules_in != "validate":
        return None
    silver = rule_split(settings)[1]
    if not silver.rules:
        return None
    return build_stage(settings.lakehouse, SILVER, silver, JOB,
                       webhooks=a.webhooks, driver_max_rows=a.driver_max_rows,
                       maintain_every_batches=a.maintain_every_batches, log=log)


@dataclass(frozen=True)
class HandedOver:
    """A batch's transitions, handed to the webhook lanes and not yet recorded in the gold tables."""

    batch_id: int
    events: list[dict[str, Any]]
    rows: int
    began: float


@dataclass
class SilverAlerts:
    spark: SparkSession
    lakehouse: str
    stage: AlertStage

    def __post_init__(self) -> None:
        self.tables = [t for layer, t in used_tables(self.stage.config) if layer == "silver"]

    def on_driver(self, batch_id: int, routed: list[RoutedOnDriver]) -> HandedOver | None:
        """A batch checked on the driver: its valid rows of the rules' tables (as the alerts job would read them from
        silver) evaluated and the transitions handed to the webhook lanes, before silver is written. The caller
        records them (`record`) once silver holds the rows. None: a replay the stage has recorded already; a batch
        with no valid row of the rules' tables is handed over empty (`rows` 0), and the caller decides whether it is
        worth a record."""
        if self.stage.applied(batch_id):
            return None  # a replay after a crash: the state loaded at start includes it
        began = time.monotonic()
        frames = [r.valid.select(["run_id", "ts", *SOURCE_COLUMNS[r.table]]).to_pandas().assign(_source=r.table)
                  for r in routed if r.table in self.tables and r.valid is not None and r.valid.num_rows]
        if not frames:
            return HandedOver(batch_id, [], 0, began)
        rows = pd.concat(frames, ignore_index=True)
        return HandedOver(batch_id, self.stage.hand_over(batch_id, self.stage.step_rows(rows)), len(rows), began)

    def record(self, handed: HandedOver) -> None:
        self.stage.record(handed.batch_id, handed.events, handed.rows, handed.began)

    def in_silver(self, batch_id: int, at_us: int) -> None:
        """A batch routed by Spark: its rows read back from silver (on the driver or the executors by size)."""
        if self.stage.applied(batch_id):
            return
        began = time.monotonic()
        frames = []
        for t in self.tables:
            path = SILVER_TABLES[t].path(self.lakehouse)
            if is_delta_table(path):
                frames.append(self.spark.read.format("delta").load(path)
                              .where(F.col("ingested_at") == F.timestamp_micros(F.lit(at_us)))
                              .select("run_id", "ts", *SOURCE_COLUMNS[t]).withColumn("_source", F.lit(t)))
        if not frames:
            return
        union: DataFrame = frames[0]
        for f in frames[1:]:
            union = union.unionByName(f, allowMissingColumns=True)
        transitions, rows, on_executors = self.stage.step_batch(union)
        if rows:
            self.stage.publish(batch_id, transitions, rows, began, on_executors)
