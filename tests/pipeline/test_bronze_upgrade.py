"""A lakehouse a bronze writer of the previous version wrote, read by this version's validate: what it lacks is added
(jobs/delta_tables.bring_bronze_up_to_date), nothing stored changes, and real drift is still refused by name."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import read_rows
from jobs.delta_tables import SchemaDriftError, bring_bronze_up_to_date, check_schema, is_delta_table
from schemas.bronze import ACK_LEDGER, BRONZE_TABLES, METRICS_COVERAGE, RUNS

NEW_ACK_COLUMNS = ("unacked_for_ms", "leader", "isr")


def _old_ack_ledger(lake: str) -> None:
    """bronze.ack_ledger as the previous version wrote it: without the columns added since, one row."""
    schema = pa.schema([f for f in ACK_LEDGER.arrow_schema if f.name not in NEW_ACK_COLUMNS])
    row = {"run_id": "r", "batch_id": 0, "ts": 1_800_000_000_000_000, "topic": "t", "partition": 0, "acks": "all",
           "records_sent": 5, "records_acked": 4, "records_failed": 1, "records_lost": 0, "lost_by_event_seq": None,
           "lost_by": None}
    write_with_checksum(ACK_LEDGER.path(lake), pa.Table.from_pylist([row], schema=schema), mode="append")


def test_an_old_lakehouse_gets_the_new_columns_and_tables_and_keeps_its_rows(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    _old_ack_ledger(lake)
    write_with_checksum(RUNS.path(lake), RUNS.arrow_schema.empty_table(), mode="append")
    logged: list[str] = []
    bring_bronze_up_to_date(BRONZE_TABLES, lake, logged.append, grace_s=0)
    for td in BRONZE_TABLES:
        check_schema(td, td.path(lake))   # every table now matches its definition
    rows = read_rows(ACK_LEDGER, lake).to_pylist()
    assert len(rows) == 1 and (rows[0]["records_acked"], rows[0]["unacked_for_ms"], rows[0]["isr"]) == (4, None, None)
    assert read_rows(METRICS_COVERAGE, lake).num_rows == 0
    assert any(m.startswith("bronze.metrics_coverage does not exist while the other bronze tables do") for m in logged)


def test_a_lakehouse_without_bronze_is_left_to_its_writer(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    bring_bronze_up_to_date(BRONZE_TABLES, lake, lambda _: None, grace_s=0)
    assert not any(is_delta_table(td.path(lake)) for td in BRONZE_TABLES)


def test_a_column_that_cannot_be_null_missing_is_drift_named_by_check_schema(tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    schema = pa.schema([f for f in RUNS.arrow_schema if f.name != "summary"])
    write_with_checksum(RUNS.path(lake), schema.empty_table(), mode="append")
    bring_bronze_up_to_date([RUNS], lake, lambda _: None, grace_s=0)
    with pytest.raises(SchemaDriftError, match=r"bronze\.runs .*column 'summary' is missing"):
        check_schema(RUNS, RUNS.path(lake))
