"""The frames each dashboard view needs, read from the lakehouse with filters pushed down.

Every function reads only the scope's cluster and window (`scan` with a filter on run_id/cluster and
ts), reduces time series to the scope's buckets in Arrow before anything reaches pandas, and returns an
empty frame with the documented columns when the table does not exist yet or the scope has no data, so
a page can say "no data yet" instead of failing.

Bucket reductions keep the worst value of a bucket (max of a problem count, min of a margin or a
budget), so a one-second spike is still visible on a 300-point chart of a day.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from dashboards.scope import PARTITION_STATE, Scope, bucket_ts, ts_scalar, window_filter
from lakehouse_read.metrics_coverage import METRICS_COVERAGE as METRICS_COVERAGE
from lakehouse_read.metrics_coverage import metrics_coverage
from lakehouse_read.reader import LakehouseReader, UnknownTable
from pipelines import slo_spec
from schemas.bronze import UNCLEAN_ELECTIONS, EventType
from schemas.gold import AlertStatus

BROKER_METRICS = "silver.broker_metrics"
CLUSTER_EVENTS = "silver.cluster_events"
ACK_LEDGER = "silver.ack_ledger"
TOPIC_CONFIGS = "silver.topic_configs"
ALERTS = "gold.alerts"
SLO_STATUS = "gold.slo_status"
POSTURE = "gold.posture"

PARTITION_GAUGES = ("UnderReplicatedPartitions", "UnderMinIsrPartitionCount", "AtMinIsrPartitionCount")
OFFLINE_PARTITIONS = "OfflinePartitionsCount"
# Elections that may pick a leader without every committed record: the ack ledger attributes losses
# after both to "unclean_election" (broker_emulator/ledger.py).
ACTIVE_ALERT_STATUSES = (AlertStatus.FIRING.value, AlertStatus.PENDING.value)
SEVERITY_ORDER = ("critical", "warning", "info")
BURN_WINDOWS = tuple(slo_spec.BURN_WINDOWS)  # 5m, 30m, 1h, 6h, 3d: the burn_rate_* columns
# Replica states in the ISR membership view; a bucket keeps the lowest (an ISR exit is never hidden).
REPLICA_OUT_OF_ISR, REPLICA_IN_ISR, REPLICA_LEADER = 0, 1, 2
MAX_HEATMAP_PARTITIONS = 200
MAX_OFFSET_PARTITIONS = 12
MAX_MEMBERSHIP_PARTITIONS = 60  # x replication factor rows: a readable chart even at RF 3

BROKER_METRIC_COLUMNS = ["ts", "broker_id", "name", "value"]
LOSS_EVENT_COLUMNS = ["ts", "kind", "partitions", "records", "where"]
ALERT_COLUMNS = ["severity", "status", "rule", "scope", "summary", "value", "active_since", "fired_at"]
COVERAGE_COLUMNS = ["role", "node_id", "metrics_url", "reporting", "reason", "exporter_rules", "metrics_found",
                    "metrics_expected", "missing", "rules_blind", "since"]
ISR_CELL_COLUMNS = ["ts", "topic", "partition", "margin", "offline", "effective_min_isr"]
MEMBERSHIP_COLUMNS = ["ts", "partition", "broker_id", "state"]
OFFSET_COLUMNS = ["ts", "partition", "broker_id", "high_watermark", "log_end_offset"]
REJECTION_COLUMNS = ["ts", "acks", "records_failed_per_s", "records_sent_per_s"]
SLO_COLUMNS = ["ts", "slo", "sli", "objective", "sli_value", "error_budget_remaining",
               *(f"burn_rate_{w}" for w in BURN_WINDOWS), "page", "ticket"]


class IsrCells(NamedTuple):
    """The ISR heatmap's cells and how they were reduced (for the figure's subtitle)."""

    frame: pd.DataFrame
    bucket_seconds: int
    partitions_total: int


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def _scan(reader: LakehouseReader, name: str, where: ds.Expression, columns: list[str]) -> pa.Table | None:
    try:
        return reader.scan(name, where, columns)
    except UnknownTable:
        return None


def _read(reader: LakehouseReader, name: str, columns: list[str] | None = None) -> pa.Table | None:
    try:
        return reader.read(name, columns)
    except UnknownTable:
        return None


def _reduce(table: pa.Table, scope: Scope, keys: list[str], aggregations: dict[str, str]) -> pd.DataFrame:
    """Group by time bucket and `keys`, aggregate each column with its function, keep the column names."""
    reduced = bucket_ts(table, scope).group_by(["ts", *keys]).aggregate(list(aggregations.items()))
    columns = {k: reduced[k] for k in ["ts", *keys]}
    columns.update({c: reduced[f"{c}_{fn}"] for c, fn in aggregations.items()})
    return pa.table(columns).to_pandas()


# -- overview ----------------------------------------------------------------------------------------------
def broker_metrics(reader: LakehouseReader, scope: Scope,
                   names: tuple[str, ...] = (*PARTITION_GAUGES, OFFLINE_PARTITIONS)) -> pd.DataFrame:
    """Gauges by broker: the max of each bucket. Columns `BROKER_METRIC_COLUMNS`."""
    if not scope.has_data:
        return _empty(BROKER_METRIC_COLUMNS)
    where = window_filter(scope) & ds.field("name").isin(list(names))
    table = _scan(reader, BROKER_METRICS, where, ["ts", "broker_id", "name", "value"])
    if table is None or table.num_rows == 0:
        return _empty(BROKER_METRIC_COLUMNS)
    frame = _reduce(table, scope, ["broker_id", "name"], {"value": "max"})
    return frame.sort_values(["name", "broker_id", "ts"], ignore_index=True)[BROKER_METRIC_COLUMNS]


def data_loss_events(reader: LakehouseReader, scope: Scope) -> pd.DataFrame:
    """Unclean elections and acknowledged records found lost, one row per bucket and kind.

    Columns `LOSS_EVENT_COLUMNS`: `partitions` affected, `records` lost (0 when an election's loss is
    not known yet), `where` a few topic-partitions for the hover text.
    """
    if not scope.has_data:
        return _empty(LOSS_EVENT_COLUMNS)
    parts = []
    is_election = ds.field("event_type") == EventType.ELECTION.value
    elections = _scan(reader, CLUSTER_EVENTS, window_filter(scope) & is_election
                      & ds.field("cause").isin(list(UNCLEAN_ELECTIONS)), ["ts", "topic", "partition", "cause"])
    if elections is not None and elections.num_rows:
        frame = bucket_ts(elections, scope).to_pandas()
        frame["kind"] = frame["cause"].str.replace("_", " ") + " election"
        frame["records"] = 0
        parts.append(frame)
    lost = _scan(reader, ACK_LEDGER, window_filter(scope) & (ds.field("records_lost") > 0),
                 ["ts", "topic", "partition", "records_lost"])
    if lost is not None and lost.num_rows:
        frame = bucket_ts(lost, scope).to_pandas().rename(columns={"records_lost": "records"})
        frame["kind"] = "acked records lost"
        parts.append(frame)
    if not parts:
        return _empty(LOSS_EVENT_COLUMNS)
    events = pd.concat(parts, ignore_index=True)
    events["tp"] = events["topic"] + "-" + events["partition"].astype("int64").astype(str)
    grouped = events.groupby(["ts", "kind"], sort=True).agg(
        partitions=("tp", "nunique"), records=("records", "sum"),
        where=("tp", lambda s: ", ".join(sorted(set(s))[:5]) + (" …" if s.nunique() > 5 else "")))
    return grouped.reset_index()[LOSS_EVENT_COLUMNS]


def active_alerts(reader: LakehouseReader, cluster: str | None) -> pd.DataFrame:
    """Pending and firing alerts of the cluster, most severe first; a flapping alert's status says so. Columns
    `ALERT_COLUMNS`."""
    table = _read(reader, ALERTS) if cluster is not None else None   # gold.alerts is small: current state
    if table is None:
        return _empty(ALERT_COLUMNS)
    keep = pc.and_(pc.equal(table["cluster"], cluster), pc.is_in(table["status"], pa.array(ACTIVE_ALERT_STATUSES)))
    table = table.filter(keep)
    frame = table.select(ALERT_COLUMNS).to_pandas()
    if "flapping" in table.column_names:   # tables written before flap detection lack it until the job runs
        held = table["flapping"].fill_null(False).to_numpy(zero_copy_only=False)
        frame.loc[held, "status"] = frame.loc[held, "status"] + " (flapping)"
    frame["_severity"] = frame["severity"].map({s: i for i, s in enumerate(SEVERITY_ORDER)}).fillna(len(SEVERITY_ORDER))
    frame["_status"] = frame["status"].str.split(" ").str[0].map({s: i for i, s in enumerate(ACTIVE_ALERT_STATUSES)})
    frame = frame.sort_values(["_severity", "_status", "active_since", "rule"], ignore_index=True)
    return frame[ALERT_COLUMNS]


def node_metrics_coverage(reader: LakehouseReader, cluster: str | None) -> pd.DataFrame:
    """Each node's current metrics coverage in the cluster (lakehouse_read.metrics_coverage), brokers first.
    Columns `COVERAGE_COLUMNS`."""
    items = [i for i in metrics_coverage(reader) if i["cluster"] == cluster] if cluster is not None else []
    return pd.DataFrame(items, columns=COVERAGE_COLUMNS) if items else _empty(COVERAGE_COLUMNS)


# -- ISR heatmap -------------------------------------------------------------------------------------------
def isr_cells(reader: LakehouseReader, scope: Scope, max_partitions: int = MAX_HEATMAP_PARTITIONS) -> IsrCells:
    """ISR size minus effective min ISR per partition and bucket (the bucket's minimum), and whether the
    partition was offline (leader -1) at any snapshot of the bucket.

    With more than `max_partitions` partitions, the worst ones are kept: offline first, then the
    smallest margin, so the page of a large cluster shows where the trouble is.
    """
    if max_partitions < 1:
        raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
    empty = IsrCells(_empty(ISR_CELL_COLUMNS), scope.bucket_seconds, 0)
    if not scope.has_data:
        return empty
    table = _scan(reader, PARTITION_STATE, window_filter(scope),
                  ["ts", "topic", "partition", "leader", "isr", "effective_min_isr"])
    if table is None or table.num_rows == 0:
        return empty
    isr_size = pc.list_value_length(table["isr"]).cast(pa.int32())
    cells = pa.table({
        "ts": table["ts"], "topic": table["topic"], "partition": table["partition"],
        "margin": pc.subtract(isr_size, table["effective_min_isr"]),
        "offline": pc.equal(table["leader"], -1),
        "effective_min_isr": table["effective_min_isr"],
    })
    frame = _reduce(cells, scope, ["topic", "partition"],
                    {"margin": "min", "offline": "any", "effective_min_isr": "max"})
    worst = frame.groupby(["topic", "partition"]).agg(offline=("offline", "any"), margin=("margin", "min"))
    worst = worst.reset_index().sort_values(["offline", "margin", "topic", "partition"],
                                            ascending=[False, True, True, True])
    shown = worst.head(max_partitions)[["topic", "partition"]]
    frame = frame.merge(shown, on=["topic", "partition"])
    frame = frame.sort_values(["topic", "partition", "ts"], ignore_index=True)[ISR_CELL_COLUMNS]
    return IsrCells(frame, scope.bucket_seconds, len(worst))


# -- topics ------------------------------------------------------------------------------------------------
def topic_names(reader: LakehouseReader, scope: Scope) -> list[str]:
    """Topics of the cluster: configured ones (silver.topic_configs) and those in the latest snapshot.

    Every topic page asks (is its topic known?): remembered per partition_state version, cluster and
    topic_configs version, a few entries per version."""
    if not scope.has_data or scope.end is None:
        return []
    key = f"topic_names/{scope.cluster}/{scope.end.isoformat()}/{reader.version_or_none(TOPIC_CONFIGS)}"
    try:
        return list(reader.derive(PARTITION_STATE, key, lambda r: _topic_names(r, scope)))
    except UnknownTable:  # no snapshot yet: nothing to remember it by
        return list(_topic_names(reader, scope))


def _topic_names(reader: LakehouseReader, scope: Scope) -> tuple[str, ...]:
    assert scope.end is not None  # topic_names checked it
    names: set[str] = set()
    configs = _read(reader, TOPIC_CONFIGS, ["run_id", "topic"])
    if configs is not None:
        names.update(configs.filter(pc.equal(configs["run_id"], scope.cluster))["topic"].to_pylist())
    latest = _scan(reader, PARTITION_STATE,
                   (ds.field("run_id") == scope.cluster) & (ds.field("ts") >= ts_scalar(scope.end)), ["topic"])
    if latest is not None:
        names.update(pc.unique(latest["topic"]).to_pylist())
    return tuple(sorted(names))


# What a topic page reads of partition_state: one scan serves both its membership and its offsets views.
TOPIC_STATE_COLUMNS = ["ts", "partition", "leader", "replicas", "isr", "high_watermark", "replica_leos"]


def topic_state(reader: LakehouseReader, scope: Scope, topic: str) -> pa.Table | None:
    """The topic's partition snapshots in the scope (`TOPIC_STATE_COLUMNS`), None when there are none."""
    if not scope.has_data:
        return None
    table = _scan(reader, PARTITION_STATE, window_filter(scope) & (ds.field("topic") == topic), TOPIC_STATE_COLUMNS)
    return table if table is not None and table.num_rows else None


def _per_replica(table: pa.Table) -> pa.Table:
    """One row per (snapshot, assigned replica): the snapshot's columns repeated, plus `broker_id`."""
    parent = pc.list_parent_indices(table["replicas"])
    columns = {name: table[name].take(parent) for name in table.column_names if name != "replicas"}
    return pa.table({**columns, "broker_id": pc.list_flatten(table["replicas"])})


def topic_isr_membership(reader: LakehouseReader, scope: Scope, topic: str,
                         max_partitions: int = MAX_MEMBERSHIP_PARTITIONS) -> pd.DataFrame:
    """`isr_membership` of the topic's snapshots."""
    return isr_membership(topic_state(reader, scope, topic), scope, max_partitions)


def isr_membership(state: pa.Table | None, scope: Scope, max_partitions: int = MAX_MEMBERSHIP_PARTITIONS
                   ) -> pd.DataFrame:
    """Per partition, replica and bucket: leader (2), in the ISR (1) or out of it (0), the bucket's
    lowest, from `topic_state` rows. With more than `max_partitions` partitions, those with the most
    out-of-ISR buckets are kept. Columns `MEMBERSHIP_COLUMNS`."""
    if max_partitions < 1:
        raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
    if state is None:
        return _empty(MEMBERSHIP_COLUMNS)
    table = state.select(["ts", "partition", "leader", "replicas", "isr"])
    # Membership of each replica in its own row's ISR, vectorised: key every (row, broker) pair.
    row_key = pa.array(range(table.num_rows), pa.int64())
    replicas = _per_replica(table.append_column("row", row_key))
    isr_keys = pc.add(pc.multiply(pc.list_parent_indices(table["isr"]).cast(pa.int64()), 1 << 31),
                      pc.list_flatten(table["isr"]).cast(pa.int64()))
    replica_keys = pc.add(pc.multiply(replicas["row"], 1 << 31), replicas["broker_id"].cast(pa.int64()))
    in_isr = pc.is_in(replica_keys, isr_keys)
    state = pc.if_else(pc.equal(replicas["broker_id"], replicas["leader"]), REPLICA_LEADER,
                       pc.if_else(in_isr, REPLICA_IN_ISR, REPLICA_OUT_OF_ISR))
    states = pa.table({"ts": replicas["ts"], "partition": replicas["partition"],
                       "broker_id": replicas["broker_id"], "state": state})
    frame = _reduce(states, scope, ["partition", "broker_id"], {"state": "min"})
    out_of_isr = frame[frame["state"] == REPLICA_OUT_OF_ISR].groupby("partition").size()
    ranked = sorted(frame["partition"].unique(), key=lambda p: (-out_of_isr.get(p, 0), p))
    frame = frame[frame["partition"].isin(ranked[:max_partitions])]
    return frame.sort_values(["partition", "broker_id", "ts"], ignore_index=True)


def topic_offsets(reader: LakehouseReader, scope: Scope, topic: str,
                  max_partitions: int = MAX_OFFSET_PARTITIONS) -> pd.DataFrame:
    """`offsets` of the topic's snapshots."""
    return offsets(topic_state(reader, scope, topic), scope, max_partitions)


def offsets(state: pa.Table | None, scope: Scope, max_partitions: int = MAX_OFFSET_PARTITIONS) -> pd.DataFrame:
    """High watermark and each replica's log end offset, at the last snapshot of every bucket, from
    `topic_state` rows.

    With more than `max_partitions` partitions, those whose replicas' LEOs spread the most are kept.
    Columns `OFFSET_COLUMNS`.
    """
    if max_partitions < 1:
        raise ValueError(f"max_partitions must be >= 1, got {max_partitions}")
    table = None if state is None else state.select(["ts", "partition", "replicas", "high_watermark", "replica_leos"])
    if table is not None:
        # A snapshot whose LEOs do not line up with its replicas cannot say whose LEO is whose: left out.
        table = table.filter(pc.equal(pc.list_value_length(table["replicas"]),
                                      pc.list_value_length(table["replica_leos"])))
    if table is None or table.num_rows == 0:
        return _empty(OFFSET_COLUMNS)
    # Offsets only grow between truncations: the bucket's last snapshot stands for the bucket.
    stamps = pa.table({"ts": table["ts"], "bucket": bucket_ts(table.select(["ts"]), scope)["ts"]})
    last = stamps.group_by("bucket").aggregate([("ts", "max")])["ts_max"]
    table = table.filter(pc.is_in(table["ts"], last))
    replicas = _per_replica(table.drop_columns(["replica_leos"]))
    frame = replicas.append_column("log_end_offset", pc.list_flatten(table["replica_leos"])).to_pandas()
    leos = frame.groupby(["ts", "partition"])["log_end_offset"]
    spread = leos.max() - leos.min()
    widest = spread.groupby("partition").max().reset_index().sort_values(
        ["log_end_offset", "partition"], ascending=[False, True]).head(max_partitions)["partition"]
    frame = frame[frame["partition"].isin(widest)].assign(ts=lambda f: f["ts"].dt.floor(f"{scope.bucket_seconds}s"))
    return frame.sort_values(["partition", "broker_id", "ts"], ignore_index=True)[OFFSET_COLUMNS]


def topic_rejections(reader: LakehouseReader, scope: Scope, topic: str) -> pd.DataFrame:
    """Records answered with an error and records sent, per acks level: the bucket's average per second
    over the topic's partitions. Columns `REJECTION_COLUMNS`."""
    if not scope.has_data:
        return _empty(REJECTION_COLUMNS)
    table = _scan(reader, ACK_LEDGER, window_filter(scope) & (ds.field("topic") == topic),
                  ["ts", "acks", "records_failed", "records_sent"])
    if table is None or table.num_rows == 0:
        return _empty(REJECTION_COLUMNS)
    per_interval = table.group_by(["ts", "acks"]).aggregate([("records_failed", "sum"), ("records_sent", "sum")])
    # Average over the intervals present, not over the bucket's width: the first and the latest bucket
    # are partly filled, and dividing by the width would understate exactly the "now" of the chart.
    interval_s = _interval_seconds(per_interval["ts"], default=scope.bucket_seconds)
    frame = _reduce(pa.table({"ts": per_interval["ts"], "acks": per_interval["acks"],
                              "records_failed": per_interval["records_failed_sum"],
                              "records_sent": per_interval["records_sent_sum"]}),
                    scope, ["acks"], {"records_failed": "mean", "records_sent": "mean"})
    frame["records_failed_per_s"] = frame["records_failed"] / interval_s
    frame["records_sent_per_s"] = frame["records_sent"] / interval_s
    return frame.sort_values(["acks", "ts"], ignore_index=True)[REJECTION_COLUMNS]


def _interval_seconds(ts: pa.ChunkedArray, default: int) -> float:
    """The metric interval: the most common gap between consecutive distinct timestamps."""
    stamps = pd.Series(pc.unique(ts).to_pandas()).sort_values()
    gaps = stamps.diff().dropna()
    if gaps.empty:
        return float(default)
    return float(gaps.mode().iloc[0].total_seconds())


# -- SLOs and posture --------------------------------------------------------------------------------------
def slo_status(reader: LakehouseReader, scope: Scope) -> pd.DataFrame:
    """SLO status per bucket: lowest budget and SLI, highest burn rates, page/ticket if they held at
    any interval. A recomputed interval counts once, as its latest computation. Columns `SLO_COLUMNS`."""
    if not scope.has_data:
        return _empty(SLO_COLUMNS)
    table = _scan(reader, SLO_STATUS, window_filter(scope, cluster_column="cluster"),
                  [*SLO_COLUMNS, "slo_batch_id"])
    if table is None or table.num_rows == 0:
        return _empty(SLO_COLUMNS)
    frame = table.to_pandas().sort_values("slo_batch_id").drop_duplicates(["slo", "ts"], keep="last")
    frame["ts"] = frame["ts"].dt.floor(f"{scope.bucket_seconds}s")
    worst = {"sli_value": "min", "error_budget_remaining": "min", **{f"burn_rate_{w}": "max" for w in BURN_WINDOWS},
             "page": "any", "ticket": "any"}
    reduced = frame.groupby(["ts", "slo", "sli", "objective"], as_index=False).agg(worst)
    return reduced.sort_values(["slo", "ts"], ignore_index=True)[SLO_COLUMNS]


def posture(reader: LakehouseReader, cluster: str | None) -> pd.DataFrame:
    """The cluster's rows of gold.posture (one per topic), by topic; every column of the table."""
    table = _read(reader, POSTURE) if cluster is not None else None
    if table is None:
        return pd.DataFrame()
    frame = table.filter(pc.equal(table["cluster"], cluster)).to_pandas()
    return frame.sort_values("topic", ignore_index=True)
