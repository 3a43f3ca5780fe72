"""What the scenario language can say (issue 23, item 12), each with the Kafka rule it follows."""

from __future__ import annotations

import numpy as np

from broker_emulator.simulation import Simulation
from tests.emulator.helpers import events, hw, leader_of, simulate
from tests.emulator.test_faults_elections_metrics import base


def with_cluster_config(text: str, settings: str) -> str:
    return text.replace("eligible.leader.replicas.enable: true",
                        f"eligible.leader.replicas.enable: true, {settings}")


def test_a_produce_to_a_chosen_non_leader_is_refused_and_retried_at_the_leader() -> None:
    """Partition.appendRecordsToLeader (via ReplicaManager.appendRecords): a broker that does not lead the
    partition answers NOT_LEADER_OR_FOLLOWER; the client retries the batch at the leader it then looks up."""
    sim = simulate(base("  - {at: 5s, kind: produce, producer: w, broker: 2, partition: 0, records: 7}"))
    s = sim.run()
    refused = [e for e in events(sim, "produce_rejected") if e[3] == 2]
    assert [(e[0], e[7], e[8]) for e in refused] == [(5_001, "NOT_LEADER_OR_FOLLOWER", 7)]
    assert sim.metrics.totals["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER"] == 1
    assert s["client_errors"] == {"NOT_LEADER_OR_FOLLOWER": 1} and s["records"]["failed"] == {}
    # The seven records were retried at broker 1 and acknowledged: every record sent is acknowledged but the
    # ones still in flight when the run ends.
    assert 0 <= s["records"]["sent"]["all"] - s["records"]["acked"]["all"] <= 10


def _admin_answers(sim: Simulation) -> list[tuple[int, str]]:
    return [(e[0], e[7]) for e in events(sim, "admin_election")]


def test_admin_elections_answer_with_kafkas_result_codes() -> None:
    """ReplicationControlManager.electLeader: ELECTION_NOT_NEEDED when the preferred replica already leads
    (preferred) or the partition has a leader (unclean); PREFERRED_LEADER_NOT_AVAILABLE when the preferred
    replica cannot lead; ELIGIBLE_LEADERS_NOT_AVAILABLE when an unclean election finds no replica; NONE when
    the election happened."""
    sim = simulate(base("  - {at: 5s, kind: elect_leaders, topic: t, partition: 0, election_type: preferred}\n"
                        "  - {at: 6s, kind: elect_leaders, topic: t, partition: 0, election_type: unclean}\n"
                        "  - {at: 10s, kind: crash, broker: 1}\n"
                        "  - {at: 25s, kind: elect_leaders, topic: t, partition: 0}\n"
                        "  - {at: 30s, kind: crash, brokers: [2, 3]}\n"
                        "  - {at: 45s, kind: elect_leaders, topic: t, partition: 0, election_type: unclean}"))
    sim.run()
    assert _admin_answers(sim) == [(5_000, "ELECTION_NOT_NEEDED"), (6_000, "ELECTION_NOT_NEEDED"),
                                   (25_000, "PREFERRED_LEADER_NOT_AVAILABLE"),
                                   (45_000, "ELIGIBLE_LEADERS_NOT_AVAILABLE")]
    assert leader_of(sim) == -1

    # Broker 3 out of the ISR (crashed and restarted), then 1 and 2 crash: offline, and only an unclean election
    # brings 3 in.
    done = simulate(base("  - {at: 5s, kind: crash, broker: 3}\n"
                         "  - {at: 20s, kind: restart, broker: 3}\n"
                         "  - {at: 21s, kind: crash, brokers: [1, 2]}\n"
                         "  - {at: 45s, kind: elect_leaders, topic: t, partition: 0, election_type: unclean}",
                         min_isr=1, elr="false"))
    done.run()
    assert _admin_answers(done) == [(45_000, "NONE")] and leader_of(done) == 3


def _hw_advances(sim: Simulation) -> int:
    """How many times the leader's high watermark moved between 5 s and 15 s, looking every 10 ms."""
    seen = []
    for at in range(5_000, 15_000, 10):
        sim.run_until(at)
        seen.append(hw(sim))
    return int(np.count_nonzero(np.diff(seen)))


def test_replica_fetch_min_bytes_holds_fetches_until_enough_is_new() -> None:
    """DelayedFetch.tryComplete: a follower's fetch completes once the bytes past its offsets reach
    replica.fetch.min.bytes, else at replica.fetch.wait.max.ms (500 ms). At 100 records/s of 512 bytes
    (51 KB/s), 100 KB never accumulates within 500 ms: each fetch waits it out, so the acks=all high watermark
    moves about twice a second, where with 1 byte it moves with every 20 ms linger batch."""
    eager = _hw_advances(simulate(base("  []", duration="20s")))
    patient = _hw_advances(simulate(with_cluster_config(base("  []", duration="20s"),
                                                        "replica.fetch.min.bytes: 100000")))
    assert eager > 300 and 15 <= patient <= 21, (eager, patient)


def _elr_after_restart_in_elr(clean: str) -> tuple[list[int], str]:
    """Broker 3 leaves the ISR, then broker 2: with min ISR 2, broker 2 goes to the ELR. It crashes there and
    restarts, registering after log recovery (6.7 to 12.5 s). The ELR just after it registered (before it
    catches up and rejoins the ISR), and how it said it had shut down."""
    sim = simulate(base("  - {at: 2s, kind: pause, broker: 3}\n"
                        "  - {at: 14s, kind: pause, broker: 2}\n"
                        "  - {at: 26s, kind: crash, broker: 2}\n"
                        f"  - {{at: 27s, kind: restart, broker: 2{clean}}}"))
    sim.run_until(26_500)
    assert sim.table.members(0, sim.table.elr[0]) == [2] and sim.brokers.by_id[2].liveness.value == "crashed"
    while not (registered := [e for e in events(sim, "broker_state") if e[3] == 2 and e[7] == "registered"]):
        sim.run_until(sim.clock.now_ms + 10)
    return sim.table.members(0, sim.table.elr[0]), registered[0][9]


def test_a_clean_restart_after_a_crash_keeps_the_brokers_elr_place() -> None:
    """ReplicationControlManager.handleBrokerUncleanShutdown (KIP-966): a broker that registers after an
    unclean shutdown leaves every ELR it was in. After a crash a restart is unclean, unless the scenario says
    `clean: true` (the logs were closed cleanly: the clean-shutdown marker is there)."""
    assert _elr_after_restart_in_elr("") == ([], '{"state":"alive","unclean_shutdown":true}')
    assert _elr_after_restart_in_elr(", clean: true") == ([2], '{"state":"alive","unclean_shutdown":false}')


def test_kip101_alone_leaves_a_diverged_log_that_kip279_truncates() -> None:
    """AbstractFetcherThread.getOffsetTruncationState (KIP-279): the follower truncates to the lesser of the
    leader's end offset for the epoch the leader found and its own end offset for that epoch. KIP-101 alone had
    only the leader's end offset. KIP-279's example: the leader holds epoch 0 at offset 0 and epoch 1 at offset
    1, then leads epoch 3 from offset 2; the follower holds epoch 0 at offset 0 and epoch 2 at offset 1. Asked
    for epoch 2, the leader finds epoch 1, ending at 2: KIP-101 keeps the follower's offset 1 (epoch 2, which the
    leader does not have: the logs diverge), KIP-279 cuts it to 1 and the follower fetches the leader's."""
    ends = {}
    for mode in ("kip101", "epoch"):
        sim = simulate(with_cluster_config(base("  []", duration="1s"), f"truncation: {mode}"))
        t = sim.table
        t.leo[0, 0], t.epoch_caches[0][0] = 2, [(0, 0), (1, 1), (3, 2)]
        t.leo[0, 1], t.epoch_caches[0][1] = 2, [(0, 0), (2, 1)]
        sim.replication._truncate_before_fetch(np.array([0]), np.array([1]), 1)
        ends[mode] = (int(t.leo[0, 1]), t.epoch_caches[0][1])
    assert ends == {"kip101": (2, [(0, 0), (2, 1)]), "epoch": (1, [(0, 0)])}
