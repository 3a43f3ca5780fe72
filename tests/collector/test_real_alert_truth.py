"""bench/real_alert_truth.py: what a correct monitor fires, derived from the bench's own view of the cluster.

The bench scores isrwatch against these expectations, so they are checked here on snapshots built by hand: a
stalled follower (broker 3) drops out of every ISR at 104 s and is fenced at 109 s; it comes back at 140 s.
"""

from __future__ import annotations

from bench.real_alert_truth import ClusterHistory, Expected, Fault, PartitionView, Snapshot, expected_alerts

CANARY = "__isrwatch_canary"
MIN_ISR = {"orders": 2, "audit": 2, "telemetry": 1, CANARY: 2}
ALL = (1, 2, 3)


def snapshot(at: float, brokers: tuple[int, ...], isr: dict[str, tuple[int, ...]]) -> Snapshot:
    """orders-0 (RF 3) and audit-0 (RF 2: replicas 1 and 3), telemetry-0 (RF 3) and the canary's partition 0
    (RF 3), each led by broker 1, with the ISR given per topic."""
    replicas = {"orders": ALL, "audit": (1, 3), "telemetry": ALL, CANARY: ALL}
    return Snapshot(at, frozenset(brokers), {(t, 0): PartitionView(1, isr[t], replicas[t]) for t in replicas})


def history_of(*snaps: Snapshot) -> ClusterHistory:
    history = ClusterHistory(probe=None, topics=MIN_ISR)   # type: ignore[arg-type]  # never polled here
    history.snapshots = list(snaps)
    return history


def expected(history: ClusterHistory, faults: list[Fault]) -> dict[str, list[Expected]]:
    out: dict[str, list[Expected]] = {}
    for e in expected_alerts(history, faults, MIN_ISR, {"orders", "audit", CANARY}, CANARY, 90.0, 260.0):
        out.setdefault(e.rule, []).append(e)
    return out


WHOLE = {"orders": ALL, "audit": (1, 3), "telemetry": ALL, CANARY: ALL}
SHRUNK = {"orders": (1, 2), "audit": (1,), "telemetry": (1, 2), CANARY: (1, 2)}
STALL = Fault("stall", (3,), start=100.0, end=140.0)


def test_a_stalled_follower_expects_the_rules_a_correct_monitor_fires() -> None:
    history = history_of(snapshot(90.0, ALL, WHOLE), snapshot(104.0, ALL, SHRUNK), snapshot(109.0, (1, 2), SHRUNK),
                         snapshot(140.0, ALL, WHOLE))
    rules = expected(history, [STALL])
    assert history.fence_times(3, 100.0, 140.0) == [109.0]
    # audit (RF 2, min ISR 2) with one replica left: under min ISR from the shrink until the ISR is whole.
    assert [(e.entity, e.shown, e.until) for e in rules["UnderMinIsr"]] == [
        ((("partition", "0"), ("topic", "audit")), 104.0, 140.0)]
    # Its leader, broker 1, refuses the acks=all writes to audit meanwhile (the producer sees only timeouts).
    assert [(e.entity, e.shown, e.until) for e in rules["ProduceNotEnoughReplicas"]] == [
        ((("broker_id", "1"),), 104.0, 140.0)]
    # orders and the canary at min ISR 2 of 3 for 36 s: AtMinIsr after its 10 s `for`; telemetry (min ISR 1) not.
    assert sorted((e.entity, e.shown) for e in rules["AtMinIsr"]) == [
        ((("partition", "0"), ("topic", CANARY)), 114.0), ((("partition", "0"), ("topic", "orders")), 114.0)]
    # The canary's writes wait on the stalled ISR member 2 s after the stall; the broker is silent 15 s after it.
    assert [(e.entity, e.shown) for e in rules["WritesStalled"]] == [((("partition", "0"), ("topic", CANARY)), 102.0)]
    assert [(e.entity, e.shown) for e in rules["BrokerNotReporting"]] == [((("broker_id", "3"),), 115.0)]
    # Every partition short of a replica for 36 s: UnderReplicated after its 30 s `for`. Nothing offline, no
    # unclean election, and an ISR left by a fenced broker is not thrash.
    assert sorted(e.entity[1][1] for e in rules["UnderReplicated"] if e.shown == 134.0) == sorted(WHOLE)
    assert set(rules) == {"UnderMinIsr", "ProduceNotEnoughReplicas", "AtMinIsr", "WritesStalled",
                          "BrokerNotReporting", "UnderReplicated"}


def test_a_follower_its_leader_drops_three_times_in_five_minutes_is_thrash_and_a_blip_is_nothing() -> None:
    snaps = [snapshot(90.0, ALL, WHOLE)]
    for at in (100.0, 160.0, 220.0):   # broker 3 stays registered: its leader drops it, then takes it back
        snaps += [snapshot(at, ALL, SHRUNK), snapshot(at + 1.0, ALL, WHOLE)]
    rules = expected(history_of(*snaps), [])
    assert sorted((e.entity, e.shown) for e in rules["IsrThrash"]) == sorted(
        ((("broker_id", "3"), ("partition", "0"), ("topic", t)), 220.0) for t in ("orders", "audit", "telemetry",
                                                                                    CANARY))
    # Each shrink lasted 1 s: shorter than a collection interval and a bit, so no UnderMinIsr or refusal expected.
    assert set(rules) == {"IsrThrash"}


def test_incidents_of_one_entity_closer_than_the_flap_quiet_are_one_and_apart_are_separate() -> None:
    stalls = [Fault("stall", (3,), start=at, end=at + 7.0) for at in (100.0, 120.0, 140.0, 200.0)]
    rules = expected(history_of(snapshot(90.0, ALL, WHOLE)), stalls)
    # The canary's writes wait 2 s into each stall: three stalls 13 s apart flap as one; the fourth, 53 s after the
    # third ended, is an incident of its own.
    assert [(e.shown, e.until) for e in rules["WritesStalled"]] == [(102.0, 147.0), (202.0, 207.0)]


def test_a_leader_from_the_eligible_leader_replicas_is_a_clean_election_and_one_from_outside_is_not() -> None:
    def telemetry(at: float, leader: int, isr: tuple[int, ...], elr: tuple[int, ...]) -> Snapshot:
        return Snapshot(at, frozenset(ALL), {("telemetry", 0): PartitionView(leader, isr, ALL, elr)})

    # Broker 1 leads with ISR [1] and broker 2 in the ELR (it left the ISR below min ISR); broker 1 dies.
    from_elr = history_of(telemetry(90.0, 1, (1,), (2,)), telemetry(100.0, 2, (2,), ()))
    assert "UncleanLeaderElection" not in expected(from_elr, [])
    outside = history_of(telemetry(90.0, 1, (1,), (2,)), telemetry(100.0, 3, (3,), ()))
    assert [(e.shown, e.until) for e in expected(outside, [])["UncleanLeaderElection"]] == [(100.0, 105.0)]


def test_a_rolling_restart_expects_only_what_outlasts_it() -> None:
    """Broker 3 restarted with a controlled shutdown from 100 s to 130 s (out of every ISR at 101 s, unregistered at
    105 s): audit-0 (replicas 1 and 3) under min ISR meanwhile is held from the receivers, as its leader's refusals
    are, until a minute after the broker is back (BrokerRestarting, info, reaches no receiver of the shipped
    settings). Where audit-0 stays under min ISR until 250 s, the part after the restart settled (190 s) is expected
    as UnderMinIsr and ProduceNotEnoughReplicas."""
    restart = Fault("controlled_restart", (3,), start=100.0, end=130.0)
    whole_again = history_of(snapshot(90.0, ALL, WHOLE), snapshot(101.0, ALL, SHRUNK), snapshot(105.0, (1, 2), SHRUNK),
                             snapshot(130.0, ALL, SHRUNK), snapshot(132.0, ALL, WHOLE))
    rules = expected(whole_again, [restart])
    assert "UnderMinIsr" not in rules and "ProduceNotEnoughReplicas" not in rules and "IsrThrash" not in rules
    assert sorted(rules) == ["AtMinIsr"], "orders and the canary at min ISR for 29 s: a warning, true"

    stays = history_of(snapshot(90.0, ALL, WHOLE), snapshot(101.0, ALL, SHRUNK), snapshot(105.0, (1, 2), SHRUNK),
                       snapshot(130.0, ALL, {**WHOLE, "audit": (1,)}), snapshot(250.0, ALL, WHOLE))
    rules = expected(stays, [restart])
    assert [(e.entity, e.shown, e.until) for e in rules["UnderMinIsr"]] == [
        ((("partition", "0"), ("topic", "audit")), 190.0, 250.0)]
    assert [(e.entity, e.shown, e.until) for e in rules["ProduceNotEnoughReplicas"]] == [
        ((("broker_id", "1"),), 190.0, 250.0)]
