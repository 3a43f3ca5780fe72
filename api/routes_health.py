"""GET /healthz (the process answers) and GET /readyz (the lakehouse is reachable and holds the tables the
API serves)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from api.deps import get_reader
from api.page_keeper import app_page_keeper
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
    return {"status": "ready", "lakehouse": reader.root, "tables": reader.tables(), "dashboards": prebuild}
