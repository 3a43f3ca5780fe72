"""The newest state of each cluster, read from the big time series without scanning them: the newest
timestamp per cluster comes from Delta file statistics, and only the rows at that timestamp are read.
Every result is remembered until its table's next version."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from lakehouse_read.jsonable import rows
from lakehouse_read.reader import LakehouseReader, UnknownTable

GAUGES = ("UnderReplicatedPartitions", "UnderMinIsrPartitionCount", "AtMinIsrPartitionCount", "LeaderCount",
          "PartitionCount", "OfflinePartitionsCount", "ActiveControllerCount")
BROKER_LOOKBACK = timedelta(minutes=10)


def latest_by_cluster(reader: LakehouseReader, table: str) -> dict[str, datetime]:
    """Newest `ts` per run_id. Files holding one run answer from their statistics; a file mixing runs
    (a micro-batch of several clusters) has its two columns read."""
    def build(r: LakehouseReader) -> dict[str, datetime]:
        actions = pa.table(r.delta_table(table).get_add_actions(flatten=True))
        out: dict[str, datetime] = {}
        if {"min.run_id", "max.run_id", "max.ts"} <= set(actions.column_names):
            for lo, hi, ts in zip(actions["min.run_id"].to_pylist(), actions["max.run_id"].to_pylist(),
                                  actions["max.ts"].to_pylist(), strict=True):
                if lo is None or hi is None or ts is None or lo != hi:
                    break           # no statistics, or a file mixing runs: read the two columns instead
                if lo not in out or ts > out[lo]:
                    out[lo] = ts
            else:
                return out
        whole = r.read(table, ["run_id", "ts"]).group_by("run_id").aggregate([("ts", "max")])
        return dict(zip(whole["run_id"].to_pylist(), whole["ts_max"].to_pylist(), strict=True))
    try:
        return reader.derive(table, "latest_by_cluster", build)
    except UnknownTable:
        return {}


def newest_cluster(reader: LakehouseReader, candidates: set[str] | None = None) -> str | None:
    """The cluster with the newest partition state (among `candidates`, when given); on a tie the smallest
    name, so the choice is stable."""
    latest = latest_by_cluster(reader, "silver.partition_state")
    pool = {c: ts for c, ts in latest.items() if candidates is None or c in candidates}
    if not pool:
        return None
    newest = max(pool.values())
    return min(c for c, ts in pool.items() if ts == newest)


def partition_snapshot(reader: LakehouseReader, cluster: str) -> list[dict[str, Any]]:
    """Every partition of a cluster at its newest partition_state timestamp, sorted by topic, partition."""
    def build(r: LakehouseReader) -> list[dict[str, Any]]:
        ts = latest_by_cluster(r, "silver.partition_state").get(cluster)
        if ts is None:
            return []
        snap = r.scan("silver.partition_state", (ds.field("run_id") == cluster) & (ds.field("ts") == ts))
        snap = snap.drop_columns([c for c in ("batch_id", "ingested_at") if c in snap.column_names])
        return rows(snap.sort_by([("topic", "ascending"), ("partition", "ascending")]))
    try:
        return reader.derive("silver.partition_state", f"snapshot:{cluster}", build)
    except UnknownTable:
        return []


def partition_health(p: dict[str, Any]) -> dict[str, bool]:
    isr, replicas, m = len(p["isr"]), len(p["replicas"]), p["effective_min_isr"]
    offline = p["leader"] == -1
    return {"offline": offline, "under_replicated": not offline and isr < replicas,
            "under_min_isr": not offline and isr < m, "at_min_isr": not offline and isr == m}


def topic_configs(reader: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest configuration of each (cluster, topic), with its per-partition replicas and racks."""
    def build(r: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
        data = r.read("silver.topic_configs").sort_by([("ts", "ascending")])
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows(data):
            key = (row["run_id"], row["topic"])
            cfg = out.setdefault(key, {"cluster": row["run_id"], "topic": row["topic"], "assignment": {}})
            cfg.update({k: row[k] for k in ("partitions", "replication_factor", "min_insync_replicas",
                                            "effective_min_isr", "unclean_leader_election_enable",
                                            "elr_enabled", "segment_bytes", "retention_ms", "flush_messages")})
            cfg["config_ts"] = row["ts"]
            cfg["assignment"][row["partition"]] = {"replicas": row["replicas"], "racks": row["replica_racks"]}
        return out
    try:
        return reader.derive("silver.topic_configs", "topic_configs", build)
    except UnknownTable:
        return {}


def broker_racks(reader: LakehouseReader, cluster: str) -> dict[int, str]:
    racks: dict[int, str] = {}
    for (c, _), cfg in sorted(topic_configs(reader).items()):
        if c == cluster:
            for a in cfg["assignment"].values():
                racks.update(zip(a["replicas"], a["racks"], strict=True))
    return racks


def broker_gauges(reader: LakehouseReader, cluster: str) -> dict[int, dict[str, Any]]:
    """Per broker: when it last reported and its newest value of each gauge in GAUGES."""
    def build(r: LakehouseReader) -> dict[int, dict[str, Any]]:
        ts = latest_by_cluster(r, "silver.broker_metrics").get(cluster)
        if ts is None:
            return {}
        where = ((ds.field("run_id") == cluster) & (ds.field("ts") >= ts - BROKER_LOOKBACK)
                 & ds.field("name").isin(list(GAUGES)))
        data = r.scan("silver.broker_metrics", where, ["ts", "broker_id", "name", "value"])
        data = data.sort_by([("ts", "ascending")])
        out: dict[int, dict[str, Any]] = {}
        for b, name, value, at in zip(data["broker_id"].to_pylist(), data["name"].to_pylist(),
                                      data["value"].to_pylist(), data["ts"].to_pylist(), strict=True):
            entry = out.setdefault(b, {"gauges": {}, "last_reported": at})
            entry["gauges"][name] = value
            entry["last_reported"] = max(entry["last_reported"], at)
        for entry in out.values():
            entry["reporting"] = entry["last_reported"] == ts
        return out
    try:
        return reader.derive("silver.broker_metrics", f"gauges:{cluster}", build)
    except UnknownTable:
        return {}

