"""Streaming alert evaluation of the rules on gold tables: -> gold.alert_events / gold.alerts, and webhooks.

    spark-submit [--master …] --jars <delta jars> jobs/alerts.py [--lakehouse URI] [--rules conf/alerts.yaml]

The rules on silver tables are evaluated by the alert lane beside validate, on each bronze commit as it lands
(jobs/alert_lane.py). This job evaluates the rules on gold tables (posture_history, slo_status), which their own jobs
write. One streaming query reads the tables its rules use (a union, so one micro-batch id orders everything),
shapes each micro-batch into per-entity samples and runs the rule lifecycle
(pipelines/alert_engine.py): on the driver for a live batch, or, for a batch of more than
`driver_max_rows` rows (a catch-up), on the executors, one group per cluster
(pipelines/alert_per_cluster.py), with the same transitions. The engine's state is stored in
gold.alerts_engine_state after every batch and restored at start-up.

Exactly once: the three gold writes carry the app transaction (isrwatch-alerts/<query id>, batch id),
the state is written last, and a batch whose state is already committed is skipped. A batch replayed
after a crash therefore recomputes the same transitions from the same state, and Delta keeps one copy.
Transitions go to the webhook dispatcher before the writes: a crash in between replays the batch, and the
receivers get the same transitions again with the same delivery ids.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from foundation.delta_io import AppVersions, ensure_table
from foundation.logs import configure, logger
from foundation.settings import PipelineSettings, SettingsError
from jobs import driver_signals
from jobs.alert_stage import (
    GOLD,
    SOURCE_COLUMNS,
    SOURCE_TABLES,
    AlertStage,
    AlertStats,
    build_stage,
    settle_owners,
    used_tables,
)
from jobs.streaming import (
    add_common_args,
    await_query,
    load_job_settings,
    start_query,
    stop_between_batches,
    union_stream,
    wait_started,
)
from pipelines.alert_config import load_alert_config, split_by_layer
from pipelines.alert_rules import AlertConfig, AlertConfigError
from pipelines.webhook_delivery import WebhookDispatcher

log = logger("alerts")


@dataclass
class AlertEvaluator:
    """The foreachBatch body: the micro-batch through the gold stage (evaluate, deliver, write gold)."""

    settings: PipelineSettings
    stage: AlertStage
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)

    @property
    def stats(self) -> AlertStats:
        return self.stage.stats

    @property
    def versions(self) -> AppVersions:
        return self.stage.versions

    @versions.setter
    def versions(self, versions: AppVersions) -> None:  # start_query sets it once the query has its id
        self.stage.versions = versions

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        wait_started(self, "alerts")
        if self.stage.applied(batch_id):
            return  # fully applied before a restart; the engine state loaded at start includes it
        began = time.monotonic()
        transitions, rows, on_executors = self.stage.step_batch(batch)
        self.stage.publish(batch_id, transitions, rows, began, on_executors)


@dataclass
class RunningAlerts:
    query: StreamingQuery
    evaluator: AlertEvaluator
    dispatcher: WebhookDispatcher | None

    def stop(self) -> None:
        stop_between_batches(self.query)
        if self.dispatcher is not None:
            self.dispatcher.stop()


def start_alerts(spark: SparkSession, settings: PipelineSettings, config: AlertConfig | None = None,
                 log: Callable[[str], None] = lambda m: log.info(m)) -> RunningAlerts:
    """Load the rules on gold tables and their engine state, start the webhook lanes, then the streaming query."""
    settings.use_storage()
    a, lake = settings.alerts, settings.lakehouse
    config = config or load_alert_config(a.rules)
    mine = split_by_layer(config, a.rules or "conf/alerts.yaml")[1]
    if not mine.rules:
        raise AlertConfigError(f"{a.rules or 'conf/alerts.yaml'}: no rule reads a gold table (posture, slo_status), "
                               "and the alert lane evaluates the rules on silver tables: the alerts job has nothing "
                               "to do")
    used = used_tables(mine)
    paths = {t: SOURCE_TABLES[(layer, t)].path(lake) for layer, t in used}
    # The gold sources (posture, slo) are created empty if their jobs have not run yet: those rules then stay silent.
    for _, t in used:
        ensure_table(SOURCE_TABLES[("gold", t)], lake)
    settle_owners(lake, {r.name for r in mine.rules})
    stage = build_stage(lake, GOLD, mine, "alerts",
                        webhooks=a.webhooks, driver_max_rows=a.driver_max_rows,
                        maintain_every_batches=a.maintain_every_batches, log=log)
    # Gold tables call the cluster `cluster`; the engine keys everything by `run_id`.
    union = union_stream(spark, {t: (paths[t], [F.col("cluster").alias("run_id"), "ts", *SOURCE_COLUMNS[t]])
                                 for _, t in used}, a.max_files_per_trigger)
    evaluator = AlertEvaluator(settings, stage)
    query = start_query(union, "alerts", evaluator, a, settings)
    return RunningAlerts(query, evaluator, stage.dispatcher)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/alerts.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_args(p)
    p.add_argument("--rules", default=None, help="alert rules and receivers (default conf/alerts.yaml)")
    p.add_argument("--no-webhooks", action="store_true", help="evaluate and record, deliver nothing")
    p.add_argument("--driver-max-rows", type=int, default=None, metavar="N",
                   help="evaluate a micro-batch of more rows on the executors "
                        "(default: driver_max_rows, conf/pipeline.yaml)")
    return p


def settings_from_args(args: argparse.Namespace) -> PipelineSettings:
    return load_job_settings(args, "alerts", {"alerts.rules": args.rules,
                                              "alerts.webhooks": False if args.no_webhooks else None,
                                              "alerts.driver_max_rows": args.driver_max_rows})


def main(argv: Sequence[str] | None = None) -> int:
    from foundation.spark import build_spark_session

    args = build_parser().parse_args(argv)
    configure(args.verbose)
    try:
        settings = settings_from_args(args)
        config = load_alert_config(settings.alerts.rules)
    except (SettingsError, AlertConfigError) as e:
        log.error(f"alerts: {e}")
        return 2
    spark = build_spark_session("isrwatch-alerts", conf=settings.spark, verbose=args.verbose,
                                lakehouse=settings.lakehouse)
    with driver_signals.installed():
        try:
            running = start_alerts(spark, settings, config)
        except (FileNotFoundError, AlertConfigError) as e:
            log.error(f"alerts: {e}")
            return 2
        log.info(f"alerts: {len(running.evaluator.stage.config.rules)} rules, {len(config.receivers)} receiver(s), "
                 f"trigger {settings.alerts.trigger}")
        if await_query(running.query, running.stop):
            log.info("alerts: stopped; a restart resumes where this left off")
            return 130
        if running.dispatcher is not None:
            running.dispatcher.wait_idle(30)
            running.dispatcher.stop()
        s = running.evaluator.stats
        failed = running.query.exception() is not None
        if failed:
            log.error(f"alerts: FAILED: {running.query.exception()}")
        log.error(f"alerts: {s.total_transitions} transitions, {s.firing} alerts firing; {s.executor_batches} of "
                  f"{s.batches} micro-batches evaluated on the executors, in {s.busy_ms / 1000:.1f} s")
        return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
