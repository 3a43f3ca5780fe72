"""Bronze tables: what the broker emulator emits, append-only, one Delta table each.

Every row carries `run_id` (one emulator run: scenario name and seed) and `batch_id` (the emulator's
flush sequence number within the run; appends are idempotent per (run_id, batch_id)).
Timestamps are UTC, microsecond precision, on the run's virtual clock.
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

from schemas.expectations import (
    BrokerRefs,
    Expect,
    a_at_least_b,
    a_greater_than_b,
    between,
    brokers_known,
    counter_not_decreasing,
    in_set,
    json_parseable,
    not_null,
    partition_history_monotonic,
    partition_in_topic,
    replication_invariants,
    within_run,
)
from schemas.kafka_metrics import MBEANS, metric_name
from schemas.table import TableDef, columns


class EventType(StrEnum):
    """bronze.cluster_events.event_type: what happened (its `cause` says why)."""

    ADMIN_ELECTION = "admin_election"
    BROKER_STATE = "broker_state"
    CONFIG_CHANGE = "config_change"
    CONSUMER_OFFSET_RESET = "consumer_offset_reset"
    ELECTION = "election"
    FAULT = "fault"
    FENCED = "fenced"
    ISR_CHANGE_CONTROLLER = "isr_change_controller"
    ISR_EXPAND = "isr_expand"
    ISR_SHRINK = "isr_shrink"
    PRODUCE_REJECTED = "produce_rejected"
    RECORDS_LOST = "records_lost"
    RECOVERY = "recovery"
    TOPIC_CREATED = "topic_created"
    TRUNCATION = "truncation"
    UNFENCED = "unfenced"


class ElectionKind(StrEnum):
    """bronze.cluster_events.cause of an `election` event: whom the controller chose (KAFKA_SEMANTICS.md)."""

    PREFERRED = "preferred"                  # the preferred replica, asked for (ElectLeaders, rebalance)
    CLEAN = "clean"                          # a member of the ISR
    ELR = "elr"                              # a member of the eligible leader replicas (KIP-966)
    LAST_KNOWN_LEADER = "last_known_leader"  # ELR on, ISR and ELR empty: the last known leader
    UNCLEAN = "unclean"                      # unclean.leader.election.enable: any live replica
    OFFLINE = "offline"                      # no replica could lead


# The elections that may lose acknowledged records: those Kafka counts in UncleanLeaderElectionsPerSec.
UNCLEAN_ELECTIONS = frozenset({ElectionKind.UNCLEAN, ElectionKind.LAST_KNOWN_LEADER})


class BrokerStateCause(StrEnum):
    """bronze.cluster_events.cause of a `broker_state` event."""

    REGISTERED = "registered"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"   # a rolling restart's: the broker asked to leave
    NOT_ANSWERING = "not_answering"               # the collector cannot reach it
    ANSWERING = "answering"


EVENT_TYPES = tuple(t.value for t in EventType)
ACKS_LEVELS = ("0", "1", "all")


def _required(schema: pa.Schema) -> tuple[Expect, ...]:
    """not-null expectations for every non-nullable column (Delta does not enforce delta-rs nullability)."""
    return not_null(*(f.name for f in schema if not f.nullable))

TS = pa.timestamp("us", tz="UTC")

_RUN = (
    ("run_id", pa.string(), False, "emulator run: '<scenario>-s<seed>'"),
    ("batch_id", pa.int64(), False, "emulator flush sequence number within the run (idempotency key)"),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "end of the metric interval the value describes (UTC)"),
    ("broker_id", pa.int32(), False, "broker that reports the metric (the active controller for controller metrics)"),
    ("mbean", pa.string(), False, "full JMX MBean name, e.g. kafka.server:type=ReplicaManager,name=IsrShrinksPerSec"),
    ("name", pa.string(), False, "the MBean's `name` key, e.g. IsrShrinksPerSec"),
    ("kind", pa.string(), False, "'gauge' (value is the current value) or 'meter' (count is cumulative)"),
    ("value", pa.float64(), False, "gauge: current value; meter: events per second over this interval"),
    ("count", pa.int64(), True, "meter: cumulative count since the broker process started; null for gauges"),
    ("process_start_ts", TS, False, "when the reporting broker process started (JMX Runtime StartTime): "
     "meters restart from zero with a new value"),
)
BROKER_METRICS = TableDef(
    "bronze", "broker_metrics", _schema, ("run_id", "ts", "broker_id", "mbean"),
    "Per-broker JMX metrics every metric interval, with Kafka's semantics (leader-side partition gauges, "
    "controller metrics only from the active controller, meters as cumulative count + interval rate).",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("broker_id", 0),
        in_set("mbean", sorted(MBEANS.values())), in_set("name", sorted({metric_name(k) for k in MBEANS})),
        in_set("kind", ["gauge", "meter"]), between("value", 0), between("count", 0),
        *within_run(), a_at_least_b("ts", "process_start_ts"), counter_not_decreasing(), brokers_known(),
    ),
    context=("run_window", "previous_count", "broker_registry"),
    broker_refs=BrokerRefs(("broker_id",), controllers=True),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "snapshot time (UTC)"),
    ("topic", pa.string(), False, "topic name"),
    ("partition", pa.int32(), False, "partition index"),
    ("leader", pa.int32(), False, "leader broker id, -1 when offline"),
    ("leader_epoch", pa.int32(), False, "current leader epoch"),
    ("partition_epoch", pa.int32(), False, "bumped by every partition change the controller commits"),
    ("replicas", pa.list_(pa.int32()), False, "assigned replicas in assignment order"),
    ("isr", pa.list_(pa.int32()), False, "in-sync replicas as committed by the controller"),
    ("elr", pa.list_(pa.int32()), False, "eligible leader replicas (KIP-966); empty when ELR is off"),
    ("leader_recovery_state", pa.string(), False, "RECOVERED or RECOVERING (after an unclean election)"),
    ("high_watermark", pa.int64(), False, "leader's high watermark (exclusive); -1 when offline"),
    ("log_start_offset", pa.int64(), False, "leader's log start offset (advanced by retention); 0 when offline"),
    ("replica_leos", pa.list_(pa.int64()), False, "log end offset of each replica, aligned with `replicas`"),
    ("configured_min_isr", pa.int32(), False, "topic min.insync.replicas"),
    ("effective_min_isr", pa.int32(), False, "min(min.insync.replicas, replication factor)"),
)
PARTITION_STATE = TableDef(
    "bronze", "partition_state", _schema, ("run_id", "ts", "topic", "partition"),
    "Snapshot of every partition's replication state, every partition-state interval.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("partition", 0), between("leader", -1),
        between("leader_epoch", 0), between("partition_epoch", 0),
        in_set("leader_recovery_state", ["RECOVERED", "RECOVERING"]), between("high_watermark", -1),
        between("log_start_offset", 0), between("configured_min_isr", 1), between("effective_min_isr", 1),
        a_at_least_b("configured_min_isr", "effective_min_isr"), *within_run(), *partition_in_topic(),
        brokers_known(), *replication_invariants(), *partition_history_monotonic(),
    ),
    context=("run_window", "topic", "broker_registry", "replication", "previous_state"),
    broker_refs=BrokerRefs(("leader", "replicas", "isr", "elr")),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "when the event happened (UTC, virtual clock)"),
    ("seq", pa.int64(), False, "event sequence number within the run, gap-free from 0"),
    ("event_type", pa.string(), False, "isr_shrink, isr_expand, isr_change_controller, election, fenced, "
     "unfenced, truncation, produce_rejected, fault, config_change, records_lost, broker_state, topic_created, "
     "admin_election (cause: the ElectLeaders result code)"),
    ("broker_id", pa.int32(), True, "broker the event concerns, if any"),
    ("topic", pa.string(), True, "topic the event concerns, if any"),
    ("partition", pa.int32(), True, "partition the event concerns, if any"),
    ("leader_epoch", pa.int32(), True, "leader epoch after the event, for partition events"),
    ("cause", pa.string(), False, "why: an election's ElectionKind, a broker_state's BrokerStateCause, a "
     "produce_rejected's Kafka error code, a fault's kind; else e.g. lag, caught_up, fenced"),
    ("records", pa.int64(), True, "records involved (truncated, rejected, lost), if any"),
    ("detail", pa.string(), False, "JSON object with the event's remaining fields"),
)
CLUSTER_EVENTS = TableDef(
    "bronze", "cluster_events", _schema, ("run_id", "seq"),
    "Discrete cluster events in the order they happened.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("seq", 0), in_set("event_type", EVENT_TYPES),
        between("broker_id", 0), between("partition", 0), between("leader_epoch", 0), between("records", 0),
        json_parseable("detail"), *within_run(), *partition_in_topic(), brokers_known(),
    ),
    context=("run_window", "topic", "broker_registry"),
    broker_refs=BrokerRefs(("broker_id",)),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "when this configuration took effect (UTC)"),
    ("topic", pa.string(), False, "topic name"),
    ("partition", pa.int32(), False, "partition index"),
    ("partitions", pa.int32(), False, "the topic's partition count"),
    ("replication_factor", pa.int32(), False, "number of assigned replicas"),
    ("min_insync_replicas", pa.int32(), False, "configured min.insync.replicas"),
    ("effective_min_isr", pa.int32(), False, "min(min.insync.replicas, replication_factor), as the broker enforces"),
    ("unclean_leader_election_enable", pa.bool_(), False, "unclean.leader.election.enable"),
    ("elr_enabled", pa.bool_(), False, "eligible leader replicas (KIP-966) enabled in the cluster"),
    ("replicas", pa.list_(pa.int32()), False, "assigned replicas in assignment order"),
    ("replica_racks", pa.list_(pa.string()), False, "rack of each assigned replica ('' when the broker has none)"),
    ("segment_bytes", pa.int64(), False, "segment.bytes"),
    ("retention_ms", pa.int64(), False, "retention.ms (-1: unlimited)"),
    ("flush_messages", pa.int64(), False, "flush.messages (Long.MAX_VALUE: never)"),
)
TOPIC_CONFIGS = TableDef(
    "bronze", "topic_configs", _schema, ("run_id", "ts", "topic", "partition"),
    "Topic configuration and replica placement, at creation and after every config change.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("partition", 0), between("partitions", 1),
        a_greater_than_b("partitions", "partition"), between("replication_factor", 1),
        between("min_insync_replicas", 1), between("effective_min_isr", 1),
        a_at_least_b("replication_factor", "effective_min_isr"), between("segment_bytes", 1),
        between("retention_ms", -1), between("flush_messages", 1), *within_run(), brokers_known(),
    ),
    context=("run_window", "broker_registry"),
    broker_refs=BrokerRefs(("replicas",)),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "end of the metric interval (UTC)"),
    ("topic", pa.string(), False, "topic name"),
    ("partition", pa.int32(), False, "partition index"),
    ("acks", pa.string(), False, "producer acks level: '0', '1' or 'all'"),
    ("records_sent", pa.int64(), False, "records producers sent in this interval"),
    ("records_acked", pa.int64(), False, "records acknowledged to the producer in this interval "
     "(acks=0: appended by the leader, the only success such a producer can know)"),
    ("records_failed", pa.int64(), False, "records answered with an error in this interval"),
    ("records_lost", pa.int64(), False, "previously acknowledged records found lost in this interval"),
    ("lost_by_event_seq", pa.int64(), True, "cluster_events.seq of the event that lost them"),
    ("lost_by", pa.string(), True, "what lost them: unclean_election, power_loss, truncate_to_hw, …; from the "
     "canary also elr_election, truncation or unattributed"),
    ("unacked_for_ms", pa.int64(), True, "how long the oldest record still waiting for its acknowledgement at the "
     "interval's end had waited, in ms (0 when none waits; null in rows written before the column existed): an "
     "acks=all write held by a stalled ISR follower shows here before Kafka shrinks the ISR or fences the broker"),
    ("leader", pa.int32(), True, "the partition's leader at the interval's end (null: none, or not seen)"),
    ("isr", pa.list_(pa.int32()), True, "the partition's ISR at the interval's end (null: not seen)"),
)
ACK_LEDGER = TableDef(
    "bronze", "ack_ledger", _schema, ("run_id", "ts", "topic", "partition", "acks"),
    "Ground truth: per partition, interval and acks level, records acknowledged and acknowledged "
    "records later lost: the emulator's ledger, or on a real cluster the collector's canary (which counts its own "
    "records only); and how long writes have been waiting, with the leader and ISR they wait on.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("partition", 0), in_set("acks", ACKS_LEVELS),
        between("records_sent", 0), between("records_acked", 0), between("records_failed", 0),
        between("records_lost", 0), between("lost_by_event_seq", 0), between("unacked_for_ms", 0),
        between("leader", 0), *within_run(), *partition_in_topic(), brokers_known(),
    ),
    context=("run_window", "topic", "broker_registry"),
    broker_refs=BrokerRefs(("leader", "isr")),
)

_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "end of the metric interval (UTC)"),
    ("group", pa.string(), False, "consumer group"),
    ("topic", pa.string(), False, "topic name"),
    ("partition", pa.int32(), False, "partition index"),
    ("position", pa.int64(), False, "the group's next offset to read"),
    ("high_watermark", pa.int64(), False, "leader's high watermark (-1 when offline): consumers never read past it"),
    ("lag", pa.int64(), False, "high_watermark - position (0 when offline)"),
    ("records_consumed", pa.int64(), False, "records the group read in this interval"),
    ("records_read_then_lost", pa.int64(), False, "records the group had read that a new leader's log no "
     "longer holds (its fetch went out of range and reset to the HW) in this interval"),
)
CONSUMER_PROGRESS = TableDef(
    "bronze", "consumer_progress", _schema, ("run_id", "ts", "group", "topic", "partition"),
    "Consumer groups reading up to the high watermark: position, lag, and records read then lost.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("partition", 0), between("position", 0),
        between("high_watermark", -1), between("lag", 0), between("records_consumed", 0),
        between("records_read_then_lost", 0), *within_run(), *partition_in_topic(),
    ),
    context=("run_window", "topic"),
)

_schema, _docs = columns(
    *_RUN,
    ("scenario", pa.string(), False, "scenario name"),
    ("seed", pa.int64(), False, "root seed"),
    ("start_ts", TS, False, "virtual time the run starts at (UTC)"),
    ("end_ts", TS, False, "virtual time of this batch's end (UTC)"),
    ("metric_interval_ms", pa.int64(), False, "metric interval"),
    ("brokers", pa.int32(), False, "brokers in the cluster"),
    ("broker_ids", pa.list_(pa.int32()), False, "the cluster's broker ids, ascending (the emulator's cluster; "
     "DescribeCluster on a real one): the registry every broker id in the run's rows must belong to"),
    ("controller_ids", pa.list_(pa.int32()), False, "node ids of the KRaft controllers, which report the "
     "controller metrics in broker_metrics"),
    ("final", pa.bool_(), False, "true on the run's last batch"),
    ("summary", pa.string(), False, "JSON run summary so far (the closing summary when final)"),
)
RUNS = TableDef(
    "bronze", "runs", _schema, ("run_id", "batch_id"),
    "One row per emulator flush: run metadata and the running summary (the last row has final=true).",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("metric_interval_ms", 1), between("brokers", 1),
        a_at_least_b("end_ts", "start_ts"), json_parseable("summary"),
    ),
)

class ExporterRules(StrEnum):
    """The naming a node's metrics came under: an exporter configuration isrwatch recognises
    (collector/exporter_dialects.py), none of them, or the emulator's own model."""

    ISRWATCH = "isrwatch"              # conf/jmx_exporter.yaml
    AGENT_DEFAULT = "agent-default"    # the JMX exporter's default naming (rules: [{pattern: ".*"}])
    STRIMZI = "strimzi"                # Strimzi's kafka-metrics.yaml
    CONFLUENT = "confluent"            # Confluent's jmx-monitoring-stacks kafka_broker.yml
    UNRECOGNISED = "unrecognised"      # an exposition with none of the series isrwatch reads
    EMULATOR = "emulator"


class NodeRole(StrEnum):
    BROKER = "broker"
    CONTROLLER = "controller"
    UNKNOWN = "unknown"                # a metrics URL isrwatch cannot tie to a node


_schema, _docs = columns(
    *_RUN,
    ("ts", TS, False, "when the node's coverage was observed: the collection interval's time (the emulator: its "
     "start)"),
    ("node_id", pa.int32(), True, "the broker or controller the URL's metrics are recorded under in broker_metrics; "
     "null while isrwatch cannot tell which node the URL is (`--metrics-url ID=URL` tells it)"),
    ("metrics_url", pa.string(), True, "the exporter endpoint scraped; null for the emulator"),
    ("role", pa.string(), False, "broker, controller, or unknown: whose metrics are expected of the node"),
    ("reporting", pa.bool_(), False, "the URL answered with an exposition"),
    ("reason", pa.string(), False, "why not, when not reporting (no answer, an HTTP error, an unparseable answer); "
     "'' when reporting"),
    ("exporter_rules", pa.string(), True, "the exporter naming recognised: isrwatch (conf/jmx_exporter.yaml), "
     "agent-default, strimzi, confluent, unrecognised; emulator; null when not reporting"),
    ("metrics_found", pa.int32(), False, "broker_metrics keys the node's exposition gave, of those expected of its "
     "role (a produce error meter Kafka has not registered yet counts as found at 0 where the naming exports them)"),
    ("metrics_expected", pa.int32(), False, "broker_metrics keys isrwatch reads from a node of this role: a "
     "broker's, the active controller's, none from a standby controller"),
    ("missing", pa.list_(pa.string()), False, "the expected keys the exposition lacks (e.g. "
     "ErrorsPerSec:NOT_ENOUGH_REPLICAS): broker_metrics has no row for them"),
    ("rules_blind", pa.list_(pa.string()), False, "alert rules (conf/alerts.yaml) whose condition reads a missing "
     "metric: they cannot fire for this node"),
)
METRICS_COVERAGE = TableDef(
    "bronze", "metrics_coverage", _schema, ("run_id", "ts", "node_id", "metrics_url"),
    "What each node's metrics endpoint gives isrwatch: the exporter naming recognised, how many of the metrics "
    "it reads were found, which are missing and which alert rules cannot fire because of them. A row per node at "
    "the start and whenever its coverage changes.",
    _docs,
    expectations=(
        *_required(_schema), between("batch_id", 0), between("node_id", 0),
        in_set("role", [r.value for r in NodeRole]), in_set("exporter_rules", [r.value for r in ExporterRules]),
        between("metrics_found", 0), between("metrics_expected", 0), a_at_least_b("metrics_expected", "metrics_found"),
        *within_run(), brokers_known(),
    ),
    context=("run_window", "broker_registry"),
    broker_refs=BrokerRefs(("node_id",), controllers=True),
)

# `runs` announces a batch and `topic_configs` describes the topics its rows refer to: the emulator commits
# them first (a reader that sees a batch's rows in any table can also see its run and its topics) and
# validate folds their rows into its context before the other tables of the same micro-batch.
REFERENCE_TABLES = (RUNS.name, TOPIC_CONFIGS.name)
# What a writer commits before the other tables of a batch, in this order: a reader that sees a batch's rows in any
# other table finds its run, its topics and its events (why an ISR shrank: a controlled shutdown) already there.
COMMITTED_FIRST = (*REFERENCE_TABLES, CLUSTER_EVENTS.name)

BRONZE_TABLES: tuple[TableDef, ...] = (
    BROKER_METRICS, PARTITION_STATE, CLUSTER_EVENTS, TOPIC_CONFIGS, ACK_LEDGER, CONSUMER_PROGRESS, RUNS,
    METRICS_COVERAGE,
)

BRONZE_BY_NAME: dict[str, TableDef] = {td.name: td for td in BRONZE_TABLES}
