"""Read-only SQL over the lakehouse with DataFusion (no JVM per request): what the query endpoint shares with
its worker processes (api/sql_pool.py, api/sql_worker.py): the first check of a query, the errors, the result.

Every table is registered under its stable name (`gold.alerts`, `silver.partition_state`, …) through
delta-rs. Safety does not rest on parsing SQL ourselves: DataFusion's SQLOptions refuse DDL, DML and
statements in the worker. We add a row cap, applied to the planned query, a time limit, and limits on the
query's size and shape checked before it is parsed (api/sql_limits.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_LEADING = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*", re.S)
# Only a single query, starting with SELECT, WITH, VALUES or a parenthesis.
_QUERY_START = re.compile(r"^(select|with|values|\()", re.I)


class QueryRejected(ValueError):
    """Not a single read-only query (HTTP 400)."""


class QueryFailed(ValueError):
    """A valid query DataFusion could not run: unknown table or column, type error (HTTP 400)."""


class QueryTimeout(TimeoutError):
    """The query ran past the time limit (HTTP 408)."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    elapsed_ms: float


def check_read_only(sql: str) -> str:
    """The query without leading comments and a trailing semicolon; QueryRejected unless it is one query."""
    body = _LEADING.sub("", sql).strip().rstrip(";").strip()
    if not body:
        raise QueryRejected("empty query")
    if not _QUERY_START.match(body):
        word = body.split(None, 1)[0][:30]
        raise QueryRejected(f"only SELECT queries are allowed, got {word!r}")
    return body
