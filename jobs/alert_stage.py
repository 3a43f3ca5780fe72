"""One evaluator of the alert rules in a streaming job: evaluate a micro-batch, deliver, then record.

There are two, one per layer the rules read (docs/architecture.md): the rules on silver tables are evaluated by the
alert lane (jobs/alert_lane.py) on each bronze commit as it lands (`lane`), the rules on gold tables (posture,
slo_status) by the alerts job (`gold`). Both run the same engine (pipelines/alert_engine.py) and share the gold
tables:
- gold.alert_events: appended by each. An event id is `<fingerprint>-<batch>-<seq>`: a rule is one evaluator's, so
  ids never collide, and each evaluator's dispatcher recovers the events of its own rules.
- gold.alerts and gold.alerts_engine_state: each evaluator overwrites only its own rows (`stage = '<name>'`,
  `engine = '<name>'`), so the rows of a rule removed from the file go with its evaluator's next batch. An equality
  predicate lets Delta's conflict check tell the two apart by file statistics. Rows written by an older isrwatch
  (validate's own evaluator, `silver`, or none) are given to the evaluator of their rule's layer at start
  (`settle_owners`), so their open alerts continue.

Exactly once: the three writes carry the app transaction (`app_id`, batch id), the state is written last, and a
batch whose state is already committed is skipped (`applied`). Transitions go to the dispatcher before the writes: a
crash in between replays the batch, which recomputes the same transitions with the same ids from the same committed
state, so receivers get them again with the same delivery ids (at least once, as after any crash of the dispatcher).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake.exceptions import CommitFailedError
from pyspark.sql import DataFrame

from foundation import kill_points
from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import AppVersions, ensure_table, open_table, read_rows
from jobs.per_cluster import route, step_per_cluster
from pipelines.alert_engine import AlertEngine
from pipelines.alert_per_cluster import evaluate_cluster, gather, state_bytes
from pipelines.alert_rules import AlertConfig
from pipelines.alert_signals import SOURCES, shape_tables, shape_union
from pipelines.alert_state import EngineState, Transition
from pipelines.webhook_delivery import WebhookDispatcher, intents_directory
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE, DELIVERIES, AlertStatus
from schemas.gold_durability import POSTURE_HISTORY, SLO_STATUS
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef

# Silver columns each source needs (the union of all of them is what a stage's input carries).
SOURCE_COLUMNS: dict[str, tuple[str, ...]] = {
    "partition_state": ("topic", "partition", "leader", "leader_epoch", "partition_epoch", "configured_min_isr",
                        "effective_min_isr", "high_watermark", "isr", "replicas", "elr", "leader_recovery_state"),
    "broker_metrics": ("broker_id", "mbean", "name", "kind", "value", "count"),
    "ack_ledger": ("topic", "partition", "acks", "records_sent", "records_acked", "records_failed", "records_lost",
                   "unacked_for_ms", "leader", "isr"),
    "cluster_events": ("topic", "partition", "broker_id", "event_type", "cause", "records", "detail"),
    "posture_history": ("topic", *SOURCES["posture"].columns),
    "slo_status": ("slo", *SOURCES["slo_status"].columns),
}
# The tables a source may read, by layer and name.
SOURCE_TABLES: dict[tuple[str, str], TableDef] = {
    **{("silver", t): td for t, td in SILVER_TABLES.items()},
    ("gold", "posture_history"): POSTURE_HISTORY, ("gold", "slo_status"): SLO_STATUS,
}
GOLD, LANE = "gold", "lane"
COMMIT_ATTEMPTS = 5


def used_tables(config: AlertConfig) -> list[tuple[str, str]]:
    """(layer, table) of every table the rules read, sorted."""
    return sorted({(SOURCES[r.source].layer, SOURCES[r.source].table) for r in config.rules})


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def event_rows(transitions: list[Transition], batch_id: int, evaluated_at: datetime) -> list[dict[str, Any]]:
    return [{
        "event_id": f"{t.fingerprint}-{batch_id}-{i}", "eval_batch_id": batch_id, "seq": i, "status": t.status,
        "previous_status": t.previous, "ts": _ts(t.ts_ms), "rule": t.rule, "fingerprint": t.fingerprint,
        "cluster": t.cluster, "severity": t.severity, "scope": t.scope, "labels": sorted(t.labels.items()),
        "summary": t.annotations.get("summary", ""), "description": t.annotations.get("description", ""),
        "runbook": t.annotations.get("runbook", ""), "value": t.value, "inhibited": t.inhibited,
        "flapping": t.flapping, "starts_at": _ts(t.starts_ms), "ends_at": _ts(t.ends_ms),
        "evaluated_at": evaluated_at,
    } for i, t in enumerate(transitions)]


def alert_rows(engine: AlertEngine, batch_id: int, stage: str) -> list[dict[str, Any]]:
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
            "stage": stage,
        })
    return rows


def evaluator_of(gold_rules: set[str]) -> Callable[[dict[str, Any]], str]:
    """The evaluator a state row (`kind`, `key`) belongs to: an alert's or window's by its rule's layer (a rule on a
    gold table: the alerts job's), everything else (the lane's signals: last HWs, last reports) the lane's."""
    def owner(r: dict[str, Any]) -> str:
        rule = r["key"].split("/", 1)[0] if r["kind"] in ("alert", "window", "window_evaluated") else None
        return GOLD if rule in gold_rules else LANE

    return owner


def settle_owners(lake: str, gold_rules: set[str]) -> None:
    """Every row of gold.alerts_engine_state and gold.alerts given to the evaluator of its rule's layer
    (`evaluator_of`), in one read and, when anything changes, one commit per table: rows an older isrwatch wrote for
    validate's own evaluator (`silver`), for the alerts job holding rules on silver tables, or before the `engine`
    and `stage` columns existed. Called by both jobs at start; a settled lakehouse is only read."""
    owner = evaluator_of(gold_rules)
    table = open_table(ALERTS_STATE, lake)
    if table is not None:
        rows = table.to_pyarrow_table().to_pylist()
        settled = [{**r, "engine": owner(r)} for r in rows]
        if settled != rows:
            write_with_checksum(ALERTS_STATE.path(lake),
                                pa.Table.from_pylist(settled, schema=ALERTS_STATE.arrow_schema), mode="overwrite")
    if open_table(ALERTS, lake) is None:
        return
    ensure_table(ALERTS, lake)  # a table from before `stage` gets the column (null)
    rows = read_rows(ALERTS, lake).to_pylist()
    settled = [{**r, "stage": owner({"kind": "alert", "key": f"{r['rule']}/{r['fingerprint']}"})} for r in rows]
    if settled != rows:
        write_with_checksum(ALERTS.path(lake), pa.Table.from_pylist(settled, schema=ALERTS.arrow_schema),
                            mode="overwrite")


def load_state(lake: str, name: str) -> EngineState:
    table = open_table(ALERTS_STATE, lake)
    if table is None:
        return EngineState()
    rows = table.to_pyarrow_table()
    return EngineState.from_rows(rows.filter(pc.equal(rows.column("engine"), name)).to_pylist())


@dataclass(frozen=True)
class BatchRecord:
    """A batch's rows for the three gold tables, as the engine stood after it."""

    batch_id: int
    events: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    state: list[dict[str, Any]]
    rows_in: int
    began: float
    on_executors: bool
    firing: int
    merged: tuple[int, ...] = ()  # batches before `batch_id` whose records this one carries (jobs/alert_recorder.py)


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
    executor_batches: int = 0   # batches evaluated on the executors (more than driver_max_rows rows)

    def describe(self) -> str:
        return f"{self.total_transitions} transitions, {self.firing} firing"


@dataclass
class AlertStage:
    """The engine, its dispatcher and its writes, for the job (`job`, naming kill points) holding `name`'s rules."""

    lakehouse: str
    name: str                   # LANE or GOLD: the evaluator's rows of gold.alerts and its state are `name`'s
    config: AlertConfig         # this stage's rules (and every receiver)
    engine: AlertEngine
    dispatcher: WebhookDispatcher | None
    job: str
    driver_max_rows: int = 500_000
    maintain_every_batches: int = 600
    versions: AppVersions = field(init=False)  # `bind` sets it: the app id needs the query's id
    stats: AlertStats = field(default_factory=AlertStats)

    def bind(self, app_id: str) -> None:
        self.versions = AppVersions(app_id)

    def applied(self, batch_id: int) -> bool:
        """The batch's state is committed: the engine loaded at start includes it (a replay after a crash)."""
        return self.versions.committed(ALERTS_STATE, self.lakehouse) >= batch_id

    def step_batch(self, batch: DataFrame) -> tuple[list[Transition], int, bool]:
        """A Spark micro-batch of the stage's union (`_source`-tagged rows): collected and stepped on the driver,
        or, above `driver_max_rows`, stepped cluster by cluster on the executors. (transitions, rows, executors)"""
        routed = route(batch, self.driver_max_rows, lambda rows: self.engine.step(shape_union(rows)),
                       self._on_executors)
        return routed.result, routed.rows, routed.on_executors

    def step_tables(self, tables: dict[str, pd.DataFrame]) -> list[Transition]:
        """A micro-batch already on the driver, one frame per table."""
        return self.engine.step(shape_tables(tables))

    def publish(self, batch_id: int, transitions: list[Transition], rows_in: int, began: float,
                on_executors: bool = False) -> list[dict[str, Any]]:
        """Hand the transitions to the webhook lanes, then write the three gold tables; the events written."""
        events = self.hand_over(batch_id, transitions)
        self.record(batch_id, events, rows_in, began, on_executors)
        return events

    def hand_over(self, batch_id: int, transitions: list[Transition]) -> list[dict[str, Any]]:
        """The transitions as events (their ids fixed by the batch), handed to the webhook lanes: nothing waits
        for a commit. `record` must follow before the batch ends."""
        events = event_rows(transitions, batch_id, datetime.now(UTC))
        if self.dispatcher is not None:
            self.dispatcher.submit(events)
        if self.dispatcher is not None and kill_points.armed(self.job, batch_id, "after_delivery"):
            self.dispatcher.wait_idle(30)  # the receivers have them: the kill falls between delivery and commit
            kill_points.reached(self.job, batch_id, "after_delivery")
        return events

    def record(self, batch_id: int, events: list[dict[str, Any]], rows_in: int, began: float,
               on_executors: bool = False) -> None:
        """gold.alert_events (a batch with transitions), gold.alerts and the engine's state, each once per batch (the
        state last)."""
        self.write(self.snapshot(batch_id, events, rows_in, began, on_executors))

    def snapshot(self, batch_id: int, events: list[dict[str, Any]], rows_in: int, began: float,
                 on_executors: bool = False) -> BatchRecord:
        """What `write` commits for the batch, taken from the engine now: the engine may step on meanwhile."""
        state = [{**r, "batch_id": batch_id, "engine": self.name} for r in self.engine.state.to_rows()]
        firing = sum(a.status == AlertStatus.FIRING for a in self.engine.state.alerts.values())
        return BatchRecord(batch_id, events, alert_rows(self.engine, batch_id, self.name), state, rows_in, began,
                           on_executors, firing)

    def write(self, r: BatchRecord) -> None:
        lake, batch_id = self.lakehouse, r.batch_id
        if r.events:  # a quiet batch commits nothing here: whether a batch is recorded is the state's to say
            self.versions.write_once(ALERT_EVENTS, lake,
                                     pa.Table.from_pylist(r.events, schema=ALERT_EVENTS.arrow_schema), batch_id)
        kill_points.reached(self.job, batch_id, "after_events")
        self._overwrite(ALERTS, pa.Table.from_pylist(r.alerts, schema=ALERTS.arrow_schema), batch_id,
                        f"stage = '{self.name}'")
        kill_points.reached(self.job, batch_id, "after_alerts")
        self._overwrite(ALERTS_STATE, pa.Table.from_pylist(r.state, schema=ALERTS_STATE.arrow_schema), batch_id,
                        f"engine = '{self.name}'")
        kill_points.reached(self.job, batch_id, "after_state")
        s = self.stats
        s.batch_id, s.rows_in, s.transitions = batch_id, r.rows_in, len(r.events)
        s.batches += 1 + len(r.merged)
        s.executor_batches += r.on_executors
        s.firing = r.firing
        s.total_transitions += len(r.events)
        s.duration_ms = int((time.monotonic() - r.began) * 1000)
        s.busy_ms += s.duration_ms
        if any(b > 0 and b % self.maintain_every_batches == 0 for b in (*r.merged, batch_id)):
            from foundation.delta_io import compact_and_checkpoint

            compact_and_checkpoint(lake, (ALERT_EVENTS, ALERTS, ALERTS_STATE, DELIVERIES))

    def _overwrite(self, td: TableDef, rows: pa.Table, batch_id: int, predicate: str | None) -> None:
        """The other stage may commit to the same table meanwhile: Delta's conflict check can then refuse this
        commit (its rows are in other files, but the check goes by file statistics); it is tried again on the
        new version."""
        for attempt in range(COMMIT_ATTEMPTS):
            try:
                self.versions.write_once(td, self.lakehouse, rows, batch_id, mode="overwrite", predicate=predicate)
                return
            except CommitFailedError:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

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

    def stop(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.wait_idle(30)
            self.dispatcher.stop()


def build_stage(lake: str, name: str, config: AlertConfig, job: str, *,
                webhooks: bool, driver_max_rows: int, maintain_every_batches: int,
                log: Callable[[str], None]) -> AlertStage:
    """Its tables made, its state loaded, its dispatcher started (recovering the events of its rules). The caller has
    settled the rows' owners (`settle_owners`)."""
    for td in (ALERT_EVENTS, ALERTS, ALERTS_STATE):
        ensure_table(td, lake)
    engine = AlertEngine(config, load_state(lake, name))
    dispatcher = None
    if webhooks and config.receivers:
        rules = {r.name for r in config.rules}
        dispatcher = WebhookDispatcher(config, lake, log=log, owns=rules.__contains__,
                                       journal=intents_directory(lake, name)).start()
    return AlertStage(lake, name, config, engine, dispatcher, job, driver_max_rows, maintain_every_batches)
