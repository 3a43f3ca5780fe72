"""collector.canary against a real Kafka 4.3.1 cluster (testing/kafka/); its ledger alone is test_canary_ledger.py.

One cluster serves the module (1 KRaft controller, brokers 1-3, replica.lag.time.max.ms 3000; the controller
keeps its default broker.session.timeout.ms of 9 s, the fixture passing broker_config to brokers only); each
test starts from every broker running and unpaused, with its own canary topic and lakehouse; the two unclean-loss
tests read one unclean election, seen by two canaries on two topics (`unclean_loss`). The oracle for a
loss is independent of the canary's evidence rules: what the canary had acknowledged (its saved state) against
what the partition's log holds afterwards, read from the beginning by a plain consumer.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from collector.canary import Canary
from collector.canary_state import (
    CanaryInterval,
    CanaryState,
    decode_value,
)
from collector.canary_topic import (
    CanaryConfig,
    describe_layout,
    metadata_layout,
    quiet_librdkafka_logger,
    wall_ms,
)
from testing.kafka import KafkaCluster
from tests.collector.kafka_logs import read_log
from tests.collector.real_cluster import started

pytestmark = pytest.mark.kafka

# ---- against a real cluster --------------------------------------------------------------------------

RATE = 20.0
UNCLEAN = {"unclean.leader.election.enable": "true"}
# Every error an acks=all write may be refused with while two of the three brokers are paused.
REFUSALS = {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT", "_MSG_TIMED_OUT",
            "NOT_LEADER_OR_FOLLOWER"}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with started(KafkaCluster(tmp_path_factory.mktemp("kafka"), brokers=3,
                              broker_config={"replica.lag.time.max.ms": "3000"})) as cluster:
        yield cluster


@pytest.fixture
def cluster(kafka: KafkaCluster) -> KafkaCluster:
    """The module's cluster with every broker running and unpaused (a test before may have stopped some)."""
    return whole(kafka)


def whole(kafka: KafkaCluster) -> KafkaCluster:
    for broker in kafka.broker_ids():
        if kafka.nodes[broker].paused:
            kafka.resume(broker)
    for broker in kafka.broker_ids():
        process = kafka.nodes[broker].process
        if process is None or process.poll() is not None:
            kafka.restart(broker)
    return kafka


def canary_config(cluster: KafkaCluster, topic: str, **settings: object) -> CanaryConfig:
    return CanaryConfig(cluster.bootstrap_servers, topic=topic, records_per_second=RATE, leader_grace_ms=2_000,
                        metadata_interval_ms=500, librdkafka_logger=quiet_librdkafka_logger(), **settings)  # type: ignore[arg-type]


class Totals:
    """Intervals summed per partition; checks at every interval that sent == acked + failed + in flight."""

    def __init__(self) -> None:
        self.sent: Counter[int] = Counter()
        self.acked: Counter[int] = Counter()
        self.failed: dict[int, Counter[str]] = {}
        self.confirmed: Counter[int] = Counter()
        self.duplicated: Counter[int] = Counter()
        self.duplicates: set[tuple[int, int, int, int]] = set()
        self.round_trips: Counter[int] = Counter()
        self.produce_latencies: Counter[int] = Counter()
        self.preferred_elections: Counter[int] = Counter()
        self.lost: dict[int, set[tuple[int, int]]] = {}
        self.lost_leaders: dict[int, set[int]] = {}
        self.last: CanaryInterval | None = None

    def add(self, interval: CanaryInterval) -> None:
        self.last = interval
        for p in interval.partitions:
            n = p.partition
            self.sent[n] += p.records_sent
            self.acked[n] += p.records_acked
            self.failed.setdefault(n, Counter()).update(p.failed_by_error)
            assert p.records_failed == sum(p.failed_by_error.values())
            assert self.sent[n] == self.acked[n] + sum(self.failed[n].values()) + p.records_in_flight, n
            self.confirmed[n] += p.records_confirmed
            self.duplicated[n] += p.records_duplicated
            assert p.records_duplicated == len(p.duplicates)
            self.duplicates |= {(d.partition, d.seq, d.acked_offset, d.read_offset) for d in p.duplicates}
            self.preferred_elections[n] += p.preferred_elections
            self.round_trips[n] += p.round_trip_latency_ms.count if p.round_trip_latency_ms else 0
            self.produce_latencies[n] += p.produce_latency_ms.count if p.produce_latency_ms else 0
            assert p.records_lost == sum(x.count for x in p.lost)
            for lost in p.lost:
                records = set(lost.records())
                assert not records & self.lost.setdefault(n, set()), "a lost record reported twice"
                self.lost[n] |= records
                self.lost_leaders.setdefault(n, set()).add(lost.leader)

    def failed_total(self, partition: int) -> int:
        return sum(self.failed.get(partition, Counter()).values())


def run_until(canary: Canary, totals: Totals, done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        totals.add(canary.take_interval(wall_ms()))
        if done():
            return
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f} s: {what}; last interval {totals.last}"
        time.sleep(0.25)


def until_lost_then_drain(canary: Canary, totals: Totals, timeout_s: float, what: str) -> None:
    """Until partition 0's loss is reported, then 2 s more: the other partitions' losses come in the same or
    the next rescan."""
    run_until(canary, totals, lambda: bool(totals.lost.get(0)), timeout_s, what)
    time.sleep(2.0)
    totals.add(canary.take_interval(wall_ms()))


def admin(cluster: KafkaCluster) -> AdminClient:
    config: dict[str, Any] = {"bootstrap.servers": cluster.bootstrap_servers, "logger": quiet_librdkafka_logger()}
    return AdminClient(config)


def leaders(cluster: KafkaCluster, topic: str) -> dict[int, int]:
    client = admin(cluster)
    try:
        layout = metadata_layout(client, topic, 3.0)
    except Exception:   # a broker that is paused or gone: no answer this time
        return {}
    return {} if layout is None else layout.leaders


def check_duplicates(cluster: KafkaCluster, topic: str, canary: Canary, totals: Totals) -> None:
    """Every duplicate the canary reported is in the log (its record at the read offset), and every record the
    stopped canary still remembers that the log holds at another offset too was reported."""
    state = CanaryState.load(canary.save_state())
    assert state is not None
    log = read_log(cluster, topic, [0, 1, 2], canary.instance_id)
    remembered = {p: dict(state.ledger(p).acked_records()) for p in range(3)}
    for p, seq, acked_offset, read_offset in totals.duplicates:
        assert log[p].get(read_offset) == seq, (p, seq, read_offset)
        if remembered[p].get(acked_offset) == seq:       # (not lost since): the log holds it twice
            assert log[p][acked_offset] == seq, (p, seq, acked_offset)
    for p in range(3):
        acked_at = {s: o for o, s in remembered[p].items()}
        in_log = {(p, s, acked_at[s], o) for o, s in log[p].items() if s in acked_at and acked_at[s] != o}
        assert in_log <= totals.duplicates, (p, sorted(in_log - totals.duplicates)[:5])


def test_healthy_cluster_every_acknowledged_record_is_read_back(cluster: KafkaCluster, tmp_path: Path) -> None:
    topic = "canary-healthy"
    canary = Canary(canary_config(cluster, topic), tmp_path / "lakehouse")
    totals = Totals()
    try:
        canary.start()
        layout = describe_layout(admin(cluster), topic, 5.0)  # describe_layout waits on its future
        assert layout is not None
        assert layout.replicas == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
        assert layout.leaders == {0: 1, 1: 2, 2: 3}
        resource = ConfigResource(ResourceType.TOPIC, topic)
        client = admin(cluster)   # kept: a dropped AdminClient fails its futures
        configs = client.describe_configs([resource])[resource].result(timeout=10)
        assert configs["min.insync.replicas"].value == "2"
        run_until(canary, totals, lambda: min(totals.confirmed[p] for p in range(3)) >= 40, 20,
                  "40 records read back on every partition")
    finally:
        canary.stop()
    totals.add(canary.take_interval(wall_ms()))
    assert totals.last is not None
    for p in range(3):
        assert totals.sent[p] == totals.acked[p] > 0, p
        assert totals.failed_total(p) == 0, totals.failed[p]
        assert totals.lost.get(p, set()) == set()
        assert totals.duplicated[p] == 0
        assert totals.confirmed[p] == totals.round_trips[p] == totals.produce_latencies[p] == totals.acked[p]
    assert all(p.records_in_flight == p.records_unconfirmed == 0 for p in totals.last.partitions)
    state = CanaryState.load(canary.save_state())
    assert state is not None
    assert state.instance_id == canary.instance_id
    for p in range(3):
        ledger = state.ledger(p)
        assert ledger.next_seq == totals.sent[p]
        assert ledger.remembered == totals.acked[p]      # read back, still watched for the horizon
        assert ledger.unconfirmed == 0


def test_two_brokers_paused_writes_refused_not_enough_replicas_none_lost(cluster: KafkaCluster,
                                                                        tmp_path: Path) -> None:
    topic = "canary-min-isr"
    canary = Canary(canary_config(cluster, topic), tmp_path / "lakehouse")
    totals = Totals()
    try:
        canary.start()
        run_until(canary, totals, lambda: min(totals.confirmed[p] for p in range(3)) >= 10, 20, "writes flowing")
        cluster.pause(2)
        cluster.pause(3)
        # Partition 0's leader (1) drops its followers from the ISR after 3 s; partitions 1 and 2 move to
        # broker 1 once the controller fences 2 and 3 (9 s): then every write is under min ISR.
        run_until(canary, totals, lambda: all(totals.failed.get(p, Counter())["NOT_ENOUGH_REPLICAS"] >= 3
                                              for p in range(3)), 40, "NOT_ENOUGH_REPLICAS on every partition")
        cluster.resume(2)
        cluster.resume(3)
        acked_at_resume = dict(totals.acked)
        run_until(canary, totals, lambda: leaders(cluster, topic) == {0: 1, 1: 2, 2: 3}
                  and all(totals.acked[p] >= acked_at_resume[p] + 10 for p in range(3)), 60,
                  "leadership back on the preferred leaders and writes acknowledged again")
    finally:
        canary.stop()
    totals.add(canary.take_interval(wall_ms()))
    for p in range(3):
        assert set(totals.failed[p]) <= REFUSALS, totals.failed[p]
        assert totals.sent[p] == totals.acked[p] + totals.failed_total(p)
        assert totals.lost.get(p, set()) == set()
        assert totals.confirmed[p] == totals.acked[p]
    # A paused leader may still append the produce requests queued on its socket when it resumes, after
    # librdkafka gave up on them, bumped its idempotent producer epoch and sent the records again: then the
    # log holds them twice, and the canary must say so.
    check_duplicates(cluster, topic, canary, totals)
    assert totals.preferred_elections[1] >= 1
    assert totals.preferred_elections[2] >= 1


def make_unclean_loss(cluster: KafkaCluster, canaries: list[tuple[Canary, Totals]]) -> int:
    """Brokers 2 and 3 paused, broker 1 acknowledges alone (min ISR 1) on each canary's partition 0, then is killed:
    returns the kill time."""
    def run_all_until(done: Callable[[Totals], bool], what: str) -> None:
        for canary, totals in canaries:
            run_until(canary, totals, lambda totals=totals: done(totals), 20, what)  # type: ignore[misc]

    run_all_until(lambda totals: min(totals.confirmed[p] for p in range(3)) >= 10, "writes flowing")
    cluster.pause(2)
    cluster.pause(3)
    acked_at_pause = {id(totals): totals.acked[0] for _, totals in canaries}
    run_all_until(lambda totals: totals.acked[0] >= acked_at_pause[id(totals)] + 30,
                  "30 records acknowledged by broker 1 alone")
    cluster.kill(1)
    killed_ms = wall_ms()
    time.sleep(1.0)    # the delivery reports of what broker 1 answered before it died
    for canary, totals in canaries:
        totals.add(canary.take_interval(wall_ms()))
    return killed_ms


def check_losses(cluster: KafkaCluster, topic: str, acknowledged: CanaryState, totals: Totals) -> None:
    """The canary reported lost exactly the acknowledged records the partitions' logs no longer hold, and those
    are the records at offsets at or above the new leader's log end when it took over."""
    log = read_log(cluster, topic, [0, 1, 2], acknowledged.instance_id)
    for p in range(3):
        acked = list(acknowledged.ledger(p).acked_records())
        expected = {(o, s) for o, s in acked if log[p].get(o) != s}
        assert totals.lost.get(p, set()) == expected, (p, sorted(expected)[:5], sorted(totals.lost.get(p, set()))[:5])
        if expected:
            new_log_end = min(o for o, _ in expected)
            assert expected == {(o, s) for o, s in acked if o >= new_log_end}
            assert totals.lost_leaders[p] == {1}
    assert totals.lost.get(0), "partition 0 (led by broker 1 alone) lost nothing"


def unclean_new_leader_log_end_checks(cluster: KafkaCluster, canary: Canary, topic: str, totals: Totals,
                                      killed_ms: int) -> None:
    """The record now at the first lost offset of partition 0 was written after broker 1 died (by the new
    leader): that offset is where the new leader's log ended when it took over."""
    first_lost = min(o for o, _ in totals.lost[0])
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "test-canary-check",
                         "enable.auto.commit": False, "logger": quiet_librdkafka_logger()})
    try:
        consumer.assign([TopicPartition(topic, 0, first_lost)])
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "no record at the first lost offset"
            messages = consumer.consume(1, timeout=0.5)
            if messages and messages[0].error() is None:
                break
        record = decode_value(messages[0].value())
        assert messages[0].offset() == first_lost
        assert record is not None and record.instance_id == canary.instance_id
        assert record.produce_ms > killed_ms
    finally:
        consumer.close()


LIVE_TOPIC, RESTART_TOPIC = "canary-unclean", "canary-restart"


@dataclass
class UncleanLoss:
    """One unclean election, seen by two canaries on two topics (partition 0 of each led by broker 1 alone): one
    running throughout, one stopped before the election and started again after it."""

    killed_ms: int
    live: Canary
    live_totals: Totals
    live_acknowledged: CanaryState      # what the running canary had acknowledged when broker 1 died
    restarted: Canary                   # the stopped canary, started again from its saved state
    before_restart: Totals
    after_restart: Totals
    restart_acknowledged: CanaryState   # what the stopped canary had acknowledged (its saved state)


@pytest.fixture(scope="module")
def unclean_loss(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UncleanLoss]:
    lake = tmp_path_factory.mktemp("unclean") / "lakehouse"
    cluster = whole(kafka)
    live_config = canary_config(cluster, LIVE_TOPIC, min_insync_replicas=1, topic_config=UNCLEAN)
    restart_config = canary_config(cluster, RESTART_TOPIC, min_insync_replicas=1, topic_config=UNCLEAN)
    live, first = Canary(live_config, lake), Canary(restart_config, lake)
    live_totals, before, after = Totals(), Totals(), Totals()
    try:
        try:
            live.start()
            first.start()
            killed_ms = make_unclean_loss(cluster, [(live, live_totals), (first, before)])
            live_acknowledged = CanaryState.load(live.save_state())
        finally:
            first.stop(drain_timeout_s=2)
        before.add(first.take_interval(wall_ms()))
        restart_acknowledged = CanaryState.load(first.save_state())
        assert live_acknowledged is not None and restart_acknowledged is not None
        cluster.resume(2)
        cluster.resume(3)
        try:
            # The controller fences broker 1 9 s after its death; with partition 0's ISR [1] (ELR on: ISR empty,
            # ELR [1], dead) the unclean election makes broker 2 its leader, and the canary's next write shows it.
            until_lost_then_drain(live, live_totals, 40, "the loss reported")
        finally:
            live.stop(drain_timeout_s=5)
        live_totals.add(live.take_interval(wall_ms()))
        deadline = time.monotonic() + 40
        while leaders(cluster, RESTART_TOPIC).get(0) not in (2, 3):
            assert time.monotonic() < deadline, "no unclean election of the stopped canary's partition 0"
            time.sleep(0.5)
        second = Canary(restart_config, lake)
        try:
            second.start()
            until_lost_then_drain(second, after, 30, "the loss reported after the restart")
        finally:
            second.stop(drain_timeout_s=5)
        after.add(second.take_interval(wall_ms()))
        yield UncleanLoss(killed_ms, live, live_totals, live_acknowledged, second, before, after,
                          restart_acknowledged)
    finally:
        whole(kafka)   # the module's other tests get every broker back


def test_unclean_election_loses_exactly_the_acked_records_beyond_the_new_leaders_log(
        kafka: KafkaCluster, unclean_loss: UncleanLoss) -> None:
    loss = unclean_loss
    check_losses(kafka, LIVE_TOPIC, loss.live_acknowledged, loss.live_totals)
    unclean_new_leader_log_end_checks(kafka, loss.live, LIVE_TOPIC, loss.live_totals, loss.killed_ms)
    check_duplicates(kafka, LIVE_TOPIC, loss.live, loss.live_totals)


def test_restarted_canary_reports_a_loss_that_happened_while_it_was_stopped(kafka: KafkaCluster,
                                                                            unclean_loss: UncleanLoss) -> None:
    loss = unclean_loss
    assert loss.restarted.instance_id == loss.restart_acknowledged.instance_id, "the saved state reloaded"
    assert all(not lost for lost in loss.before_restart.lost.values()), "nothing lost while broker 1 was the leader"
    check_losses(kafka, RESTART_TOPIC, loss.restart_acknowledged, loss.after_restart)
