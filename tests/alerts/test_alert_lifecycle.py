"""Alerts that do not flap: windowed rules hold between samples, keep_firing_for, flap detection, and the same
transitions across batches and restarts.

The windowed rule here is `Churn`, a partition's ISR shrinks and expands over 5 minutes (cluster_events counts),
which exercises the windows with the plainest counts; the shipped IsrThrash (a replica's leaves) is in
tests/alerts/test_engine.py."""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest

from pipelines.alert_engine import AlertEngine
from pipelines.alert_rules import AlertConfigError, parse_alert_config
from pipelines.alert_state import EngineState, Transition
from tests.alerts.test_engine import T0, at, controller, of, partitions, run

WINDOWED = parse_alert_config({"rules": [{
    "name": "Churn", "source": "cluster_events", "scope": "partition", "window": "5m",
    "when": "(isr_shrinks >= 2) and (isr_expands >= 2)", "value": "isr_shrinks", "severity": "warning",
    "summary": "{topic}-{partition}: ISR shrank {isr_shrinks} and expanded {isr_expands} times in 5 min"}]},
    "tests/churn.yaml")
EVENT_COLUMNS = ("elections", "unclean_elections", "produce_not_enough_replicas", "produce_rejected", "truncations",
                 "records_truncated")


def events(*rows: tuple[float, int, int, int]) -> dict[str, pd.DataFrame]:
    """cluster_events samples: (second, partition, shrinks, expands) of topic t."""
    return {"cluster_events": pd.DataFrame([{
        "run_id": "c1", "ts": at(s), "topic": "t", "partition": p, "isr_shrinks": shrinks, "isr_expands": expands,
        **dict.fromkeys(EVENT_COLUMNS, 0)} for s, p, shrinks, expands in rows])}


def seconds(ts: list[Transition]) -> list[tuple[str, float]]:
    return [(t.status, (t.ts_ms - T0.value // 10**6) / 1000) for t in ts]


# Partition 0 thrashes (two shrinks, two expands in 60 s) while partition 1's events land in between, in the
# same batch and in later ones: partition 0's window sum holds at those times.
THRASH_THEN_NEIGHBOURS = [
    events((0, 0, 1, 0), (20, 0, 0, 1), (40, 0, 1, 0), (60, 0, 0, 1), (61, 1, 1, 0), (70, 1, 0, 1)),
    events((80, 1, 1, 0), (90, 1, 0, 1), (100, 0, 1, 0)),
    events((120, 1, 1, 0)),
    {"broker_metrics": controller(200)},
    {"broker_metrics": controller(400)},
]


def test_a_windowed_alert_stays_firing_while_other_entities_report() -> None:
    """The defect: partition 0's Churn resolved at every event of another partition (counted as 'absent')
    and fired again at its own next event. Now it fires once and resolves once, when its events leave the
    5-minute window: it holds two shrinks and two expands until the expand at 20 s leaves, at 320 s."""
    ts = run(AlertEngine(WINDOWED), *THRASH_THEN_NEIGHBOURS)
    p0 = [t for t in of(ts, "Churn") if t.labels["partition"] == "0"]
    assert seconds(p0) == [("firing", 60.0), ("resolved", 320.0)]
    assert p0[0].annotations["summary"] == "t-0: ISR shrank 2 and expanded 2 times in 5 min"
    # Partition 1 thrashes too (2 and 2 by 90 s; a third shrink at 120 s): its own single pair, resolved when
    # its expand at 70 s leaves the window.
    p1 = [t for t in of(ts, "Churn") if t.labels["partition"] == "1"]
    assert seconds(p1) == [("firing", 90.0), ("resolved", 370.0)]


def test_a_windowed_alert_resolves_when_its_samples_leave_the_window_between_batches() -> None:
    """The resolution happens at the moment the window lost a sample (event time), not at whatever time the
    next batch reports, and the summary at firing counts what the window held."""
    ts = run(AlertEngine(WINDOWED), events((0, 0, 1, 0), (10, 0, 0, 1), (20, 0, 1, 0), (30, 0, 0, 1)),
             {"broker_metrics": controller(1000)})
    assert seconds(of(ts, "Churn")) == [("firing", 30.0), ("resolved", 300.0)]


def test_windowed_rules_give_the_same_transitions_across_batches_and_a_restart() -> None:
    """Every event in its own batch, or all in one, or stopped and restored from the stored state halfway:
    the same transitions at the same event times."""
    flat = [row for batch in THRASH_THEN_NEIGHBOURS for row in batch.get("cluster_events", pd.DataFrame())
            .itertuples(index=False)]
    singles = [{"cluster_events": pd.DataFrame([r._asdict()])} for r in flat]
    tail = THRASH_THEN_NEIGHBOURS[3:]
    key = [(t.rule, t.status, t.ts_ms, t.fingerprint, t.annotations["summary"]) for t in
           of(run(AlertEngine(WINDOWED), *THRASH_THEN_NEIGHBOURS), "Churn")]
    one_by_one = of(run(AlertEngine(WINDOWED), *singles, *tail), "Churn")
    assert [(t.rule, t.status, t.ts_ms, t.fingerprint, t.annotations["summary"]) for t in one_by_one] == key
    first = AlertEngine(WINDOWED)
    part1 = run(first, *singles[:5])
    restored = AlertEngine(WINDOWED, EngineState.from_rows(first.state.to_rows()))
    part2 = run(restored, *singles[5:], *tail)
    assert [(t.rule, t.status, t.ts_ms, t.fingerprint, t.annotations["summary"])
            for t in of(part1 + part2, "Churn")] == key
    assert restored.late == 0, "no point is evaluated twice"


def _one_rule(**extra: Any) -> dict[str, Any]:
    rule = {"name": "Low", "source": "partition_state", "scope": "partition", "when": "isr_size < 3",
            "severity": "warning", "summary": "{topic}-{partition}"}
    return {"rules": [{**rule, **{k: v for k, v in extra.items() if k != "flap_detection"}}],
            **({"flap_detection": extra["flap_detection"]} if "flap_detection" in extra else {})}


def flipping(pattern: str, start: int = 0) -> list[dict[str, pd.DataFrame]]:
    """One partition_state batch a second: '1' the ISR is short (condition true), '0' full."""
    return [{"partition_state": partitions(start + i, {0: 2 if c == "1" else 3})} for i, c in enumerate(pattern)]


def test_keep_firing_for_holds_an_alert_through_short_gaps() -> None:
    config = parse_alert_config(_one_rule(keep_firing_for="5s", flap_detection={"max_changes": 0}), "x.yaml")
    ts = run(AlertEngine(config), *flipping("1101110011111000000000"))
    # Gaps of 1 and 2 s are bridged; the condition false from 13 s resolves at 18 s (5 s later).
    assert seconds(ts) == [("firing", 0.0), ("resolved", 18.0)]
    without = run(AlertEngine(parse_alert_config(_one_rule(flap_detection={"max_changes": 0}), "x.yaml")),
                  *flipping("1101110011111000000000"))
    assert seconds(without) == [("firing", 0.0), ("resolved", 2.0), ("firing", 3.0), ("resolved", 6.0),
                                ("firing", 8.0), ("resolved", 13.0)]


def notified(ts: list[Transition]) -> list[tuple[str, float]]:
    """What the receivers are sent: the transitions webhook delivery routes (pipelines/webhook_delivery.routed)."""
    from pipelines.alert_rules import Receiver
    from pipelines.webhook_delivery import routed

    receiver = Receiver("r", "http://127.0.0.1:1/")
    return seconds([t for t in ts if routed({"status": t.status, "inhibited": t.inhibited, "flapping": t.flapping,
                                             "severity": t.severity, "labels": t.labels}, receiver)])


def test_a_flapping_alert_follows_its_condition_and_its_notifications_wait_until_it_settles() -> None:
    config = parse_alert_config(_one_rule(flap_detection={"window": "10s", "max_changes": 4}), "x.yaml")
    e = AlertEngine(config)
    ts = run(e, *flipping("10101010101" + "0" * 12))
    # gold follows the condition at every second: fired at even seconds up to 10, resolved at odd ones and from 11.
    assert seconds(ts)[:12] == [("firing" if s % 2 == 0 else "resolved", float(s)) for s in range(12)]
    # The first firing is not a change. Changes: resolved 1, fired 2, resolved 3, fired 4 (4 changes: not yet
    # flapping); the fall at 5 s is the 5th: from there the transitions are marked flapping and held back. The
    # condition keeps changing until 11 s (changes 2..11 in the 10 s window), then no more than 4 changes are
    # left in the last 10 s at 17 s (8, 9, 10, 11): it settles, and the receivers are told its state, resolved.
    assert [t.flapping for t in ts[:12]] == [False] * 5 + [True] * 7
    assert seconds(ts)[12:] == [("resolved", 17.0)] and ts[12].previous == "resolved" and not ts[12].flapping
    assert notified(ts) == [("firing", 0.0), ("resolved", 1.0), ("firing", 2.0), ("resolved", 3.0),
                            ("firing", 4.0), ("resolved", 17.0)]
    alert = e.state.alerts["Low/" + ts[0].fingerprint]
    assert (alert.status, alert.flapping, alert.held) == ("resolved", False, False)
    # Mid-flap, gold says what holds (firing at 8 s, resolved at 9 s), and that its notifications are held.
    mid = AlertEngine(config)
    run(mid, *flipping("101010101"))
    alert = mid.state.alerts["Low/" + ts[0].fingerprint]
    assert (alert.status, alert.flapping, alert.held) == ("firing", True, True)
    run(mid, *flipping("0", start=9))
    assert (alert.status, alert.flapping, alert.held) == ("resolved", True, True)


def test_a_flapping_alert_that_settles_firing_tells_the_receivers_firing() -> None:
    """The receivers last heard "resolved" (at 3 s, the third change); it then flaps and stays firing from 10 s: once
    its condition has not changed for `quiet` (5 s), at 15 s, they are told it fires, and its changes are
    forgotten."""
    config = parse_alert_config(_one_rule(flap_detection={"window": "1m", "max_changes": 3, "quiet": "5s"}),
                                "x.yaml")
    e = AlertEngine(config)
    ts = run(e, *flipping("1010101010" + "1" * 10))
    assert notified(ts) == [("firing", 0.0), ("resolved", 1.0), ("firing", 2.0), ("resolved", 3.0), ("firing", 15.0)]
    assert ts[-1].previous == "firing"
    alert = e.state.alerts["Low/" + ts[0].fingerprint]
    assert (alert.status, alert.flapping, alert.held, alert.changes) == ("firing", False, False, [])


def test_incidents_apart_by_a_quiet_spell_are_separate_incidents_never_one_flapping_alert() -> None:
    """Three faults of one partition 60-90 s apart within 5 minutes: each is a firing/resolved pair at the
    receivers; without the quiet spell's reset the fifth change would have held the third fault back."""
    config = parse_alert_config(_one_rule(flap_detection={"window": "10m", "max_changes": 4, "quiet": "30s"}),
                                "x.yaml")
    pattern = "1" * 20 + "0" * 60 + "1" * 30 + "0" * 70 + "1" * 25 + "0" * 40
    ts = run(AlertEngine(config), *flipping(pattern))
    assert notified(ts) == [("firing", 0.0), ("resolved", 20.0), ("firing", 80.0), ("resolved", 110.0),
                            ("firing", 180.0), ("resolved", 205.0)]
    assert not any(t.flapping for t in ts)
    # The same faults 10 s apart flap: the fifth change (the third fault's end, at 35 s) is held back, and the
    # receivers hear of it once the condition has not changed for 30 s.
    close = "1" * 5 + "0" * 10 + "1" * 5 + "0" * 10 + "1" * 5 + "0" * 40
    ts = run(AlertEngine(config), *flipping(close))
    assert notified(ts) == [("firing", 0.0), ("resolved", 5.0), ("firing", 15.0), ("resolved", 20.0),
                            ("firing", 30.0), ("resolved", 65.0)]
    assert [t.flapping for t in ts if t.ts_ms == ts[-2].ts_ms] == [True]


def test_the_receivers_state_equals_golds_once_a_flapping_alert_settles() -> None:
    """Whatever the pattern, one evaluation after it settles the last notification of every alert says what gold
    says."""
    config = parse_alert_config(_one_rule(flap_detection={"window": "20s", "max_changes": 2, "quiet": "4s"}),
                                "x.yaml")
    for pattern in ("110100111010" + "1" * 8, "1101001110101" + "0" * 8, "10" * 8 + "0" * 8, "1" + "10" * 9 + "1" * 6):
        e = AlertEngine(config)
        ts = run(e, *flipping(pattern))
        alert = e.state.alerts["Low/" + ts[0].fingerprint]
        assert not alert.flapping and not alert.held, pattern
        assert notified(ts)[-1][0] == alert.status, pattern
        told = [status for status, _ in notified(ts)]
        assert all(a != b for a, b in itertools.pairwise(told)), (pattern, told)   # never the same twice


def test_a_flap_that_ends_where_the_receivers_last_heard_tells_them_nothing_more() -> None:
    """Told "firing" at 0 s, then flapping from the 3rd change; it ends firing, which they already hold: no second
    "firing" when it settles (the receivers' state was never wrong, only unconfirmed)."""
    config = parse_alert_config(_one_rule(flap_detection={"window": "1m", "max_changes": 2, "quiet": "5s"}),
                                "x.yaml")
    e = AlertEngine(config)
    ts = run(e, *flipping("1" + "01" * 4 + "1" * 10))
    assert notified(ts) == [("firing", 0.0), ("resolved", 1.0), ("firing", 2.0)]
    assert [t.flapping for t in ts] == [False, False, False] + [True] * 6
    alert = e.state.alerts["Low/" + ts[0].fingerprint]
    assert (alert.status, alert.flapping, alert.held, alert.told) == ("firing", False, False, "firing")


def test_flap_state_survives_a_restart() -> None:
    config = parse_alert_config(_one_rule(flap_detection={"window": "10s", "max_changes": 4}), "x.yaml")
    batches = flipping("10101010101" + "0" * 12)
    straight = run(AlertEngine(config), *batches)
    first = AlertEngine(config)
    part1 = run(first, *batches[:7])
    restored = AlertEngine(config, EngineState.from_rows(first.state.to_rows()))
    both = part1 + run(restored, *batches[7:])
    assert [(t.status, t.previous, t.ts_ms, t.flapping) for t in both] == [
        (t.status, t.previous, t.ts_ms, t.flapping) for t in straight]


@pytest.mark.parametrize(("raw", "message"), [
    ({"flap_detection": {"max_changes": -1}}, "flap_detection: max_changes: expected an integer >= 0"),
    ({"flap_detection": {"window": "often"}}, "flap_detection: window: expected a duration"),
    ({"flap_detection": {"winodw": "5m"}}, "flap_detection: winodw: unknown field"),
    ({"flap_detection": [4]}, "flap_detection: expected a mapping"),
    ({"flap_detection": {"quiet": "0s"}}, "flap_detection: quiet: must be longer than 0"),
    ({"keep_firing_for": "a while"}, "rule 'Low': keep_firing_for: expected a duration"),
])
def test_bad_lifecycle_settings_fail_naming_the_field(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(AlertConfigError) as e:
        parse_alert_config(_one_rule(**raw), "conf/x.yaml")
    assert str(e.value).startswith("conf/x.yaml: ") and message in str(e.value)


def test_a_windowed_sample_arriving_after_the_clock_passed_it_is_still_evaluated() -> None:
    """The alerts query reads a union of tables that arrive unevenly: broker_metrics may move the cluster's
    clock to 100 s before the cluster_events of 40 s and 60 s arrive. Those samples still count at their own
    times (the thrash seen at 60 s fires at 60 s), not only at some later clock."""
    e = AlertEngine(WINDOWED)
    ts = run(e, {**events((0, 0, 1, 0), (20, 0, 0, 1)), "broker_metrics": controller(100)},
             events((40, 0, 1, 0), (60, 0, 0, 1)))
    assert seconds(of(ts, "Churn")) == [("firing", 60.0)]
    assert of(ts, "Churn")[0].annotations["summary"] == "t-0: ISR shrank 2 and expanded 2 times in 5 min"
    # The next clock evaluates the held window once more, without a second transition.
    assert of(run(e, {"broker_metrics": controller(150)}), "Churn") == []
