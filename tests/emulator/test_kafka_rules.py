"""The emulator follows the Kafka source rule each test names (issue 23's known differences, one test each)."""

from __future__ import annotations

from broker_emulator.simulation import Simulation
from tests.emulator.helpers import isr, leader_of, simulate
from tests.emulator.test_faults_elections_metrics import base


def members(sim: Simulation, mask_name: str, p: int = 0) -> list[int]:
    return sim.table.members(p, getattr(sim.table, mask_name)[p])


def test_last_known_elr_holds_the_leader_from_when_the_isr_first_empties_until_a_leader_exists() -> None:
    """PartitionChangeBuilder.maybeUpdateLastKnownLeader (useLastKnownLeaderInBalancedRecovery, Kafka's default):
    lastKnownElr is set to [partition.leader] by the change that empties the ISR, and cleared by the change that
    gives the partition a leader. Brokers 3, 2, 1 paused in turn (min ISR 2): the ELR gathers 2 and 1, the last
    known ELR is [1] alone (never the old ELR members); broker 1 resumed is elected from the ELR, which clears it."""
    sim = simulate(base("  - {at: 2s, kind: pause, broker: 3}\n"
                        "  - {at: 14s, kind: pause, broker: 2}\n"
                        "  - {at: 26s, kind: pause, broker: 1}\n"
                        "  - {at: 45s, kind: resume, broker: 1}"))
    sim.run_until(25_000)
    assert isr(sim) == [1] and members(sim, "elr") == [2] and members(sim, "last_known_elr") == []
    sim.run_until(44_000)
    assert leader_of(sim) == -1 and isr(sim) == [] and members(sim, "elr") == [1, 2]
    assert members(sim, "last_known_elr") == [1]
    sim.run_until(55_000)
    assert leader_of(sim) == 1 and members(sim, "last_known_elr") == []
