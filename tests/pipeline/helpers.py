"""Shared set-up for the pipeline tests: a small emulator run into bronze, and validate runs."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from deltalake import DeltaTable, write_deltalake

from schemas.table import TableDef
from tests.emulated import emulate_into

RUN_ID = "pipeline-test-s5"
SCENARIO: dict[str, Any] = {
    "name": "pipeline-test", "seed": 5, "duration": "20s", "flush_every_intervals": 2,
    "cluster": {"brokers": 3, "racks": ["a", "b", "c"]},
    "topics": [{"name": "t", "partitions": 4, "replication.factor": 3, "config": {"min.insync.replicas": 2}}],
    "workload": {"producers": [{"topic": "t", "acks": "all", "rate": 200}],
                 "consumers": [{"group": "g", "topic": "t"}]},
    # The broker restarts: its meters start again from zero with a new process_start_ts (not an error).
    "faults": [{"at": "5s", "kind": "crash", "broker": 2, "duration": "6s"}],
}


@functools.cache
def gold_rules_only() -> str:
    """The shipped rules on gold tables alone, no receiver: validate's runs here then start no alert lane (the rules on
    silver tables are the lane's, tested in tests/alerts/test_alert_lane.py and test_alerts_job.py)."""
    root = Path(__file__).resolve().parents[2]
    raw = yaml.safe_load((root / "conf/alerts.yaml").read_text())
    raw["rules"] = [r for r in raw["rules"] if r["source"] in ("posture", "slo_status")]
    raw["receivers"] = []
    path = Path(tempfile.mkdtemp(prefix="isrwatch-gold-rules-")) / "alerts.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def emulate(lakehouse: str, **overrides: Any) -> dict[str, Any]:
    return emulate_into(lakehouse, {**SCENARIO, **overrides}, RUN_ID)


def rows(td: TableDef, lakehouse: str) -> list[dict[str, Any]]:
    return DeltaTable(td.path(lakehouse)).to_pyarrow_table().to_pylist()


def append(td: TableDef, lakehouse: str, new_rows: list[dict[str, Any]]) -> None:
    """Append rows to a bronze table as another writer would (no validation on the way in)."""
    write_deltalake(td.path(lakehouse), pa.Table.from_pylist(new_rows, schema=td.landing_schema), mode="append")


def key_of(td: TableDef, row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in td.natural_key)
