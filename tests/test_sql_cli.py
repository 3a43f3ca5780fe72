"""`isrwatch sql` through the CLI runner, in-process (it reuses the test session's Spark)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from deltalake import DeltaTable

from isrwatch.cli import main
from schemas.bronze import BRONZE_TABLES
from tests.pipeline.helpers import emulate

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> str:
    root = str(tmp_path_factory.mktemp("sql") / "lakehouse")
    emulate(root, duration="6s")
    spark.createDataFrame([(1, "a"), (2, "b")], "id int, tag string").write.format("delta").save(
        f"{root}/silver/example")
    return root


def test_every_bronze_table_is_queryable_under_its_stable_name(lake: str, capsys: Any) -> None:
    for td in BRONZE_TABLES:
        query = f"SELECT count(*) AS n FROM {td.qualified_name}"
        assert main(["sql", "--lakehouse", lake, "--format", "csv", query]) == 0
        out = list(csv.reader(io.StringIO(capsys.readouterr().out)))
        assert out == [["n"], [str(DeltaTable(td.path(lake)).to_pyarrow_table().num_rows)]], td.name
    assert main(["sql", "--lakehouse", lake, "SELECT id, tag FROM silver.example ORDER BY id"]) == 0
    assert capsys.readouterr().out == "id  tag\n--  ---\n1   a\n2   b\n(2 rows)\n"


def test_json_lines_with_utc_timestamps_and_lists(lake: str, capsys: Any) -> None:
    q = "SELECT ts, replicas FROM bronze.partition_state ORDER BY ts, partition LIMIT 2"
    assert main(["sql", "--lakehouse", lake, "--format", "json", q]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 2
    assert lines[0]["ts"].endswith("Z") and lines[0]["ts"].startswith("2026-01-01T00:00:01")
    assert isinstance(lines[0]["replicas"], list) and len(lines[0]["replicas"]) == 3


@pytest.mark.parametrize("query,error", [("SELEC 1", "[PARSE_SYNTAX_ERROR]"),
                                         ("SELECT * FROM bronze.nope", "[TABLE_OR_VIEW_NOT_FOUND]")])
def test_bad_sql_is_one_line_and_a_non_zero_exit(lake: str, capsys: Any, query: str, error: str) -> None:
    assert main(["sql", "--lakehouse", lake, query]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"isrwatch sql: {error}")


def test_missing_lakehouse_exits_2(tmp_path: Any, capsys: Any) -> None:
    assert main(["sql", "--lakehouse", str(tmp_path / "nothing"), "SELECT 1"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_interactive_session_survives_an_error(lake: str, capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("SELECT 1 AS a;\nSELECT nope\n FROM nowhere;\n\\d\nSELECT 2 AS b;\n"))
    assert main(["sql", "--lakehouse", lake, "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("a\n1\n")
    assert "silver.example" in captured.out and captured.out.endswith("b\n2\n")
    assert captured.err.count("isrwatch sql: [TABLE_OR_VIEW_NOT_FOUND]") == 1


def test_print_init_recreates_the_names(lake: str, capsys: Any, spark: Any) -> None:
    assert main(["sql", "--lakehouse", lake, "--print-init"]) == 0
    statements = [s for s in capsys.readouterr().out.split(";\n") if s.strip()]
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS bronze"
    spark.sql("DROP DATABASE IF EXISTS bronze CASCADE")
    for s in statements:
        spark.sql(s.rstrip(";"))
    runs = DeltaTable(f"{lake}/bronze/runs").to_pyarrow_table().num_rows
    assert spark.sql("SELECT count(*) FROM bronze.runs").first()[0] == runs > 0
