"""The lakehouse the alerts, posture, SLO and API tests share: three clusters, validated into silver, with
the posture and SLO jobs run over them (built once per test session by the `silver_lake` fixture in
tests/conftest.py: emulating and validating is the slow part). Tests treat it as read-only and copy it to
write.

The clusters: a healthy one, one losing two of three brokers, and the seed's unclean election.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker_emulator.scenario import load_scenario
from foundation.settings import load_settings
from jobs.posture import start_posture
from jobs.slo import start_slo
from tests.emulated import emulate_into
from tests.pipeline.test_validate import validate

ROOT = Path(__file__).resolve().parents[1]
LOSE_TWO: dict[str, Any] = {
    "name": "lose-two", "seed": 3, "duration": "60s", "flush_every_intervals": 10,
    "cluster": {"brokers": 3, "racks": ["a", "b", "c"]},
    "topics": [{"name": "orders", "partitions": 4, "replication.factor": 3, "config": {"min.insync.replicas": 2}}],
    # request.timeout.ms 5 s: a write parked at the leader for a crashed follower not yet fenced holds the
    # producer's connection (the broker reads one request at a time) until it times out; with the default 30 s
    # no fresh write would reach the leader while the ISR is at one, and none would be refused.
    "workload": {"producers": [{"topic": "orders", "acks": "all", "rate": 50, "request.timeout.ms": "5s"}]},
    # Broker 2 is down 30 s (fenced: ISR 2 of 3, at min ISR), then broker 3 for 8 s (ISR 1: writes refused).
    "faults": [{"at": "5s", "kind": "crash", "broker": 2, "duration": "30s"},
               {"at": "22s", "kind": "crash", "broker": 3, "duration": "8s"}],
}
# Four brokers: RF 3 then leaves a spare, so the healthy cluster has no posture finding either.
HEALTHY: dict[str, Any] = {**LOSE_TWO, "name": "healthy", "faults": [],
                           "cluster": {"brokers": 4, "racks": ["a", "b", "c"]}}
TABLES = ("broker_metrics", "partition_state", "cluster_events", "ack_ledger", "runs", "topic_configs",
          "metrics_coverage")
UNCLEAN = "unclean-election-loses-d-and-e-s4"


def lose_two_bronze(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The cluster losing two of its three brokers, 45 s of it in bronze (its faults end 35 s in: the rest leaves
    their alerts time to resolve)."""
    lake = tmp_path_factory.mktemp(name) / "lakehouse"
    emulate_into(str(lake), {**LOSE_TWO, "duration": "45s"}, "lose-two-s3")
    return lake


def build_silver_lake(path: Path, spark: Any) -> None:
    lake = str(path)
    for raw, run_id in ((HEALTHY, "healthy-s3"), (LOSE_TWO, "lose-two-s3")):
        emulate_into(lake, raw, run_id)
    emulate_into(lake, load_scenario(ROOT / "conf/scenarios/unclean-election-loses-d-and-e.yaml"), UNCLEAN)
    # A few files per silver table, so a job reading one file per trigger sees several micro-batches.
    validate(spark, lake, TABLES, **{"validate.max_files_per_trigger": 4})
    run_gold_jobs(spark, lake)


def run_gold_jobs(spark: Any, lake: str) -> None:
    """jobs/posture.py and jobs/slo.py over the silver tables, to the end (available-now)."""
    settings = load_settings(overrides={"lakehouse": lake, "posture.trigger": "available-now",
                                        "slo.trigger": "available-now", "posture.wait_for_tables": "0 seconds",
                                        "slo.wait_for_tables": "0 seconds"})
    for start in (start_posture, start_slo):
        query, _ = start(spark, settings, log=lambda _: None)
        query.awaitTermination()
        assert query.exception() is None, query.exception()


