"""GET /api/v1/brokers/coverage on the shared lakehouse (tests/api/conftest.py: the emulator's clusters through
validate, which checks bronze.metrics_coverage into silver like every bronze table), and on a copy with the rows a
collector writes for a broker under Strimzi's rules."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient

from api.app import create_app
from lakehouse_read.jsonable import iso
from schemas.silver import SILVER_TABLES
from tests.api.conftest import api_settings

ERRORS = ["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER", "ErrorsPerSec:NOT_ENOUGH_REPLICAS",
          "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND", "ErrorsPerSec:REQUEST_TIMED_OUT"]


def run_start(lake: str, cluster: str) -> Any:
    runs = DeltaTable(f"{lake}/silver/runs").to_pyarrow_table().to_pylist()
    return min(r["start_ts"] for r in runs if r["run_id"] == cluster)


def test_the_emulators_nodes_report_every_metric_of_their_role(client: TestClient, api_lake: str) -> None:
    answer = client.get("/api/v1/brokers/coverage", params={"cluster": "lose-two-s3"})

    assert answer.status_code == 200
    body = answer.json()
    start = iso(run_start(api_lake, "lose-two-s3"))
    assert body["total"] == 4
    assert body["items"] == [
        *({"cluster": "lose-two-s3", "node_id": b, "metrics_url": None, "role": "broker", "reporting": True,
           "reason": "", "exporter_rules": "emulator", "metrics_found": 15, "metrics_expected": 15, "missing": [],
           "rules_blind": [], "since": start} for b in (1, 2, 3)),
        {"cluster": "lose-two-s3", "node_id": 3000, "metrics_url": None, "role": "controller", "reporting": True,
         "reason": "", "exporter_rules": "emulator", "metrics_found": 7, "metrics_expected": 7, "missing": [],
         "rules_blind": [], "since": start}]
    every = client.get("/api/v1/brokers/coverage").json()
    assert {i["cluster"] for i in every["items"]} == {"healthy-s3", "lose-two-s3", "unclean-election-loses-d-and-e-s4"}
    assert every["total"] == len(every["items"]) == 5 + 4 + 4   # the healthy cluster has four brokers


def test_an_unknown_cluster_is_404(client: TestClient) -> None:
    answer = client.get("/api/v1/brokers/coverage", params={"cluster": "elsewhere"})

    assert (answer.status_code, answer.json()) == (404, {"detail": "unknown cluster 'elsewhere'"})


def test_a_collectors_changed_row_replaces_the_nodes_coverage(lake_copy: str) -> None:
    # A collector's rows for broker 1 of lose-two-s3: its exporter first under the project's rules, then (a change:
    # a row) under Strimzi's; and a URL whose node cannot be told.
    template = next(r for r in DeltaTable(f"{lake_copy}/silver/metrics_coverage").to_pyarrow_table().to_pylist()
                    if r["run_id"] == "lose-two-s3" and r["node_id"] == 1)
    url = "http://10.0.0.1:9404/metrics"
    rows = [{**template, "metrics_url": url, "exporter_rules": "isrwatch", "ts": template["ts"] + timedelta(seconds=1)},
            {**template, "metrics_url": url, "exporter_rules": "strimzi", "metrics_found": 11, "missing": ERRORS,
             "rules_blind": ["ProduceNotEnoughReplicas"], "ts": template["ts"] + timedelta(seconds=9)},
            {**template, "node_id": None, "metrics_url": "http://10.0.0.7:7071/metrics", "role": "unknown",
             "exporter_rules": "unrecognised", "metrics_found": 0, "metrics_expected": 21,
             "ts": template["ts"] + timedelta(seconds=2)}]
    write_deltalake(f"{lake_copy}/silver/metrics_coverage",
                    pa.Table.from_pylist(rows, schema=SILVER_TABLES["metrics_coverage"].arrow_schema), mode="append")

    with TestClient(create_app(api_settings(lake_copy))) as client:
        items = client.get("/api/v1/brokers/coverage", params={"cluster": "lose-two-s3"}).json()["items"]

    by_url = {i["metrics_url"]: i for i in items}
    assert len(items) == 6
    strimzi = by_url[url]
    assert (strimzi["node_id"], strimzi["exporter_rules"], strimzi["metrics_found"], strimzi["metrics_expected"]) == (
        1, "strimzi", 11, 15)
    assert (strimzi["missing"], strimzi["rules_blind"]) == (ERRORS, ["ProduceNotEnoughReplicas"])
    assert strimzi["since"] == iso(template["ts"] + timedelta(seconds=9))
    unknown = by_url["http://10.0.0.7:7071/metrics"]
    assert (unknown["node_id"], unknown["role"], unknown["exporter_rules"]) == (None, "unknown", "unrecognised")
    assert items[-1] == unknown   # the unknown role last
