"""POST /api/v1/query: one read-only SQL query over every lakehouse table, with row and time limits."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from api.deps import get_reader, get_settings, require_read
from api.errors import ApiError
from api.lakehouse import LakehouseReader
from api.sql_query import QueryFailed, QueryRejected, QueryTimeout, run_query

router = APIRouter(prefix="/api/v1", tags=["query"], dependencies=[Depends(require_read)])


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sql: str = Field(min_length=1, max_length=100_000, examples=[
        "SELECT rule, count(*) AS n FROM gold.alerts WHERE status = 'firing' GROUP BY rule"])
    max_rows: int | None = Field(default=None, ge=1, description="at most api.query_max_rows")


@router.post("/query", summary="Run one read-only SELECT over the lakehouse tables (e.g. gold.alerts)")
async def query(body: QueryRequest, request: Request,
                reader: Annotated[LakehouseReader, Depends(get_reader)]) -> dict[str, Any]:
    settings = get_settings(request)
    cap = min(body.max_rows or settings.query_max_rows, settings.query_max_rows)
    try:
        result = await run_in_threadpool(run_query, reader, body.sql, cap, settings.query_timeout_seconds)
    except QueryRejected as e:
        raise ApiError(400, f"rejected: {e}") from None
    except QueryFailed as e:
        raise ApiError(400, f"query failed: {e}") from None
    except QueryTimeout as e:
        raise ApiError(408, str(e)) from None
    return {"columns": result.columns, "rows": result.rows, "row_count": len(result.rows),
            "truncated": result.truncated, "max_rows": cap, "elapsed_ms": round(result.elapsed_ms, 2)}
