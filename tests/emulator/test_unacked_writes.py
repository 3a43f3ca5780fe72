"""bronze.ack_ledger's unacked_for_ms, leader and isr from the emulator: a paused follower freezes the high
watermark, and the oldest write still waiting for its acknowledgement ages one interval after the other, on every
partition whose ISR holds the paused broker, until the broker resumes; healthy, nothing waits at an interval's
end."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from broker_emulator.scenario import parse_scenario
from broker_emulator.simulation import Simulation
from tests.emulator.test_determinism_and_sweep import CapturingSink

PAUSE_AT_MS = 10_000
ASSIGNMENT = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}   # broker 3 follows partitions 0 and 1 and leads 2


def paused_follower(pause: str, seed: int = 7) -> dict[str, object]:
    """Broker 3 paused at 10 s for `pause`; replica.lag.time.max.ms 10 s and the 9 s session timeout keep it in
    every ISR through a 6 s pause: nothing but its resumption releases the writes."""
    return {
        "name": "paused-follower", "seed": seed, "duration": "24s", "metric_interval": "1s",
        "cluster": {"brokers": 3, "config": {"replica.lag.time.max.ms": 10_000}},
        "topics": [{"name": "orders", "partitions": 3, "replication.factor": 3,
                    "config": {"min.insync.replicas": 2}, "assignment": list(ASSIGNMENT.values())}],
        "workload": {"producers": [{"name": "all", "topic": "orders", "acks": "all", "rate": 300, "linger.ms": 5},
                                   {"name": "one", "topic": "orders", "acks": 1, "rate": 100, "linger.ms": 5}]},
        "faults": [{"at": f"{PAUSE_AT_MS}ms", "kind": "pause", "broker": 3, "duration": pause}],
    }


def emulated_ack_ledger(pause: str) -> tuple[pd.DataFrame, int]:
    """The run's bronze.ack_ledger rows, each with `at_ms` (virtual ms since the start), and the start (epoch ms)."""
    sink = CapturingSink()
    sim = Simulation(parse_scenario(paused_follower(pause), "<test>"), sink)
    sim.run()
    rows = pa.concat_tables(sink.tables["ack_ledger"]).to_pandas()
    start_ms = sim.scenario.start_epoch_ms
    rows["at_ms"] = rows["ts"].map(lambda ts: int(pd.Timestamp(ts).value // 1_000_000) - start_ms)
    return rows, start_ms


def test_a_paused_follower_makes_the_oldest_unacknowledged_write_age_on_its_partitions() -> None:
    rows, _ = emulated_ack_ledger("6s")
    acks_all = rows[rows["acks"] == "all"]
    healthy = acks_all[(acks_all["at_ms"] <= PAUSE_AT_MS) | (acks_all["at_ms"] >= PAUSE_AT_MS + 7_000)]
    assert len(healthy) and (healthy["unacked_for_ms"] == 0).all(), healthy[["at_ms", "partition", "unacked_for_ms"]]
    paused = acks_all[(acks_all["at_ms"] > PAUSE_AT_MS) & (acks_all["at_ms"] <= PAUSE_AT_MS + 6_000)]
    for p, replicas in ASSIGNMENT.items():
        ages = paused[paused["partition"] == p].sort_values("at_ms")
        assert len(ages) == 6, ages
        # One interval older each time: the same oldest write waits on, from the first second of the pause.
        steps = ages["unacked_for_ms"].diff().dropna()
        assert (steps == 1_000).all(), (p, ages["unacked_for_ms"].tolist())
        assert 5_000 <= ages["unacked_for_ms"].max() <= 6_000, (p, ages["unacked_for_ms"].tolist())
        assert set(ages["leader"]) == {replicas[0]}
        assert {tuple(isr) for isr in ages["isr"]} == {tuple(replicas)}   # broker 3 still in it
    # acks=1 writes wait only where the paused broker leads.
    acks_one = rows[(rows["acks"] == "1") & (rows["at_ms"] > PAUSE_AT_MS + 1_000) & (rows["at_ms"] <= 16_000)]
    waiting = acks_one.groupby("partition")["unacked_for_ms"].min()
    assert waiting[2] >= 1_000 and waiting[0] == waiting[1] == 0, waiting


def test_a_one_second_pause_holds_writes_for_about_a_second() -> None:
    rows, _ = emulated_ack_ledger("1s")
    acks_all = rows[rows["acks"] == "all"]
    assert 0 < acks_all["unacked_for_ms"].max() <= 1_000, acks_all.sort_values("unacked_for_ms").tail(3)
