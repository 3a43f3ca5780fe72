"""The collector's rows in the bronze tables' shapes (schemas/bronze.py), one batch per collection interval.

Where a real cluster does not expose what a column holds, the value is what the collector can observe, and
the column docs in docs/collector.md say so: `partition_epoch` counts the partition changes the collector
saw (Kafka keeps its own partition epoch to the controller), `leader_recovery_state` is RECOVERING for the
interval in which an unclean election was observed, and a replica's log end offset is null while its broker
does not answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from collector.cluster_view import ClusterView, Partition, TopicConfig, TopicPartition
from collector.metrics_scrape import MetricRow
from collector.observed_events import Event, Remembered
from schemas.table import TableDef


def us(ms: int | float) -> int:
    return int(ms * 1000)


def table(td: TableDef, run_id: str, batch_id: int, rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    full = [{"run_id": run_id, "batch_id": batch_id, **r} for r in rows]
    return pa.Table.from_pylist(full, schema=td.arrow_schema)


def partition_state_rows(view: ClusterView, memory: Mapping[TopicPartition, Remembered],
                         configs: Mapping[str, TopicConfig]) -> list[dict[str, Any]]:
    """One row per partition whose topic config is known, from `memory` (already updated with this view)."""
    rows = []
    for tp, p in view.partitions.items():
        config = configs.get(tp[0])
        mem = memory.get(tp)
        if config is None or mem is None:
            continue
        leos = view.log_end_offsets.get(tp, {})
        offline = p.leader < 0
        rows.append({
            "ts": us(view.ts_ms), "topic": tp[0], "partition": tp[1], "leader": p.leader,
            "leader_epoch": p.leader_epoch, "partition_epoch": mem.partition_epoch,
            "replicas": list(p.replicas), "isr": list(p.isr), "elr": list(p.elr),
            "leader_recovery_state": "RECOVERING" if mem.recovering else "RECOVERED",
            "high_watermark": -1 if offline else mem.high_watermark,
            "log_start_offset": 0 if offline else mem.log_start_offset,
            "replica_leos": [leos.get(b) for b in p.replicas],
            "configured_min_isr": config.min_insync_replicas,
            "effective_min_isr": config.effective_min_isr,
        })
    return rows


def topic_config_rows(ts_ms: int, topics: Iterable[str], configs: Mapping[str, TopicConfig], view: ClusterView,
                      racks: Mapping[int, str | None], elr_enabled: bool) -> list[dict[str, Any]]:
    wanted = set(topics)
    by_topic: dict[str, list[tuple[int, Partition]]] = {t: [] for t in wanted}
    for (t, partition), p in view.partitions.items():   # one pass, not one per topic
        if t in wanted:
            by_topic[t].append((partition, p))
    rows = []
    for topic in sorted(wanted):
        c = configs[topic]
        for partition, p in by_topic[topic]:
            rows.append({
                "ts": us(ts_ms), "topic": topic, "partition": partition, "partitions": c.partitions,
                "replication_factor": c.replication_factor, "min_insync_replicas": c.min_insync_replicas,
                "effective_min_isr": c.effective_min_isr,
                "unclean_leader_election_enable": c.unclean_leader_election_enable, "elr_enabled": elr_enabled,
                "replicas": list(p.replicas), "replica_racks": [racks.get(b) or "" for b in p.replicas],
                "segment_bytes": c.segment_bytes, "retention_ms": c.retention_ms,
                "flush_messages": c.flush_messages,
            })
    return rows


def broker_metric_rows(ts_ms: int, rows: Iterable[MetricRow]) -> list[dict[str, Any]]:
    return [{"ts": us(ts_ms), "broker_id": r.broker_id, "mbean": r.mbean, "name": r.name, "kind": r.kind,
             "value": max(float(r.value), 0.0), "count": r.count, "process_start_ts": us(r.process_start_s * 1000)}
            for r in rows]


def event_rows(events: Iterable[Event]) -> list[dict[str, Any]]:
    return [{"ts": us(e.ts_ms), "seq": e.seq, "event_type": e.event_type.value, "broker_id": e.broker_id,
             "topic": e.topic, "partition": e.partition, "leader_epoch": e.leader_epoch, "cause": e.cause,
             "records": e.records, "detail": e.detail_json()} for e in events]


def runs_row(*, scenario: str, start_ms: int, end_ms: int, interval_ms: int, broker_ids: Iterable[int],
             controller_ids: Iterable[int], final: bool, summary: str) -> dict[str, Any]:
    brokers = sorted(set(broker_ids))
    return {"scenario": scenario, "seed": 0, "start_ts": us(start_ms), "end_ts": us(end_ms),
            "metric_interval_ms": interval_ms, "brokers": max(len(brokers), 1), "broker_ids": brokers,
            "controller_ids": sorted(set(controller_ids)), "final": final, "summary": summary}

