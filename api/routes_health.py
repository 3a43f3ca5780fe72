"""GET /healthz (the process answers), GET /readyz (the lakehouse is reachable and holds the tables the API serves)
and GET /api/v1/freshness (how far the pipeline's queries are behind bronze: lakehouse_read/freshness.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from api.deps import get_freshness, get_reader, require_read
from api.page_keeper import app_page_keeper
from lakehouse_read.freshness import BEHIND_AFTER_S, Freshness
from lakehouse_read.reader import LakehouseReader

router = APIRouter(tags=["health"])

REQUIRED = ("silver.partition_state", "silver.topic_configs", "silver.broker_metrics", "gold.alerts",
            "gold.alert_events", "gold.posture", "gold.slo_status")


@router.get("/healthz", summary="Liveness")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the lakehouse is reachable and has the tables the API reads",
            responses={503: {"description": "not ready: the body names the missing tables"}})
def readyz(request: Request, reader: Annotated[LakehouseReader, Depends(get_reader)]) -> Any:
    try:
        missing = [t for t in REQUIRED if not reader.exists(t)]
    except OSError as e:
        return JSONResponse({"status": "unreachable", "detail": f"lakehouse {reader.root}: {e}"}, status_code=503)
    if missing:
        return JSONResponse({"status": "not ready", "detail": f"missing tables: {', '.join(missing)}",
                             "missing": missing}, status_code=503)
    keeper = app_page_keeper(request)
    prebuild = ({"prebuild": "off"} if keeper is None else
                {"prebuild": "on", "passes": keeper.passes, "pages_built": keeper.builds,
                 "last_pass_built": keeper.last_pass_built})
    behind = [r.reader.name for r in get_freshness(request).readers() if r.status != "current"]
    return {"status": "ready", "lakehouse": reader.root, "tables": reader.tables(), "dashboards": prebuild,
            "behind": behind}


@router.get("/api/v1/freshness", summary="How far the pipeline's queries are behind bronze",
            dependencies=[Depends(require_read)],
            description="Per query that reads bronze (validate, the alert lane): `current`, `behind` (more than "
                        f"{BEHIND_AFTER_S:g} s), `not started` or `unreadable`, and per bronze table the commits it "
                        "has not taken and since when. `notices`: what the dashboards say about it.")
def freshness(freshness: Annotated[Freshness, Depends(get_freshness)]) -> dict[str, Any]:
    readers = freshness.readers()
    return {"queries": [r.as_json() for r in readers], "notices": [s for r in readers if (s := r.sentence())]}
