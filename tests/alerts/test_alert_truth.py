"""Alert quality against ground truth on hand-built frames: episodes cut from bronze rows, firing intervals
from alert events, and the score (recall, precision, detection delay, grace window)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipelines.alert_truth import CLASSES, CLUSTER_SCOPED, episodes, firing_intervals, score

T0 = pd.Timestamp("2026-01-01T00:00:00Z")


def at(s: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=s)


def state(s: float, isr: int, leader: int = 1, min_isr: int = 2, rf: int = 3, partition: int = 0,
          run: str = "c1") -> dict[str, Any]:
    return {"run_id": run, "ts": at(s), "topic": "t", "partition": partition, "leader": leader,
            "isr": np.arange(1, isr + 1), "effective_min_isr": min_isr, "replicas": list(range(1, rf + 1))}


def ack(s: float, acks: str, acked: int = 0, lost: int = 0, partition: int = 0) -> dict[str, Any]:
    return {"run_id": "c1", "ts": at(s), "topic": "t", "partition": partition, "acks": acks,
            "records_acked": acked, "records_lost": lost}


NO_ACKS = pd.DataFrame([ack(0, "all")]).iloc[:0]


def spans(eps: pd.DataFrame, cls: str) -> list[tuple[int, pd.Timestamp, pd.Timestamp]]:
    e = eps[eps["cls"] == cls]
    return list(zip(e["partition"], e["start"], e["end"], strict=True))


def test_isr_dip_below_min_isr_is_one_writes_refused_episode() -> None:
    eps = episodes(pd.DataFrame([state(s, isr) for s, isr in enumerate([3, 1, 1, 3])]), NO_ACKS)
    assert spans(eps, "writes_refused") == [(0, at(1), at(2))]
    assert list(eps["cls"]) == ["writes_refused"]
    assert str(eps["start"].dt.tz) == "UTC"


def test_two_dips_are_two_episodes_and_partitions_never_merge() -> None:
    rows = [state(s, isr) for s, isr in enumerate([1, 3, 1, 1, 3, 1])]
    rows += [state(s, isr, partition=1) for s, isr in enumerate([1, 3])]
    eps = episodes(pd.DataFrame(rows[::-1]), NO_ACKS)  # unsorted input
    assert spans(eps, "writes_refused") == [(0, at(0), at(0)), (0, at(2), at(3)), (0, at(5), at(5)),
                                            (1, at(0), at(0))]


def test_offline_run_is_offline_not_writes_refused() -> None:
    rows = [state(0, 3), state(1, 0, leader=-1), state(2, 0, leader=-1), state(3, 1), state(4, 3)]
    eps = episodes(pd.DataFrame(rows), NO_ACKS)
    assert spans(eps, "offline_partitions") == [(0, at(1), at(2))]
    assert spans(eps, "writes_refused") == [(0, at(3), at(3))]


def test_single_copy_acks_only_in_samples_with_acks_all_traffic() -> None:
    rows = [state(s, 1, min_isr=1) for s in range(5)]
    acks = [ack(0, "all", 5), ack(1, "all", 5), ack(2, "1", 5), ack(2, "all", 0), ack(3, "all", 5)]
    eps = episodes(pd.DataFrame(rows), pd.DataFrame(acks))
    assert spans(eps, "single_copy_acks") == [(0, at(0), at(1)), (0, at(3), at(3))]


def test_rf_one_partition_is_never_single_copy() -> None:
    rows = [state(s, 1, min_isr=1, rf=1) for s in range(3)]
    eps = episodes(pd.DataFrame(rows), pd.DataFrame([ack(s, "all", 5) for s in range(3)]))
    assert eps.empty


def test_acked_loss_is_summed_over_acks_levels() -> None:
    acks = [ack(5, "1", 10, lost=2), ack(5, "all", 10, lost=3), ack(6, "all", 10), ack(7, "0", 1, lost=1)]
    eps = episodes(pd.DataFrame([state(5, 3)]), pd.DataFrame(acks))
    lost = eps[eps["cls"] == "acked_data_lost"]
    assert list(zip(lost["start"], lost["end"], lost["records"], strict=True)) == [(at(5), at(5), 5.0),
                                                                                   (at(7), at(7), 1.0)]


def ep(cls: str, start: float, end: float, partition: int = 0, cluster: str = "c1") -> dict[str, Any]:
    return {"cls": cls, "cluster": cluster, "topic": "t", "partition": partition, "start": at(start),
            "end": at(end), "records": 0.0}


def alert(rule: str, fired: float, resolved: float | None = None, partition: int = 0, cluster: str = "c1",
          inhibited: bool = False, as_tuples: bool = False) -> list[dict[str, Any]]:
    labels = {"alertname": rule, "cluster": cluster}
    if rule not in CLUSTER_SCOPED:
        labels |= {"topic": "t", "partition": str(partition)}
    fp = "|".join(f"{k}={v}" for k, v in sorted(labels.items()))
    base = {"rule": rule, "fingerprint": fp, "cluster": cluster, "inhibited": inhibited,
            "labels": list(labels.items()) if as_tuples else labels}
    events = [{**base, "status": "firing", "ts": at(fired)}]
    return events + ([{**base, "status": "resolved", "ts": at(resolved)}] if resolved is not None else [])


def run(eps: list[dict[str, Any]], *alerts: list[dict[str, Any]], grace_ms: int = 15_000,
        ) -> tuple[pd.Series, pd.DataFrame]:
    """Score, returning the summary row of the first episode's class and the matches."""
    events = pd.DataFrame([e for a in alerts for e in a],
                          columns=["status", "rule", "fingerprint", "cluster", "labels", "ts", "inhibited"])
    summary, matches = score(pd.DataFrame(eps), events, grace_ms)
    assert list(summary["cls"]) == list(CLASSES)
    return summary.set_index("cls").loc[eps[0]["cls"]], matches


def test_alert_firing_one_second_after_start_detects_with_delay_one() -> None:
    row, matches = run([ep("writes_refused", 10, 20)], alert("UnderMinIsr", 11, 21))
    assert (row["episodes"], row["detected"], row["recall"], row["precision"]) == (1, 1, 1.0, 1.0)
    assert (row["delay_p50_s"], row["delay_max_s"]) == (1.0, 1.0)
    assert matches[["detected", "delay_s", "rule"]].to_dict("records") == [
        {"detected": True, "delay_s": 1.0, "rule": "UnderMinIsr"}]


def test_alert_on_another_partition_is_a_false_positive() -> None:
    row, _ = run([ep("writes_refused", 10, 20)], alert("UnderMinIsr", 11, 21),
                 alert("UnderMinIsr", 11, 21, partition=1))
    assert (row["alerts"], row["true_alerts"], row["precision"]) == (2, 1, 0.5)


def test_cluster_scoped_alert_matches_a_partition_offline_episode() -> None:
    row, matches = run([ep("offline_partitions", 10, 20, partition=3)], alert("OfflinePartitions", 12, 22),
                       alert("OfflinePartitions", 12, cluster="c2"))
    assert (row["detected"], row["true_alerts"], row["precision"]) == (1, 1, 0.5)
    assert matches.loc[0, "delay_s"] == 2.0


def test_inhibited_alert_counts_and_earliest_rule_is_reported() -> None:
    row, matches = run([ep("offline_partitions", 10, 20)], alert("OfflinePartitions", 13),
                       alert("PartitionOffline", 12, inhibited=True))
    assert (row["true_alerts"], row["precision"]) == (2, 1.0)
    assert (matches.loc[0, "rule"], matches.loc[0, "delay_s"]) == ("PartitionOffline", 2.0)


def test_alert_already_firing_at_episode_start_has_zero_delay() -> None:
    _, matches = run([ep("writes_refused", 10, 20)], alert("UnderMinIsr", 5))
    assert matches.loc[0, "delay_s"] == 0.0


def test_missed_episode_lowers_recall_and_delays_are_over_detected_ones() -> None:
    eps = [ep("writes_refused", 10, 20), ep("writes_refused", 100, 110), ep("writes_refused", 10, 20, partition=1)]
    row, matches = run(eps, alert("UnderMinIsr", 11, 21), alert("UnderMinIsr", 103, 111))
    assert (row["episodes"], row["detected"], row["recall"]) == (3, 2, 2 / 3)
    assert (row["delay_p50_s"], row["delay_p95_s"], row["delay_max_s"]) == (2.0, pytest.approx(2.9), 3.0)
    missed = matches[~matches["detected"]]
    assert list(missed["partition"]) == [1]
    assert math.isnan(missed["delay_s"].iloc[0])
    assert missed["rule"].iloc[0] is None


@pytest.mark.parametrize(("fired", "resolved", "detected"), [
    (35, None, True), (35.001, None, False),   # end + grace
    (-20, -5, True), (-20, -5.001, False),      # start - grace
])
def test_grace_window_boundaries(fired: float, resolved: float | None, detected: bool) -> None:
    row, _ = run([ep("writes_refused", 10, 20)], alert("UnderMinIsr", fired, resolved))
    assert row["detected"] == int(detected)


def test_zero_grace_and_negative_grace() -> None:
    row, _ = run([ep("writes_refused", 10, 20)], alert("UnderMinIsr", 20.5), grace_ms=0)
    assert row["detected"] == 0
    with pytest.raises(ValueError, match="grace_ms"):
        run([ep("writes_refused", 10, 20)], grace_ms=-1)


def test_labels_as_list_of_tuples() -> None:
    row, _ = run([ep("acked_data_lost", 10, 10, partition=2)], alert("AckedRecordsLost", 10, 11, partition=2,
                                                                     as_tuples=True))
    assert (row["detected"], row["precision"]) == (1, 1.0)


def test_class_without_episodes_or_alerts_has_nan_recall_and_precision() -> None:
    summary, _ = score(pd.DataFrame([ep("writes_refused", 10, 20)]), pd.DataFrame(alert("UnderMinIsr", 11)))
    empty = summary.set_index("cls").loc["single_copy_acks"]
    assert (empty["episodes"], empty["alerts"]) == (0, 0)
    assert all(math.isnan(empty[c]) for c in ("recall", "precision", "delay_p50_s", "delay_p95_s", "delay_max_s"))


def test_firing_paired_with_next_resolved_of_same_fingerprint() -> None:
    events = alert("UnderMinIsr", 10, 20) + alert("UnderMinIsr", 30) + alert("UnderMinIsr", 15, 25, partition=1)
    intervals = firing_intervals(pd.DataFrame(events[::-1]))
    got = intervals.sort_values("fired")[["partition", "fired", "resolved"]].to_numpy().tolist()
    assert got == [[0, at(10), at(20)], [1, at(15), at(25)], [0, at(30), pd.NaT]]
    scoped = firing_intervals(pd.DataFrame(alert("OfflinePartitions", 1)))
    assert (scoped.loc[0, "topic"], scoped.loc[0, "partition"]) == (None, None)


def test_a_firing_that_continues_a_firing_alert_is_not_another_alert() -> None:
    """UnderMinIsr fired inhibited at 10 s and was delivered at 14 s when its inhibitor resolved (firing -> firing):
    one interval, 10 s to 20 s, so one alert for the episode, not a second firing pair."""
    fired, resolved = alert("UnderMinIsr", 10, 20, inhibited=True)
    lifted = {**fired, "ts": at(14), "inhibited": False, "previous_status": "firing"}
    events = pd.DataFrame([{**fired, "previous_status": "inactive"}, lifted, {**resolved, "previous_status": "firing"}])
    got = firing_intervals(events)[["fired", "resolved", "inhibited"]].to_numpy().tolist()
    assert got == [[at(10), at(20), True]]


def test_missing_columns_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"partition_state: missing column.* isr"):
        episodes(pd.DataFrame([state(0, 3)]).drop(columns="isr"), NO_ACKS)
    with pytest.raises(ValueError, match=r"ack_ledger: missing column.* records_lost"):
        episodes(pd.DataFrame([state(0, 3)]), NO_ACKS.drop(columns="records_lost"))
    with pytest.raises(ValueError, match=r"episodes: missing column.* end"):
        score(pd.DataFrame([ep("writes_refused", 1, 2)]).drop(columns="end"), pd.DataFrame(alert("UnderMinIsr", 1)))
    with pytest.raises(ValueError, match=r"alert_events: missing column.* labels"):
        firing_intervals(pd.DataFrame(alert("UnderMinIsr", 1)).drop(columns="labels"))


def event(s: float, event_type: str, cause: str, run: str = "c1") -> dict[str, Any]:
    return {"run_id": run, "ts": at(s), "topic": "t", "partition": 0, "event_type": event_type, "cause": cause,
            "detail": "{}"}


def test_unclean_elections_are_their_own_episodes_scored_against_the_unclean_election_rule() -> None:
    ce = pd.DataFrame([event(5, "election", "clean"), event(9, "election", "unclean"),
                       event(30, "election", "last_known_leader", run="c2"), event(40, "isr_shrink", "lag")])
    eps = episodes(pd.DataFrame([state(0, 3)]), NO_ACKS, ce)
    assert spans(eps, "unclean_elections") == [(0, at(9), at(9)), (0, at(30), at(30))]
    assert list(eps["cluster"]) == ["c1", "c2"] and set(eps["cls"]) == {"unclean_elections"}
    assert episodes(pd.DataFrame([state(0, 3)]), NO_ACKS).empty  # no events: no such episodes
    # The rule's alert on c1 is true; one on c3 is not; c2's election is missed. The rule no longer counts
    # against acknowledged loss, where it claimed none.
    row, matches = run(eps.to_dict("records"), alert("UncleanLeaderElection", 10, 70),
                       alert("UncleanLeaderElection", 10, cluster="c3"))
    assert (row["episodes"], row["detected"], row["alerts"], row["true_alerts"]) == (2, 1, 2, 1)
    assert "UncleanLeaderElection" not in CLASSES["acked_data_lost"]
    assert matches.loc[matches["detected"], "delay_s"].tolist() == [1.0]
    with pytest.raises(ValueError, match=r"cluster_events: missing column.* cause"):
        episodes(pd.DataFrame([state(0, 3)]), NO_ACKS, ce.drop(columns="cause"))


def test_isr_thrash_episodes_span_while_one_replica_was_dropped_three_times_within_the_window() -> None:
    def moved(s: float, kind: str, replica: int) -> dict[str, Any]:
        key = {"isr_shrink": "removed", "isr_expand": "added"}.get(kind)
        detail = {key: [replica]} if key else {"previous_isr": [1, 2, 3], "isr": [r for r in (1, 2, 3) if r != replica]}
        return {**event(s, kind, "lag"), "detail": json.dumps(detail)}

    ce = pd.DataFrame([moved(s, kind, replica) for s, kind, replica in [
        (0, "isr_shrink", 3), (20, "isr_expand", 3), (40, "isr_shrink", 3), (60, "isr_expand", 3),
        (70, "isr_shrink", 2), (80, "isr_expand", 2), (100, "isr_shrink", 3),
        # Removed by the controller three times (a broker stopped): no leave.
        (1000, "isr_change_controller", 2), (1010, "isr_expand", 2), (1100, "isr_change_controller", 2),
        (1110, "isr_expand", 2), (1200, "isr_change_controller", 2), (1210, "isr_expand", 2)]]
        + [event(1002, "election", "clean")])
    eps = episodes(pd.DataFrame([state(0, 3)]), NO_ACKS, ce)
    # Holds from broker 3's third drop at 100 s until its first leaves the 5-minute window (300 s); broker 2's
    # single drop and its three removals by the controller are no thrash.
    assert spans(eps, "isr_thrash") == [(0, at(100), at(300))]


def test_a_second_firing_pair_for_one_incident_is_not_a_true_alert() -> None:
    """A flapping alert: three firing/resolved pairs of one rule during one episode. The first is true, the
    other two count against precision, and `pairs` says 3."""
    flapping = alert("UnderMinIsr", 11, 12) + alert("UnderMinIsr", 13, 14) + alert("UnderMinIsr", 15, 21)
    row, matches = run([ep("writes_refused", 10, 20)], flapping)
    assert (row["alerts"], row["true_alerts"], row["precision"]) == (3, 1, pytest.approx(1 / 3))
    assert (row["pairs_max"], row["pairs_mean"], matches.loc[0, "pairs"]) == (3.0, 3.0, 3)
    # One pair per incident: precision 1, pairs 1. Two incidents, one alert each: both true.
    row, matches = run([ep("writes_refused", 10, 20), ep("writes_refused", 100, 120)],
                       alert("UnderMinIsr", 11, 21), alert("UnderMinIsr", 101, 121))
    assert (row["true_alerts"], row["precision"], row["pairs_max"]) == (2, 1.0, 1.0)
    assert list(matches["pairs"]) == [1, 1]
    # Two rules of one class each firing once for an incident: one pair per rule, both true.
    row, _ = run([ep("offline_partitions", 10, 20)], alert("OfflinePartitions", 12, 22),
                 alert("PartitionOffline", 11, 21))
    assert (row["true_alerts"], row["pairs_max"]) == (2, 1.0)


def test_an_alert_near_the_next_incident_is_chosen_for_its_own_not_counted_as_a_repeat() -> None:
    """Incidents 8 s apart, one alert each: within the grace both alerts touch both incidents, yet each is the
    one chosen for its own incident (it overlaps it), so both are true and each incident has one pair."""
    row, matches = run([ep("writes_refused", 10, 20), ep("writes_refused", 28, 40)],
                       alert("UnderMinIsr", 10, 21), alert("UnderMinIsr", 28, 41))
    assert (row["alerts"], row["true_alerts"], row["precision"], row["pairs_max"]) == (2, 2, 1.0, 1.0)
    assert list(matches["pairs"]) == [1, 1]


def test_two_bursts_of_elections_seconds_apart_are_two_true_alerts_each_timed_to_its_own_burst() -> None:
    """Unclean elections at 44.2 s (partitions 1 and 4) and at 46.2 s (partition 0). The rate-based rule fires at
    the next sample after each burst (45 s, resolved at 46 s; 47 s). No alert overlaps an instant episode, so
    within the grace both alerts touch every episode: the 47 s alert is the one chosen for the second burst (it
    fired after it; the 45 s one resolved before it began), and that burst's delay is measured to it."""
    eps = [ep("unclean_elections", 44.2, 44.2, partition=1), ep("unclean_elections", 44.2, 44.2, partition=4),
           ep("unclean_elections", 46.2, 46.2, partition=0)]
    row, matches = run(eps, alert("UncleanLeaderElection", 45, 46), alert("UncleanLeaderElection", 47))
    assert (row["alerts"], row["true_alerts"], row["precision"], row["recall"]) == (2, 2, 1.0, 1.0)
    assert matches["delay_s"].round(1).tolist() == [0.8, 0.8, 0.8]
