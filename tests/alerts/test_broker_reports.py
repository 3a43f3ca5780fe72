"""The `broker_reports` source on hand-made samples: a broker silent for 15 s, one that never reported, metrics that
stop altogether, and a broker restarting after a controlled shutdown (BrokerRestarting, what it holds from the
receivers, and what outlasts it)."""

from __future__ import annotations

import pandas as pd

from pipelines.alert_engine import AlertEngine
from tests.alerts.test_engine import CONFIG, T0, at, controller, of, partitions, run


def test_a_broker_that_stops_reporting_fires_after_15_seconds_and_resolves_when_it_returns() -> None:
    e = AlertEngine(CONFIG)
    ts = run(e, *({"broker_metrics": controller(s).query("broker_id != 2" if 5 <= s < 30 else "broker_id >= 0")}
                  for s in range(0, 40)))
    fired, resolved = of(ts, "BrokerNotReporting", "firing"), of(ts, "BrokerNotReporting", "resolved")
    assert [(t.labels["broker_id"], (t.ts_ms - T0.value // 10**6) / 1000) for t in fired] == [("2", 20.0)]
    assert [(t.ts_ms - T0.value // 10**6) / 1000 for t in resolved] == [30.0]


def replica_brokers(s: float, *brokers: int) -> pd.DataFrame:
    """The brokers partition_state shows holding replicas at second `s` (pipelines/alert_signals.shape_union)."""
    return pd.DataFrame({"run_id": "c1", "ts": at(s), "broker_id": list(brokers)})


def test_a_broker_that_never_reported_is_not_reporting_like_one_that_stopped() -> None:
    """Broker 4 holds replicas from 0 s and its metrics never come (no exporter, or one isrwatch cannot read): it
    fires 15 s after it was first seen, as a broker that stopped would; the others, reporting, do not."""
    e = AlertEngine(CONFIG)
    ts = run(e, *({"broker_metrics": controller(s), "replica_brokers": replica_brokers(s, 1, 2, 3, 4)}
                  for s in range(0, 20)))
    assert [(t.status, t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in of(ts, "BrokerNotReporting")] \
        == [("firing", "4", 16_000)]
    assert of(ts, "BrokerNotReporting")[0].annotations["summary"] == "Broker 4 has sent no metrics for 16 s"


def test_metrics_that_stop_altogether_fire_for_every_broker() -> None:
    """From 5 s no broker_metrics row arrives at all (every exporter gone) while partition_state goes on: each
    broker fires at its cluster's latest time, not silence for want of a metrics row to evaluate at."""
    e = AlertEngine(CONFIG)
    ts = run(e, *({"broker_metrics": controller(s), "replica_brokers": replica_brokers(s, 1, 2, 3)} if s < 5 else
                  {"partition_state": partitions(s, {0: 3}), "replica_brokers": replica_brokers(s, 1, 2, 3)}
                  for s in range(0, 25)))
    fired = of(ts, "BrokerNotReporting", "firing")
    assert sorted((t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in fired) == [
        ("1", 20_000), ("2", 20_000), ("3", 20_000), ("3000", 20_000)]


def test_a_broker_stopped_with_a_controlled_shutdown_does_not_page_until_it_stays_away_10_minutes() -> None:
    """Broker 2 shut down cleanly at 5 s (a rolling restart; its last metrics at 4 s) and is back reporting at 40 s: no
    alert, where a broker gone as long without a controlled shutdown fires at 20 s. Broker 3 shut down cleanly and
    never comes back: it fires once it has been silent over 600 s."""
    def second(s: int) -> dict[str, pd.DataFrame]:
        absent = {2} if 5 <= s < 40 else set()
        absent |= {3} if s >= 5 else set()
        frames = {"broker_metrics": controller(s)[lambda f: ~f["broker_id"].isin(absent)]}
        if s == 5:
            frames["broker_stops"] = pd.DataFrame({"run_id": "c1", "ts": [at(5), at(5)], "broker_id": [2, 3],
                                                   "stopped": [True, True]})
        if s == 41:
            frames["broker_stops"] = pd.DataFrame({"run_id": "c1", "ts": [at(41)], "broker_id": [2],
                                                   "stopped": [False]})
        return frames

    e = AlertEngine(CONFIG)
    ts = run(e, *(second(s) for s in range(0, 620, 1)))
    assert [(t.status, t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in of(ts, "BrokerNotReporting")] == [
        ("firing", "3", 605_000)]
    assert e.state.shut_down == {"c1/3": at(5).value // 10**6}, "broker 2 back; broker 3 down after its shutdown"
    # Without the controlled shutdown, the same absence fires at 20 s (16 s after their last metrics).
    plain = run(AlertEngine(CONFIG), *({k: v for k, v in second(s).items() if k != "broker_stops"} for s in range(30)))
    assert sorted((t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in of(plain, "BrokerNotReporting")) == [
        ("2", 20_000), ("3", 20_000)]


def test_a_broker_back_from_a_controlled_shutdown_has_a_minute_for_its_first_metrics() -> None:
    """Broker 2 shut down cleanly at 5 s and is back (unfenced) at 40 s; its exporter answers its first scrape 30 s
    later (a JVM warming up behind Strimzi's rules, seconds a scrape): no alert. Broker 3, back at 40 s as well, never
    reports again: it fires a minute after its return, when its restart is over."""
    def second(s: int) -> dict[str, pd.DataFrame]:
        absent = ({2} if 5 <= s < 70 else set()) | ({3} if s >= 5 else set())
        frames = {"broker_metrics": controller(s)[lambda f: ~f["broker_id"].isin(absent)]}
        if s in (5, 40):
            frames["broker_stops"] = pd.DataFrame({"run_id": "c1", "ts": [at(s), at(s)], "broker_id": [2, 3],
                                                   "stopped": [s == 5, s == 5]})
        return frames

    ts = run(AlertEngine(CONFIG), *(second(s) for s in range(0, 120)))
    assert [(t.status, t.labels["broker_id"], t.ts_ms - T0.value // 10**6) for t in of(ts, "BrokerNotReporting")] == [
        ("firing", "3", 100_000)]


def test_a_rolling_restart_pages_nobody_and_what_outlasts_it_is_delivered() -> None:
    """Topic t (RF 2, min ISR 2) on brokers 1 and 2. Broker 2 begins a controlled shutdown at 10 s (Kafka takes it out
    of the ISR at once: t-0 under min ISR, broker 1 refusing acks=all writes), stops reporting at 14 s, is back at 40 s
    and t-0 is whole at 45 s. Its second restart at 200 s leaves t-1 under min ISR after it is back (at 230 s) for good.
    UnderMinIsr and ProduceNotEnoughReplicas are recorded (inhibited) while the broker restarts and for a minute after
    it is back; what still fires then is delivered then; a write held 2.5 s as a leadership moves too.
    BrokerRestarting, info, is the one notification."""
    def second(s: int) -> dict[str, pd.DataFrame]:
        first, second_restart = 10 <= s < 45, s >= 200
        isr = {0: 1 if first else 2, 1: 1 if second_restart else 2}
        refusing = 5.0 if first or second_restart else 0.0
        metrics = controller(s)
        metrics.loc[metrics["broker_id"] == 1, "ErrorsPerSec_NOT_ENOUGH_REPLICAS"] = refusing
        frames = {"partition_state": partitions(s, isr, rf=2, min_isr=2),
                  "broker_metrics": metrics[lambda f: ~((f["broker_id"] == 2) & (14 <= s < 42 or 204 <= s < 232))]}
        if s in (10, 40, 200, 230):
            frames["broker_stops"] = pd.DataFrame({"run_id": "c1", "ts": [at(s)], "broker_id": [2],
                                                   "stopped": [s in (10, 200)]})
        # A write to t-2 waits 2.5 s at 12 s, as its leadership moves.
        frames["ack_ledger"] = pd.DataFrame({"run_id": "c1", "ts": [at(s)], "topic": "t", "partition": 2,
                                             "acks_all_unacked_for_ms": [2_500.0 if s == 12 else 0.0],
                                             "leader": [1.0], "isr_size": [2.0]})
        return frames

    e = AlertEngine(CONFIG)
    ts = run(e, *(second(s) for s in range(0, 320)))
    since = T0.value // 10**6

    def seen(rule: str) -> list[tuple[str, str, bool, int]]:
        return [(t.status.value, t.labels.get("partition", t.labels.get("broker_id", "")), t.inhibited,
                 (t.ts_ms - since) // 1000) for t in of(ts, rule)]

    assert seen("BrokerRestarting") == [("firing", "2", False, 10), ("resolved", "2", False, 100),
                                        ("firing", "2", False, 200), ("resolved", "2", False, 290)]
    assert seen("UnderMinIsr") == [("firing", "0", True, 10), ("resolved", "0", True, 45),
                                   ("firing", "1", True, 200), ("firing", "1", False, 290)]
    assert seen("ProduceNotEnoughReplicas")[:2] == [("firing", "1", True, 10), ("resolved", "1", True, 45)]
    assert seen("ProduceNotEnoughReplicas")[2:] == [("firing", "1", True, 200), ("firing", "1", False, 290)]
    assert seen("WritesStalled") == [("firing", "2", True, 12), ("resolved", "2", True, 13)]
    assert [t for t in ts if t.severity == "critical" and not t.inhibited and t.ts_ms - since < 290_000] == []
    assert not of(ts, "BrokerNotReporting")
    assert e.state.back_from_shutdown == {}, "forgotten a minute after the broker is back"
