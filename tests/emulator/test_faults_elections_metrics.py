"""Fault kinds, election kinds, error codes, placement and metric semantics."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from broker_emulator.errors import InvalidReplicationFactor
from broker_emulator.placement import place_replicas
from broker_emulator.produce import Pending
from broker_emulator.producer_client import Batch, Request
from schemas.kafka_metrics import CONTROLLER_NODE_ID
from tests.emulator.helpers import events, hw, isr, leader_of, leo, simulate

BASE = """
name: t
duration: {duration}
cluster: {{brokers: 3, config: {{eligible.leader.replicas.enable: {elr}}}}}
topics:
  - {{name: t, partitions: 1, replication.factor: 3, config: {{min.insync.replicas: {min_isr},
     unclean.leader.election.enable: {unclean}}}, assignment: [[1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: {acks}, rate: 100, linger.ms: 20, delivery.timeout.ms: 5s}}
faults:
{faults}
"""


def base(faults: str, *, duration: str = "60s", min_isr: int = 2, acks: str = "all", unclean: str = "false",
         elr: str = "true") -> str:
    return BASE.format(duration=duration, min_isr=min_isr, acks=acks, unclean=unclean, elr=elr, faults=faults)


def test_network_partition_isolated_leader_keeps_acking_acks1_until_fenced() -> None:
    sim = simulate(base("  - {at: 10s, kind: network_partition, groups: [[1], [2, 3, controller]], duration: 20s}",
                        min_isr=1, acks="1"))
    s = sim.run()
    # Broker 1 is fenced at its session's end, 7-9 s after the cut (its heartbeat phase is the seed's). Cut off
    # from the controller it never hears that it was replaced, and the producer, whose writes it keeps answering,
    # has no reason to ask who leads (no error, no closed connection, metadata.max.age.ms is 5 min): it goes on
    # writing to broker 1 until the heal, 100 records/s acknowledged there alone, all lost.
    fenced = [e[0] for e in events(sim, "fenced") if e[3] == 1]
    assert len(fenced) == 1 and 17_000 < fenced[0] <= 19_001
    alone = (30_000 - 10_000) * 100 // 1000
    assert abs(s["lost_by"]["leader_failover"] - alone) <= 10 and set(s["lost_by"]) == {"leader_failover"}
    cut = [e for e in events(sim, "truncation") if e[3] == 1]
    assert len(cut) == 1 and cut[0][8] == s["lost_by"]["leader_failover"] and cut[0][0] == 30_000  # at the heal
    assert leader_of(sim) == 2 and isr(sim) == [1, 2, 3]


def test_disk_loss_follower_comes_back_empty_and_catches_up() -> None:
    sim = simulate(base("  - {at: 10s, kind: disk_loss, broker: 3, duration: 5s}"))
    sim.run_until(14_000)
    assert leo(sim, 3) == 0
    s = sim.run()
    assert leo(sim, 3) == leo(sim, 1) and isr(sim) == [1, 2, 3]
    assert s["records"]["lost"] == {}


def test_config_change_at_runtime_applies_the_new_min_isr() -> None:
    sim = simulate(base("  - {at: 5s, kind: crash, broker: 3}\n"
                        "  - {at: 30s, kind: config_change, topic: t, set: {min.insync.replicas: 3}}"))
    s = sim.run()
    refused = [e[0] for e in events(sim, "produce_rejected") if e[7] == "NOT_ENOUGH_REPLICAS"]
    assert refused and min(refused) >= 30_000  # ISR 2 was enough for min ISR 2, not for 3
    assert [e for e in events(sim, "config_change") if e[7] == "alter_configs"]
    assert int(sim.table.configured_min_isr[0]) == 3
    assert s["records"]["acked"]["all"] > 0


def test_preferred_leader_election_moves_leadership_back() -> None:
    sim = simulate(base("  - {at: 5s, kind: crash, broker: 1, duration: 10s}\n"
                        "  - {at: 40s, kind: elect_leaders, topic: t, election_type: preferred}"))
    sim.run_until(39_000)
    assert leader_of(sim) == 2 and 1 in isr(sim)
    s = sim.run()
    assert leader_of(sim) == 1
    assert s["elections"] == {"clean": 1, "preferred": 1} and s["records"]["lost"] == {}


def test_admin_unclean_election_on_an_offline_partition() -> None:
    faults = ("  - {at: 5s, kind: crash, broker: 3}\n"
              "  - {at: 20s, kind: restart, broker: 3}\n"
              "  - {at: 21s, kind: crash, brokers: [1, 2]}\n"
              "  - {at: 45s, kind: elect_leaders, topic: t, partition: 0, election_type: unclean}")
    sim = simulate(base(faults, min_isr=1, elr="false"))
    sim.run_until(44_000)
    assert leader_of(sim) == -1  # offline: unclean election is off for the topic
    s = sim.run()
    assert leader_of(sim) == 3
    assert s["elections"]["unclean"] == 1
    assert sim.table.recovery_state[0] == 0  # RECOVERING ended once the leader reported recovery
    assert sim.metrics.totals["UncleanLeaderElectionsPerSec"] == 1


def test_not_enough_replicas_after_append_when_isr_shrank_before_completion() -> None:
    """Partition.checkEnoughReplicasReachOffset: HW reached, but the maximal ISR is below min ISR."""
    sim = simulate(base("  []", duration="3s"))
    sim.run_until(2_000)
    t = sim.table
    batch = Batch(0, 0, 5, sim.clock.now_ms)
    request = Request(10_000, 0, 1, [batch], undecided=1)
    entry = Pending(request, batch, leader=1, leader_slot=0, epoch=int(t.known_epoch[0, 0]),
                    base_offset=0, required_offset=1, deadline_ms=sim.clock.now_ms + 30_000)
    sim.produce.pending[0] = [entry]
    t.leader_isr[0] = [True, False, False]  # the ISR shrank to the leader alone meanwhile
    sim.produce.complete(0)
    rejected = events(sim, "produce_rejected")
    assert [e[7] for e in rejected] == ["NOT_ENOUGH_REPLICAS_AFTER_APPEND"]
    assert sim.metrics.counts[(1, "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND")] == 1


def test_not_leader_or_follower_after_leadership_moves() -> None:
    sim = simulate(base("  - {at: 10s, kind: controlled_shutdown, broker: 1, duration: 10s}"))
    s = sim.run()
    assert "NOT_LEADER_OR_FOLLOWER" in s["produce_errors"]
    assert s["records"]["lost"] == {} and s["elections"] == {"clean": 1}


def test_striped_placement_spreads_racks_and_leaders() -> None:
    brokers = [(1, "a"), (2, "b"), (3, "c"), (4, "a"), (5, "b"), (6, "c")]
    out = place_replicas(brokers, 6, 3, random.Random(1))
    assert out == place_replicas(brokers, 6, 3, random.Random(1))  # deterministic for a seed
    racks = dict(brokers)
    assert all(len({racks[b] for b in reps}) == 3 for reps in out)
    assert len({reps[0] for reps in out}) == 6  # every broker leads one partition
    with pytest.raises(InvalidReplicationFactor, match="INVALID_REPLICATION_FACTOR"):
        place_replicas(brokers, 1, 7, random.Random(1))


def _gauges(sim) -> dict[tuple[int, str], float]:  # type: ignore[no-untyped-def]
    return {(node, name): value for node, name, kind, value, _ in sim.metrics.snapshot(1000) if kind == "gauge"}


def test_leader_side_gauges_and_controller_metrics() -> None:
    sim = simulate(base("  - {at: 5s, kind: crash, broker: 3}\n  - {at: 30s, kind: crash, broker: 2}"))
    sim.run_until(20_000)  # broker 3 fenced: ISR {1,2} = min ISR 2
    g = _gauges(sim)
    assert g[(1, "UnderReplicatedPartitions")] == 1 and g[(1, "AtMinIsrPartitionCount")] == 1
    assert g[(1, "UnderMinIsrPartitionCount")] == 0 and g[(2, "UnderReplicatedPartitions")] == 0
    assert (3, "PartitionCount") not in g  # a crashed broker reports nothing
    assert g[(CONTROLLER_NODE_ID, "ActiveControllerCount")] == 1
    assert g[(CONTROLLER_NODE_ID, "FencedBrokerCount")] == 1
    assert sim.metrics.totals.get("IsrShrinksPerSec", 0) == 0  # fencing removed 3, not the leader
    sim.run_until(45_000)
    g = _gauges(sim)
    assert g[(1, "UnderMinIsrPartitionCount")] == 1
    assert hw(sim) == int(sim.table.hw[0, 0])


def test_a_leaderless_partition_counts_on_no_broker() -> None:
    sim = simulate(base("  - {at: 5s, kind: crash, brokers: [1, 2, 3]}\n  - {at: 30s, kind: restart, broker: 2}",
                        elr="false"))
    sim.run_until(40_000)
    assert leader_of(sim) == -1
    g = _gauges(sim)
    assert g[(CONTROLLER_NODE_ID, "OfflinePartitionsCount")] == 1
    assert g[(2, "UnderMinIsrPartitionCount")] == 0 and g[(2, "LeaderCount")] == 0
    assert np.all(sim.table.leader[:1] == -1)


PARKED = """
name: t
duration: 90s
cluster: {brokers: 3, config: {replica.fetch.wait.max.ms: 5000, log.recovery.ms: 2000, log.recovery.jitter: 0}}
topics:
  - {name: a, partitions: 1, replication.factor: 3, config: {min.insync.replicas: 3}, assignment: [[1, 2, 3]]}
  - {name: b, partitions: 1, replication.factor: 3, config: {min.insync.replicas: 2}, assignment: [[2, 1, 3]]}
workload:
  producers:
    - {name: w, topic: a, acks: all, rate: 100, linger.ms: 20, delivery.timeout.ms: 5s}
faults:
  - {at: 10s, kind: controlled_shutdown, broker: 2, duration: 10s}
  - {at: 40s, kind: crash, broker: 1, duration: 10s}
"""


def test_a_fetch_parked_at_a_leader_that_stops_is_retried_not_lost() -> None:
    # Topic b has no producer, so 1 and 3 long-poll broker 2 for 5 s at a time. Broker 2 stops at
    # 10 s with those fetches parked: they must fail and be re-sent, or the sessions (1->2, 3->2)
    # fall silent. At 40 s broker 1 crashes and 2 leads a; a refuses writes (ISR [2, 3] < min ISR 3),
    # so no new data would ever wake a silent session: 1 must still come back into a's ISR.
    sim = simulate(PARKED)
    sim.run_until(58_000)
    back = [e for e in events(sim, "isr_expand") if e[4] == "a" and e[0] > 50_000]
    assert [json.loads(e[9])["added"] for e in back] == [[1]]
    assert back[0][0] <= 52_000 + 5_000 + 1_000  # registered at 52 s; the next fetch after unfencing
    hw_back = hw(sim, 0)
    sim.run()
    assert isr(sim, 0) == [1, 2, 3] and leader_of(sim, 0) == 2
    assert hw(sim, 0) - hw_back >= 3_000  # writable again: 32 s x 100 records/s, less those in flight


def test_requests_held_by_a_paused_broker_that_crashes_fail_and_are_retried() -> None:
    # Broker 1 (leader) pauses: produce and fetch requests wait in it. It then crashes: producers
    # retry those batches (none is left unresolved) and the followers' fetchers back off and
    # re-send, so they follow 1 again once a preferred election hands it the lead back.
    sim = simulate(base("  - {at: 10s, kind: pause, broker: 1, duration: 10s}\n"
                        "  - {at: 12s, kind: crash, broker: 1, duration: 10s}\n"
                        "  - {at: 40s, kind: elect_leaders, topic: t, election_type: preferred}", duration="90s")
                   .replace("rate: 100,", "rate: 100, stop: 80s,"))
    s = sim.run()
    assert leader_of(sim) == 1 and isr(sim) == [1, 2, 3]
    assert [e[0] for e in events(sim, "isr_shrink") if e[0] > 40_000] == []
    sent, acked, failed = (sum(s["records"][k].values()) for k in ("sent", "acked", "failed"))
    assert failed > 0 and sent == acked + failed  # every batch 1 held was retried, then acked or expired
