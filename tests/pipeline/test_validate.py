"""validate on real Spark + Delta: silver = bronze - quarantine, each injected bad row quarantined with
its reason, duplicates dropped, GE's verdict in dq_runs, and schema drift stopping the job."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from broker_emulator.scenario import load_scenario
from broker_emulator.simulation import Simulation
from foundation.bronze_sink import DeltaSink
from foundation.settings import load_settings
from jobs.delta_tables import SchemaDriftError
from jobs.validate import start_validation
from schemas.bronze import BROKER_METRICS, BRONZE_TABLES, CLUSTER_EVENTS, PARTITION_STATE, TOPIC_CONFIGS
from schemas.silver import DQ_RUNS, QUARANTINE_TABLES, SILVER_TABLES
from tests.pipeline.helpers import append, emulate, gold_rules_only, key_of, rows

pytestmark = pytest.mark.spark

TABLES = ("broker_metrics", "partition_state", "cluster_events", "runs", "topic_configs")


def validate(spark: Any, lakehouse: str, tables: tuple[str, ...] = TABLES, log: Callable[[str], None] = lambda _: None,
             **overrides: Any) -> None:
    # Validate alone (no rule on a silver table: no alert lane), so the lakes this builds serve the evaluators' tests,
    # which run the lane themselves (tests/alerts/test_alerts_job.py); the lane beside validate is tested in
    # tests/alerts/test_alert_lane.py, tests/test_object_store.py and tests/test_pipeline_cli.py.
    settings = load_settings(overrides={"lakehouse": lakehouse, "validate.tables": list(tables),
                                        "validate.trigger": "available-now", "validate.wait_for_tables": "0 seconds",
                                        "alerts.rules": gold_rules_only(), **overrides})
    running = start_validation(spark, settings, log=log)
    for q in running.queries.values():
        q.awaitTermination()
        assert q.exception() is None, q.exception()


def _later(row: dict[str, Any], ms: int = 1) -> dt.datetime:
    return row["ts"] + dt.timedelta(milliseconds=ms)


def test_bad_rows_are_quarantined_with_reasons_and_the_rest_reaches_silver(spark: Any, lakehouse: str) -> None:
    emulate(lakehouse)
    metrics = rows(BROKER_METRICS, lakehouse)
    gauge = next(r for r in metrics if r["name"] == "UnderReplicatedPartitions" and r["broker_id"] == 1)
    meter = next(r for r in metrics if r["name"] == "MessagesInPerSec" and r["broker_id"] == 1 and r["count"] > 10)
    year = dt.timedelta(days=365)
    bad_metrics = {
        "null_mbean": {**gauge, "ts": _later(gauge, 1), "mbean": None},
        "negative": {**gauge, "ts": _later(gauge, 2), "value": -5.0},
        "unknown_name": {**gauge, "ts": _later(gauge, 3), "name": "NotAKafkaMetric"},
        "backwards": {**meter, "ts": _later(meter, 1), "count": meter["count"] - 7},
        "wrong_kind": {**gauge, "ts": _later(gauge, 4), "kind": "histogram"},
        "future": {**gauge, "ts": gauge["ts"] + year},
        "unknown_batch": {**gauge, "ts": _later(gauge, 5), "batch_id": 999},
    }
    expected_reasons = {
        "null_mbean": {"not_null(mbean)"},
        "negative": {"between(0<=value)"},
        "unknown_name": {"in_set(name)"},
        "backwards": {"pair(count>=ctx_previous_count)"},
        "wrong_kind": {"in_set(kind)"},
        "future": {"pair(ctx_batch_end_ts>=ts)"},
        "unknown_batch": {"not_null(ctx_batch_end_ts)"},
    }
    append(BROKER_METRICS, lakehouse, [*bad_metrics.values(), dict(gauge)])  # the last is a duplicate
    state = rows(PARTITION_STATE, lakehouse)[0]
    append(PARTITION_STATE, lakehouse, [{**state, "ts": _later(state), "partition": 99},
                                        {**state, "ts": _later(state), "topic": "no-such-topic"}])
    event = rows(CLUSTER_EVENTS, lakehouse)[0]
    append(CLUSTER_EVENTS, lakehouse, [{**event, "seq": 10_000, "detail": "{not json"}])

    validate(spark, lakehouse)

    # Every table: silver + quarantine = the bronze rows, less exact duplicates of a natural key.
    for name in TABLES:
        bronze = next(td for td in BRONZE_TABLES if td.name == name)
        distinct = {key_of(bronze, r) for r in rows(bronze, lakehouse)}
        silver = rows(SILVER_TABLES[name], lakehouse)
        quarantine = rows(QUARANTINE_TABLES[name], lakehouse)
        assert len({key_of(bronze, r) for r in silver}) == len(silver), f"{name}: duplicates in silver"
        assert len(silver) + len(quarantine) == len(distinct), name
        assert {key_of(bronze, r) for r in silver} | {key_of(bronze, r) for r in quarantine} == distinct, name

    quarantined = rows(QUARANTINE_TABLES["broker_metrics"], lakehouse)
    assert len(quarantined) == len(bad_metrics)
    for label, bad in bad_metrics.items():
        match = [q for q in quarantined if q["ts"] == bad["ts"] and q["batch_id"] == bad["batch_id"]
                 and q["mbean"] == bad["mbean"] and q["name"] == bad["name"]]
        assert len(match) == 1, label
        assert {f["expectation"] for f in match[0]["failures"]} == expected_reasons[label], label
    backwards = next(q for q in quarantined if q["count"] == meter["count"] - 7)
    assert backwards["failures"][0]["value"] == f"count={meter['count'] - 7}, ctx_previous_count={meter['count']}"
    negative = next(q for q in quarantined if q["value"] == -5.0)
    assert negative["failures"][0]["value"] == "-5.0"

    ps_reasons = sorted(tuple(sorted(f["expectation"] for f in q["failures"]))
                        for q in rows(QUARANTINE_TABLES["partition_state"], lakehouse))
    assert ps_reasons == [("in_set(ctx_topic_known)",), ("pair(ctx_topic_partitions>partition)",)]
    ev = rows(QUARANTINE_TABLES["cluster_events"], lakehouse)
    assert [(q["seq"], [f["expectation"] for f in q["failures"]]) for q in ev] == [(10_000, ["json(detail)"])]

    # The broker restart reset its meters: no counter in silver is flagged, and counts did drop.
    silver_meters = [r for r in rows(SILVER_TABLES["broker_metrics"], lakehouse)
                     if r["broker_id"] == 2 and r["name"] == "MessagesInPerSec"]
    assert len({r["process_start_ts"] for r in silver_meters}) == 2

    dq = DeltaTable(DQ_RUNS.path(lakehouse)).to_pyarrow_table().to_pylist()
    by_table: dict[str, dict[str, int]] = {}
    for d in dq:
        agg = by_table.setdefault(d["table_name"], {"in": 0, "valid": 0, "bad": 0})
        agg["in"] += d["rows_in"]
        agg["valid"] += d["rows_valid"]
        agg["bad"] += d["rows_quarantined"]
        assert d["ge_success"] == (d["rows_quarantined"] == 0)
        assert d["ge_engine"] == "pandas"
    assert by_table["broker_metrics"]["bad"] == len(bad_metrics)
    assert by_table["broker_metrics"]["valid"] == len(rows(SILVER_TABLES["broker_metrics"], lakehouse))
    failed = [f for d in dq if d["table_name"] == "broker_metrics" for f in d["failed_expectations"]]
    assert sum(f["unexpected_count"] for f in failed) == sum(len(v) for v in expected_reasons.values())


# A slow test (make test-all): in make test the executor route is taken, over every table, by the standalone-cluster
# test in tests/test_object_store.py (silver and gold equal to the driver's), and its check row by row by
# tests/pipeline/test_row_checks.py.
@pytest.mark.slow
def test_batches_over_the_driver_limit_get_the_same_verdict_on_the_executors(spark: Any, lakehouse: str) -> None:
    emulate(lakehouse, duration="6s", faults=[])
    gauge = next(r for r in rows(BROKER_METRICS, lakehouse) if r["name"] == "UnderReplicatedPartitions")
    append(BROKER_METRICS, lakehouse, [{**gauge, "ts": _later(gauge, 1), "value": -1.0},
                                       {**gauge, "ts": _later(gauge, 2), "kind": "histogram", "value": -2.0}])

    validate(spark, lakehouse, ("broker_metrics",), **{"validate.driver_max_rows": 1})

    dq = DeltaTable(DQ_RUNS.path(lakehouse)).to_pyarrow_table().to_pylist()
    assert {d["ge_engine"] for d in dq} == {"spark"}
    failed = {f["expectation"]: f["unexpected_count"] for d in dq for f in d["failed_expectations"]}
    assert failed == {"between(0<=value)": 2, "in_set(kind)": 1}
    assert [d["ge_success"] for d in dq] == [False]
    quarantined = rows(QUARANTINE_TABLES["broker_metrics"], lakehouse)
    assert sorted(q["value"] for q in quarantined) == [-2.0, -1.0]
    assert len(rows(SILVER_TABLES["broker_metrics"], lakehouse)) == len(rows(BROKER_METRICS, lakehouse)) - 2


def test_schema_drift_fails_naming_table_and_column_and_writes_nothing(spark: Any, lakehouse: str) -> None:
    path = f"{lakehouse}/bronze/cluster_events"
    df = spark.createDataFrame([("r", 0, "2026-01-01", 1)], "run_id string, batch_id long, ts string, seq long")
    df.write.format("delta").save(path)
    with pytest.raises(SchemaDriftError, match=r"bronze\.cluster_events .*column 'ts' has type string, "
                                               r"expected timestamp"):
        validate(spark, lakehouse, ("cluster_events",))
    import os

    assert not os.path.exists(f"{lakehouse}/silver") and not os.path.exists(f"{lakehouse}/_checkpoints")


def test_one_query_validates_every_table_with_one_dq_commit_per_micro_batch(spark: Any, lakehouse: str) -> None:
    emulate(lakehouse, duration="6s", flush_every_intervals=2, faults=[])  # 3 bronze commits per table

    validate(spark, lakehouse, **{"validate.max_files_per_trigger": 1})

    dq = DeltaTable(DQ_RUNS.path(lakehouse)).to_pyarrow_table().to_pylist()
    batches = sorted({d["validate_batch_id"] for d in dq})
    files = {name: DeltaTable(f"{lakehouse}/bronze/{name}").get_add_actions().num_rows for name in TABLES}
    # One file per table and trigger: as many micro-batches as the table with the most files has, and the
    # first one validates a file of every table.
    assert batches == list(range(max(files.values()))) and min(files.values()) >= 1
    assert sorted(d["table_name"] for d in dq if d["validate_batch_id"] == 0) == sorted(TABLES)
    for name, n in files.items():
        assert sum(d["table_name"] == name for d in dq) == n, name
    history = DeltaTable(DQ_RUNS.path(lakehouse)).history()
    markers = [h.get("userMetadata") for h in history if h.get("operation") == "WRITE" and h.get("userMetadata")]
    assert len(markers) == len(batches) and all(m.startswith("isrwatch-validate/dq_runs/") for m in markers)
    # Every table's silver holds each of its bronze rows once.
    for name in TABLES:
        bronze = next(td for td in BRONZE_TABLES if td.name == name)
        assert sorted(key_of(bronze, r) for r in rows(SILVER_TABLES[name], lakehouse)) == \
            sorted(key_of(bronze, r) for r in rows(bronze, lakehouse)), name
    # The de-duplication state lives in RocksDB (off the JVM heap), as the checkpoint records.
    offsets = (Path(lakehouse) / "_checkpoints" / "validate" / "union" / "offsets" / "0").read_text()
    conf = json.loads(offsets.splitlines()[1])["conf"]
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(".RocksDBStateStoreProvider")


def _bad_partition_states(template: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, set[str]]]:
    """Rows of topic "bad" (one partition each, so no real snapshot is their neighbour) breaking one of Kafka's
    invariants each, the valid offline forms Kafka shows, and the labels each row must be quarantined with."""
    t0 = template["ts"] - dt.timedelta(milliseconds=1)
    base = {**template, "topic": "bad", "ts": template["ts"], "leader": 1, "leader_epoch": 2, "partition_epoch": 3,
            "replicas": [1, 2, 3], "isr": [1, 2, 3], "elr": [], "leader_recovery_state": "RECOVERED",
            "high_watermark": 100, "log_start_offset": 0, "replica_leos": [100, 90, 100]}
    cases: list[tuple[dict[str, Any], set[str]]] = [
        ({"isr": [1, 2, 3, 4, 5, 6], "replicas": [3, 1], "replica_leos": [100, 100]},
         {"isr_subset_of_replicas", "broker_ids_known"}),
        ({"leader": 99, "isr": [99]}, {"isr_subset_of_replicas", "broker_ids_known"}),
        ({"leader": 2, "isr": [1, 3], "replica_leos": [100, 100, 100]}, {"leader_in_isr_or_offline"}),
        ({"isr": [1, 2], "elr": [2]}, {"elr_disjoint_from_isr"}),
        ({"replicas": [1, 2], "isr": [1], "elr": [3], "replica_leos": [100, 90]}, {"elr_subset_of_replicas"}),
        ({"replicas": [1, 1, 2], "isr": [1]}, {"replicas_distinct"}),
        ({"replica_leos": [100, 90]}, {"replica_leos_aligned_with_replicas"}),
        ({"high_watermark": 101}, {"high_watermark_within_leader_leo"}),          # above the leader's LEO
        ({"leader": -1, "isr": [1], "high_watermark": 5}, {"high_watermark_within_leader_leo"}),
        ({"log_start_offset": 101}, {"log_start_offset_within_high_watermark"}),
        ({"leader": -1, "isr": [2], "high_watermark": -1}, set()),                 # offline, last ISR member listed
        ({"leader": -1, "isr": [], "elr": [2, 3], "high_watermark": -1}, set()),  # offline with ELR
        ({"leader": 3, "high_watermark": 95, "replica_leos": [80, 85, 95]}, set()),  # followers behind the HW
    ]
    # Pairs: an earlier snapshot (valid), then one Kafka cannot follow it with.
    pairs: list[tuple[dict[str, Any], dict[str, Any], set[str]]] = [
        ({}, {"high_watermark": 99}, {"high_watermark_not_decreasing_in_leader_epoch"}),
        ({"log_start_offset": 5}, {"log_start_offset": 4}, {"log_start_offset_not_decreasing_in_leader_epoch"}),
        ({"leader_epoch": 3}, {"leader_epoch": 2}, {"leader_epoch_not_decreasing"}),
        ({"partition_epoch": 4}, {"partition_epoch": 3}, {"partition_epoch_not_decreasing"}),
        # A new leader epoch: the HW may go back (a new leader's HW lags) and so may the log start.
        ({"high_watermark": 100, "log_start_offset": 7}, {"leader_epoch": 3, "leader": 2, "high_watermark": 90,
                                                          "log_start_offset": 3}, set()),
    ]
    out, expected = [], {}
    for over, labels in cases:
        expected[len(out)] = labels
        out.append({**base, **over, "partition": len(out)})
    for first, second, labels in pairs:
        partition = len(out)
        out.append({**base, **first, "partition": partition, "ts": t0})
        out.append({**base, **second, "partition": partition})
        expected[partition] = labels
    return out, expected


# On the driver, and on the executors (slow: make test-all; see the note above
# test_batches_over_the_driver_limit_get_the_same_verdict_on_the_executors)
@pytest.mark.parametrize("where", ["driver", pytest.param("executors", marks=pytest.mark.slow)])
def test_kafka_invariants_quarantine_with_named_reasons(spark: Any, lakehouse: str, where: str) -> None:
    emulate(lakehouse, duration="6s", faults=[])
    config = rows(TOPIC_CONFIGS, lakehouse)[0]
    append(TOPIC_CONFIGS, lakehouse, [{**config, "topic": "bad", "partitions": 32},
                                      {**config, "topic": "bad", "partition": 1, "partitions": 32,
                                       "replicas": [1, 2, 99], "replica_racks": ["a", "b", ""]}])
    template = next(r for r in rows(PARTITION_STATE, lakehouse) if r["leader"] >= 0)
    states, expected = _bad_partition_states(template)
    append(PARTITION_STATE, lakehouse, states)
    gauge = next(r for r in rows(BROKER_METRICS, lakehouse) if r["name"] == "UnderReplicatedPartitions")
    append(BROKER_METRICS, lakehouse, [{**gauge, "broker_id": 99}])  # a 3-broker cluster has no broker 99
    event = rows(CLUSTER_EVENTS, lakehouse)[0]
    append(CLUSTER_EVENTS, lakehouse, [{**event, "seq": 10_000, "broker_id": 99}])

    validate(spark, lakehouse, **{"validate.driver_max_rows": 500_000 if where == "driver" else 1})

    quarantined = rows(QUARANTINE_TABLES["partition_state"], lakehouse)
    got = {q["partition"]: {f["expectation"] for f in q["failures"]} for q in quarantined}
    assert len(got) == len(quarantined) and all(q["topic"] == "bad" for q in quarantined)
    assert got == {p: labels for p, labels in expected.items() if labels}
    silver = rows(SILVER_TABLES["partition_state"], lakehouse)
    assert sorted((r["partition"], r["ts"]) for r in silver if r["topic"] == "bad") == sorted(
        (s["partition"], s["ts"]) for s in states if s["partition"] not in got or s["ts"] != template["ts"])
    assert len(silver) == len(rows(PARTITION_STATE, lakehouse)) - len(quarantined)
    for name, key in (("broker_metrics", "broker_id"), ("cluster_events", "broker_id"),
                      ("topic_configs", "partition")):
        bad = rows(QUARANTINE_TABLES[name], lakehouse)
        assert [(q[key], [f["expectation"] for f in q["failures"]]) for q in bad] == [
            (1 if name == "topic_configs" else 99, ["broker_ids_known"])], name
    dq = DeltaTable(DQ_RUNS.path(lakehouse)).to_pyarrow_table().to_pylist()
    assert {d["ge_engine"] for d in dq if d["table_name"] == "partition_state"} == {
        "pandas" if where == "driver" else "spark"}
    failed: dict[str, int] = {}
    for d in dq:
        if d["table_name"] == "partition_state":
            for f in d["failed_expectations"]:
                failed[f["expectation"]] = failed.get(f["expectation"], 0) + f["unexpected_count"]
    assert failed == {label: sum(label in labels for labels in expected.values())
                      for label in set().union(*expected.values())}


def test_shipped_scenarios_pass_every_expectation(spark: Any, lakehouse: str) -> None:
    """No false positives: each shipped scenario's output, up to a little after its first fault, reaches silver
    whole (faults, elections, ELR, power loss and an unclean election included)."""
    for path in sorted((Path(__file__).resolve().parents[2] / "conf" / "scenarios").glob("*.yaml")):
        sc = load_scenario(path)
        first_fault_ms = min((f.at_ms for f in sc.faults), default=0)
        duration_ms = min(sc.duration_ms, max(first_fault_ms + 15_000, 10_000))
        sc = replace(sc.with_overrides(duration_ms=duration_ms), flush_every_intervals=1_000)
        Simulation(sc, DeltaSink(lakehouse, f"{sc.name}-s{sc.seed}")).run()

    validate(spark, lakehouse)

    for name in TABLES:
        assert rows(QUARANTINE_TABLES[name], lakehouse) == [], name
        bronze = next(td for td in BRONZE_TABLES if td.name == name)
        assert len(rows(SILVER_TABLES[name], lakehouse)) == len(rows(bronze, lakehouse)), name
