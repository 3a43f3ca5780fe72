"""Delta tables the streaming jobs read and write: schema checks, waiting for tables, creating sinks.

All of it reads the tables' logs with delta-rs on the driver: no Spark job before the query starts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable

from deltalake import DeltaTable
from pyspark.sql.types import StructType

from foundation.delta_io import ensure_table
from foundation.object_store import storage_options
from schemas.spark import to_spark_schema
from schemas.table import TableDef


class SchemaDriftError(Exception):
    """Raised when a bronze table's schema differs from its definition in schemas/ (nothing is started)."""


def table_schema(path: str) -> StructType:
    """The table's schema as Spark reads it, from its Delta log by delta-rs (Delta stores Spark's schema JSON)."""
    table = DeltaTable(path, storage_options=storage_options(path))
    return StructType.fromJson(json.loads(table.schema().to_json()))


def check_schema(td: TableDef, path: str) -> None:
    actual = {f.name: f.dataType for f in table_schema(path)}
    expected = {f.name: f.dataType for f in to_spark_schema(td.arrow_schema)}
    for name, dtype in expected.items():
        if name not in actual:
            raise SchemaDriftError(f"{td.qualified_name} ({path}): column {name!r} is missing "
                                   f"(expected {dtype.simpleString()})")
        if actual[name] != dtype:
            raise SchemaDriftError(f"{td.qualified_name} ({path}): column {name!r} has type "
                                   f"{actual[name].simpleString()}, expected {dtype.simpleString()}")
    extra = [n for n in actual if n not in expected]
    if extra:
        raise SchemaDriftError(f"{td.qualified_name} ({path}): unexpected column(s) {extra}")


def is_delta_table(path: str) -> bool:
    """Whether a Delta log exists at `path`: read by delta-rs, no Spark job (any URI form the jobs take)."""
    return bool(DeltaTable.is_deltatable(path, storage_options=storage_options(path)))


def wait_for_tables(paths: dict[str, str], timeout_s: float, log: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout_s
    missing = [n for n, p in paths.items() if not is_delta_table(p)]
    if missing:
        log(f"waiting up to {timeout_s:.0f} s for tables: {', '.join(missing)}")
    while missing:
        if time.monotonic() >= deadline:
            raise FileNotFoundError(f"tables not found after {timeout_s:.0f} s: "
                                    + ", ".join(f"{n} ({paths[n]})" for n in missing))
        time.sleep(0.5)
        missing = [n for n in missing if not is_delta_table(paths[n])]


def bring_bronze_up_to_date(tables: Iterable[TableDef], lakehouse: str, log: Callable[[str], None],
                            grace_s: float = 10.0) -> None:
    """A lakehouse written by an older bronze writer, read by this version: each bronze table gets the nullable
    columns its definition has gained since (its old rows read null there), and a table the writer did not write yet
    is created empty, once the writer's other tables exist and `grace_s` has passed (a writer that is starting
    creates all of its tables within its first batch). Nothing stored is changed. A lakehouse with no bronze table
    at all is left to `wait_for_tables`: its writer has not started."""
    tables = list(tables)
    if not any(is_delta_table(td.path(lakehouse)) for td in tables):
        return
    deadline = time.monotonic() + grace_s
    missing = [td for td in tables if not is_delta_table(td.path(lakehouse))]
    while missing and time.monotonic() < deadline:
        time.sleep(0.5)
        missing = [td for td in missing if not is_delta_table(td.path(lakehouse))]
    for td in missing:
        log(f"{td.qualified_name} does not exist while the other bronze tables do (written before this version): "
            "created empty")
        ensure_table(td, lakehouse)
    for td in tables:
        have = {f.name for f in table_schema(td.path(lakehouse))} if td not in missing else set()
        absent = [f for f in td.arrow_schema if f.name not in have]
        if td not in missing and absent and all(f.nullable for f in absent):
            ensure_table(td, lakehouse)   # anything else is drift: check_schema names it


def create_sinks_if_missing(tables: Iterable[TableDef], lakehouse: str) -> None:
    """Create each sink table before any query writes it: concurrent first appends to one table conflict.
    delta-rs creates them (an empty commit each, ~10 ms); an empty Spark append took ~3.5 s a table."""
    for td in tables:
        ensure_table(td, lakehouse)
