"""Gold tables for configuration posture (jobs/posture.py) and durability SLOs (jobs/slo.py)."""

from __future__ import annotations

import pyarrow as pa

from schemas.bronze import TS
from schemas.table import TableDef, columns

FINDING_COLUMNS = (
    ("finding_min_isr_above_rf", "min.insync.replicas > RF: the broker silently caps it at RF"),
    ("finding_min_isr_one", "effective min ISR is 1: acks=all can be satisfied by a single copy"),
    ("finding_rf_below_3", "RF < 3"),
    ("finding_rf2_trap", "RF = 2: no min.insync.replicas is both durable and available under one failure"),
    ("finding_unclean_enabled", "unclean.leader.election.enable=true: an out-of-sync leader can lose acked data"),
    ("finding_shared_failure_domain", "some partition keeps two replicas in one rack/AZ"),
    ("finding_rf_equals_brokers", "RF = broker count: no spare broker to re-replicate onto after a loss"),
)

_POSTURE = (
    ("cluster", pa.string(), False, "the cluster (emulator run id)"),
    ("ts", TS, False, "event time of the configuration this snapshot describes"),
    ("topic", pa.string(), False, "topic name"),
    ("partitions", pa.int32(), False, "partitions of the topic"),
    ("replication_factor", pa.int32(), False, "RF (the smallest over the topic's partitions)"),
    ("configured_min_isr", pa.int32(), False, "min.insync.replicas as configured"),
    ("effective_min_isr", pa.int32(), False, "min(min.insync.replicas, RF): what the broker enforces"),
    ("unclean_leader_election_enable", pa.bool_(), False, "unclean.leader.election.enable"),
    ("elr_enabled", pa.bool_(), False, "eligible leader replicas (KIP-966) enabled"),
    ("brokers", pa.int32(), True, "brokers in the cluster (null until the run's metadata arrives)"),
    ("racks_configured", pa.bool_(), False, "every replica's broker has broker.rack set"),
    ("failure_domains", pa.int32(), False, "fewest independent failure domains (racks; a broker without a rack "
     "is its own) holding one partition's replicas"),
    ("partitions_sharing_domain", pa.int32(), False, "partitions with two replicas in one failure domain"),
    ("availability_headroom", pa.int32(), False, "max(RF - M, 0): replicas that can fail while acks=all writes "
     "continue"),
    ("zero_loss_tolerance", pa.int32(), False, "M - 1: failures an acknowledged acks=all record survives (the "
     "ISR that acknowledged it held at least M copies); the seed table's 'zero acked loss' column"),
    ("redundancy_bound", pa.int32(), False, "RF - 1: copies that can be lost without losing a committed record"),
    ("failure_probability", pa.float64(), False, "p: probability one broker loses its copy in the chosen window "
     "(conf/pipeline.yaml posture.failure_probability)"),
    ("p_all_copies_lost", pa.float64(), False, "p ** failure_domains: correlated replicas collapse the exponent"),
    ("p_all_copies_lost_if_independent", pa.float64(), False, "p ** RF: what the same RF would give with "
     "independent replicas"),
    ("verdict", pa.string(), False, "the verdict of the RF/min.insync.replicas table (derived by class off-table)"),
    ("verdict_class", pa.string(), False, "no-durability, durable-not-available, single-copy-acks or "
     "durable-and-available"),
    ("verdict_row", pa.string(), True, "the table row matched, e.g. 'RF=3/M=2'; null when derived"),
    *((name, pa.bool_(), False, doc) for name, doc in FINDING_COLUMNS),
    ("findings", pa.list_(pa.string()), False, "names of the findings that hold (finding_* without the prefix)"),
    ("finding_count", pa.int32(), False, "number of findings"),
    ("posture_batch_id", pa.int64(), False, "the posture query's micro-batch that computed this snapshot"),
)

_schema, _docs = columns(*_POSTURE)
POSTURE = TableDef(
    "gold", "posture", _schema, ("cluster", "topic"),
    "Current configuration posture: one row per cluster and topic (the latest snapshot).", _docs,
)
POSTURE_HISTORY = TableDef(
    "gold", "posture_history", _schema, ("cluster", "ts", "topic"),
    "Every posture snapshot (all of a cluster's topics, each time a topic config or the broker count "
    "changed); the alerts job reads posture findings from here.", _docs,
)

_schema, _docs = columns(
    ("slo", pa.string(), False, "SLO name (conf/slos.yaml)"),
    ("cluster", pa.string(), False, "the cluster (emulator run id)"),
    ("ts", TS, False, "end of the metric interval"),
    ("sli", pa.string(), False, "write_availability, read_availability, acked_durability or multi_copy_acks"),
    ("bad", pa.float64(), False, "events against the SLO in the interval: partition-intervals failing the SLI, "
     "or acknowledged records found lost"),
    ("total", pa.float64(), False, "all events in the interval: partition-intervals, or records acknowledged"),
    ("slo_batch_id", pa.int64(), False, "the SLO query's micro-batch that wrote the slice"),
)
SLO_TIMESLICES = TableDef(
    "gold", "slo_timeslices", _schema, ("slo", "cluster", "ts", "slo_batch_id"),
    "Per SLO, cluster and metric interval: bad and total events (what every window is summed from).", _docs,
)

_schema, _docs = columns(
    ("slo", pa.string(), False, "SLO name"),
    ("cluster", pa.string(), False, "the cluster (emulator run id)"),
    ("ts", TS, False, "the interval this status is evaluated at"),
    ("sli", pa.string(), False, "the SLI kind"),
    ("objective", pa.float64(), False, "objective as a fraction (99.9 % -> 0.999)"),
    ("window", pa.string(), False, "the rolling SLO window, e.g. '28d'"),
    ("bad_window", pa.float64(), False, "bad events over the window"),
    ("total_window", pa.float64(), False, "all events over the window"),
    ("sli_value", pa.float64(), False, "1 - bad_window / total_window (1.0 when nothing happened)"),
    ("error_budget_remaining", pa.float64(), False, "1 - error ratio / (1 - objective) over the window; "
     "negative once the budget is overspent"),
    ("burn_rate_5m", pa.float64(), False, "error ratio over 5 min / (1 - objective)"),
    ("burn_rate_30m", pa.float64(), False, "error ratio over 30 min / (1 - objective)"),
    ("burn_rate_1h", pa.float64(), False, "error ratio over 1 h / (1 - objective)"),
    ("burn_rate_6h", pa.float64(), False, "error ratio over 6 h / (1 - objective)"),
    ("burn_rate_3d", pa.float64(), False, "error ratio over 3 days / (1 - objective)"),
    ("page", pa.bool_(), False, "a page burn condition holds (default 1h & 5m > 14.4, or 6h & 30m > 6)"),
    ("ticket", pa.bool_(), False, "a ticket burn condition holds (default 3d & 6h > 1)"),
    ("slo_batch_id", pa.int64(), False, "the SLO query's micro-batch that computed it"),
)
SLO_STATUS = TableDef(
    "gold", "slo_status", _schema, ("slo", "cluster", "ts", "slo_batch_id"),
    "SLO status at every metric interval: SLI over the window, error budget left, burn rates, and whether a "
    "page or ticket condition holds (the alerts job turns those into alerts).", _docs,
)

GOLD_DURABILITY_TABLES: tuple[TableDef, ...] = (POSTURE, POSTURE_HISTORY, SLO_TIMESLICES, SLO_STATUS)
