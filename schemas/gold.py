"""Gold tables: alert transitions and current state, webhook deliveries, and the alert engine's state."""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from schemas.bronze import TS
from schemas.expectations import in_set, not_null
from schemas.table import TableDef, columns

LABELS = pa.map_(pa.string(), pa.string())


class AlertStatus(StrEnum):
    """An alert's lifecycle (gold.alerts.status, gold.alert_events.status and previous_status)."""

    PENDING = "pending"      # the condition holds, not yet for the rule's `for`
    FIRING = "firing"
    RESOLVED = "resolved"    # was firing; the condition no longer holds
    INACTIVE = "inactive"    # was pending; the condition ended before `for`


NOTIFIED = (AlertStatus.FIRING, AlertStatus.RESOLVED)  # the transitions receivers are told of

_ALERT_COLUMNS = (
    ("rule", pa.string(), False, "alert rule name (conf/alerts.yaml), also the `alertname` label"),
    ("fingerprint", pa.string(), False, "stable id of the rule and entity: a hash of the rule and its labels"),
    ("cluster", pa.string(), False, "the cluster (emulator run id) the alert is about"),
    ("severity", pa.string(), False, "critical, warning or info"),
    ("scope", pa.string(), False, "partition, topic, broker or cluster"),
    ("labels", LABELS, False, "alertname, severity, cluster, the entity (topic/partition/broker_id) and rule labels"),
    ("summary", pa.string(), False, "rendered summary template"),
    ("description", pa.string(), False, "rendered description template"),
    ("runbook", pa.string(), False, "rendered runbook text"),
    ("value", pa.float64(), False, "the rule's `value` expression at the last sample"),
    ("inhibited", pa.bool_(), False, "an inhibiting alert was firing when this one fired: recorded, not delivered"),
    ("flapping", pa.bool_(), True, "its condition changed more often than flap_detection allows: its "
     "notifications are held back until it settles (null in rows written before flap detection existed)"),
)

_schema, _docs = columns(
    ("event_id", pa.string(), False, "'<evaluation batch>-<seq>': unique, ordered"),
    ("eval_batch_id", pa.int64(), False, "the alerts query's micro-batch that produced the transition"),
    ("seq", pa.int32(), False, "order within the micro-batch (event time, then rule, then fingerprint)"),
    ("status", pa.string(), False, "the new status: pending, firing, resolved, or inactive (pending cleared)"),
    ("previous_status", pa.string(), False, "the status before: inactive, pending, firing or resolved"),
    ("ts", TS, False, "event time of the sample that caused the transition"),
    *_ALERT_COLUMNS,
    ("starts_at", TS, False, "when it started firing (pending: when the condition began)"),
    ("ends_at", TS, True, "when it resolved (or the pending condition cleared); null otherwise"),
    ("evaluated_at", TS, False, "wall time the micro-batch was evaluated"),
)
ALERT_EVENTS = TableDef(
    "gold", "alert_events", _schema, ("event_id",),
    "Every alert lifecycle transition, in order: what webhooks are sent from.", _docs,
    expectations=(*not_null("event_id", "status", "rule", "fingerprint"),
                  in_set("status", [s.value for s in AlertStatus])),
)

_schema, _docs = columns(
    ("status", pa.string(), False, "pending, firing or resolved (resolved ones stay for resolved_retention)"),
    *_ALERT_COLUMNS,
    ("active_since", TS, False, "when the condition began to hold"),
    ("fired_at", TS, True, "when it started firing"),
    ("resolved_at", TS, True, "when it resolved"),
    ("last_evaluated", TS, False, "event time of the last sample evaluated for it"),
    ("updated_batch_id", pa.int64(), False, "the alerts micro-batch that last wrote this table"),
    ("stage", pa.string(), True, "the stage holding it: silver (validate), lane (the alert lane) or gold (the alerts "
     "job); each overwrites its own rows"),
)
ALERTS = TableDef(
    "gold", "alerts", _schema, ("fingerprint",),
    "Current state: one row per rule and entity with an open (pending/firing) or recently resolved alert.", _docs,
)

_schema, _docs = columns(
    ("kind", pa.string(), False, "alert, last_seen (a broker's last metrics) or window (a rule's trailing samples)"),
    ("key", pa.string(), False, "rule/fingerprint or cluster/broker_id"),
    ("state", pa.string(), False, "JSON"),
    ("batch_id", pa.int64(), False, "the micro-batch (of its engine's job) this state is the result of"),
    ("engine", pa.string(), True, "the stage holding it: silver (validate), lane (the alert lane) or gold (the "
     "alerts job)"),
)
ALERTS_STATE = TableDef(
    "gold", "alerts_engine_state", _schema, ("kind", "key"),
    "Internal: the alert engine's state after the last micro-batch (restored on restart).", _docs,
)

_schema, _docs = columns(
    ("delivery_id", pa.string(), False, "'<event_id>@<receiver>': the same across retries (X-Isrwatch-Delivery)"),
    ("event_id", pa.string(), False, "gold.alert_events.event_id delivered"),
    ("receiver", pa.string(), False, "receiver name (conf/alerts.yaml)"),
    ("rule", pa.string(), False, "alert rule"),
    ("fingerprint", pa.string(), False, "alert fingerprint"),
    ("alert_status", pa.string(), False, "firing or resolved"),
    ("attempt", pa.int32(), False, "1 for the first attempt; X-Isrwatch-Attempt"),
    ("outcome", pa.string(), False, "sending: the attempt's intent, committed before its POST; then the row that "
     "ends the attempt: delivered, retry (will try again), rejected (4xx, not retried), gave_up, silenced (an active "
     "silence matched: not sent), not_sent (stopped before the POST), unknown (no outcome was recorded before a "
     "crash: the receiver may have got it; sent again)"),
    ("http_status", pa.int32(), True, "the receiver's HTTP status, null when no response"),
    ("error", pa.string(), True, "why it failed (connection error, timeout, status text)"),
    ("attempted_at", TS, False, "wall time the row was written: the intent's commit, or the attempt's end"),
    ("duration_ms", pa.float64(), False, "wall time the POST took (0 for rows without a POST)"),
    ("next_attempt_at", TS, True, "for retry: when the next attempt is due"),
)
# An attempt is two rows with the same (delivery_id, attempt): its intent (`sending`, absent when nothing was to
# be sent: silenced) and its end; count attempts as rows with outcome <> 'sending'.
class DeliveryOutcome(StrEnum):
    """gold.deliveries.outcome: how one attempt ended, or `sending`, its intent."""

    SENDING = "sending"      # the intent, committed before the POST
    DELIVERED = "delivered"  # 2xx
    RETRY = "retry"          # failed, tried again later
    REJECTED = "rejected"    # a 4xx other than 408/429: not tried again
    GAVE_UP = "gave_up"      # retries exhausted
    SILENCED = "silenced"    # not sent: a silence matched
    NOT_SENT = "not_sent"    # the dispatcher stopped before the POST
    UNKNOWN = "unknown"      # no outcome recorded before the dispatcher stopped: the receiver may have got it


DELIVERY_OUTCOMES = tuple(o.value for o in DeliveryOutcome if o is not DeliveryOutcome.SENDING)
DELIVERIES = TableDef(
    "gold", "deliveries", _schema, ("delivery_id", "attempt", "outcome"),
    "Every webhook delivery attempt: its intent, written before the POST, and its outcome.", _docs,
    expectations=(in_set("outcome", [o.value for o in DeliveryOutcome]),),
)

GOLD_ALERT_TABLES: tuple[TableDef, ...] = (ALERT_EVENTS, ALERTS, ALERTS_STATE, DELIVERIES)
