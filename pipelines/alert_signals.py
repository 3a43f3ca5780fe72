"""Alert signals: silver rows shaped into the per-entity samples alert rules are written against.

Each source has a grain (the entity one sample describes) and documented columns; a rule's `when`
expression may use exactly these columns (checked at start-up). Pure pandas: the alerts job collects
each silver micro-batch and shapes it here, so the rule engine can be tested without Spark.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipelines.alert_samples import grouped_sum_max
from schemas.bronze import UNCLEAN_ELECTIONS, BrokerStateCause, EventType
from schemas.gold_durability import FINDING_COLUMNS
from schemas.kafka_metrics import BROKER_METERS, CONTROLLER_METERS, MBEANS

SCOPE_KEYS: dict[str, tuple[str, ...]] = {
    "replica": ("topic", "partition", "broker_id"),   # a partition's replica, by the broker that holds it
    "partition": ("topic", "partition"),
    "topic": ("topic",),
    "broker": ("broker_id",),
    "slo": ("slo",),
    "cluster": (),
}


def metric_column(key: str) -> str:
    """Column of a metric in the broker_metrics source: `ErrorsPerSec:NOT_ENOUGH_REPLICAS` ->
    `ErrorsPerSec_NOT_ENOUGH_REPLICAS` (a valid expression name)."""
    return key.replace(":", "_")


METERS = (*BROKER_METERS, *CONTROLLER_METERS)
BROKER_METRIC_COLUMNS: dict[str, str] = {
    **{metric_column(k): f"{k}: gauge value, or a meter's rate per second over the interval" for k in MBEANS},
    **{f"{metric_column(k)}_count": f"{k}: cumulative count since the broker process started" for k in METERS},
}
EVENT_COUNT_COLUMNS = {
    "isr_shrinks": "isr_shrink events", "isr_expands": "isr_expand events",
    "elections": "leader elections (any kind)", "unclean_elections": "unclean leader elections",
    "produce_not_enough_replicas": "produce requests refused with NOT_ENOUGH_REPLICAS",
    "produce_rejected": "produce requests refused (any error)",
    "truncations": "replica log truncations", "records_truncated": "records removed by truncation",
}

ISR_MEMBERSHIP_COLUMNS = {
    "isr_leaves": "times the replica's leader removed it from the ISR (it fell behind replica.lag.time.max.ms)",
    "isr_rejoins": "times it joined the ISR again",
    "isr_removed_by_controller": "times the controller removed it (its broker fenced or shut down): not a leave",
}
# The ISR events and, in their detail, the replicas each one moved (the emulator's and the collector's alike).
_ISR_MOVES = {"isr_shrink": (("removed", "isr_leaves"),), "isr_expand": (("added", "isr_rejoins"),)}


@dataclass(frozen=True)
class Source:
    """A signal source: the table it reads, its grain, its columns and how to shape it."""

    name: str
    table: str
    grain: str
    columns: dict[str, str]
    shape: Callable[[pd.DataFrame], pd.DataFrame]
    layer: str = "silver"


def _sizes(values: pd.Series) -> pd.Series:
    return values.map(lambda v: 0 if v is None else len(v)).astype("int64")


def shape_partition_state(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows[["run_id", "ts", "topic", "partition", "leader", "leader_epoch", "partition_epoch",
                "configured_min_isr", "effective_min_isr", "high_watermark"]].copy()
    out["isr_size"] = _sizes(rows["isr"])
    out["replication_factor"] = _sizes(rows["replicas"])
    out["elr_size"] = _sizes(rows["elr"])
    out["offline"] = rows["leader"] < 0
    out["recovering"] = rows["leader_recovery_state"] == "RECOVERING"
    return out


def shape_broker_metrics(rows: pd.DataFrame) -> pd.DataFrame:
    """One wide row per (run, ts, broker), sorted: a column per metric, its last value (absent metrics are NaN), and
    per meter its last cumulative count. A (run, ts, broker) none of whose values is known has no row.

    Placed with numpy rather than `pivot_table` (two of them a micro-batch, ~7 ms each on a live batch of ~100
    rows): each row's value lands in its (row, metric) cell, the last one of the batch winning."""
    runs, run_at = np.unique(rows["run_id"].to_numpy(str), return_inverse=True)
    stamps = rows["ts"] if pd.api.types.is_datetime64_any_dtype(rows["ts"]) else pd.to_datetime(rows["ts"], utc=True)
    ts = np.asarray(stamps.values)  # datetime64 in UTC, whatever the column's zone
    keys, at = np.unique(np.stack([run_at, ts.view("int64"), rows["broker_id"].to_numpy("int64")], axis=1),
                         axis=0, return_inverse=True)
    at = at.reshape(-1)
    cells = [_metric_cells(m, n, k) for m, n, k in zip(rows["mbean"], rows["name"], rows["kind"], strict=True)]
    wide = np.full((len(keys), len(BROKER_METRIC_COLUMNS)), np.nan)
    _place_last(wide, at, np.array([c[0] for c in cells], "float64"), rows["value"].to_numpy("float64"))
    known = ~np.isnan(wide).all(axis=1)  # before the counts: a row exists where a value is known
    _place_last(wide, at, np.array([c[1] for c in cells], "float64"), rows["count"].to_numpy("float64"))
    keys = keys[known]
    out = pd.DataFrame({"run_id": pd.Series(runs[keys[:, 0]], dtype=rows["run_id"].dtype),
                        "ts": _stamps_like(keys[:, 1].view(ts.dtype), stamps),
                        "broker_id": pd.Series(keys[:, 2]).astype(rows["broker_id"].dtype)})
    return pd.concat([out, pd.DataFrame(wide[known], columns=list(BROKER_METRIC_COLUMNS))], axis=1)


def _stamps_like(values: np.ndarray, stamps: pd.Series) -> pd.Series:
    out = pd.Series(values)
    return out.dt.tz_localize("UTC").dt.tz_convert(stamps.dt.tz) if stamps.dt.tz is not None else out


@functools.cache
def _metric_cells(mbean: str, name: str, kind: str) -> tuple[float, float]:
    """The columns of a metric's value and (a meter's) count in the wide frame; NaN for a metric it has none."""
    # ErrorsPerSec is one MBean name per error code: the code is the MBean's `error` key.
    error = re.search(r"error=([A-Z_]+)", mbean)
    key = f"{name}_{error.group(1)}" if error else name
    count = _COLUMN_AT.get(f"{key}_count", np.nan) if kind == "meter" else np.nan
    return _COLUMN_AT.get(key, np.nan), count


_COLUMN_AT = {c: float(i) for i, c in enumerate(BROKER_METRIC_COLUMNS)}


def _place_last(wide: np.ndarray, at: np.ndarray, column: np.ndarray, values: np.ndarray) -> None:
    """wide[at, column] = values, the last known value winning where a cell is given several; unknown metrics
    (column NaN) and unknown values are skipped."""
    ok = ~np.isnan(column) & ~np.isnan(values)
    cells = (at[ok] * wide.shape[1] + column[ok].astype("int64"))[::-1]
    cells, first_from_end = np.unique(cells, return_index=True)
    wide.flat[cells] = values[ok][::-1][first_from_end]


def shape_ack_ledger(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, ts, partition): the interval's records over all acks levels, the acks=all share, how long the
    oldest acks=all write still unacknowledged had waited at the interval's end, and the leader and ISR size it
    waited on (NaN where the writer did not see them)."""
    acks_all = (rows["acks"] == "all").to_numpy()
    isr = rows["isr"].tolist()
    summed = {c: rows[c].to_numpy() for c in ("records_sent", "records_acked", "records_failed", "records_lost")}
    summed["acks_all_acked"] = np.where(acks_all, summed["records_acked"], 0)
    # Every acks level's row of a partition gives the same leader and ISR; the writes of any level can wait.
    latest = {"acks_all_unacked_for_ms": np.where(acks_all, rows["unacked_for_ms"].to_numpy(), 0),
              "leader": rows["leader"].to_numpy("float64"),
              "isr_size": np.fromiter((np.nan if _is_null(v) else float(len(v)) for v in isr), np.float64, len(isr))}
    return grouped_sum_max(rows, ["run_id", "ts", "topic", "partition"], summed, latest)


def _is_null(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


def shape_cluster_events(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, ts, topic, partition): how many events of each kind happened (partition events only)."""
    e = rows[rows["topic"].notna() & rows["partition"].notna()]
    et, cause = e["event_type"].to_numpy(), e["cause"]
    rejected, truncation = et == EventType.PRODUCE_REJECTED, et == EventType.TRUNCATION
    elections = et == EventType.ELECTION
    counts = {
        "isr_shrinks": et == EventType.ISR_SHRINK, "isr_expands": et == EventType.ISR_EXPAND,
        "elections": elections, "unclean_elections": elections & cause.isin(UNCLEAN_ELECTIONS).to_numpy(),
        "produce_not_enough_replicas": rejected & (cause == "NOT_ENOUGH_REPLICAS").to_numpy(),
        "produce_rejected": rejected, "truncations": truncation,
        "records_truncated": np.where(truncation, e["records"].fillna(0).to_numpy(), 0),
    }
    grouped = grouped_sum_max(e, ["run_id", "ts", "topic", "partition"],
                              {c: np.asarray(v).astype("int64") for c, v in counts.items()}, {})
    grouped["partition"] = grouped["partition"].astype("int64")
    return grouped


def shape_isr_membership(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, ts, topic, partition, replica): how many times the replica left the ISR by its leader's decision,
    joined it, or was removed by the controller, from the ISR events' detail (`removed`, `added`; the controller's
    `previous_isr` and `isr`). A replica leaving again and again is what a thrashing ISR is; a broker that stops
    or restarts is removed by the controller, once, which is no leave."""
    isr_types = (EventType.ISR_SHRINK, EventType.ISR_EXPAND, EventType.ISR_CHANGE_CONTROLLER)
    isr_events = rows[rows["event_type"].isin(isr_types)
                      & rows["topic"].notna() & rows["partition"].notna()]
    out: list[tuple[object, object, str, int, int, str]] = []
    for run, ts, topic, partition, event_type, detail in zip(
            isr_events["run_id"], isr_events["ts"], isr_events["topic"], isr_events["partition"],
            isr_events["event_type"], isr_events["detail"], strict=True):
        moved = json.loads(detail) if detail else {}
        if event_type == EventType.ISR_CHANGE_CONTROLLER:
            before, after = moved.get("previous_isr") or [], moved.get("isr") or []
            changes = [(b, "isr_removed_by_controller") for b in before if b not in after]
            changes += [(b, "isr_rejoins") for b in after if b not in before]
        else:
            changes = [(b, column) for key, column in _ISR_MOVES[event_type] for b in moved.get(key) or []]
        out += [(run, ts, topic, int(partition), int(b), column) for b, column in changes]
    keys = ["run_id", "ts", "topic", "partition", "broker_id"]
    frame = pd.DataFrame(out, columns=[*keys, "column"])
    if not len(frame):
        return pd.DataFrame({**{k: pd.Series(dtype=rows[k].dtype) for k in ("run_id", "ts", "topic")},
                             **{c: pd.Series(dtype="int64") for c in ("partition", "broker_id",
                                                                      *ISR_MEMBERSHIP_COLUMNS)}})
    counts = pd.crosstab([frame[k] for k in keys], frame["column"])
    counts = counts.reindex(columns=list(ISR_MEMBERSHIP_COLUMNS), fill_value=0).astype("int64")
    counts.columns.name = None
    return counts.reset_index()


def selecting(*columns: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """Shape for gold sources, already one row per entity and time: keep the columns the source documents."""
    return lambda rows: rows[["run_id", "ts", *columns]].reset_index(drop=True)


_POSTURE_COLUMNS = {
    "partitions": "partitions of the topic", "replication_factor": "RF (smallest over the partitions)",
    "configured_min_isr": "min.insync.replicas as configured", "effective_min_isr": "min(min.insync.replicas, RF)",
    "unclean_leader_election_enable": "unclean leader election enabled", "brokers": "brokers in the cluster",
    "failure_domains": "fewest failure domains holding one partition's replicas",
    "partitions_sharing_domain": "partitions with two replicas in one failure domain",
    "availability_headroom": "max(RF - M, 0)", "zero_loss_tolerance": "M - 1",
    "p_all_copies_lost": "p ** failure_domains", "finding_count": "number of findings",
    **{name: doc for name, doc in FINDING_COLUMNS},
}
_SLO_STATUS_COLUMNS = {
    "sli_value": "SLI over the SLO window", "error_budget_remaining": "error budget left (1 = untouched)",
    **{f"burn_rate_{w}": f"burn rate over {w}" for w in ("5m", "30m", "1h", "6h", "3d")},
    "page": "a page burn condition holds", "ticket": "a ticket burn condition holds",
    "objective": "the objective as a fraction",
}
_PARTITION_STATE_COLUMNS = {
    "leader": "leader broker id (-1 offline)", "leader_epoch": "leader epoch",
    "partition_epoch": "partition epoch", "configured_min_isr": "min.insync.replicas",
    "effective_min_isr": "min(min.insync.replicas, replication factor)", "high_watermark": "leader HW",
    "isr_size": "replicas in the ISR", "replication_factor": "assigned replicas", "elr_size": "ELR size",
    "offline": "no leader", "recovering": "leader recovery state is RECOVERING (after an unclean election)",
    "hw_advance": "how far the HW moved since the partition's previous sample: records committed in the interval",
}
SOURCES: dict[str, Source] = {s.name: s for s in (
    Source("partition_state", "partition_state", "partition", _PARTITION_STATE_COLUMNS, shape_partition_state),
    Source("broker_metrics", "broker_metrics", "broker", BROKER_METRIC_COLUMNS, shape_broker_metrics),
    Source("ack_ledger", "ack_ledger", "partition", {
        "records_sent": "records sent in the interval", "records_acked": "records acknowledged",
        "records_failed": "records answered with an error",
        "records_lost": "acknowledged records found lost (ground truth: the emulator's ledger, or the canary)",
        "acks_all_acked": "records acknowledged to acks=all producers",
        "acks_all_unacked_for_ms": "how long the oldest acks=all record still unacknowledged at the interval's end "
                                   "had waited, in ms (0: none waits)",
        "leader": "the partition's leader at the interval's end (NaN: not seen)",
        "isr_size": "replicas in its ISR at the interval's end (NaN: not seen)"}, shape_ack_ledger),
    Source("cluster_events", "cluster_events", "partition", EVENT_COUNT_COLUMNS, shape_cluster_events),
    Source("isr_membership", "cluster_events", "replica", ISR_MEMBERSHIP_COLUMNS, shape_isr_membership),
    Source("posture", "posture_history", "topic", _POSTURE_COLUMNS, selecting("topic", *_POSTURE_COLUMNS),
           layer="gold"),
    Source("slo_status", "slo_status", "slo", _SLO_STATUS_COLUMNS, selecting("slo", *_SLO_STATUS_COLUMNS),
           layer="gold"),
    # Computed by the engine from broker_metrics arrivals (a broker that stops reporting has no rows) and from the
    # brokers holding replicas (one that never reported counts from when it was first seen).
    Source("broker_reports", "broker_metrics", "broker", {
        "seconds_since_report": "event time since the broker's last metrics (or, never reported, since it was first "
                                "seen holding a replica), at the cluster's latest report",
        "shut_down_cleanly": "the broker stopped with a controlled shutdown (a rolling restart) and is not back",
        "restarting": "the broker stopped with a controlled shutdown at most 10 minutes ago and is not back, or is "
                      "back less than a minute (its replicas rejoining their ISRs)"},
        lambda rows: rows),
)}


def empty_frame(source: Source, scope: str) -> pd.DataFrame:
    """A zero-row frame with a source's columns at a scope, to check expressions and templates against."""
    cols = ["run_id", "ts", *SCOPE_KEYS[scope], *source.columns]
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})


REPLICA_BROKERS = "replica_brokers"  # not a rule source: the brokers the engine expects metrics from
BROKER_STOPS = "broker_stops"        # not a rule source: brokers stopped with a controlled shutdown, and back


def shape_broker_stops(rows: pd.DataFrame) -> pd.DataFrame:
    """cluster_events rows -> (run_id, ts, broker_id, stopped): a broker stopped with a controlled shutdown
    (`broker_state` events of cause `controlled_shutdown`: a rolling restart's), and back (`unfenced`)."""
    shutdown = (rows["event_type"] == EventType.BROKER_STATE) & (rows["cause"] == BrokerStateCause.CONTROLLED_SHUTDOWN)
    back = rows["event_type"] == EventType.UNFENCED
    picked = rows[(shutdown | back) & rows["broker_id"].notna()]
    return pd.DataFrame({"run_id": picked["run_id"], "ts": picked["ts"],
                         "broker_id": picked["broker_id"].astype("int64"),
                         "stopped": (picked["event_type"] == EventType.BROKER_STATE).to_numpy()}).reset_index(drop=True)


def shape_replica_brokers(rows: pd.DataFrame) -> pd.DataFrame:
    """partition_state rows -> (run_id, ts, broker_id): each broker holding a replica, at the first time this batch
    shows it. A broker the cluster places replicas on is expected to report metrics, whether it ever did or not."""
    replicas = rows["replicas"].tolist()
    counts = np.fromiter((0 if v is None else len(v) for v in replicas), np.int64, len(replicas))
    brokers = rows[["run_id", "ts"]].iloc[np.repeat(np.arange(len(rows)), counts)].reset_index(drop=True)
    brokers["broker_id"] = np.fromiter((b for v in replicas if v is not None for b in v), np.int64,
                                       int(counts.sum()))
    return brokers.sort_values("ts", kind="stable").drop_duplicates(["run_id", "broker_id"]).reset_index(drop=True)


def shape_tables(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """A micro-batch's rows, one frame per table, shaped per source. The engine computes `broker_reports` itself,
    from broker_metrics and the brokers holding replicas (`REPLICA_BROKERS`)."""
    frames = {}
    for source in SOURCES.values():
        part = tables.get(source.table)
        if source.name == "broker_reports" or part is None or not len(part):
            continue
        frames[source.name] = source.shape(part)
        if source.name == "partition_state":
            frames[REPLICA_BROKERS] = shape_replica_brokers(part)
        if source.name == "cluster_events":
            frames[BROKER_STOPS] = shape_broker_stops(part)
    return frames


def shape_union(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A micro-batch of a union of tables (each row tagged with its table in `_source`), shaped per source."""
    return shape_tables({str(t): part.drop(columns="_source") for t, part in rows.groupby("_source", sort=False)})
