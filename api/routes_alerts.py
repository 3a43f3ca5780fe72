"""GET /api/v1/alerts (filtered, paginated) and GET /api/v1/alerts/{fingerprint} (with its transitions and
deliveries)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import pyarrow.dataset as ds
from fastapi import APIRouter, Depends, Path, Query, Request

from api.deps import get_reader, get_settings, require_read
from api.errors import ApiError
from api.response_cache import ResponseCache
from lakehouse_read.jsonable import iso, rows
from lakehouse_read.reader import LakehouseReader, UnknownTable
from pipelines.silence_store import SilenceStore
from schemas.gold import AlertStatus

router = APIRouter(prefix="/api/v1", tags=["alerts"], dependencies=[Depends(require_read)])

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}
_FINGERPRINT = r"^[0-9a-f]{16}$"


def _alerts(reader: LakehouseReader) -> list[dict[str, Any]]:
    """gold.alerts as JSON rows, most urgent first: severity, then firing before pending before resolved,
    then the most recent."""
    def build(r: LakehouseReader) -> list[dict[str, Any]]:
        out = rows(r.read("gold.alerts"))
        status_rank = {AlertStatus.FIRING: 0, AlertStatus.PENDING: 1, AlertStatus.RESOLVED: 2}
        out.sort(key=lambda a: (a["fingerprint"]))
        out.sort(key=lambda a: a["fired_at"] or a["active_since"], reverse=True)
        out.sort(key=lambda a: (SEVERITY_RANK.get(a["severity"], 9), status_rank.get(a["status"], 9)))
        return out
    try:
        return reader.derive("gold.alerts", "alerts_json", build)
    except UnknownTable:
        return []


def _with_silences(alert: dict[str, Any], store: SilenceStore) -> dict[str, Any]:
    return {**alert, "silenced_by": store.matching(alert["labels"])}


def _active_silences(store: SilenceStore) -> tuple[tuple[str, int], ...]:
    now = datetime.now(UTC)
    return tuple((s.silence_id, s.version) for s in store.all() if s.state(now) == "active")


@router.get("/alerts", summary="Alerts: current state, filtered and paginated")
async def list_alerts(
    request: Request,
    reader: Annotated[LakehouseReader, Depends(get_reader)],
    state: Annotated[Literal["pending", "firing", "resolved"] | None, Query(description="alert status")] = None,
    severity: Annotated[Literal["critical", "warning", "info"] | None, Query()] = None,
    rule: Annotated[str | None, Query(max_length=200)] = None,
    cluster: Annotated[str | None, Query(max_length=200)] = None,
    topic: Annotated[str | None, Query(max_length=249)] = None,
    broker: Annotated[int | None, Query(ge=0, description="broker id (the broker_id label)")] = None,
    since: Annotated[datetime | None, Query(description="alerts still evaluated at or after this time")] = None,
    until: Annotated[datetime | None, Query(description="alerts active at or before this time")] = None,
    limit: Annotated[int, Query(ge=1, description="page size (at most api.page_size_max)")] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    settings = get_settings(request)
    if limit > settings.page_size_max:
        raise ApiError(422, f"limit: at most {settings.page_size_max}")
    if since is not None and until is not None and since > until:
        raise ApiError(422, "since: must not be after until")
    since_s, until_s = iso(since) if since else None, iso(until) if until else None

    def keep(a: dict[str, Any]) -> bool:
        labels = a["labels"]
        return ((state is None or a["status"] == state) and (severity is None or a["severity"] == severity)
                and (rule is None or a["rule"] == rule) and (cluster is None or a["cluster"] == cluster)
                and (topic is None or labels.get("topic") == topic)
                and (broker is None or labels.get("broker_id") == str(broker))
                # ISO-8601 UTC strings of one format order like the times they name
                and (since_s is None or a["last_evaluated"] >= since_s)
                and (until_s is None or a["active_since"] <= until_s))

    store: SilenceStore = request.app.state.silences

    def compute() -> dict[str, Any]:
        matched = [a for a in _alerts(reader) if keep(a)]
        page = [_with_silences(a, store) for a in matched[offset:offset + limit]]
        nxt = offset + limit if offset + limit < len(matched) else None
        return {"items": page, "total": len(matched), "limit": limit, "offset": offset, "next_offset": nxt}

    # Under one URL (the filters), the answer depends only on gold.alerts' version and the active silences.
    cache: ResponseCache = request.app.state.responses
    return await cache.respond(request, lambda: (reader.version_or_none("gold.alerts"), _active_silences(store)),
                               compute)  # type: ignore[return-value]


@router.get("/alerts/{fingerprint}", summary="One alert with its transition history and deliveries")
def get_alert(
    request: Request,
    reader: Annotated[LakehouseReader, Depends(get_reader)],
    fingerprint: Annotated[str, Path(pattern=_FINGERPRINT, description="16 hex digits")],
) -> dict[str, Any]:
    alert = next((a for a in _alerts(reader) if a["fingerprint"] == fingerprint), None)
    transitions = _by_fingerprint(reader, "gold.alert_events", fingerprint)
    transitions.sort(key=lambda e: (e["eval_batch_id"], e["seq"]))
    if alert is None and not transitions:
        raise ApiError(404, f"unknown alert fingerprint {fingerprint!r}")
    if alert is None:   # aged out of gold.alerts: its last transition says how it ended
        last = transitions[-1]
        alert = {k: last[k] for k in ("rule", "fingerprint", "cluster", "severity", "scope", "labels", "summary",
                                      "description", "runbook", "value", "inhibited")}
        alert["flapping"] = last.get("flapping")   # null in transitions recorded before flap detection
        alert |= {"status": last["status"], "active_since": last["starts_at"], "fired_at": last["starts_at"],
                  "resolved_at": last["ends_at"], "last_evaluated": last["ts"]}
    deliveries = _by_fingerprint(reader, "gold.deliveries", fingerprint)
    deliveries.sort(key=lambda d: (d["attempted_at"], d["attempt"]))
    store: SilenceStore = request.app.state.silences
    return {**_with_silences(alert, store), "transitions": transitions, "deliveries": deliveries}


def _by_fingerprint(reader: LakehouseReader, table: str, fingerprint: str) -> list[dict[str, Any]]:
    try:
        return rows(reader.scan(table, ds.field("fingerprint") == fingerprint))
    except UnknownTable:
        return []
