"""GET /api/v1/slos (every SLO's latest status per cluster) and GET /api/v1/slos/{name} (spec, status over
time, timeslices)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import pyarrow.dataset as ds
from fastapi import APIRouter, Depends, Path, Query, Request

from api.deps import get_reader, get_settings, require_read
from api.errors import ApiError
from lakehouse_read.jsonable import rows
from lakehouse_read.reader import LakehouseReader, UnknownTable
from pipelines.slo_spec import Slo

router = APIRouter(prefix="/api/v1", tags=["slos"], dependencies=[Depends(require_read)])


def _spec(slo: Slo) -> dict[str, Any]:
    def conditions(cs: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [{"long": c.long, "short": c.short, "factor": c.factor} for c in cs]
    return {"name": slo.name, "sli": slo.sli, "objective": slo.objective, "window": slo.window,
            "topics": list(slo.topics), "acks": list(slo.acks), "description": slo.description,
            "page": conditions(slo.page), "ticket": conditions(slo.ticket)}


def _latest_status(reader: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest gold.slo_status row per (slo, cluster)."""
    def build(r: LakehouseReader) -> dict[tuple[str, str], dict[str, Any]]:
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows(r.read("gold.slo_status")):
            key = (row["slo"], row["cluster"])
            if key not in latest or (row["ts"], row["slo_batch_id"]) > (latest[key]["ts"], latest[key]["slo_batch_id"]):
                latest[key] = row
        return latest
    try:
        return reader.derive("gold.slo_status", "latest_by_slo_cluster", build)
    except UnknownTable:
        return {}


@router.get("/slos", summary="Every SLO: spec and latest status (SLI, budget left, burn rates) per cluster")
def list_slos(request: Request, reader: Annotated[LakehouseReader, Depends(get_reader)]) -> dict[str, Any]:
    slos: tuple[Slo, ...] = request.app.state.slos
    latest = _latest_status(reader)
    items = [{**_spec(s), "status": [latest[k] for k in sorted(latest) if k[0] == s.name]} for s in slos]
    return {"items": items, "total": len(items)}


@router.get("/slos/{name}", summary="One SLO: spec, status over time and timeslices")
def get_slo(
    request: Request,
    reader: Annotated[LakehouseReader, Depends(get_reader)],
    name: Annotated[str, Path(max_length=200)],
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    since: Annotated[datetime | None, Query(description="status rows and timeslices at or after this time")] = None,
    limit: Annotated[int, Query(ge=1, description="newest rows returned per series")] = 500,
) -> dict[str, Any]:
    if limit > get_settings(request).page_size_max:
        raise ApiError(422, f"limit: at most {get_settings(request).page_size_max}")
    slo = next((s for s in request.app.state.slos if s.name == name), None)
    if slo is None:
        raise ApiError(404, f"unknown SLO {name!r}")
    where = ds.field("slo") == name
    if cluster is not None:
        where = where & (ds.field("cluster") == cluster)
    if since is not None:
        where = where & (ds.field("ts") >= since)
    return {**_spec(slo),
            "status": [v for k, v in sorted(_latest_status(reader).items()) if k[0] == name
                       and (cluster is None or k[1] == cluster)],
            "history": _newest(reader, "gold.slo_status", where, limit),
            "timeslices": _newest(reader, "gold.slo_timeslices", where, limit)}


def _newest(reader: LakehouseReader, table: str, where: ds.Expression, limit: int) -> list[dict[str, Any]]:
    try:
        data = reader.scan(table, where)
    except UnknownTable:
        return []
    data = data.sort_by([("ts", "descending"), ("slo_batch_id", "descending")]).slice(0, limit)
    return list(reversed(rows(data)))
