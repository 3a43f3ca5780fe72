"""Streaming alert evaluation: silver tables -> gold.alert_events / gold.alerts, and webhooks.

    spark-submit [--master …] --jars <delta jars> jobs/alerts.py [--lakehouse URI] [--rules conf/alerts.yaml]

One streaming query reads the silver tables the rules use (a union, so one micro-batch id orders
everything), shapes each micro-batch into per-entity samples and runs the rule lifecycle
(pipelines/alert_engine.py): on the driver for a live batch, or, for a batch of more than
`alerts.driver_max_rows` rows (a catch-up), on the executors, one group per cluster
(pipelines/alert_per_cluster.py), with the same transitions. The engine's state is stored in
gold.alerts_engine_state after every batch and restored at start-up.

Exactly once: the three gold writes carry the app transaction (isrwatch-alerts/<query id>, batch id),
the state is written last, and a batch whose state is already committed is skipped. A batch replayed
after a crash therefore recomputes the same transitions from the same state, and Delta keeps one copy.
Transitions go to the webhook dispatcher after the commit; a crash before it hands them over is covered
by the dispatcher's recovery from gold.alert_events at the next start.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from foundation.delta_io import AppVersions, ensure_table, read_rows
from foundation.settings import PipelineSettings, SettingsError
from jobs import driver_signals
from jobs.delta_tables import wait_for_tables
from jobs.per_cluster import route, step_per_cluster
from jobs.streaming import (
    add_common_args,
    await_query,
    die_here_if_asked,
    load_job_settings,
    start_query,
    stop_between_batches,
    union_stream,
    wait_started,
)
from pipelines.alert_config import load_alert_config
from pipelines.alert_engine import AlertEngine
from pipelines.alert_per_cluster import evaluate_cluster, gather, state_bytes
from pipelines.alert_rules import AlertConfig, AlertConfigError
from pipelines.alert_signals import SOURCES, shape_union
from pipelines.alert_state import EngineState, Transition
from pipelines.webhook_delivery import WebhookDispatcher
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE, DELIVERIES
from schemas.gold_durability import POSTURE_HISTORY, SLO_STATUS
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef

# Silver columns each source needs (the union of all of them is what the streaming query carries).
SOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    "partition_state": ("topic", "partition", "leader", "leader_epoch", "partition_epoch", "configured_min_isr",
                        "effective_min_isr", "high_watermark", "isr", "replicas", "elr", "leader_recovery_state"),
    "broker_metrics": ("broker_id", "mbean", "name", "kind", "value", "count"),
    "ack_ledger": ("topic", "partition", "acks", "records_sent", "records_acked", "records_failed", "records_lost"),
    "cluster_events": ("topic", "partition", "event_type", "cause", "records"),
    "posture_history": ("topic", *SOURCES["posture"].columns),
    "slo_status": ("slo", *SOURCES["slo_status"].columns),
}
# The tables a source may read, by layer and name.
SOURCE_TABLES: dict[tuple[str, str], TableDef] = {
    **{("silver", t): td for t, td in SILVER_TABLES.items()},
    ("gold", "posture_history"): POSTURE_HISTORY, ("gold", "slo_status"): SLO_STATUS,
}


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def event_rows(transitions: list[Transition], batch_id: int, evaluated_at: datetime) -> list[dict[str, Any]]:
    return [{
        "event_id": f"{batch_id}-{i}", "eval_batch_id": batch_id, "seq": i, "status": t.status,
        "previous_status": t.previous, "ts": _ts(t.ts_ms), "rule": t.rule, "fingerprint": t.fingerprint,
        "cluster": t.cluster, "severity": t.severity, "scope": t.scope, "labels": sorted(t.labels.items()),
        "summary": t.annotations.get("summary", ""), "description": t.annotations.get("description", ""),
        "runbook": t.annotations.get("runbook", ""), "value": t.value, "inhibited": t.inhibited,
        "flapping": t.flapping, "starts_at": _ts(t.starts_ms), "ends_at": _ts(t.ends_ms),
        "evaluated_at": evaluated_at,
    } for i, t in enumerate(transitions)]


def alert_rows(engine: AlertEngine, batch_id: int) -> list[dict[str, Any]]:
    rules = {r.name: r for r in engine.config.rules}
    rows = []
    for a in sorted(engine.state.alerts.values(), key=lambda a: (a.cluster, a.rule, a.fingerprint)):
        r = rules.get(a.rule)
        if r is None:
            continue  # a rule removed from the file: its old alert is dropped with it
        rows.append({
            "status": a.status, "rule": a.rule, "fingerprint": a.fingerprint, "cluster": a.cluster,
            "severity": r.severity, "scope": r.scope, "labels": sorted(a.labels.items()),
            "summary": a.annotations.get("summary", ""), "description": a.annotations.get("description", ""),
            "runbook": a.annotations.get("runbook", ""), "value": a.value, "inhibited": a.inhibited,
            "flapping": a.flapping, "active_since": _ts(a.since_ms), "fired_at": _ts(a.fired_ms),
            "resolved_at": _ts(a.resolved_ms), "last_evaluated": _ts(a.last_ms), "updated_batch_id": batch_id,
        })
    return rows


@dataclass
class AlertStats:
    batch_id: int = -1
    rows_in: int = 0
    transitions: int = 0
    firing: int = 0
    duration_ms: int = 0
    total_transitions: int = 0
    batches: int = 0
    busy_ms: int = 0            # all batches' durations
    executor_batches: int = 0   # batches evaluated on the executors (more than alerts.driver_max_rows rows)

    def describe(self) -> str:
        return f"{self.total_transitions} transitions, {self.firing} firing"


@dataclass
class AlertEvaluator:
    """The foreachBatch body: shape, evaluate, write gold, hand transitions to the webhooks."""

    settings: PipelineSettings
    config: AlertConfig
    engine: AlertEngine
    dispatcher: WebhookDispatcher | None
    query_id: str | None = None
    stats: AlertStats = field(default_factory=AlertStats)
    on_batch: Callable[[int, list[dict[str, Any]]], None] | None = None
    started: threading.Event = field(default_factory=threading.Event)

    versions: AppVersions = field(init=False)  # set by start_query: the app id needs the query's id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        lake = self.settings.lakehouse
        wait_started(self, "alerts")
        versions = self.versions
        if versions.committed(ALERTS_STATE, lake) >= batch_id:
            return  # fully applied before a restart; the engine state loaded at start includes it
        began = time.monotonic()
        evaluated_at = datetime.now(UTC)
        routed = route(batch, self.settings.alerts.driver_max_rows,
                       lambda rows: self.engine.step(shape_union(rows)), self._on_executors)
        transitions = routed.result
        events = event_rows(transitions, batch_id, evaluated_at)
        versions.write_once(ALERT_EVENTS, lake, pa.Table.from_pylist(events, schema=ALERT_EVENTS.arrow_schema),
                            batch_id)
        die_here_if_asked("alerts", batch_id, "after_events")
        versions.write_once(ALERTS, lake, pa.Table.from_pylist(alert_rows(self.engine, batch_id),
                                                               schema=ALERTS.arrow_schema), batch_id, mode="overwrite")
        state = [{**r, "batch_id": batch_id} for r in self.engine.state.to_rows()]
        versions.write_once(ALERTS_STATE, lake, pa.Table.from_pylist(state, schema=ALERTS_STATE.arrow_schema),
                            batch_id, mode="overwrite")
        die_here_if_asked("alerts", batch_id, "after_state")
        if self.dispatcher is not None:
            self.dispatcher.submit(events)
        if self.on_batch is not None:
            self.on_batch(batch_id, events)
        s = self.stats
        s.batch_id, s.rows_in, s.transitions = batch_id, routed.rows, len(events)
        s.batches += 1
        s.executor_batches += routed.on_executors
        s.firing = sum(a.status == "firing" for a in self.engine.state.alerts.values())
        s.total_transitions += len(events)
        s.duration_ms = int((time.monotonic() - began) * 1000)
        s.busy_ms += s.duration_ms
        if batch_id > 0 and batch_id % self.settings.alerts.maintain_every_batches == 0:
            from foundation.delta_io import compact_and_checkpoint

            compact_and_checkpoint(lake, (ALERT_EVENTS, ALERTS, ALERTS_STATE, DELIVERIES))

    def _on_executors(self, batch: DataFrame) -> list[Transition]:
        """A batch too large to collect: grouped by cluster on the executors, each group evaluated with its
        cluster's state by the same engine (pipelines/alert_per_cluster.py). Only transitions and the evaluated
        clusters' state come back to the driver."""
        parts = self.engine.state.by_cluster()
        step = functools.partial(evaluate_cluster, replace(self.config, receivers=()))  # no secrets shipped
        states = {c: state_bytes(p) for c, p in parts.items()}
        transitions, stepped, late = gather(step_per_cluster(batch, states, step))
        self.engine.state = EngineState.joined({**parts, **stepped}.values())  # clusters not in the batch kept
        self.engine.late += late
        return transitions


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
                 log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> RunningAlerts:
    """Load rules and engine state, start the webhook lanes, then the streaming query."""
    a, lake = settings.alerts, settings.lakehouse
    config = config or load_alert_config(a.rules)
    used = sorted({(SOURCES[r.source].layer, SOURCES[r.source].table) for r in config.rules})
    paths = {t: SOURCE_TABLES[(layer, t)].path(lake) for layer, t in used}
    # validate creates the silver tables: wait for them as validate waits for bronze. The gold sources
    # (posture, slo) are created empty if their jobs have not run yet: those rules then stay silent.
    wait_for_tables({f"silver.{t}": paths[t] for layer, t in used if layer == "silver"},
                    a.wait_for_tables_seconds, log)
    for layer, t in used:
        if layer == "gold":
            ensure_table(SOURCE_TABLES[(layer, t)], lake)
    for td in (ALERT_EVENTS, ALERTS, ALERTS_STATE):
        ensure_table(td, lake)
    state = EngineState.from_rows(read_rows(ALERTS_STATE, lake).to_pylist())
    engine = AlertEngine(config, state)
    dispatcher = WebhookDispatcher(config, lake, log=log).start() if a.webhooks and config.receivers else None
    # Gold tables call the cluster `cluster`; the engine keys everything by `run_id`.
    union = union_stream(spark, {t: (paths[t], ["run_id" if layer == "silver" else F.col("cluster").alias("run_id"),
                                                "ts", *SOURCE_COLUMNS[t]])
                                 for layer, t in used}, a.max_files_per_trigger)
    evaluator = AlertEvaluator(settings, config, engine, dispatcher)
    query = start_query(union, "alerts", evaluator, a, settings)
    return RunningAlerts(query, evaluator, dispatcher)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/alerts.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_args(p)
    p.add_argument("--rules", default=None, help="alert rules and receivers (default conf/alerts.yaml)")
    p.add_argument("--no-webhooks", action="store_true", help="evaluate and record, deliver nothing")
    p.add_argument("--driver-max-rows", type=int, default=None, metavar="N",
                   help="evaluate a micro-batch of more rows on the executors (default alerts.driver_max_rows)")
    return p


def settings_from_args(args: argparse.Namespace) -> PipelineSettings:
    return load_job_settings(args, "alerts", {"alerts.rules": args.rules,
                                              "alerts.webhooks": False if args.no_webhooks else None,
                                              "alerts.driver_max_rows": args.driver_max_rows})


def main(argv: Sequence[str] | None = None) -> int:
    from foundation.spark import build_spark_session

    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
        config = load_alert_config(settings.alerts.rules)
    except (SettingsError, AlertConfigError) as e:
        print(f"alerts: {e}", file=sys.stderr)
        return 2
    spark = build_spark_session("isrwatch-alerts", conf=settings.spark, verbose=args.verbose,
                                lakehouse=settings.lakehouse)
    driver_signals.install()
    try:
        running = start_alerts(spark, settings, config)
    except FileNotFoundError as e:
        print(f"alerts: {e}", file=sys.stderr)
        return 2
    print(f"alerts: {len(config.rules)} rules, {len(config.receivers)} receiver(s), "
          f"trigger {settings.alerts.trigger}", file=sys.stderr)
    if await_query(running.query, running.stop):
        print("alerts: stopped; a restart resumes where this left off", file=sys.stderr)
        return 130
    if running.dispatcher is not None:
        running.dispatcher.wait_idle(30)
        running.dispatcher.stop()
    s = running.evaluator.stats
    failed = running.query.exception() is not None
    if failed:
        print(f"alerts: FAILED: {running.query.exception()}", file=sys.stderr)
    print(f"alerts: {s.total_transitions} transitions, {s.firing} alerts firing; {s.executor_batches} of "
          f"{s.batches} micro-batches evaluated on the executors, in {s.busy_ms / 1000:.1f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
