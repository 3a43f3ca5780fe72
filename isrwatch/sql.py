"""`isrwatch sql`: every lakehouse table under a stable name (`bronze.broker_metrics`, `silver.dq_runs`, …)."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from foundation.logs import logger

log = logger("sql")


LAYERS = ("bronze", "silver", "quarantine", "gold", "api")


@dataclass(frozen=True)
class TableRef:
    layer: str
    name: str
    location: str

    @property
    def qualified_name(self) -> str:
        return f"{self.layer}.{self.name}"


def discover_tables(spark: Any, root: str) -> list[TableRef]:
    """Every Delta table `<root>/<layer>/<name>/` (a directory holding `_delta_log`)."""
    found: list[TableRef] = []
    if "://" not in root:
        base = Path(root).resolve()
        for layer in LAYERS:
            layer_dir = base / layer
            if layer_dir.is_dir():
                found += [TableRef(layer, d.name, str(d)) for d in sorted(layer_dir.iterdir())
                          if (d / "_delta_log").is_dir() and not d.name.startswith("_")]
        return found
    jvm = spark._jvm
    for layer in LAYERS:
        path = jvm.org.apache.hadoop.fs.Path(f"{root.rstrip('/')}/{layer}")
        fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
        if not fs.exists(path):
            continue
        for status in sorted(fs.listStatus(path), key=lambda s: s.getPath().getName()):
            name = status.getPath().getName()
            if status.isDirectory() and not name.startswith("_") and fs.exists(
                    jvm.org.apache.hadoop.fs.Path(status.getPath(), "_delta_log")):
                found.append(TableRef(layer, name, status.getPath().toString()))
    return found


def init_sql(tables: list[TableRef]) -> list[str]:
    """Statements giving the stable names; also usable as `spark-sql -i` / `pyspark` start-up."""
    out = [f"CREATE DATABASE IF NOT EXISTS {layer}" for layer in sorted({t.layer for t in tables})]
    out += [f"CREATE TABLE IF NOT EXISTS {t.qualified_name} USING delta LOCATION '{t.location}'" for t in tables]
    return out


def register_tables(spark: Any, root: str) -> list[TableRef]:
    tables = discover_tables(spark, root)
    for statement in init_sql(tables):
        spark.sql(statement)
    return tables


def _cell(v: Any) -> Any:
    if isinstance(v, dt.datetime):
        return (v.astimezone(dt.UTC) if v.tzinfo else v).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(v, list | tuple):
        return [_cell(x) for x in v]
    if hasattr(v, "asDict"):
        return {k: _cell(x) for k, x in v.asDict().items()}
    return v


def format_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> str:
    cells = [[_cell(v) for v in r] for r in rows]
    if fmt == "json":
        return "".join(json.dumps(dict(zip(columns, r, strict=True)), default=str) + "\n" for r in cells)
    text = [[("NULL" if v is None else json.dumps(v) if isinstance(v, list | dict) else str(v)) for v in r]
            for r in cells]
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(text)
        return buf.getvalue()
    widths = [max([len(c), *(len(r[i]) for r in text)]) for i, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True)).rstrip()  # noqa: E731
    body = [line(columns), line(["-" * w for w in widths]), *(line(r) for r in text)]
    return "\n".join(body) + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})\n"


class SqlError(Exception):
    """Raised when Spark rejects a statement; the message is Spark's, on one line."""


def run_query(spark: Any, statement: str, max_rows: int) -> tuple[list[str], list[tuple[Any, ...]], bool]:
    from pyspark.errors import PySparkException

    try:
        df = spark.sql(statement)
        rows = df.collect() if max_rows == 0 else df.limit(max_rows + 1).collect()
    except PySparkException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SqlError(first) from None
    truncated = max_rows > 0 and len(rows) > max_rows
    return list(df.columns), [tuple(r) for r in rows[: max_rows or None]], truncated


def add_sql_parser(sub: Any) -> None:
    p = sub.add_parser("sql", help="run SQL over every lakehouse table (interactive without a query)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("query", nargs="?", help="SQL statement; omit for an interactive session")
    p.add_argument("--lakehouse", default="lakehouse", help="lakehouse root: path or Hadoop URI")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    p.add_argument("--max-rows", type=int, default=1000, help="rows printed at most (0: all)")
    p.add_argument("--print-init", action="store_true", help="print the CREATE statements for spark-sql -i")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's and the JVM's own log lines (Spark's default: WARN and up), py4j's, and Spark's "
                        "log of a rejected statement")


def _execute(spark: Any, statement: str, args: argparse.Namespace, out: TextIO) -> bool:
    try:
        columns, rows, truncated = run_query(spark, statement, args.max_rows)
    except SqlError as e:
        log.info(f"isrwatch sql: {e}")
        return False
    out.write(format_rows(columns, rows, args.format))
    if truncated:
        log.info(f"isrwatch sql: output cut at --max-rows {args.max_rows}")
    return True


def repl(spark: Any, args: argparse.Namespace, tables: list[TableRef], stdin: TextIO, out: TextIO) -> int:
    tty = stdin.isatty()
    buffer: list[str] = []
    while True:
        if tty:
            out.write("isrwatch> " if not buffer else "      -> ")
            out.flush()
        line = stdin.readline()
        if not line:
            return 0
        stripped = line.strip()
        if not buffer and stripped in ("\\q", "exit", "quit", "exit;", "quit;"):
            return 0
        if not buffer and stripped == "\\d":
            out.write("".join(f"{t.qualified_name}  {t.location}\n" for t in tables))
            continue
        buffer.append(line)
        if stripped.endswith(";"):
            statement = "".join(buffer).strip().rstrip(";").strip()
            buffer = []
            if statement:
                _execute(spark, statement, args, out)


def main_sql(args: argparse.Namespace) -> int:
    from foundation.spark import build_spark_session

    root = args.lakehouse
    if "://" not in root and not Path(root).is_dir():
        log.error(f"isrwatch sql: lakehouse {root!r} does not exist (run `isrwatch emulate` first)")
        return 2
    spark = build_spark_session("isrwatch-sql", conf={"spark.sql.warehouse.dir": tempfile.mkdtemp(
        prefix="isrwatch-warehouse-")}, verbose=args.verbose, lakehouse=root)
    if not args.verbose:
        # Spark logs every rejected statement at ERROR with a stack trace; we print its message on one line.
        spark.sparkContext.setLogLevel("OFF")
        for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):  # pyspark's own copy, as JSON
            logging.getLogger(name).disabled = True
    tables = register_tables(spark, root)
    if args.print_init:
        print(";\n".join(init_sql(tables)) + ";")
        return 0
    if args.query is None:
        return repl(spark, args, tables, sys.stdin, sys.stdout)
    return 0 if _execute(spark, args.query, args, sys.stdout) else 1
