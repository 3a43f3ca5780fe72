"""Delta tables the streaming jobs read and write: schema checks, waiting for tables, creating sinks."""

from __future__ import annotations

import time
from collections.abc import Callable

from pyspark.sql import SparkSession

from schemas.spark import to_spark_schema
from schemas.table import TableDef


class SchemaDriftError(Exception):
    """Raised when a bronze table's schema differs from its definition in schemas/ (nothing is started)."""


def check_schema(spark: SparkSession, td: TableDef, path: str) -> None:
    actual = {f.name: f.dataType for f in spark.read.format("delta").load(path).schema}
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


def is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def wait_for_tables(spark: SparkSession, paths: dict[str, str], timeout_s: float,
                    log: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout_s
    missing = [n for n, p in paths.items() if not is_delta_table(spark, p)]
    if missing:
        log(f"waiting up to {timeout_s:.0f} s for tables: {', '.join(missing)}")
    while missing:
        if time.monotonic() >= deadline:
            raise FileNotFoundError(f"tables not found after {timeout_s:.0f} s: "
                                    + ", ".join(f"{n} ({paths[n]})" for n in missing))
        time.sleep(0.5)
        missing = [n for n in missing if not is_delta_table(spark, paths[n])]


def create_table_if_missing(spark: SparkSession, td: TableDef, path: str) -> None:
    """Create a sink table before any query writes it: concurrent first appends to one table conflict."""
    if not is_delta_table(spark, path):  # an empty append: works for any URI form (file:/, file:///, s3a://)
        spark.createDataFrame([], to_spark_schema(td.arrow_schema)).write.format("delta").mode("append").save(path)
