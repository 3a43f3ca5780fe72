"""bench/real_alerts.py's fault plans: what each does to the fixture cluster, as the faults it records.

Every plan starts on a whole cluster (every partition led, every ISR whole) and returns once it has put the
cluster back (resumed, restarted); bench/real_alerts.py then waits for every ISR to be whole again and 60 s more.
A broker stalled is SIGSTOPped (a long GC pause: no answer, no fetch, no heartbeat; fenced by the controller
after `broker.session.timeout.ms`, 9 s); killed is SIGKILLed and started again; restarted is stopped with SIGTERM
(a controlled shutdown: the controller moves its leaderships and removes it from the ISRs first) and started
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.real_alert_truth import ClusterHistory, Fault
from testing.kafka import KafkaCluster

ORDERS, AUDIT, TELEMETRY = "orders", "audit", "telemetry"


@dataclass
class PlanContext:
    cluster: KafkaCluster
    history: ClusterHistory
    hold: Callable[[float], None]                        # sleeps, failing if a child process died
    wait: Callable[[Callable[[], bool], float, str], None]


def _stall(ctx: PlanContext, brokers: tuple[int, ...], seconds: float) -> Fault:
    fault = Fault("stall", brokers, time.time())
    for b in brokers:
        ctx.cluster.pause(b)
    ctx.hold(seconds)
    for b in brokers:
        ctx.cluster.resume(b)
    fault.end = time.time()
    return fault


def _kill(ctx: PlanContext, broker: int, down_s: float) -> Fault:
    fault = Fault("kill", (broker,), time.time())
    ctx.cluster.kill(broker)
    ctx.hold(down_s)
    ctx.cluster.restart(broker, timeout_s=180)
    fault.end = time.time()
    return fault


def _whole_and_quiet(ctx: PlanContext, quiet_s: float) -> None:
    ctx.wait(ctx.history.whole, 300, "every ISR whole")
    ctx.hold(quiet_s)


def _most_leaderships(ctx: PlanContext, topic: str) -> int:
    snap = ctx.history.snapshots[-1]
    counts: dict[int, int] = {}
    for (t, _), view in snap.partitions.items():
        if t == topic and view.leader >= 0:
            counts[view.leader] = counts.get(view.leader, 0) + 1
    return max(sorted(counts), key=lambda b: counts[b])


def stalled_follower(ctx: PlanContext) -> list[Fault]:
    """Broker 3 SIGSTOPped for 30 s: fenced at 9 s."""
    return [_stall(ctx, (3,), 30)]


def killed_leader(ctx: PlanContext) -> list[Fault]:
    """The broker leading most `orders` partitions SIGKILLed, started again after 30 s."""
    return [_kill(ctx, _most_leaderships(ctx, ORDERS), 30)]


def two_brokers_stalled(ctx: PlanContext) -> list[Fault]:
    """Brokers 1 and 3 SIGSTOPped for 30 s: only broker 2 left."""
    return [_stall(ctx, (1, 3), 30)]


def unclean_election(ctx: PlanContext) -> list[Fault]:
    """Brokers 2 and 3 SIGSTOPped until fenced, `telemetry` (min ISR 1, unclean election on, written with acks=1)
    acknowledged by broker 1 alone for a few seconds; broker 1 killed, 2 and 3 resumed: the controller elects one of
    them uncleanly and what broker 1 alone held is gone. Broker 1 is started again afterwards."""
    stall = Fault("stall", (2, 3), time.time())
    for b in (2, 3):
        ctx.cluster.pause(b)
    ctx.wait(lambda: not ({2, 3} & ctx.history.snapshots[-1].brokers), 60, "brokers 2 and 3 fenced")
    ctx.hold(5)
    kill = Fault("kill", (1,), time.time())
    ctx.cluster.kill(1)
    ctx.hold(2)
    for b in (2, 3):
        ctx.cluster.resume(b)
    stall.end = time.time()

    def led_elsewhere() -> bool:  # broker 1 led them all since 2 and 3 were fenced
        views = [v for (t, _), v in ctx.history.snapshots[-1].partitions.items() if t == TELEMETRY]
        return bool(views) and all(v.leader in (2, 3) for v in views)

    ctx.wait(led_elsewhere, 120, "telemetry's partitions led by broker 2 or 3 (the unclean election)")
    ctx.hold(10)
    ctx.cluster.restart(1, timeout_s=180)
    kill.end = time.time()
    return [stall, kill]


def three_faults_of_one_partition(ctx: PlanContext) -> list[Fault]:
    """audit-0's follower broker: stalled 30 s, killed for 30 s, stalled 30 s, each a minute after the cluster was
    whole again: three incidents within 5 minutes, not one flapping alert."""
    view = ctx.history.snapshots[-1].partitions[(AUDIT, 0)]
    follower = next(b for b in view.replicas if b != view.leader)
    faults = [_stall(ctx, (follower,), 30)]
    _whole_and_quiet(ctx, 60)
    faults.append(_kill(ctx, follower, 30))
    _whole_and_quiet(ctx, 60)
    faults.append(_stall(ctx, (follower,), 30))
    return faults


def rolling_restart(ctx: PlanContext) -> list[Fault]:
    """Every broker in turn stopped with a controlled shutdown and started again, the next once every ISR is whole."""
    faults = []
    for b in ctx.cluster.broker_ids():
        fault = Fault("controlled_restart", (b,), time.time())
        ctx.cluster.restart(b, timeout_s=180)
        fault.end = time.time()
        faults.append(fault)
        ctx.wait(ctx.history.whole, 300, f"every ISR whole after restarting broker {b}")
    return faults


def follower_stalling_every_20s(ctx: PlanContext) -> list[Fault]:
    """Broker 2 SIGSTOPped for 7 s every 20 s, eight times: longer than replica.lag.time.max.ms (5 s), so its
    leaders drop it from their ISRs, and shorter than the session timeout (9 s), so it is never fenced: the
    follower that keeps falling out of and back into the ISR."""
    faults = []
    for _ in range(8):
        began = time.time()
        faults.append(_stall(ctx, (2,), 7))
        ctx.hold(max(0.0, began + 20 - time.time()))
    return faults


PLANS: dict[str, Callable[[PlanContext], list[Fault]]] = {
    "stalled_follower": stalled_follower,
    "killed_leader": killed_leader,
    "two_brokers_stalled": two_brokers_stalled,
    "unclean_election": unclean_election,
    "three_faults_one_partition": three_faults_of_one_partition,
    "rolling_restart": rolling_restart,
    "follower_stalls_every_20s": follower_stalling_every_20s,
}
