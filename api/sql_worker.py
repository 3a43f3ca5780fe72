"""A SQL worker process: runs the API's read-only queries with DataFusion, one at a time, for api/sql_pool.py.

It opens the lakehouse's Delta tables itself (lakehouse_read/reader.py, re-checked every `refresh_s`), registers each
under its `<layer>.<table>` name in a fresh DataFusion context per query, and answers with JSON-ready rows.
Safety does not rest on parsing SQL ourselves: DataFusion's SQLOptions refuse DDL (CREATE EXTERNAL TABLE would
read any file), DML (INSERT, COPY … TO would write one) and statements (SET), and it plans a single statement
only; file paths are not tables (no URL tables).

What a query can do to the process is bounded from outside: after warming up, the worker caps its address
space (RLIMIT_AS) at what it has mapped plus `memory_bytes`, so a query that needs more ends this process
(Rust aborts on a failed allocation), not the server; the server kills it past the time limit; a stack
overflow in DataFusion's recursive planner ends it too. The server then starts another.

Protocol over the pipe: the worker sends ("ready", pid) once, then for each request `(sql, max_rows)` one
answer: ("ok", columns, rows, truncated), ("rejected", message) or ("failed", message). None or a closed
pipe ends it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions
from datafusion.catalog import Schema

from foundation.object_store import is_object_store
from lakehouse_read.jsonable import value
from lakehouse_read.reader import LakehouseReader

QUERY_MEMORY_BYTES = 512 * 1024 * 1024
_READ_ONLY = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
_PARENT_CHECK_S = 1.0


def _provider(reader: LakehouseReader, name: str) -> Any:
    """What DataFusion scans for table `name`: delta-rs's own table provider, except on an object store, where
    that provider's scan finds no store for the bucket whatever the session registers (delta-io/delta-rs#4623,
    open in deltalake 1.6.6: only `count(*)`, answered from the log, works); there delta-rs's pyarrow dataset
    of the same snapshot, which reads through delta-rs's own store."""
    table = reader.delta_table(name)
    return table.to_pyarrow_dataset() if is_object_store(reader.root) else table


def _context(reader: LakehouseReader) -> SessionContext:
    # Two partitions (the API shares the machine) and a memory pool: a query needing more fails with
    # DataFusion's resources-exhausted error before it reaches the process's address-space limit.
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
            schema.register_table(table, _provider(reader, f"{layer}.{table}"))
    return ctx


def answer(reader: LakehouseReader, sql: str, max_rows: int) -> tuple[Any, ...]:
    """One request's answer (see the module's protocol); `sql` has passed api.sql_query.check_read_only."""
    try:
        ctx = _context(reader)
        # A limit on the planned query keeps its ORDER BY (a LIMIT around a subquery would not).
        table = ctx.sql_with_options(sql, _READ_ONLY).limit(max_rows + 1).to_arrow_table()
    except Exception as e:   # DataFusion raises plain Exceptions with a readable message
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "not supported" in message or "only supports a single SQL statement" in message:
            return ("rejected", message)
        return ("failed", message)
    truncated = table.num_rows > max_rows
    table = table.slice(0, max_rows)
    columns = [[value(v) for v in col.to_pylist()] for col in table.columns]   # columns may share a name
    rows = [list(r) for r in zip(*columns, strict=True)]
    return ("ok", table.column_names, rows, truncated)


def main_from_argv() -> None:
    """The worker's entry point: `python -c "…main_from_argv()" '{"fd": …, "root": …, …}'` (api/sql_pool.py)."""
    config = json.loads(sys.argv[1])
    main(Connection(config["fd"]), config["root"], config["refresh_s"], config["memory_bytes"])


def main(conn: Connection, root: str, refresh_s: float, memory_bytes: int) -> None:
    """Serve requests from `conn` until it closes."""
    # Ctrl-C in a terminal reaches the whole process group: the server stops its workers itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="isrwatch-sql-parent", daemon=True).start()
    reader = LakehouseReader(root, refresh_s=refresh_s)
    # Warm: DataFusion's runtime and threads, and the tables' handles, exist before the limit is set.
    answer(reader, "SELECT 1", 1)
    if memory_bytes > 0:
        _limit_address_space(memory_bytes)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        sql, max_rows = request
        try:
            reply = answer(reader, sql, max_rows)
        except MemoryError:
            reply = ("failed", "out of memory (api.query_worker_memory_mb)")
        conn.send(reply)


def _limit_address_space(memory_bytes: int) -> None:
    try:
        mapped = _mapped_bytes()
    except OSError:   # no /proc (not Linux): DataFusion's memory pool is the only limit
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = mapped + memory_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _exit_with_parent(parent: int) -> None:
    # A worker busy with a long query would otherwise outlive a server killed with SIGKILL (an idle one sees
    # its pipe close). DataFusion releases the GIL while it runs, so this thread runs meanwhile.
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os._exit(0)
