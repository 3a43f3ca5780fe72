"""Read-only SQL over the lakehouse with DataFusion (no JVM per request).

Every table is registered under its stable name (`gold.alerts`, `silver.partition_state`, …) through
delta-rs. Safety does not rest on parsing SQL ourselves: DataFusion's SQLOptions refuse DDL
(CREATE EXTERNAL TABLE would read any file), DML (INSERT, COPY … TO would write one) and statements
(SET), and it plans a single statement only; file paths are not tables (no URL tables). We add a row cap,
applied to the planned query, and a time limit.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions
from datafusion.catalog import Schema

from api.jsonable import value
from api.lakehouse import LakehouseReader

_READ_ONLY = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
_LEADING = re.compile(r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*", re.S)
# Only a single query, starting with SELECT, WITH, VALUES or a parenthesis.
_QUERY_START = re.compile(r"^(select|with|values|\()", re.I)

QUERY_MEMORY_BYTES = 512 * 1024 * 1024
# A query past its time limit is answered 408, but DataFusion cannot be interrupted from Python: it finishes
# in the background. Two workers bound how many such queries run at once.
_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="isrwatch-sql")


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


def _context(reader: LakehouseReader) -> SessionContext:
    # Two partitions (the API shares the machine) and a memory pool: a query needing more fails with
    # DataFusion's resources-exhausted error instead of growing the server.
    ctx = SessionContext(SessionConfig().with_target_partitions(2),
                         RuntimeEnvBuilder().with_disk_manager_disabled().with_greedy_memory_pool(QUERY_MEMORY_BYTES))
    catalog = ctx.catalog()
    by_layer: dict[str, list[str]] = {}
    for name in reader.tables():
        layer, table = name.split(".", 1)
        by_layer.setdefault(layer, []).append(table)
    for layer, tables in sorted(by_layer.items()):
        catalog.register_schema(layer, Schema.memory_schema())
        schema = catalog.schema(layer)
        for table in tables:
            schema.register_table(table, reader.delta_table(f"{layer}.{table}"))
    return ctx


def check_read_only(sql: str) -> str:
    """The query without leading comments and a trailing semicolon; QueryRejected unless it is one query."""
    body = _LEADING.sub("", sql).strip().rstrip(";").strip()
    if not body:
        raise QueryRejected("empty query")
    if not _QUERY_START.match(body):
        word = body.split(None, 1)[0][:30]
        raise QueryRejected(f"only SELECT queries are allowed, got {word!r}")
    return body


def run_query(reader: LakehouseReader, sql: str, max_rows: int, timeout_s: float) -> QueryResult:
    body = check_read_only(sql)
    began = time.perf_counter()

    def execute() -> pa.Table:
        ctx = _context(reader)
        try:
            # A limit on the planned query keeps its ORDER BY (a LIMIT around a subquery would not).
            return ctx.sql_with_options(body, _READ_ONLY).limit(max_rows + 1).to_arrow_table()
        except Exception as e:   # DataFusion raises plain Exceptions with a readable message
            message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            if "not supported" in message or "only supports a single SQL statement" in message:
                raise QueryRejected(message) from None
            raise QueryFailed(message) from None

    future = _pool.submit(execute)
    try:
        table = future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise QueryTimeout(f"query ran longer than {timeout_s:g} s") from None
    truncated = table.num_rows > max_rows
    table = table.slice(0, max_rows)
    columns = [[value(v) for v in col.to_pylist()] for col in table.columns]   # columns may share a name
    data = [list(r) for r in zip(*columns, strict=True)]
    return QueryResult(table.column_names, data, truncated, (time.perf_counter() - began) * 1000)
