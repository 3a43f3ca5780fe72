"""Silences, Alertmanager-like: POST creates, GET lists or shows, DELETE expires. A silence suppresses webhook
delivery of the alerts its matchers match while it is active; evaluation and gold tables are unaffected."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from api.deps import require_read, require_write
from api.errors import ApiError
from lakehouse_read.jsonable import iso
from pipelines.silence_store import SilenceStore
from pipelines.silences import Matcher, Silence, SilenceError

router = APIRouter(prefix="/api/v1", tags=["silences"])
_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


class MatcherIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=100, examples=["alertname"])
    value: str = Field(max_length=1000, examples=["UnderMinIsr"])
    isRegex: bool = False
    isEqual: bool = True


class SilenceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matchers: list[MatcherIn] = Field(min_length=1, max_length=50)
    startsAt: AwareDatetime | None = Field(default=None, description="default: now")
    endsAt: AwareDatetime
    createdBy: str = Field(min_length=1, max_length=200)
    comment: str = Field(min_length=1, max_length=2000)


def _out(s: Silence, now: datetime) -> dict[str, Any]:
    return {"id": s.silence_id, "status": {"state": s.state(now)},
            "matchers": [{"name": m.name, "value": m.value, "isRegex": m.is_regex, "isEqual": m.is_equal}
                         for m in s.matchers],
            "startsAt": iso(s.starts_at), "endsAt": iso(s.ends_at), "createdBy": s.created_by,
            "comment": s.comment, "updatedAt": iso(s.updated_at), "version": s.version}


def _store(request: Request) -> SilenceStore:
    store: SilenceStore = request.app.state.silences
    return store


@router.post("/silences", status_code=201, dependencies=[Depends(require_write)],
             summary="Create a silence (bearer token required)")
async def create_silence(body: SilenceIn, request: Request) -> dict[str, Any]:
    matchers = [Matcher(m.name, m.value, m.isRegex, m.isEqual) for m in body.matchers]
    try:
        s = await run_in_threadpool(_store(request).create, matchers, body.startsAt, body.endsAt, body.createdBy,
                                    body.comment)
    except SilenceError as e:
        raise ApiError(422, str(e)) from None
    return {"silenceID": s.silence_id, **_out(s, datetime.now(UTC))}


@router.get("/silences", dependencies=[Depends(require_read)], summary="List silences, newest first")
def list_silences(request: Request,
                  state: Annotated[Literal["active", "pending", "expired"] | None, Query()] = None) -> dict[str, Any]:
    now = datetime.now(UTC)
    items = [_out(s, now) for s in _store(request).all() if state is None or s.state(now) == state]
    return {"items": items, "total": len(items)}


@router.get("/silences/{silence_id}", dependencies=[Depends(require_read)], summary="One silence")
def get_silence(request: Request, silence_id: Annotated[str, Path(pattern=_ID)]) -> dict[str, Any]:
    s = _store(request).get(silence_id)
    if s is None:
        raise ApiError(404, f"unknown silence {silence_id!r}")
    return _out(s, datetime.now(UTC))


@router.delete("/silences/{silence_id}", dependencies=[Depends(require_write)],
               summary="Expire a silence now (bearer token required)")
async def expire_silence(request: Request, silence_id: Annotated[str, Path(pattern=_ID)]) -> dict[str, Any]:
    s = await run_in_threadpool(_store(request).expire, silence_id)
    if s is None:
        raise ApiError(404, f"unknown silence {silence_id!r}")
    return _out(s, datetime.now(UTC))
