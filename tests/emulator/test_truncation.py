"""Leader-epoch truncation (KIP-101/279) keeps what truncating to the high watermark loses."""

from __future__ import annotations

from broker_emulator.state import PartitionTable
from tests.emulator.helpers import leader_of, leo, simulate

# One record reaches followers 2 and 3 and is committed on leader 1 (HW=1) while the followers still
# believe HW=0. Leader 1 shuts down (controlled): 2 takes over; 3 becomes its follower. 2 crashes the
# moment 3 hears of it; when 2's session expires, 3 (still in the ISR) is elected.
KIP_101 = """
name: kip-101
duration: 30s
cluster:
  brokers: 3
  config: {{truncation: {mode}, eligible.leader.replicas.enable: false}}
topics:
  - {{name: t, partitions: 1, replication.factor: 3, config: {{min.insync.replicas: 1}}, assignment: [[1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 1, linger.ms: 1s, start: 1s, stop: 1500ms}}
faults:
  - {{at: 1100ms, kind: controlled_shutdown, broker: 1}}
  - {{at: 1120ms, kind: crash, broker: 2}}
"""


def test_truncation_to_high_watermark_loses_a_committed_record() -> None:
    sim = simulate(KIP_101.format(mode="high_watermark"))
    summary = sim.run()
    assert leader_of(sim) == 3
    assert leo(sim, 3) == 0
    assert summary["records"]["acked"] == {"all": 1}
    assert summary["lost_by"] == {"truncate_to_hw": 1}


def test_truncation_by_leader_epoch_keeps_it() -> None:
    sim = simulate(KIP_101.format(mode="epoch"))
    summary = sim.run()
    assert leader_of(sim) == 3
    assert leo(sim, 3) == 1
    assert summary["records"]["acked"] == {"all": 1}
    assert summary["records"]["lost"] == {}


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing() -> None:
    # A broker became leader at epoch 1 at offset 5 (its epoch cache says so), appended nothing,
    # and lost the lead. A new leader's records from offset 5 on are epoch 0's; the follower's
    # truncation to 5 removes no record but must remove the empty epoch-1 entry, as
    # UnifiedLog.truncateTo does, or the records it fetches next would read as epoch 1.
    t = PartitionTable(1, 3)
    p = t.add_partition(0, 0, (1, 2, 3), 0, 100)
    t.leo[p, 1] = 5
    t.assign_epoch(p, 1, 0, 0)
    t.assign_epoch(p, 1, 1, 5)
    assert t.truncate(p, 1, 5) == 0
    assert t.epoch_caches[p][1] == [(0, 0)]
    t.leo[p, 1] = 8  # the fetched records, copied from a leader whose last epoch is 0
    assert t.epoch_at(p, 1, 7) == 0
    t.assign_epoch(p, 1, 2, 8)
    assert t.truncate(p, 1, 9) == 0 and t.epoch_caches[p][1] == [(0, 0)]  # past the end: cut at the end
