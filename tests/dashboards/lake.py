"""A small, hand-written lakehouse for the dashboard tests: two clusters, every value chosen so that a test
can compute what a view must show.

Cluster `c1` (the latest) runs 20 one-second snapshots from T0:
  orders-0  replicas [1, 2, 3], effective min ISR 2: full ISR for s 0-9 (margin +1), ISR [1] for s 10-14
            (margin -1), offline (leader -1) for s 15-16, then an unclean election makes broker 2 leader with
            ISR [2, 3] (margin 0) for s 17-19; 5 acknowledged records are lost at s 17.
  orders-1  replicas [2, 3, 1], full ISR throughout (margin +1).
  logs-0    replicas [3, 1], effective min ISR 1, full ISR (margin +1).
Cluster `c0` stopped an hour earlier: one topic `old`, 5 snapshots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from schemas.gold import ALERTS
from schemas.gold_durability import POSTURE, SLO_STATUS
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef

T0 = datetime(2026, 1, 1, tzinfo=UTC)
C0_START = T0 - timedelta(hours=1)
SECONDS = 20


def at(second: float, start: datetime = T0) -> datetime:
    return start + timedelta(seconds=second)


def _default(dtype: pa.DataType) -> Any:
    if pa.types.is_string(dtype):
        return ""
    if pa.types.is_boolean(dtype):
        return False
    if pa.types.is_floating(dtype):
        return 0.0
    if pa.types.is_integer(dtype):
        return 0
    if pa.types.is_timestamp(dtype):
        return T0
    if pa.types.is_list(dtype) or pa.types.is_map(dtype):
        return []
    raise TypeError(f"no default for {dtype}")


def table_of(td: TableDef, rows: list[dict[str, Any]]) -> pa.Table:
    """Rows as a table of `td`'s schema; unset columns get a neutral value (the tests do not read them)."""
    schema = td.arrow_schema
    full = [{f.name: row.get(f.name, None if f.nullable else _default(f.type)) for f in schema} for row in rows]
    unknown = {k for row in rows for k in row} - set(schema.names)
    assert not unknown, f"{td.qualified_name} has no columns {unknown}"
    return pa.Table.from_pylist(full, schema=schema)


def write(lake: Path, td: TableDef, rows: list[dict[str, Any]]) -> None:
    write_deltalake(str(lake / td.layer / td.name), table_of(td, rows), mode="append")


def _orders0(s: int) -> dict[str, Any]:
    if s < 10:
        leader, isr = 1, [1, 2, 3]
    elif s < 15:
        leader, isr = 1, [1]
    elif s < 17:
        leader, isr = -1, [1]
    else:
        leader, isr = 2, [2, 3]
    # Followers 2 and 3 stop fetching at s 10: their LEOs stay at 1000 while the leader's grows.
    leos = [100 * s, min(100 * s, 1000), min(100 * s, 1000)]
    return {"partition": 0, "leader": leader, "isr": isr, "replicas": [1, 2, 3], "effective_min_isr": 2,
            "high_watermark": -1 if leader == -1 else min(100 * s, 1000), "replica_leos": leos}


def partition_state_rows() -> list[dict[str, Any]]:
    rows = []
    for s in range(SECONDS):
        common = {"run_id": "c1", "ts": at(s), "topic": "orders", "configured_min_isr": 2}
        rows.append({**common, **_orders0(s)})
        rows.append({**common, "partition": 1, "leader": 2, "replicas": [2, 3, 1], "isr": [2, 3, 1],
                     "effective_min_isr": 2, "high_watermark": 50 * s, "replica_leos": [50 * s] * 3})
        rows.append({"run_id": "c1", "ts": at(s), "topic": "logs", "partition": 0, "leader": 3, "replicas": [3, 1],
                     "isr": [3, 1], "configured_min_isr": 1, "effective_min_isr": 1, "high_watermark": 10 * s,
                     "replica_leos": [10 * s, 10 * s]})
    for s in range(5):
        rows.append({"run_id": "c0", "ts": at(s, C0_START), "topic": "old", "partition": 0, "leader": 1,
                     "replicas": [1], "isr": [1], "configured_min_isr": 1, "effective_min_isr": 1,
                     "high_watermark": s, "replica_leos": [s]})
    return rows


def broker_metric_rows() -> list[dict[str, Any]]:
    rows = []
    for s in range(SECONDS):
        for broker in (1, 2):
            lagging = broker == 1 and 10 <= s <= 16
            values = {"UnderReplicatedPartitions": 1.0 if lagging else 0.0,
                      "UnderMinIsrPartitionCount": 1.0 if broker == 1 and 10 <= s <= 14 else 0.0,
                      "AtMinIsrPartitionCount": 1.0 if broker == 2 and s >= 17 else 0.0,
                      "LeaderCount": 9.0}
            rows += [{"run_id": "c1", "ts": at(s), "broker_id": broker, "name": n, "value": v}
                     for n, v in values.items()]
        rows.append({"run_id": "c1", "ts": at(s), "broker_id": 1, "name": "OfflinePartitionsCount",
                     "value": 1.0 if 15 <= s <= 16 else 0.0})
    rows.append({"run_id": "c0", "ts": at(0, C0_START), "broker_id": 1, "name": "UnderReplicatedPartitions",
                 "value": 7.0})
    return rows


def cluster_event_rows() -> list[dict[str, Any]]:
    return [
        {"run_id": "c1", "ts": at(3), "seq": 0, "event_type": "election", "topic": "orders", "partition": 1,
         "cause": "clean", "detail": "{}"},
        {"run_id": "c1", "ts": at(12), "seq": 1, "event_type": "produce_rejected", "topic": "orders", "partition": 0,
         "cause": "NOT_ENOUGH_REPLICAS", "records": 4, "detail": "{}"},
        {"run_id": "c1", "ts": at(17), "seq": 2, "event_type": "election", "broker_id": 2, "topic": "orders",
         "partition": 0, "cause": "unclean", "detail": "{}"},
    ]


def ack_ledger_rows() -> list[dict[str, Any]]:
    rows = []
    for s in range(SECONDS):
        common = {"run_id": "c1", "ts": at(s), "topic": "orders"}
        rows.append({**common, "partition": 0, "acks": "all", "records_sent": 10,
                     "records_failed": 4 if 10 <= s <= 16 else 0, "records_lost": 5 if s == 17 else 0})
        rows.append({**common, "partition": 0, "acks": "1", "records_sent": 5})
        rows.append({**common, "partition": 1, "acks": "all", "records_sent": 10,
                     "records_failed": 2 if 10 <= s <= 14 else 0})
    return rows


def alert_rows() -> list[dict[str, Any]]:
    def alert(cluster: str, status: str, severity: str, rule: str, since: int, flapping: bool = False
              ) -> dict[str, Any]:
        return {"status": status, "cluster": cluster, "severity": severity, "rule": rule, "fingerprint": rule,
                "summary": f"{rule} on orders-0", "value": 1.0, "active_since": at(since),
                "fired_at": at(since) if status != "pending" else None, "flapping": flapping}
    return [alert("c1", "pending", "warning", "UnderReplicated", 10),
            alert("c1", "firing", "warning", "AtMinIsr", 17, flapping=True),
            alert("c1", "firing", "critical", "UnderMinIsr", 10), alert("c1", "resolved", "critical", "Offline", 15),
            alert("c0", "firing", "critical", "OldAlert", 0)]


def slo_rows() -> list[dict[str, Any]]:
    rows = []
    for s in range(SECONDS):
        rows.append({"slo": "write-availability", "cluster": "c1", "ts": at(s), "sli": "write_availability",
                     "objective": 0.999, "sli_value": 1.0, "error_budget_remaining": 1.0 - 0.01 * s,
                     "burn_rate_1h": float(s), "page": s >= 15, "slo_batch_id": 1})
        rows.append({"slo": "acked-durability", "cluster": "c1", "ts": at(s), "sli": "acked_durability",
                     "objective": 0.99999, "sli_value": 1.0, "error_budget_remaining": 1.0, "slo_batch_id": 1})
    # The last interval recomputed by a later batch: that one counts.
    rows.append({"slo": "write-availability", "cluster": "c1", "ts": at(SECONDS - 1), "sli": "write_availability",
                 "objective": 0.999, "sli_value": 0.9, "error_budget_remaining": 0.5, "burn_rate_1h": 30.0,
                 "page": True, "ticket": True, "slo_batch_id": 2})
    return rows


def posture_rows() -> list[dict[str, Any]]:
    return [
        {"cluster": "c1", "topic": "orders", "partitions": 2, "replication_factor": 3, "configured_min_isr": 2,
         "effective_min_isr": 2, "verdict_class": "durable-and-available", "failure_domains": 3, "findings": []},
        {"cluster": "c1", "topic": "logs", "partitions": 1, "replication_factor": 2, "configured_min_isr": 1,
         "effective_min_isr": 1, "verdict_class": "single-copy-acks", "failure_domains": 2,
         "finding_rf_below_3": True, "finding_rf2_trap": True, "findings": ["rf_below_3", "rf2_trap"],
         "finding_count": 2},
        {"cluster": "c0", "topic": "old", "verdict_class": "no-durability", "findings": ["rf_below_3"]},
    ]


def topic_config_rows() -> list[dict[str, Any]]:
    return [{"run_id": run, "ts": T0, "topic": topic, "partition": p}
            for run, topic, p in (("c1", "orders", 0), ("c1", "orders", 1), ("c1", "logs", 0), ("c0", "old", 0))]


def build_lake(root: Path) -> Path:
    silver = SILVER_TABLES
    write(root, silver["partition_state"], partition_state_rows())
    write(root, silver["broker_metrics"], broker_metric_rows())
    write(root, silver["cluster_events"], cluster_event_rows())
    write(root, silver["ack_ledger"], ack_ledger_rows())
    write(root, silver["topic_configs"], topic_config_rows())
    write(root, ALERTS, alert_rows())
    write(root, SLO_STATUS, slo_rows())
    write(root, POSTURE, posture_rows())
    return root
