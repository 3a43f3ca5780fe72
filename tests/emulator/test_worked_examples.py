"""The worked examples of the seed texts, reproduced exactly by the emulator."""

from __future__ import annotations

from tests.emulator.helpers import events, hw, isr, leader_of, leo, simulate

HW_TIMELINE = """
name: hw-timeline
duration: 10s
cluster: {brokers: 3}
topics:
  - {name: t, partitions: 1, replication.factor: 3, assignment: [[1, 2, 3]]}
workload:
  producers:
    - {name: first-100, topic: t, acks: 1, rate: 100, linger.ms: 1s, start: 1s, stop: 1500ms}
    - {name: next-5, topic: t, acks: 1, rate: 5, linger.ms: 1s, start: 3s, stop: 3500ms}
faults:
  - {at: 2s, kind: slow_follower, broker: 3, delay: 200ms}
"""


def test_high_watermark_progression_of_the_replication_reference() -> None:
    """001: HW = min LEO over the ISR; it moves only once follower 3 has fetched too."""
    sim = simulate(HW_TIMELINE)
    sim.run_until(2_900)  # t=0: everyone at 100
    assert (leo(sim, 1), leo(sim, 2), leo(sim, 3), hw(sim)) == (100, 100, 100, 100)
    assert isr(sim) == [1, 2, 3]
    sim.run_until(3_001)  # t=1: the producer's 5 records reach the leader only
    assert (leo(sim, 1), hw(sim)) == (105, 100)
    sim.run_until(3_010)  # t=2: follower 2 has fetched up to 105, follower 3 (slow) has not
    assert (leo(sim, 2), leo(sim, 3), hw(sim)) == (105, 100, 100)
    sim.run_until(3_500)  # t=3: follower 3's response arrives and its next fetch moves the HW
    assert (leo(sim, 3), hw(sim)) == (105, 105)


HW_PINNED = """
name: hw-pinned
duration: 40s
cluster: {brokers: 3}
topics:
  - {name: t, partitions: 1, replication.factor: 3, config: {min.insync.replicas: 2}, assignment: [[1, 2, 3]]}
workload:
  producers:
    - {name: first-102, topic: t, acks: all, rate: 102, linger.ms: 1s, start: 1s, stop: 1500ms}
    - {name: two-more, topic: t, acks: all, rate: 2, linger.ms: 1s, start: 5s, stop: 5500ms,
       request.timeout.ms: 30s, retries: 0}
    - {name: refused, topic: t, acks: all, rate: 1, linger.ms: 1s, start: 20s, stop: 20500ms, retries: 0}
faults:
  - {at: 4s, kind: pause, brokers: [2, 3]}
"""


def test_hw_pinned_at_102_while_under_min_isr_and_writes_refused() -> None:
    """000: leader LEO 104, ISR {leader}: HW stays at 102 and acks=all gets NOT_ENOUGH_REPLICAS."""
    sim = simulate(HW_PINNED)
    sim.run_until(3_000)
    assert (leo(sim, 1), hw(sim), isr(sim)) == (102, 102, [1, 2, 3])
    sim.run_until(19_000)  # followers stalled; fenced by the controller after broker.session.timeout.ms
    assert isr(sim) == [1]
    assert (leo(sim, 1), hw(sim)) == (104, 102)
    sim.run_until(21_000)
    rejected = events(sim, "produce_rejected")
    assert [r[7] for r in rejected] == ["NOT_ENOUGH_REPLICAS"]
    assert leo(sim, 1) == 104  # the refused write never entered the log
    sim.run_until(36_000)  # the two appended writes time out in purgatory: the HW never reached them
    assert [r[7] for r in events(sim, "produce_rejected")][-1] == "REQUEST_TIMED_OUT"
    assert hw(sim) == 102


def test_unclean_election_loses_d_and_e() -> None:
    """004: R3 (LEO 3, out of the ISR) is elected uncleanly after R1 and R2 fail: D and E are lost."""
    from broker_emulator.scenario import load_scenario
    from broker_emulator.simulation import Simulation

    sim = Simulation(load_scenario("conf/scenarios/unclean-election-loses-d-and-e.yaml"))
    sim.run_until(25_000)
    assert (leo(sim, 1), leo(sim, 2), leo(sim, 3), hw(sim), isr(sim)) == (5, 5, 3, 5, [1, 2])
    summary = sim.run()
    assert leader_of(sim) == 3
    assert summary["records"]["acked"] == {"all": 5}
    assert summary["records"]["lost"] == {"all": 2}
    assert summary["lost_by"] == {"unclean_election": 2}
    # R1 and R2 fail together; whichever the controller fences first decides whether R2 leads for a moment (a
    # clean election) before R3 is elected uncleanly: their heartbeat phases are the seed's.
    assert summary["elections"]["unclean"] == 1 and set(summary["elections"]) <= {"clean", "unclean"}
    assert (leo(sim, 3), hw(sim)) == (3, 3)
    # The auditor group had read all five records; D and E then vanished under it.
    assert summary["consumed"] == {"auditor": 5}
    assert summary["read_then_lost"] == {"auditor": 2}


def test_no_loss_when_unclean_election_is_disabled() -> None:
    from broker_emulator.scenario import load_scenario
    from broker_emulator.simulation import Simulation

    sc = load_scenario("conf/scenarios/unclean-election-loses-d-and-e.yaml")
    import dataclasses

    topic = dataclasses.replace(sc.topics[0], config=dataclasses.replace(sc.topics[0].config,
                                                                           unclean_leader_election_enable=False))
    sim = Simulation(dataclasses.replace(sc, topics=(topic,)))
    summary = sim.run()
    assert leader_of(sim) == -1  # offline: waits for an ISR member instead of losing data
    assert summary["records"]["lost"] == {}
    assert summary["read_then_lost"] == {"auditor": 0}
    assert summary["elections"]["offline"] == 1 and set(summary["elections"]) <= {"clean", "offline"}
