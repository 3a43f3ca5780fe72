"""Topics, partitions, brokers and posture: GET /api/v1/topics, /topics/{topic}, /brokers, /brokers/coverage,
/posture."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request

from api.deps import get_reader, require_read
from api.errors import ApiError
from api.response_cache import ResponseCache
from lakehouse_read.cluster_state import (
    broker_gauges,
    broker_racks,
    newest_cluster,
    partition_health,
    partition_snapshot,
    topic_configs,
)
from lakehouse_read.jsonable import iso, rows
from lakehouse_read.metrics_coverage import metrics_coverage
from lakehouse_read.reader import LakehouseReader, UnknownTable
from schemas.gold_durability import FINDING_COLUMNS
from schemas.kafka_metrics import CONTROLLER_NODE_ID

router = APIRouter(prefix="/api/v1", tags=["topics"], dependencies=[Depends(require_read)])

TOPIC_TABLES = ("silver.topic_configs", "silver.partition_state", "gold.posture")
FINDINGS = tuple(name.removeprefix("finding_") for name, _ in FINDING_COLUMNS)
ClusterQuery = Annotated[str | None, Query(max_length=200, description="cluster (emulator run id); default: all, "
                                           "or for one topic the cluster with the newest data")]


def _posture(reader: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
    def build(r: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
        return {(p["cluster"], p["topic"]): p for p in rows(r.read("gold.posture"))}
    try:
        return reader.derive("gold.posture", "by_cluster_topic", build)
    except UnknownTable:
        return {}


def _health_counts(parts: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"offline": 0, "under_replicated": 0, "under_min_isr": 0, "at_min_isr": 0}
    for p in parts:
        for k, v in partition_health(p).items():
            counts[k] += v
    return counts


@router.get("/topics", summary="Every topic: configuration, posture verdict and partition health now")
def list_topics(reader: Annotated[LakehouseReader, Depends(get_reader)], cluster: ClusterQuery = None
                ) -> dict[str, Any]:
    posture = _posture(reader)
    items = []
    snapshots: dict[str, list[dict[str, Any]]] = {}
    for (c, topic), cfg in sorted(topic_configs(reader).items()):
        if cluster is not None and c != cluster:
            continue
        snap = snapshots.setdefault(c, partition_snapshot(reader, c))
        p = posture.get((c, topic), {})
        items.append({k: v for k, v in cfg.items() if k != "assignment"} | {
            "verdict_class": p.get("verdict_class"), "findings": p.get("findings", []),
            "health": _health_counts([x for x in snap if x["topic"] == topic]),
            "as_of": snap[0]["ts"] if snap else None})
    return {"items": items, "total": len(items)}


@router.get("/topics/{topic}", summary="One topic: configs, posture and every partition's leader, ISR, ELR, HW, "
            "LEO and recovery state")
async def get_topic(request: Request, reader: Annotated[LakehouseReader, Depends(get_reader)],
                    topic: Annotated[str, Path(max_length=249)], cluster: ClusterQuery = None) -> dict[str, Any]:
    # The answer depends only on these tables' versions: repeated requests reuse the encoded body.
    cache: ResponseCache = request.app.state.responses
    return await cache.respond(request,  # type: ignore[return-value]
                               lambda: tuple(reader.version_or_none(t) for t in TOPIC_TABLES),
                               lambda: _topic(reader, topic, cluster))


def _topic(reader: LakehouseReader, topic: str, cluster: str | None) -> dict[str, Any]:
    configs = topic_configs(reader)
    holders = {c for c, t in configs if t == topic}
    if cluster is not None:
        holders &= {cluster}
    chosen = newest_cluster(reader, holders) or (min(holders) if holders else None)
    if chosen is None:
        where = f" in cluster {cluster!r}" if cluster is not None else ""
        raise ApiError(404, f"unknown topic {topic!r}{where}")
    cfg = configs[(chosen, topic)]
    partitions = []
    for p in partition_snapshot(reader, chosen):
        if p["topic"] != topic:
            continue
        racks = cfg["assignment"].get(p["partition"], {}).get("racks", [])
        partitions.append({
            "partition": p["partition"], "leader": p["leader"], "leader_epoch": p["leader_epoch"],
            "partition_epoch": p["partition_epoch"], "replicas": p["replicas"], "isr": p["isr"], "elr": p["elr"],
            "leader_recovery_state": p["leader_recovery_state"], "high_watermark": p["high_watermark"],
            "log_start_offset": p["log_start_offset"],
            "replica_states": [{"broker_id": b, "leo": leo, "in_isr": b in p["isr"],
                                "rack": racks[i] if i < len(racks) else None}
                               for i, (b, leo) in enumerate(zip(p["replicas"], p["replica_leos"], strict=True))],
            "effective_min_isr": p["effective_min_isr"], **partition_health(p), "ts": p["ts"]})
    return {"cluster": chosen, "topic": topic,
            "config": {k: v for k, v in cfg.items() if k not in ("assignment", "cluster", "topic")},
            "posture": _posture(reader).get((chosen, topic)), "health": _health_counts(partitions),
            "partitions": partitions}


@router.get("/brokers", summary="Brokers: rack, last report and the ISR gauges operators watch")
def list_brokers(reader: Annotated[LakehouseReader, Depends(get_reader)], cluster: ClusterQuery = None
                 ) -> dict[str, Any]:
    clusters = sorted({c for c, _ in topic_configs(reader)})
    if cluster is not None:
        if cluster not in clusters:
            raise ApiError(404, f"unknown cluster {cluster!r}")
        clusters = [cluster]
    items = []
    for c in clusters:
        racks = broker_racks(reader, c)
        gauges = broker_gauges(reader, c)
        for b in sorted(set(racks) | set(gauges)):
            g = gauges.get(b, {})
            # The active KRaft controller reports controller metrics under its own node id.
            role = "controller" if b == CONTROLLER_NODE_ID else "broker"
            items.append({"cluster": c, "broker_id": b, "role": role, "rack": racks.get(b) or None,
                          "last_reported": iso(g["last_reported"]) if g else None,
                          "reporting": bool(g.get("reporting", False)), "gauges": g.get("gauges", {})})
    return {"items": items, "total": len(items)}


@router.get("/brokers/coverage", summary="Per broker and controller: the exporter rules its metrics come under, the "
            "metrics isrwatch reads found of those expected, the missing ones and the alert rules they blind")
def list_metrics_coverage(reader: Annotated[LakehouseReader, Depends(get_reader)], cluster: ClusterQuery = None
                          ) -> dict[str, Any]:
    items = metrics_coverage(reader)
    if cluster is not None:
        if cluster not in {i["cluster"] for i in items}:
            raise ApiError(404, f"unknown cluster {cluster!r}")
        items = [i for i in items if i["cluster"] == cluster]
    return {"items": items, "total": len(items)}


@router.get("/posture", summary="Configuration posture per topic: headroom, loss tolerance, failure domains, "
            "verdict, findings")
def list_posture(
    reader: Annotated[LakehouseReader, Depends(get_reader)],
    cluster: ClusterQuery = None,
    finding: Annotated[Literal[FINDINGS] | None, Query(description="only topics with this finding")] = None,  # type: ignore[valid-type]
) -> dict[str, Any]:
    items = [p for (c, _), p in sorted(_posture(reader).items())
             if (cluster is None or c == cluster) and (finding is None or finding in p["findings"])]
    return {"items": items, "total": len(items)}
