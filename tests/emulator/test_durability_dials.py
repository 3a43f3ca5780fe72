"""The RF / min.insync.replicas table of the durability chapter, and the effectiveMinIsr cap."""

from __future__ import annotations

import pytest

from tests.emulator.helpers import events, isr, simulate


def _table_row(rf: int, min_isr: int, failures: int) -> str:
    followers = list(range(2, 2 + failures))
    crash = f"- {{at: 2s, kind: crash, brokers: {followers}}}" if failures else ""
    return f"""
name: dial
duration: 30s
cluster: {{brokers: {rf}}}
topics:
  - {{name: t, partitions: 1, replication.factor: {rf}, config: {{min.insync.replicas: {min_isr}}},
     assignment: [{list(range(1, rf + 1))}]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 10, linger.ms: 1s, start: 20s, stop: 25s, retries: 0}}
faults:
  {crash}
"""


@pytest.mark.parametrize(("rf", "min_isr", "keeps_writing_through"), [
    (1, 1, 0), (2, 2, 0), (2, 1, 1), (3, 2, 1), (5, 3, 2),
])
def test_writes_continue_through_rf_minus_m_failures_and_stop_after(rf: int, min_isr: int,
                                                                    keeps_writing_through: int) -> None:
    """Each row: losing max(RF-M, 0) in-sync followers keeps acks=all writes flowing; one more stops them."""
    assert keeps_writing_through == max(rf - min_isr, 0)
    for failures in range(0, rf):
        sim = simulate(_table_row(rf, min_isr, failures))
        summary = sim.run()
        assert len(isr(sim)) == rf - failures
        refused = [r for r in events(sim, "produce_rejected") if r[7] == "NOT_ENOUGH_REPLICAS"]
        if failures <= keeps_writing_through:
            assert summary["records"]["acked"] == {"all": 50}, (rf, min_isr, failures)
            assert refused == []
        else:
            assert summary["records"]["acked"] == {}, (rf, min_isr, failures)
            assert summary["records"]["failed"] == {"all": 50}
            assert refused


def test_effective_min_isr_is_capped_at_the_replication_factor() -> None:
    """min.insync.replicas=3 on an RF=2 topic behaves as 2; on RF=1, min.insync.replicas=2 behaves as 1."""
    sim = simulate(_table_row(2, 3, 0))
    summary = sim.run()
    assert summary["records"]["acked"] == {"all": 50}  # not refused although min ISR 3 > RF 2
    assert int(sim.table.effective_min_isr(0)) == 2
    sim = simulate(_table_row(2, 3, 1))
    assert sim.run()["records"]["acked"] == {}  # one failure: ISR 1 < effective 2
    sim = simulate(_table_row(1, 2, 0))
    summary = sim.run()
    assert summary["records"]["acked"] == {"all": 50}  # single copy, silently accepted
    assert int(sim.table.effective_min_isr(0)) == 1
