"""The dashboard frames read from a hand-written lakehouse (tests/dashboards/lake.py): scope, filters,
bucket reductions and the empty frames of missing tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dashboards import data
from dashboards.scope import DEFAULT_WINDOW_MINUTES, MAX_WINDOW_MINUTES, Scope, resolve_scope
from lakehouse_read.reader import LakehouseReader
from schemas.silver import SILVER_TABLES
from tests.dashboards.lake import C0_START, SECONDS, at, write


@pytest.fixture
def scope(reader: LakehouseReader) -> Scope:
    """Cluster c1, 5 minutes: one-second buckets, so every snapshot is its own bucket."""
    s = resolve_scope(reader, window_minutes=5)
    assert s.bucket_seconds == 1
    return s


def stamps(values: pd.Series) -> list[pd.Timestamp]:
    return [pd.Timestamp(v) for v in values]


def test_the_default_cluster_is_the_one_with_the_latest_snapshot_and_the_window_ends_there(
        reader: LakehouseReader) -> None:
    s = resolve_scope(reader)
    assert (s.cluster, s.window_minutes, s.end) == ("c1", DEFAULT_WINDOW_MINUTES, at(SECONDS - 1))
    assert s.bucket_seconds == 6


def test_a_named_cluster_ends_at_its_own_latest_snapshot(reader: LakehouseReader) -> None:
    assert resolve_scope(reader, "c0").end == at(4, C0_START)
    assert resolve_scope(reader, "nope") == Scope("nope", DEFAULT_WINDOW_MINUTES, None)


@pytest.mark.parametrize(("window", "error"), [(0, ValueError), (-5, ValueError), (MAX_WINDOW_MINUTES + 1, ValueError),
                                               (1.5, TypeError), (True, TypeError)])
def test_a_bad_window_is_refused_naming_the_argument(reader: LakehouseReader, window: object,
                                                     error: type[Exception]) -> None:
    with pytest.raises(error, match="window_minutes"):
        resolve_scope(reader, window_minutes=window)  # type: ignore[arg-type]


def test_isr_cells_are_isr_size_minus_effective_min_isr_with_offline_flagged(reader: LakehouseReader,
                                                                              scope: Scope) -> None:
    cells = data.isr_cells(reader, scope)
    assert cells.partitions_total == 3
    orders0 = cells.frame[(cells.frame["topic"] == "orders") & (cells.frame["partition"] == 0)]
    assert stamps(orders0["ts"]) == [at(s) for s in range(SECONDS)]
    assert list(orders0["margin"]) == [1] * 10 + [-1] * 7 + [0] * 3
    assert list(orders0["offline"]) == [False] * 15 + [True] * 2 + [False] * 3
    assert set(cells.frame.loc[cells.frame["topic"] == "logs", "margin"]) == {1}
    assert "c0" not in set(cells.frame["topic"]) and "old" not in set(cells.frame["topic"])


def test_isr_cells_keep_the_minimum_of_a_bucket_and_the_worst_partitions(reader: LakehouseReader) -> None:
    six_second = resolve_scope(reader)  # 30 minutes: 6-second buckets from 00:00:00
    cells = data.isr_cells(reader, six_second, max_partitions=1)
    assert cells.partitions_total == 3
    assert set(zip(cells.frame["topic"], cells.frame["partition"], strict=True)) == {("orders", 0)}
    assert stamps(cells.frame["ts"]) == [at(0), at(6), at(12), at(18)]
    # s 6-11 hold a -1 from s 10; s 12-17 are offline at s 15-16; s 18-19 are at min ISR.
    assert list(cells.frame["margin"]) == [1, -1, -1, 0]
    assert list(cells.frame["offline"]) == [False, False, True, False]


def test_broker_metrics_are_the_overview_gauges_of_the_cluster_only(reader: LakehouseReader, scope: Scope) -> None:
    frame = data.broker_metrics(reader, scope)
    assert set(frame["name"]) == {*data.PARTITION_GAUGES, data.OFFLINE_PARTITIONS}  # not LeaderCount
    urp = frame[(frame["name"] == "UnderReplicatedPartitions") & (frame["broker_id"] == 1)]
    assert list(urp["value"]) == [0.0] * 10 + [1.0] * 7 + [0.0] * 3  # not c0's 7.0
    offline = frame[frame["name"] == data.OFFLINE_PARTITIONS]
    assert offline.loc[offline["value"] > 0, "ts"].tolist() == [at(15), at(16)]


def test_broker_metrics_keep_the_maximum_of_a_bucket(reader: LakehouseReader) -> None:
    frame = data.broker_metrics(reader, resolve_scope(reader), names=("UnderReplicatedPartitions",))
    broker1 = frame[frame["broker_id"] == 1]
    assert stamps(broker1["ts"]) == [at(0), at(6), at(12), at(18)]
    assert list(broker1["value"]) == [0.0, 1.0, 1.0, 0.0]


def test_data_loss_events_are_unclean_elections_and_lost_acknowledged_records(reader: LakehouseReader,
                                                                              scope: Scope) -> None:
    losses = data.data_loss_events(reader, scope)
    assert losses.to_dict("records") == [
        {"ts": at(17), "kind": "acked records lost", "partitions": 1, "records": 5, "where": "orders-0"},
        {"ts": at(17), "kind": "unclean election", "partitions": 1, "records": 0, "where": "orders-0"},
    ]


def test_active_alerts_are_the_clusters_pending_and_firing_most_severe_first(reader: LakehouseReader) -> None:
    alerts = data.active_alerts(reader, "c1")
    assert list(zip(alerts["severity"], alerts["status"], alerts["rule"], strict=True)) == [
        ("critical", "firing", "UnderMinIsr"), ("warning", "firing (flapping)", "AtMinIsr"),
        ("warning", "pending", "UnderReplicated")]
    assert data.active_alerts(reader, None).empty


def test_topic_names_of_the_cluster(reader: LakehouseReader, scope: Scope) -> None:
    assert data.topic_names(reader, scope) == ["logs", "orders"]
    assert data.topic_names(reader, resolve_scope(reader, "c0")) == ["old"]


def test_isr_membership_is_leader_in_isr_or_out_per_replica(reader: LakehouseReader, scope: Scope) -> None:
    frame = data.topic_isr_membership(reader, scope, "orders")
    p0 = frame[frame["partition"] == 0]
    by_broker = {b: list(p0.loc[p0["broker_id"] == b, "state"]) for b in (1, 2, 3)}
    leader, in_isr, out = data.REPLICA_LEADER, data.REPLICA_IN_ISR, data.REPLICA_OUT_OF_ISR
    # s 15-16 offline: nobody leads; broker 1 stays in the ISR the controller last committed.
    assert by_broker[1] == [leader] * 15 + [in_isr] * 2 + [out] * 3
    assert by_broker[2] == [in_isr] * 10 + [out] * 7 + [leader] * 3
    assert by_broker[3] == [in_isr] * 10 + [out] * 7 + [in_isr] * 3
    assert set(frame.loc[frame["partition"] == 1, "state"]) == {leader, in_isr}
    assert list(data.topic_isr_membership(reader, scope, "orders", max_partitions=1)["partition"].unique()) == [0]


def test_offsets_align_each_replicas_leo_with_its_broker(reader: LakehouseReader, scope: Scope) -> None:
    frame = data.topic_offsets(reader, scope, "orders")
    at12 = frame[(frame["partition"] == 0) & (frame["ts"] == at(12))]
    assert list(zip(at12["broker_id"], at12["log_end_offset"], at12["high_watermark"], strict=True)) == [
        (1, 1200, 1000), (2, 1000, 1000), (3, 1000, 1000)]
    # Partition 0's replicas drift apart, partition 1's never do: with room for one, 0 is shown.
    assert set(data.topic_offsets(reader, scope, "orders", max_partitions=1)["partition"]) == {0}


def test_offsets_leave_out_a_snapshot_whose_leos_do_not_line_up_with_its_replicas(lake_copy: Path) -> None:
    write(lake_copy, SILVER_TABLES["partition_state"],
          [{"run_id": "c1", "ts": at(SECONDS), "topic": "logs", "partition": 0, "leader": 3, "replicas": [3, 1],
            "isr": [3, 1], "effective_min_isr": 1, "high_watermark": 7, "replica_leos": [7]}])
    reader = LakehouseReader(lake_copy, refresh_s=0)
    frame = data.topic_offsets(reader, resolve_scope(reader, window_minutes=5), "logs")
    assert frame["ts"].max() == at(SECONDS - 1)
    assert len(frame) == 2 * SECONDS


def test_produce_errors_per_acks_level_per_second(reader: LakehouseReader, scope: Scope) -> None:
    frame = data.topic_rejections(reader, scope, "orders")
    every_all = frame[frame["acks"] == "all"].set_index("ts")["records_failed_per_s"]
    assert every_all[at(12)] == 6.0  # 4 on partition 0 + 2 on partition 1 in a one-second interval
    assert every_all[at(16)] == 4.0
    assert every_all[at(0)] == 0.0
    assert set(frame.loc[frame["acks"] == "1", "records_failed_per_s"]) == {0.0}
    assert set(frame["records_sent_per_s"]) == {20.0, 5.0}


def test_produce_errors_average_over_the_intervals_a_bucket_holds(reader: LakehouseReader) -> None:
    # 6-second buckets; the last one (s 18-19) holds two intervals, not six: its rate is not diluted.
    frame = data.topic_rejections(reader, resolve_scope(reader), "orders")
    every_all = frame[frame["acks"] == "all"].set_index("ts")
    assert every_all.loc[at(12), "records_failed_per_s"] == (6 * 3 + 4 * 2) / 6
    assert every_all.loc[at(18), "records_sent_per_s"] == 20.0


def test_slo_status_counts_a_recomputed_interval_once_as_its_latest(reader: LakehouseReader, scope: Scope) -> None:
    frame = data.slo_status(reader, scope)
    write = frame[frame["slo"] == "write-availability"].set_index("ts")
    assert len(write) == SECONDS
    assert write.loc[at(SECONDS - 1), "error_budget_remaining"] == 0.5
    assert write.loc[at(SECONDS - 1), "burn_rate_1h"] == 30.0
    assert write.loc[at(3), "error_budget_remaining"] == pytest.approx(0.97)
    assert list(write["page"]) == [False] * 15 + [True] * 5


def test_a_window_reads_only_its_minutes(reader: LakehouseReader) -> None:
    one_minute = resolve_scope(reader, window_minutes=1)
    assert len(data.slo_status(reader, one_minute)) == 2 * SECONDS
    c0 = resolve_scope(reader, "c0", window_minutes=1)
    assert data.slo_status(reader, c0).empty
    assert stamps(data.isr_cells(reader, c0).frame["ts"]) == [at(s, C0_START) for s in range(5)]


def test_posture_of_the_cluster(reader: LakehouseReader) -> None:
    frame = data.posture(reader, "c1")
    assert list(frame["topic"]) == ["logs", "orders"]
    assert list(frame.loc[0, "findings"]) == ["rf_below_3", "rf2_trap"]


def test_missing_tables_give_empty_frames(tmp_path: Path) -> None:
    reader = LakehouseReader(tmp_path / "empty")
    scope = resolve_scope(reader)
    assert scope == Scope(None, DEFAULT_WINDOW_MINUTES, None)
    named = Scope("c1", 5, at(19))  # a cluster named, but none of its tables written yet
    for s in (scope, named):
        assert data.broker_metrics(reader, s).empty
        assert data.data_loss_events(reader, s).empty
        assert data.isr_cells(reader, s).frame.empty
        assert data.topic_isr_membership(reader, s, "orders").empty
        assert data.topic_offsets(reader, s, "orders").empty
        assert data.topic_rejections(reader, s, "orders").empty
        assert data.slo_status(reader, s).empty
        assert data.topic_names(reader, s) == []
    assert data.active_alerts(reader, "c1").empty
    assert data.posture(reader, "c1").empty
