"""The overview's metrics coverage table, over silver.metrics_coverage rows written into the dashboards' lake: each
node's newest row, as the collector records them (one at the start, one per change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dashboards.pages import DashboardParams, page_payload
from lakehouse_read.reader import LakehouseReader
from schemas.silver import SILVER_TABLES
from tests.dashboards.lake import at, write

BROKER_URL, STRANGER_URL = "http://10.0.0.1:9404/metrics", "http://10.0.0.7:7071/metrics"
ERRORS = ["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER", "ErrorsPerSec:NOT_ENOUGH_REPLICAS",
          "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND", "ErrorsPerSec:REQUEST_TIMED_OUT"]


def coverage(second: float, **row: Any) -> dict[str, Any]:
    return {"run_id": "c1", "ts": at(second), "reporting": True, "reason": "", "missing": [], "rules_blind": [],
            **row}


def test_the_overview_shows_each_nodes_newest_coverage(lake_copy: Path) -> None:
    write(lake_copy, SILVER_TABLES["metrics_coverage"], [
        coverage(0, node_id=1, metrics_url=BROKER_URL, role="broker", exporter_rules="isrwatch", metrics_found=15,
                 metrics_expected=15),
        # Broker 1's exporter restarted under Strimzi's rules: its newest row is the one shown.
        coverage(5, node_id=1, metrics_url=BROKER_URL, role="broker", exporter_rules="strimzi", metrics_found=11,
                 metrics_expected=15, missing=ERRORS, rules_blind=["ProduceNotEnoughReplicas"]),
        coverage(0, node_id=3000, metrics_url="http://10.0.0.9:9404/metrics", role="controller",
                 exporter_rules="confluent", metrics_found=6, metrics_expected=6),
        coverage(0, node_id=None, metrics_url=STRANGER_URL, role="unknown", exporter_rules="unrecognised",
                 metrics_found=0, metrics_expected=21, missing=["UnderReplicatedPartitions"],
                 rules_blind=["OfflinePartitions"]),
        coverage(0, node_id=2, metrics_url="http://10.0.0.2:9404/metrics", role="broker", exporter_rules=None,
                 reporting=False, reason="HTTP 503", metrics_found=0, metrics_expected=15, missing=ERRORS,
                 rules_blind=["ProduceNotEnoughReplicas"]),
        {**coverage(0, node_id=1, metrics_url=BROKER_URL, role="broker", exporter_rules="isrwatch",
                    metrics_found=15, metrics_expected=15), "run_id": "c0"},   # another cluster's
    ])

    payload = page_payload(LakehouseReader(lake_copy, refresh_s=0), "overview", DashboardParams(cluster="c1"))

    assert "silver.metrics_coverage=0" in payload["version"]
    figure = payload["figures"]["metrics-coverage"]
    assert figure["layout"]["title"]["text"].startswith("Metrics coverage")
    (table,) = figure["data"]
    assert table["header"]["values"] == ["<b>node</b>", "<b>exporter rules</b>", "<b>found / expected</b>",
                                         "<b>missing</b>", "<b>rules that cannot fire</b>"]
    assert table["cells"]["values"] == [
        ["broker 1", "broker 2 (not reporting: HTTP 503)", "controller 3000", STRANGER_URL],
        ["strimzi", "", "confluent", "unrecognised"],
        ["11 / 15", "0 / 15", "6 / 6", "0 / 21"],
        [", ".join(ERRORS), ", ".join(ERRORS), "none", "UnderReplicatedPartitions"],
        ["ProduceNotEnoughReplicas", "ProduceNotEnoughReplicas", "none", "OfflinePartitions"]]
    assert table["cells"]["fill"]["color"] == [["#fff4d6", "#fde2e1", "#e3f4e1", "#fde2e1"]]


def test_without_the_table_the_overview_says_there_is_no_data_yet(reader: LakehouseReader) -> None:
    figure = page_payload(reader, "overview", DashboardParams(cluster="c1"))["figures"]["metrics-coverage"]

    assert figure["data"] == [] and figure["layout"]["annotations"][0]["text"] == "no data yet"
