"""POST /api/v1/query: one read-only SQL query over every lakehouse table, with row and time limits, run in a
worker process (api/sql_pool.py) after its size and shape passed the limits (api/sql_limits.py)."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from api.deps import get_settings, require_query
from api.errors import ApiError
from api.sql_limits import ClientSlots, QueryLimits, QueryTooLarge, check_limits
from api.sql_pool import SqlWorkerPool, WorkersUnavailable
from api.sql_query import QueryFailed, QueryRejected, QueryTimeout, check_read_only
from foundation.settings import ApiSettings

router = APIRouter(prefix="/api/v1", tags=["query"], dependencies=[Depends(require_query)])

_SCAN_INLINE_MAX = 4096
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "not one read-only query, over a nesting or operator limit, or the query failed"},
    408: {"description": "past api.query_timeout"},
    413: {"description": "longer than api.query_max_bytes"},
    429: {"description": "this client already runs api.query_max_per_client queries"},
    503: {"description": "all SQL workers busy, or the worker running the query died"},
}


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=100_000, examples=[
        "SELECT rule, count(*) AS n FROM gold.alerts WHERE status = 'firing' GROUP BY rule"])
    max_rows: int | None = Field(default=None, ge=1, description="at most api.query_max_rows")


def client_key(request: Request, settings: ApiSettings) -> str:
    """Who runs a query, for the per-client limit: its bearer token when the query needs one (require_query
    checked it), else its address. A token nobody checks would let a client pick a new identity per request."""
    if settings.read_auth or settings.query_auth:
        _, _, token = request.headers.get("authorization", "").partition(" ")
        return "token:" + hashlib.sha256(token.strip().encode()).hexdigest()[:16]
    return "peer:" + (request.client.host if request.client is not None else "unknown")


@router.post("/query", summary="Run one read-only SELECT over the lakehouse tables (e.g. gold.alerts)",
             responses=_ERRORS)
async def query(body: QueryRequest, request: Request) -> dict[str, Any]:
    settings = get_settings(request)
    cap = min(body.max_rows or settings.query_max_rows, settings.query_max_rows)
    limits = QueryLimits(settings.query_max_bytes, settings.query_max_nesting, settings.query_max_operators)
    try:
        # A long query's scan (tens of ms at 64 KiB) in a thread: the event loop keeps serving meanwhile.
        if len(body.sql) > _SCAN_INLINE_MAX:
            await run_in_threadpool(check_limits, body.sql, limits)
        else:
            check_limits(body.sql, limits)
        sql = check_read_only(body.sql)
    except QueryTooLarge as e:
        raise ApiError(e.status, f"rejected: {e}") from None
    except QueryRejected as e:
        raise ApiError(400, f"rejected: {e}") from None
    clients: ClientSlots = request.app.state.sql_clients
    client = client_key(request, settings)
    if not clients.try_acquire(client):
        raise ApiError(429, f"this client already runs {clients.per_client} "
                            f"quer{'y' if clients.per_client == 1 else 'ies'} (api.query_max_per_client); "
                            "wait for it to end", headers={"Retry-After": "1"})
    pool: SqlWorkerPool = request.app.state.sql_pool
    try:
        result = await pool.run(sql, cap, settings.query_timeout.total_seconds(), settings.query_wait.total_seconds())
    except QueryRejected as e:
        raise ApiError(400, f"rejected: {e}") from None
    except QueryFailed as e:
        raise ApiError(400, f"query failed: {e}") from None
    except QueryTimeout as e:
        raise ApiError(408, str(e)) from None
    except WorkersUnavailable as e:
        raise ApiError(503, str(e), headers={"Retry-After": "1"}) from None
    finally:
        clients.release(client)
    return {"columns": result.columns, "rows": result.rows, "row_count": len(result.rows),
            "truncated": result.truncated, "max_rows": cap, "elapsed_ms": round(result.elapsed_ms, 2)}
