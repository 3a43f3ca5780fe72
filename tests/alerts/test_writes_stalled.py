"""WritesStalled (conf/alerts.yaml) on the emulator's bronze.ack_ledger, shaped as the alert jobs shape it: a
follower paused for 6 s fires it on each partition whose ISR holds it within 4 s of the pause (1 s intervals),
naming how long, the leader and the ISR size; a 1 s pause fires nothing."""

from __future__ import annotations

import pandas as pd

from pipelines.alert_config import load_alert_config
from pipelines.alert_engine import AlertEngine
from pipelines.alert_signals import shape_ack_ledger
from pipelines.alert_state import Transition
from tests.emulator.test_unacked_writes import ASSIGNMENT, PAUSE_AT_MS, emulated_ack_ledger

CONFIG = load_alert_config()


def writes_stalled(rows: pd.DataFrame) -> list[Transition]:
    """WritesStalled's transitions over the rows, one engine step per interval (as live micro-batches come)."""
    engine = AlertEngine(CONFIG)
    transitions: list[Transition] = []
    for _, interval in rows.groupby("ts", sort=True):
        transitions += engine.step({"ack_ledger": shape_ack_ledger(interval)})
    return [t for t in transitions if t.rule == "WritesStalled"]


def test_a_paused_follower_fires_writes_stalled_before_kafka_would_react_and_it_resolves() -> None:
    rows, start_ms = emulated_ack_ledger("6s")
    transitions = writes_stalled(rows)
    fired = {int(t.labels["partition"]): t for t in transitions if t.status == "firing"}
    assert set(fired) == set(ASSIGNMENT)
    for p, t in fired.items():
        assert t.ts_ms - (start_ms + PAUSE_AT_MS) <= 4_000, (p, t.ts_ms - start_ms)
        assert t.labels["severity"] == "critical" and t.labels["topic"] == "orders"
    assert fired[0].annotations["summary"] == (
        f"orders-0: an acks=all write waiting {int(fired[0].value)} ms for its acknowledgement (leader 1, 3 replicas "
        "in the ISR)")
    assert 2_000 < fired[0].value <= 3_000
    resolved = {int(t.labels["partition"]) for t in transitions if t.status == "resolved"}
    assert resolved == set(ASSIGNMENT), "each resolved once the broker resumed"
    assert len(transitions) == 2 * len(ASSIGNMENT)


def test_a_one_second_pause_fires_nothing() -> None:
    rows, _ = emulated_ack_ledger("1s")
    assert rows["unacked_for_ms"].max() > 0, "the pause held writes"
    assert writes_stalled(rows) == []


def test_the_shape_takes_the_acks_all_wait_and_the_leader_and_isr_size_the_writes_wait_on() -> None:
    ts = pd.Timestamp("2026-01-01T00:00:01Z")
    rows = pd.DataFrame([
        {"run_id": "c", "ts": ts, "topic": "t", "partition": 0, "acks": "all", "records_sent": 5, "records_acked": 2,
         "records_failed": 0, "records_lost": 0, "unacked_for_ms": 2_500, "leader": 1, "isr": [1, 2, 3]},
        {"run_id": "c", "ts": ts, "topic": "t", "partition": 0, "acks": "1", "records_sent": 4, "records_acked": 4,
         "records_failed": 0, "records_lost": 0, "unacked_for_ms": 9_000, "leader": 1, "isr": [1, 2, 3]},
        {"run_id": "c", "ts": ts, "topic": "t", "partition": 1, "acks": "all", "records_sent": 1, "records_acked": 0,
         "records_failed": 1, "records_lost": 0, "unacked_for_ms": 0, "leader": None, "isr": None},
        # Written before the column existed.
        {"run_id": "c", "ts": ts, "topic": "t", "partition": 2, "acks": "all", "records_sent": 1, "records_acked": 1,
         "records_failed": 0, "records_lost": 0, "unacked_for_ms": None, "leader": 3, "isr": [3, 1]},
    ])
    shaped = shape_ack_ledger(rows).set_index("partition")
    assert shaped.loc[0, ["records_sent", "acks_all_acked", "acks_all_unacked_for_ms", "leader", "isr_size"]
                      ].tolist() == [9, 2, 2_500, 1.0, 3.0]
    assert shaped.loc[1, "acks_all_unacked_for_ms"] == 0
    assert shaped.loc[1, ["leader", "isr_size"]].isna().all()
    assert pd.isna(shaped.loc[2, "acks_all_unacked_for_ms"]) and shaped.loc[2, "isr_size"] == 2
