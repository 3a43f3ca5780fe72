"""The alert lifecycle on hand-made samples: for-durations in event time, resolution, inhibition, the
anchors' defects (unclean election, controller-only offline count, one partition of a hundred), restart."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipelines.alert_config import load_alert_config
from pipelines.alert_engine import AlertEngine
from pipelines.alert_rules import AlertConfigError, parse_alert_config
from pipelines.alert_state import EngineState, Transition

CONFIG = load_alert_config()
T0 = pd.Timestamp("2026-01-01T00:00:00Z")


def at(s: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(seconds=s)


def partitions(s: float, isr: dict[int, int], rf: int = 3, min_isr: int = 2, topic: str = "t",
               leader: dict[int, int] | None = None, n: int | None = None, hw: int = 0) -> pd.DataFrame:
    """partition_state samples at second `s`: partition -> ISR size (others fully in sync), every HW at `hw`."""
    count = n if n is not None else max(isr) + 1
    rows = [{"run_id": "c1", "ts": at(s), "topic": topic, "partition": p, "leader": (leader or {}).get(p, 1),
             "leader_epoch": 0, "partition_epoch": 0, "configured_min_isr": min_isr, "effective_min_isr": min_isr,
             "high_watermark": hw, "isr_size": isr.get(p, rf), "replication_factor": rf, "elr_size": 0,
             "offline": (leader or {}).get(p, 1) < 0, "recovering": False} for p in range(count)]
    return pd.DataFrame(rows)


def controller(s: float, **metrics: float) -> pd.DataFrame:
    """broker_metrics samples at second `s`: the controller (3000) and three brokers reporting."""
    rows = [{"run_id": "c1", "ts": at(s), "broker_id": 3000, "ActiveControllerCount": 1.0,
             "OfflinePartitionsCount": 0.0, "UncleanLeaderElectionsPerSec": 0.0, **metrics}]
    rows += [{"run_id": "c1", "ts": at(s), "broker_id": b, "ErrorsPerSec_NOT_ENOUGH_REPLICAS": 0.0} for b in (1, 2, 3)]
    return pd.DataFrame(rows)


def run(engine: AlertEngine, *batches: dict[str, pd.DataFrame]) -> list[Transition]:
    out: list[Transition] = []
    for frames in batches:
        out += engine.step(frames)
    return out


def of(ts: list[Transition], rule: str, status: str | None = None) -> list[Transition]:
    return [t for t in ts if t.rule == rule and (status is None or t.status == status)]


def test_under_min_isr_fires_at_once_and_resolves_when_the_isr_returns() -> None:
    e = AlertEngine(CONFIG)
    ts = run(e, {"partition_state": partitions(0, {0: 3})}, {"partition_state": partitions(1, {0: 1})},
             {"partition_state": partitions(2, {0: 1})}, {"partition_state": partitions(3, {0: 3})})
    fired, resolved = of(ts, "UnderMinIsr", "firing"), of(ts, "UnderMinIsr", "resolved")
    assert [(t.ts_ms, t.labels["partition"]) for t in fired] == [(1000 + T0.value // 10**6, "0")]
    assert [t.ts_ms - T0.value // 10**6 for t in resolved] == [3000]
    assert fired[0].fingerprint == resolved[0].fingerprint
    assert fired[0].annotations["summary"] == "t-0: ISR 1 below min.insync.replicas 2"
    assert fired[0].severity == "critical" and fired[0].value == 1.0


def test_for_duration_is_event_time() -> None:
    """UnderReplicated has for: 30s. 29 s of samples keep it pending; the sample at 30 s fires it."""
    e = AlertEngine(CONFIG)
    ts = run(e, *({"partition_state": partitions(s, {0: 2})} for s in range(0, 30)))
    assert [t.status for t in of(ts, "UnderReplicated")] == ["pending"]
    ts = run(e, {"partition_state": partitions(30, {0: 2})})
    assert [t.status for t in of(ts, "UnderReplicated")] == ["firing"]
    assert of(ts, "UnderReplicated")[0].starts_ms - T0.value // 10**6 == 30_000


def test_pending_that_clears_goes_back_to_inactive_without_firing() -> None:
    e = AlertEngine(CONFIG)
    ts = run(e, {"partition_state": partitions(0, {0: 2})}, {"partition_state": partitions(10, {0: 3})})
    assert [t.status for t in of(ts, "UnderReplicated")] == ["pending", "inactive"]
    assert not e.state.alerts


def test_one_under_min_isr_partition_of_a_hundred_fires_one_alert() -> None:
    """The anchor rule set sums ISR size over a topic and almost never fires; ours is per partition."""
    e = AlertEngine(CONFIG)
    ts = run(e, {"partition_state": partitions(0, {57: 1}, n=100)})
    fired = of(ts, "UnderMinIsr", "firing")
    assert [(t.labels["topic"], t.labels["partition"]) for t in fired] == [("t", "57")]


def test_unclean_election_alert_resolves_when_the_rate_returns_to_zero() -> None:
    """The anchor tests a cumulative counter and never clears."""
    e = AlertEngine(CONFIG)
    ts = run(e, {"broker_metrics": controller(0)},
             {"broker_metrics": controller(1, UncleanLeaderElectionsPerSec=1.0, UncleanLeaderElectionsPerSec_count=1)},
             {"broker_metrics": controller(2, UncleanLeaderElectionsPerSec_count=1)})
    assert [t.status for t in of(ts, "UncleanLeaderElection")] == ["firing", "resolved"]
    assert not [a for a in e.state.alerts.values() if a.status == "firing"]


def test_one_offline_partition_on_the_controller_is_one_critical_alert() -> None:
    """Only the controller reports OfflinePartitionsCount: summed, not averaged over four reporters; the
    partition-level PartitionOffline is inhibited (recorded, not delivered). Its empty ISR is not UnderMinIsr:
    no leader refuses writes, and Kafka's UnderMinIsrPartitionCount counts leaders only."""
    e = AlertEngine(CONFIG)
    ts = run(e, {"broker_metrics": controller(0, OfflinePartitionsCount=1.0),
                 "partition_state": partitions(0, {3: 0}, leader={3: -1}, n=10)})
    firing = [t for t in ts if t.status == "firing"]
    delivered = [t for t in firing if not t.inhibited]
    assert [(t.rule, t.severity, t.value) for t in delivered] == [("OfflinePartitions", "critical", 1.0)]
    assert [t.rule for t in firing if t.inhibited] == ["PartitionOffline"]


def test_under_min_isr_fires_when_an_offline_partition_returns_with_a_leader_under_min_isr() -> None:
    """Offline with its ISR emptied (the replicas kept in the ELR): PartitionOffline only. Back with a leader and
    one replica in sync: UnderMinIsr fires then, at that sample, and is delivered."""
    e = AlertEngine(CONFIG)
    offline = run(e, *({"partition_state": partitions(s, {3: 0}, leader={3: -1}, n=4)} for s in range(2)))
    assert [t.rule for t in offline if t.status == "firing"] == ["PartitionOffline"]
    back = e.step({"partition_state": partitions(2, {3: 1}, n=4)})
    assert [(t.rule, t.status, t.inhibited, t.ts_ms - T0.value // 10**6) for t in back
            if t.rule in ("UnderMinIsr", "PartitionOffline")] == [
        ("PartitionOffline", "resolved", False, 2000), ("UnderMinIsr", "firing", False, 2000)]


# Degraded is muted while its partition is Offline (both hold while offline with one replica in the ISR).
MUTED = parse_alert_config({"rules": [
    {"name": "Offline", "source": "partition_state", "scope": "partition", "when": "offline", "severity": "critical"},
    {"name": "Degraded", "source": "partition_state", "scope": "partition", "when": "isr_size < 2",
     "severity": "critical", "inhibited_by": [{"rule": "Offline", "equal": ["cluster", "topic", "partition"]}]},
]}, "tests/muted.yaml")


def test_an_alert_fired_inhibited_is_delivered_when_its_inhibitor_resolves() -> None:
    """Partition 3 goes offline with one replica left in its ISR: Degraded fires, inhibited by Offline. When a
    leader returns with the ISR still short, Offline resolves and Degraded is delivered then (as Alertmanager
    notifies a muted alert when its inhibitor resolves); its resolution is delivered too."""
    e = AlertEngine(MUTED)
    offline = run(e, {"partition_state": partitions(0, {3: 1}, leader={3: -1}, n=4)},
                  {"partition_state": partitions(1, {3: 1}, leader={3: -1}, n=4)})
    assert [(t.rule, t.status, t.inhibited) for t in of(offline, "Degraded")] == [("Degraded", "firing", True)]
    back = e.step({"partition_state": partitions(2, {3: 1}, n=4)})
    assert [(t.rule, t.status, t.previous, t.inhibited, t.ts_ms - T0.value // 10**6) for t in back] == [
        ("Degraded", "firing", "firing", False, 2000), ("Offline", "resolved", "firing", False, 2000)]
    # Still firing, not inhibited: nothing more until it resolves, and the resolution is delivered.
    assert not of(e.step({"partition_state": partitions(3, {3: 1}, n=4)}), "Degraded")
    resolved = of(e.step({"partition_state": partitions(4, {3: 3}, n=4)}), "Degraded")
    assert [(t.status, t.inhibited) for t in resolved] == [("resolved", False)]


def test_an_alert_still_inhibited_or_resolved_in_the_same_batch_is_not_lifted() -> None:
    """The inhibitor fires on: nothing is lifted. Inhibitor and alert resolve at the same sample: the alert
    resolves inhibited (never delivered firing, so its resolution is not delivered either)."""
    e = AlertEngine(MUTED)
    ts = run(e, *({"partition_state": partitions(s, {3: 1}, leader={3: -1}, n=4)} for s in range(3)))
    assert [(t.status, t.inhibited) for t in of(ts, "Degraded")] == [("firing", True)]
    ts = e.step({"partition_state": partitions(3, {3: 3}, n=4)})
    assert [(t.status, t.inhibited) for t in of(ts, "Degraded")] == [("resolved", True)]


def slo_status(s: float, page: bool, ticket: bool) -> pd.DataFrame:
    return pd.DataFrame([{"run_id": "c1", "ts": at(s), "slo": "writes", "page": page, "ticket": ticket,
                          "burn_rate_1h": 20.0, "burn_rate_5m": 20.0, "burn_rate_3d": 2.0,
                          "error_budget_remaining": 0.5}])


def test_an_inhibitor_that_resolves_later_in_the_batch_still_inhibits_what_fired_while_it_fired() -> None:
    """Inhibiting rules are evaluated over the whole batch first: the page has resolved by the time the
    ticket is evaluated, yet at the ticket's firing time the page was firing."""
    e = AlertEngine(CONFIG)
    ts = e.step({"slo_status": pd.concat([slo_status(0, True, True), slo_status(1, False, False)])})
    assert [(t.rule, t.status, t.inhibited) for t in ts] == [
        ("SloBurnRatePage", "firing", False), ("SloBurnRateTicket", "firing", True),
        ("SloBurnRatePage", "resolved", False), ("SloBurnRateTicket", "resolved", True)]
    # A ticket that starts after the page resolved is delivered.
    later = e.step({"slo_status": slo_status(2, False, True)})
    assert [(t.rule, t.status, t.inhibited) for t in later] == [("SloBurnRateTicket", "firing", False)]


def test_active_controller_count_is_summed_over_controllers() -> None:
    e = AlertEngine(CONFIG)
    two = pd.concat([controller(0), controller(0).iloc[[0]].assign(broker_id=3001)])
    ts = run(e, {"broker_metrics": two})
    assert [(t.status, t.value) for t in of(ts, "ActiveControllerCount")] == [("firing", 2.0)]
    ts = run(e, {"broker_metrics": controller(1)})
    assert [t.status for t in of(ts, "ActiveControllerCount")] == ["resolved"]
    # Brokers alone (no controller's metrics read) say nothing of the controllers: no alert, rather than "0 active".
    brokers_only = controller(2).query("broker_id != 3000")
    assert of(run(AlertEngine(CONFIG), {"broker_metrics": brokers_only}), "ActiveControllerCount") == []
    none_active = controller(3, ActiveControllerCount=0.0)
    assert [(t.status, t.value) for t in of(run(e, {"broker_metrics": none_active}), "ActiveControllerCount")] == [
        ("firing", 0.0)]


def isr_events(*rows: tuple[float, str, list[int], list[int]]) -> dict[str, pd.DataFrame]:
    """The ISR frames of cluster_events rows of topic t, partition 0: (second, event type, ISR before, after), with
    the detail the emulator and the collector write, shaped as the engine gets them."""
    from pipelines.alert_signals import shape_isr_membership

    detail = {"isr_shrink": lambda b, a: {"removed": [r for r in b if r not in a], "isr": a},
              "isr_expand": lambda b, a: {"added": [r for r in a if r not in b], "isr": a},
              "isr_change_controller": lambda b, a: {"previous_isr": b, "isr": a, "elr": []}}
    raw = pd.DataFrame([{"run_id": "c1", "ts": at(s), "topic": "t", "partition": 0, "event_type": kind,
                         "detail": json.dumps(detail[kind](before, after))} for s, kind, before, after in rows])
    return {"isr_membership": shape_isr_membership(raw)}


def test_isr_thrash_is_one_replica_dropped_by_its_leader_again_and_again() -> None:
    e = AlertEngine(CONFIG)
    # Broker 3's follower is dropped for lag and rejoins, twice; broker 2 is dropped once: no thrash yet.
    ts = run(e, isr_events((0, "isr_shrink", [1, 2, 3], [1, 2]), (20, "isr_expand", [1, 2], [1, 2, 3]),
                           (40, "isr_shrink", [1, 2, 3], [1, 2]), (60, "isr_expand", [1, 2], [1, 2, 3]),
                           (70, "isr_shrink", [1, 2, 3], [1, 3]), (80, "isr_expand", [1, 3], [1, 2, 3])))
    assert not of(ts, "IsrThrash")
    # The third drop of broker 3's replica within 5 minutes: IsrThrash for that replica only.
    ts = run(e, isr_events((100, "isr_shrink", [1, 2, 3], [1, 2])))
    assert [(t.status, t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in of(ts, "IsrThrash")] == [
        ("firing", "3", 100_000)]
    assert of(ts, "IsrThrash")[0].annotations["summary"] == (
        "t-0: the replica on broker 3 left the ISR 3 times in 5 min (rejoined 2)")
    # When its first drop leaves the window (300 s) the window holds two: the cluster's clock (another source)
    # having passed it, it resolves there.
    ts = run(e, {"broker_metrics": controller(341)})
    assert [(t.status, t.ts_ms - T0.value // 10**6) for t in of(ts, "IsrThrash")] == [("resolved", 300_000)]


def test_a_rolling_restart_is_no_isr_thrash() -> None:
    """Each broker stopped and started in turn, twice over within 5 minutes: the controller removes a stopping
    broker's replica and it rejoins; no replica is dropped by its leader, so nothing thrashes."""
    rows = []
    for lap in range(2):
        for n, b in enumerate((1, 2, 3)):
            s = lap * 120 + n * 40
            rows += [(s, "isr_change_controller", [1, 2, 3], [r for r in (1, 2, 3) if r != b]),
                     (s + 20, "isr_expand", [r for r in (1, 2, 3) if r != b], [1, 2, 3])]
    assert not of(run(AlertEngine(CONFIG), isr_events(*rows), {"broker_metrics": controller(400)}), "IsrThrash")


def test_state_round_trip_continues_exactly_where_it_left_off() -> None:
    """What the job stores after a batch and loads at restart gives the same transitions as never stopping."""
    batches = [{"partition_state": partitions(s, {0: 2 if 5 <= s < 50 else 3})} for s in range(0, 60)]
    straight = run(AlertEngine(CONFIG), *batches)
    first = AlertEngine(CONFIG)
    part1 = run(first, *batches[:20])
    restored = AlertEngine(CONFIG, EngineState.from_rows(first.state.to_rows()))
    part2 = run(restored, *batches[20:])
    assert [(t.rule, t.status, t.ts_ms, t.fingerprint) for t in part1 + part2] == \
           [(t.rule, t.status, t.ts_ms, t.fingerprint) for t in straight]
    assert [t.status for t in of(straight, "UnderReplicated")] == ["pending", "firing", "resolved"]


def test_replaying_a_batch_on_the_state_it_produced_changes_nothing() -> None:
    e = AlertEngine(CONFIG)
    batch = {"partition_state": partitions(1, {0: 1})}
    assert of(e.step(batch), "UnderMinIsr", "firing")
    assert e.step(batch) == [] and e.late > 0


def _config(**rule: Any) -> dict[str, Any]:
    base = {"name": "R", "source": "partition_state", "scope": "partition", "when": "isr_size < 2",
            "severity": "critical"}
    return {"rules": [{**base, **rule}]}


@pytest.mark.parametrize(("rule", "message"), [
    ({"when": "isr_sise < 2"}, "rule 'R': when: 'isr_sise < 2': UndefinedVariableError"),
    ({"source": "metrics"}, "rule 'R': source: unknown source 'metrics'"),
    ({"scope": "partition", "source": "broker_metrics", "when": "LeaderCount > 0"},
     "rule 'R': scope: source 'broker_metrics' describes a broker, not a partition"),
    ({"for": "ten seconds"}, "rule 'R': for: expected a duration"),
    ({"severity": "page"}, "rule 'R': severity: 'page' is not one of critical, warning, info"),
    ({"summary": "{topic} {nope}"}, "rule 'R': summary: unknown template field(s) ['nope']"),
    ({"inhibited_by": [{"rule": "Other", "equal": ["topic"]}]}, "rule 'R': inhibited_by: unknown rule 'Other'"),
    ({"colour": "red"}, "rule 'R': colour: unknown field"),
])
def test_invalid_rules_fail_naming_file_rule_and_field(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(AlertConfigError) as e:
        parse_alert_config(_config(**rule), "conf/x.yaml")
    assert str(e.value).startswith("conf/x.yaml: ") and message in str(e.value)


def test_a_secret_from_a_missing_environment_variable_is_refused() -> None:
    raw = {**_config(), "receivers": [{"name": "pager", "url": "http://127.0.0.1:1/x", "secret_env": "NOPE"}]}
    with pytest.raises(AlertConfigError, match="receiver 'pager': secret_env: environment variable 'NOPE'"):
        parse_alert_config(raw, "conf/x.yaml", env={})


@pytest.mark.parametrize(("parallel", "expected"), [(None, 4), (1, 1), (32, 32), (0, None), (33, None), (True, None),
                                                     ("4", None)])
def test_a_receivers_parallel_lanes_default_to_four_and_must_be_from_one_to_thirty_two(
        parallel: Any, expected: int | None) -> None:
    receiver = {"name": "pager", "url": "http://127.0.0.1:1/x", **({} if parallel is None else {"parallel": parallel})}
    raw = {**_config(), "receivers": [receiver]}
    if expected is None:
        with pytest.raises(AlertConfigError, match=f"receiver 'pager': parallel: expected an integer from 1 to 32, "
                                                   f"got {parallel!r}"):
            parse_alert_config(raw, "conf/x.yaml")
    else:
        assert parse_alert_config(raw, "conf/x.yaml").receivers[0].parallel == expected


def test_single_copy_acks_fires_when_a_lone_leader_commits_with_min_isr_one() -> None:
    e = AlertEngine(CONFIG)
    ts = run(e, {"partition_state": partitions(0, {0: 1, 1: 1}, min_isr=1, hw=10)},   # first sample: no history
             {"partition_state": partitions(1, {0: 1, 1: 1}, min_isr=1, hw=25)},   # 15 records on one copy
             {"partition_state": partitions(2, {0: 1, 1: 2}, min_isr=1, hw=40)},
             {"partition_state": partitions(3, {0: 1, 1: 2}, min_isr=1, hw=40)})   # no writes: exposure only
    assert [(t.status, t.labels["partition"], t.ts_ms - T0.value // 10**6, t.value)
            for t in of(ts, "SingleCopyAcks")] == [
        ("firing", "0", 1000, 15.0), ("firing", "1", 1000, 15.0), ("resolved", "1", 2000, 15.0),
        ("resolved", "0", 3000, 15.0)]
    assert e.state.last_hw["c1"] == {"t/0": 40, "t/1": 40}
    # The HW carried in the state survives a restart: the next sample's advance is measured from it.
    restored = AlertEngine(CONFIG, EngineState.from_rows(e.state.to_rows()))
    again = restored.step({"partition_state": partitions(4, {0: 1}, min_isr=1, hw=41, n=2)})
    assert [(t.status, t.value) for t in of(again, "SingleCopyAcks")] == [("firing", 1.0)]
    # A leader returning from offline (HW -1) with its recovered log has committed nothing new.
    back = run(AlertEngine(CONFIG), {"partition_state": partitions(0, {0: 1}, min_isr=1, hw=-1, leader={0: -1})},
               {"partition_state": partitions(1, {0: 1}, min_isr=1, hw=1464)})
    assert of(back, "SingleCopyAcks") == []
    # min ISR 2 refuses the write instead (UnderMinIsr), and RF 1 is a posture finding, not this alert.
    quiet = run(AlertEngine(CONFIG), {"partition_state": partitions(0, {0: 1}, min_isr=2)},
                {"partition_state": partitions(1, {0: 1}, min_isr=2, hw=5)},
                {"partition_state": partitions(2, {0: 1}, rf=1, min_isr=1, hw=9)})
    assert of(quiet, "SingleCopyAcks") == []


def posture(s: float, **findings: bool) -> pd.DataFrame:
    flags = {f"finding_{k}": False for k in ("min_isr_above_rf", "min_isr_one", "rf_below_3", "rf2_trap",
                                              "unclean_enabled", "shared_failure_domain", "rf_equals_brokers")}
    flags.update({f"finding_{k}": v for k, v in findings.items()})
    return pd.DataFrame([{"run_id": "c1", "ts": at(s), "topic": "t", "replication_factor": 3,
                          "configured_min_isr": 1, "effective_min_isr": 1, "partitions": 4, "brokers": 3,
                          "failure_domains": 3, "partitions_sharing_domain": 0, "availability_headroom": 2,
                          "zero_loss_tolerance": 0, "p_all_copies_lost": 8e-6, "finding_count": 1, **flags}])


def test_a_posture_finding_fires_while_the_config_holds_and_resolves_after_a_change() -> None:
    e = AlertEngine(CONFIG)
    ts = run(e, {"posture": posture(0, min_isr_one=True)}, {"posture": posture(60, min_isr_one=False)})
    assert [(t.rule, t.status, t.ts_ms - T0.value // 10**6) for t in ts] == [
        ("PostureMinIsrOne", "firing", 0), ("PostureMinIsrOne", "resolved", 60_000)]
    assert ts[0].labels["topic"] == "t" and ts[0].severity == "warning"


@pytest.mark.parametrize("keep", [None, [True, False, True]])
def test_records_are_pandas_records_value_for_value(keep: list[bool] | None) -> None:
    """The engine builds its sample records column by column: the same Python values as `to_dict("records")`, NaN and
    nulls included, for every column type a source has, and datetimes (which numpy would turn into integers) too."""
    from pipelines.alert_samples import records as _records

    frame = pd.DataFrame({"run_id": ["c1", "c1", "c2"], "ts": [1, 2, 3], "partition": [0, 1, 2],
                          "isr_size": [1.0, float("nan"), 3.0], "offline": [True, False, True],
                          "topic": ["t", None, "u"]})
    mask = None if keep is None else np.array(keep)
    expected = (frame if mask is None else frame[mask]).to_dict("records")
    got = _records(frame, mask)
    assert [{k: (None if v != v else v) for k, v in r.items()} for r in got] == \
           [{k: (None if v != v else v) for k, v in r.items()} for r in expected]
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in expected]
    stamped = frame.assign(at=pd.to_datetime([1, 2, 3], unit="s", utc=True))
    assert _records(stamped, mask)[0]["at"] == pd.Timestamp(1, unit="s", tz="UTC")
