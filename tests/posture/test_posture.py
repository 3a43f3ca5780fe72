"""Topic posture: the seed's RF/min.insync.replicas table, failure domains and findings (pure pandas)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipelines.posture import FINDINGS, POSTURE_COLUMNS, latest_configs, topic_posture

P = 0.02  # the seed's illustrative per-broker loss probability


def config(topic: str = "orders", partition: int = 0, rf: int = 3, min_isr: int = 2, *,
           run_id: str = "c1", racks: list[str] | None = None, unclean: bool = False,
           replicas: list[int] | None = None) -> dict[str, Any]:
    replicas = list(range(1, rf + 1)) if replicas is None else replicas
    racks = [f"r{b}" for b in replicas] if racks is None else racks
    return {
        "run_id": run_id, "topic": topic, "partition": partition, "replication_factor": rf,
        "min_insync_replicas": min_isr, "effective_min_isr": min(min_isr, rf),
        "unclean_leader_election_enable": unclean, "elr_enabled": False,
        # Arrow hands list columns to pandas as numpy arrays.
        "replicas": np.array(replicas, dtype="int32"), "replica_racks": np.array(racks, dtype=object),
    }


def posture(*rows: dict[str, Any], brokers: dict[str, int] | None = None, p: float = P) -> pd.DataFrame:
    return topic_posture(pd.DataFrame(list(rows)), {"c1": 9} if brokers is None else brokers, p)


def one(*rows: dict[str, Any], **kwargs: Any) -> pd.Series:
    out = posture(*rows, **kwargs)
    assert len(out) == 1
    return out.iloc[0]


SEED_11 = "No durability. Dev only."
SEED_22 = "Durable but not available, one slow follower halts the topic."
SEED_21 = "Available but a single-copy ack can be lost on leader failure."
SEED_32 = "The standard. Durable AND available under one failure."
SEED_53 = "Higher tolerance for critical/financial data; meaningfully pricier."


# headroom = max(RF − M, 0) is the seed's "keeps writing" column; redundancy_bound = RF − 1 its raw bound.
# zero_loss_tolerance is the seed's "zero acked loss" column, cell by cell: 0, 1, 0, 1, 2 brokers.
@pytest.mark.parametrize(
    ("rf", "m", "headroom", "zero_loss", "redundancy", "text", "cls", "findings"),
    [
        (1, 1, 0, 0, 0, SEED_11, "no-durability", ["min_isr_one", "rf_below_3"]),
        (2, 2, 0, 1, 1, SEED_22, "durable-not-available", ["rf_below_3", "rf2_trap"]),
        (2, 1, 1, 0, 1, SEED_21, "single-copy-acks", ["min_isr_one", "rf_below_3", "rf2_trap"]),
        (3, 2, 1, 1, 2, SEED_32, "durable-and-available", []),
        (5, 3, 2, 2, 4, SEED_53, "durable-and-available", []),
    ],
)
def test_seed_table_rows(rf: int, m: int, headroom: int, zero_loss: int, redundancy: int, text: str,
                         cls: str, findings: list[str]) -> None:
    row = one(config(rf=rf, min_isr=m))
    assert row["effective_min_isr"] == m
    assert row["availability_headroom"] == headroom
    assert row["zero_loss_tolerance"] == zero_loss
    assert row["redundancy_bound"] == redundancy
    assert row["verdict"] == text
    assert row["verdict_row"] == f"RF={rf}/M={m}"
    assert row["verdict_class"] == cls
    assert row["findings"] == findings
    assert row["finding_count"] == len(findings)
    assert row["p_all_copies_lost_if_independent"] == pytest.approx(P**rf)


# Written out here, not derived from pipelines.posture: gold.posture's columns, in order.
EXPECTED_FINDINGS = ["min_isr_above_rf", "min_isr_one", "rf_below_3", "rf2_trap", "unclean_enabled",
                     "shared_failure_domain", "rf_equals_brokers"]
EXPECTED_COLUMNS = [
    "run_id", "topic", "partitions", "replication_factor", "configured_min_isr", "effective_min_isr",
    "unclean_leader_election_enable", "elr_enabled", "brokers", "racks_configured", "failure_domains",
    "partitions_sharing_domain", "availability_headroom", "zero_loss_tolerance", "redundancy_bound",
    "p_all_copies_lost", "p_all_copies_lost_if_independent", "verdict", "verdict_row", "verdict_class",
    "finding_min_isr_above_rf", "finding_min_isr_one", "finding_rf_below_3", "finding_rf2_trap",
    "finding_unclean_enabled", "finding_shared_failure_domain", "finding_rf_equals_brokers",
    "findings", "finding_count",
]


def test_output_columns_and_findings_catalogue() -> None:
    out = posture(config())
    assert list(out.columns) == EXPECTED_COLUMNS
    assert list(POSTURE_COLUMNS) == EXPECTED_COLUMNS
    assert {name: sev for name, (sev, _) in FINDINGS.items()} == {
        "min_isr_above_rf": "warning", "min_isr_one": "warning", "rf_below_3": "warning", "rf2_trap": "warning",
        "unclean_enabled": "warning", "shared_failure_domain": "warning", "rf_equals_brokers": "info"}
    assert list(FINDINGS) == EXPECTED_FINDINGS
    # RF 3, min ISR 2, three racks, nine brokers: the standard, with no finding.
    row = out.iloc[0].to_dict()
    assert row == {
        "run_id": "c1", "topic": "orders", "partitions": 1, "replication_factor": 3, "configured_min_isr": 2,
        "effective_min_isr": 2, "unclean_leader_election_enable": False, "elr_enabled": False, "brokers": 9,
        "racks_configured": True, "failure_domains": 3, "partitions_sharing_domain": 0, "availability_headroom": 1,
        "zero_loss_tolerance": 1, "redundancy_bound": 2, "p_all_copies_lost": pytest.approx(8e-6),
        "p_all_copies_lost_if_independent": pytest.approx(8e-6), "verdict": SEED_32, "verdict_row": "RF=3/M=2",
        "verdict_class": "durable-and-available", **{f"finding_{name}": False for name in EXPECTED_FINDINGS},
        "findings": [], "finding_count": 0,
    }


def test_min_isr_above_rf_is_capped() -> None:
    row = one(config(rf=2, min_isr=3))
    assert row["configured_min_isr"] == 3
    assert row["effective_min_isr"] == 2
    assert row["availability_headroom"] == 0
    assert row["verdict"] == SEED_22
    assert row["verdict_row"] == "RF=2/M=2"
    assert row["verdict_class"] == "durable-not-available"
    assert row["findings"] == ["min_isr_above_rf", "rf_below_3", "rf2_trap"]


def test_combinations_outside_the_seed_table_get_their_class() -> None:
    out = posture(config("a", rf=3, min_isr=5), config("b", rf=4, min_isr=2), config("c", rf=3, min_isr=1),
                  config("d", rf=1, min_isr=2))
    assert out["verdict_class"].tolist() == [
        "durable-not-available", "durable-and-available", "single-copy-acks", "no-durability"]
    assert out["verdict"].tolist() == [
        "Durable but not available: losing any one replica stops acks=all writes.",
        "Durable and available under 2 failure(s).", SEED_21, SEED_11]
    assert out["verdict_row"].tolist() == [None, None, None, "RF=1/M=1"]
    assert out["effective_min_isr"].tolist() == [3, 2, 1, 1]


def test_all_replicas_in_one_rack_collapse_to_one_domain() -> None:
    row = one(*(config(partition=i, racks=["a", "a", "a"]) for i in range(4)))
    assert row["racks_configured"]
    assert row["failure_domains"] == 1
    assert row["p_all_copies_lost"] == pytest.approx(0.02)
    assert row["p_all_copies_lost_if_independent"] == pytest.approx(8e-6)
    assert row["partitions_sharing_domain"] == 4
    assert row["finding_shared_failure_domain"]
    assert "shared_failure_domain" in row["findings"]


def test_two_racks_give_two_domains() -> None:
    row = one(config(racks=["a", "a", "b"]))
    assert row["failure_domains"] == 2
    assert row["p_all_copies_lost"] == pytest.approx(4e-4)
    assert row["partitions_sharing_domain"] == 1


def test_three_racks_are_independent() -> None:
    row = one(config(racks=["a", "b", "c"]))
    assert row["failure_domains"] == 3
    assert row["p_all_copies_lost"] == pytest.approx(8e-6)
    assert row["partitions_sharing_domain"] == 0
    assert not row["finding_shared_failure_domain"]
    assert row["findings"] == []


def test_without_racks_each_broker_is_its_own_domain() -> None:
    row = one(config(racks=["", "", ""]))
    assert not row["racks_configured"]
    assert row["failure_domains"] == 3
    assert row["p_all_copies_lost"] == pytest.approx(8e-6)
    assert not row["finding_shared_failure_domain"]


def test_partially_racked_partition_counts_rackless_brokers_separately() -> None:
    row = one(config(racks=["a", "", "a"]))
    assert not row["racks_configured"]
    assert row["failure_domains"] == 2


def test_one_bad_partition_sets_the_topic_minimum() -> None:
    rows = [config(partition=i, racks=["a", "b", "c"]) for i in range(5)]
    rows[3] = config(partition=3, racks=["b", "b", "b"])
    row = one(*rows)
    assert row["partitions"] == 5
    assert row["failure_domains"] == 1
    assert row["partitions_sharing_domain"] == 1
    assert row["p_all_copies_lost"] == pytest.approx(0.02)


def test_topic_takes_the_worst_partition_settings() -> None:
    row = one(config(partition=0, rf=3, min_isr=2), config(partition=1, rf=2, min_isr=3, unclean=True))
    assert row["replication_factor"] == 2
    assert row["configured_min_isr"] == 3
    assert row["effective_min_isr"] == 2
    assert row["unclean_leader_election_enable"]


@pytest.mark.parametrize(("brokers", "expected", "known"), [({"c1": 3}, True, 3), ({"c1": 5}, False, 5),
                                                            ({"other": 3}, False, None)])
def test_rf_equals_brokers(brokers: dict[str, int], expected: bool, known: int | None) -> None:
    out = posture(config(rf=3), brokers=brokers)
    row = out.iloc[0]
    assert out["brokers"].dtype == "Int64"
    assert bool(row["finding_rf_equals_brokers"]) is expected
    assert ("rf_equals_brokers" in row["findings"]) == expected
    if known is None:
        assert row["brokers"] is pd.NA
    else:
        assert row["brokers"] == known


def test_unclean_election_finding() -> None:
    row = one(config(unclean=True))
    assert row["finding_unclean_enabled"]
    assert row["findings"] == ["unclean_enabled"]
    assert row["finding_count"] == 1


def test_clusters_are_kept_apart() -> None:
    out = posture(config(run_id="c2", racks=["a", "a", "a"]), config(run_id="c1"), config("audit", run_id="c1"),
                  brokers={"c1": 3, "c2": 6})
    assert out[["run_id", "topic"]].values.tolist() == [["c1", "audit"], ["c1", "orders"], ["c2", "orders"]]
    assert out["partitions"].tolist() == [1, 1, 1]
    assert out["failure_domains"].tolist() == [3, 3, 1]
    assert out["brokers"].tolist() == [3, 3, 6]
    assert out["finding_rf_equals_brokers"].tolist() == [True, True, False]


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_bad_failure_probability(p: float) -> None:
    with pytest.raises(ValueError, match="failure_probability"):
        posture(config(), p=p)


def test_missing_column() -> None:
    frame = pd.DataFrame([config()]).drop(columns=["replica_racks"])
    with pytest.raises(ValueError, match="replica_racks"):
        topic_posture(frame, {}, P)


def test_mismatched_racks_raise() -> None:
    with pytest.raises(ValueError, match="replica_racks"):
        posture(config(racks=["a", "b"]))


def test_empty_configs() -> None:
    out = topic_posture(pd.DataFrame(columns=list(config())), {}, P)
    assert out.empty
    assert list(out.columns) == EXPECTED_COLUMNS


def test_latest_configs_keeps_the_latest_row() -> None:
    ts = pd.to_datetime(["2024-01-01T00:00:02Z", "2024-01-01T00:00:01Z", "2024-01-01T00:00:03Z",
                         "2024-01-01T00:00:01Z"])
    rows = pd.DataFrame([config(rf=3, min_isr=1), config(rf=3, min_isr=2), config(rf=3, min_isr=3),
                         config(partition=1)]).assign(ts=ts)
    latest = latest_configs(rows.iloc[[1, 2, 0, 3]])
    assert latest[["partition", "min_insync_replicas"]].values.tolist() == [[0, 3], [1, 2]]
    with pytest.raises(ValueError, match="ts"):
        latest_configs(rows.drop(columns=["ts"]))


def test_latest_configs_breaks_ts_ties_by_input_order() -> None:
    rows = pd.DataFrame([config(min_isr=1), config(min_isr=2)]).assign(ts=pd.Timestamp("2024-01-01", tz="UTC"))
    assert latest_configs(rows)["min_insync_replicas"].tolist() == [2]
    assert latest_configs(rows.iloc[::-1])["min_insync_replicas"].tolist() == [1]
