"""validate on bronze.metrics_coverage (real Spark + Delta): the emulator's rows and a collector's reach silver, rows
naming an unknown node, more metrics found than expected or an unknown exporter naming are quarantined with the
expectation they failed."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from schemas.bronze import METRICS_COVERAGE
from schemas.silver import QUARANTINE_TABLES, SILVER_TABLES
from tests.pipeline.helpers import RUN_ID, append, emulate, rows
from tests.pipeline.test_validate import validate

pytestmark = pytest.mark.spark

URL = "http://10.0.0.1:9404/metrics"


def test_coverage_rows_are_validated_like_every_bronze_table(spark: Any, lakehouse: str) -> None:
    emulate(lakehouse)
    emulated = rows(METRICS_COVERAGE, lakehouse)
    assert sorted((r["node_id"], r["role"], r["exporter_rules"], r["metrics_found"]) for r in emulated) == [
        (1, "broker", "emulator", 15), (2, "broker", "emulator", 15), (3, "broker", "emulator", 15),
        (3000, "controller", "emulator", 7)]
    start = emulated[0]["ts"]

    def collected(second: int, **row: Any) -> dict[str, Any]:
        # In the run's batch 5, which ends 12 s in (a batch every 2 s).
        return {"run_id": RUN_ID, "batch_id": 5, "ts": start + dt.timedelta(seconds=second), "node_id": 1,
                "metrics_url": URL, "role": "broker", "reporting": True, "reason": "", "exporter_rules": "strimzi",
                "metrics_found": 11, "metrics_expected": 15,
                "missing": ["ErrorsPerSec:NOT_ENOUGH_REPLICAS"], "rules_blind": ["ProduceNotEnoughReplicas"], **row}

    good = [collected(1), collected(2, node_id=None, role="unknown", metrics_url="http://10.0.0.7:7071/metrics"),
            collected(3, reporting=False, reason="HTTP 503", exporter_rules=None, metrics_found=0)]
    bad = {"unknown_node": collected(4, node_id=7), "found_over_expected": collected(5, metrics_found=16),
           "unknown_rules": collected(6, exporter_rules="prometheus"), "no_role": collected(7, role=None)}
    append(METRICS_COVERAGE, lakehouse, [*good, *bad.values()])

    validate(spark, lakehouse, ("runs", "metrics_coverage"))

    silver = rows(SILVER_TABLES["metrics_coverage"], lakehouse)
    assert len(silver) == len(emulated) + len(good)
    assert sorted(r["ts"] for r in silver if r["metrics_url"] is not None) == sorted(r["ts"] for r in good)
    quarantined = {q["ts"]: sorted(f["expectation"] for f in q["failures"])
                   for q in rows(QUARANTINE_TABLES["metrics_coverage"], lakehouse)}
    assert quarantined == {
        bad["unknown_node"]["ts"]: ["broker_ids_known"],
        bad["found_over_expected"]["ts"]: ["pair(metrics_expected>=metrics_found)"],
        bad["unknown_rules"]["ts"]: ["in_set(exporter_rules)"],
        bad["no_role"]["ts"]: ["not_null(role)"]}
