"""The collector's shortcuts (bench/collect.py, docs/benchmarks.md) give what the long way gives."""

from __future__ import annotations

from dataclasses import asdict, fields
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.metadata import MetadataResponse

from collector.canary_feed import CanaryFeed
from collector.cluster_view import (
    METADATA_VERSION,
    Broker,
    ClusterReader,
    ClusterView,
    Partition,
    TopicConfig,
)
from collector.kafka_wire import PreEncoded
from collector.metadata_key import metadata_key, metadata_key_checked
from collector.observed_events import (
    Event,
    Remembered,
    broker_events,
    controlled_shutdown_silence_ms,
    partition_events,
    shutting_down_brokers,
    view_events,
)
from tests.collector.metadata_answers import FakeConnection, metadata_body


def list_offsets(partitions: int) -> ListOffsetsRequest:
    lt = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-2, isolation_level=0, topics=[
        lt(name=f"t{t}", partitions=[lt.ListOffsetsPartition(partition_index=p, timestamp=-1)
                                     for p in range(partitions)])
        for t in range(3)])


@pytest.mark.parametrize("version", [1, 5, 8])
def test_a_pre_encoded_request_sends_the_bytes_the_message_encodes_to(version: int) -> None:
    pre = PreEncoded(list_offsets(50), version)
    for correlation_id in (1, 2, 70_000):
        message = list_offsets(50)
        message.API_VERSION = version
        message.with_header(correlation_id=correlation_id, client_id="isrwatch-collect")
        pre.API_VERSION = version
        pre.with_header(correlation_id=correlation_id, client_id="isrwatch-collect")
        assert pre.encode(header=True, framed=True) == bytes(message.encode(header=True, framed=True))


def test_metadata_answers_differing_only_in_correlation_and_controller_id_share_a_key() -> None:
    a, b = metadata_body(1, [1, 2, 3], correlation_id=7), metadata_body(3, [1, 2, 3], correlation_id=8)
    assert a != b and metadata_key(a) == metadata_key(b)
    assert metadata_key(metadata_body(1, [1, 2])) != metadata_key(a), "an ISR change is a new answer"
    for body in (a, b):
        assert metadata_key_checked(body, MetadataResponse.decode(body, version=METADATA_VERSION, header=True))


def test_a_metadata_key_that_does_not_match_the_decoded_answer_is_refused() -> None:
    body = metadata_body(2, [1, 2, 3])
    meta = MetadataResponse.decode(body, version=METADATA_VERSION, header=True)
    meta.controller_id = 3
    assert not metadata_key_checked(body, meta)
    assert metadata_key(body[:20]) == body[4:20], "a truncated answer is its own key"


def test_the_reader_reuses_a_metadata_answer_only_when_it_is_the_same() -> None:
    reader = ClusterReader(["127.0.0.1:1"])
    reader.connections = {1: FakeConnection([metadata_body(1, [1, 2, 3]), metadata_body(2, [1, 2, 3], 9),
                                             metadata_body(2, [1, 3], 10)])}  # type: ignore[dict-item]
    first = reader._metadata(1, True)
    again = reader._metadata(1, True)
    changed = reader._metadata(1, True)
    assert again is first
    assert changed is not first and [p.isr_nodes for p in changed.topics[0].partitions] == [[1, 3]] * 4
    partitions = reader._partitions_of(changed)
    assert partitions == ClusterReader._partitions(changed)
    assert reader._partitions_of(changed) == partitions and reader._partitions_of(changed) is not partitions
    reader.close()


def test_eligible_leader_replicas_are_asked_only_where_a_partition_can_have_them() -> None:
    asked: list[Any] = []

    class Answers:
        def request(self, message: Any, response_class: Any, version: int) -> Any:
            asked.append([t.name for t in message.topics])
            raise_unavailable()

        def close(self) -> None:
            pass

    def raise_unavailable() -> None:
        from collector.kafka_wire import BrokerUnavailable

        raise BrokerUnavailable("no answer")

    reader = ClusterReader(["127.0.0.1:1"])
    reader.connections = {1: Answers()}  # type: ignore[dict-item]
    config = TopicConfig(partitions=1, replication_factor=3, min_insync_replicas=2,
                         unclean_leader_election_enable=False, segment_bytes=1, retention_ms=1, flush_messages=1)
    reader.topic_configs = {"whole": config, "shrunk": config, "capped": TopicConfig(**{**asdict(config),
                                                                                          "min_insync_replicas": 4})}
    whole = Partition("whole", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), ())
    parts = {("whole", 0): whole, ("capped", 0): Partition("capped", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), ()),
             ("shrunk", 0): Partition("shrunk", 0, 1, 0, (1, 2, 3), (1,), (), ()),
             ("unknown", 0): Partition("unknown", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), ())}
    assert reader._with_elr(1, parts) == parts
    assert asked == [["capped", "shrunk", "unknown"]]
    asked.clear()
    assert reader._with_elr(1, {("whole", 0): whole}) == {("whole", 0): whole} and asked == []
    reader.close()


def test_remembered_to_json_is_asdict() -> None:
    r = Remembered(leader=1, leader_epoch=2, isr=[1, 2], elr=[3], replicas=[1, 2, 3], partition_epoch=4,
                   high_watermark=5, log_start_offset=6, recovering=True)
    out = r.to_json()
    assert out == asdict(r) and list(out) == [f.name for f in fields(Remembered)]
    out["isr"].append(9)
    assert r.isr == [1, 2], "the lists are copies"
    assert Remembered.from_json(r.to_json()) == r


def test_an_unchanged_partition_has_no_events_and_a_reordered_isr_is_still_compared() -> None:
    before = Remembered(leader=1, leader_epoch=2, isr=[1, 2, 3], elr=[], replicas=[1, 2, 3], partition_epoch=0,
                        high_watermark=10, log_start_offset=0)
    same = Partition("t", 0, 1, 2, (1, 2, 3), (1, 2, 3), (), ())
    assert partition_events(1, ("t", 0), before, same, 10) == []
    assert partition_events(1, ("t", 0), before, Partition("t", 0, 1, 2, (1, 2, 3), (3, 1, 2), (), ()), 10) == []
    shrunk = partition_events(1, ("t", 0), before, Partition("t", 0, 1, 2, (1, 2, 3), (1, 2), (), ()), 10)
    assert [(e.event_type, e.detail["removed"]) for e in shrunk] == [("isr_shrink", [3])]


def test_a_leader_from_outside_the_previous_isr_is_unclean_only_when_no_previous_member_is_left() -> None:
    """A rolling restart read at a 2 s interval: ISR [2, 3] (leader 2), then broker 1 rejoined and broker 2 shut down
    between two views, leader 1 with ISR [1, 3]: a clean election (3, of the previous ISR, is still in it). With no
    previous ISR member left it is unclean, even when the new leader took a follower back before the next view;
    an ELR member is `elr`."""
    before = Remembered(leader=2, leader_epoch=15, isr=[2, 3], elr=[], replicas=[1, 2, 3], partition_epoch=0,
                        high_watermark=10, log_start_offset=0)

    def elected(isr: tuple[int, ...], remembered: Remembered = before) -> list[tuple[str, str]]:
        got = partition_events(1, ("t", 0), remembered, Partition("t", 0, 1, 16, (1, 2, 3), isr, (), ()), 10)
        return [(e.event_type, e.cause) for e in got if e.event_type == "election"]

    assert elected((1, 3)) == [("election", "clean")]
    assert elected((1,)) == [("election", "unclean")]
    assert elected((1, 3), Remembered(**{**before.to_json(), "isr": [2]})) == [("election", "unclean")]
    from_elr = Remembered(**{**before.to_json(), "isr": [2], "elr": [1]})
    assert elected((1,), from_elr) == [("election", "elr")]


def test_a_replica_whose_broker_left_the_metadata_was_removed_by_the_controller_not_its_leader() -> None:
    """Broker 3 fenced (no longer listed) and broker 2 dropped for lag at once: the controller's removal is
    isr_change_controller (cause fenced, as the emulator writes it), the leader's an isr_shrink; neither when the
    view lists no brokers (unknown)."""
    before = Remembered(leader=1, leader_epoch=2, isr=[1, 2, 3], elr=[], replicas=[1, 2, 3], partition_epoch=0,
                        high_watermark=10, log_start_offset=0)
    now = Partition("t", 0, 1, 2, (1, 2, 3), (1,), (), ())
    got = partition_events(1, ("t", 0), before, now, 10, registered={1, 2})
    assert [(e.event_type, e.cause, e.detail) for e in got] == [
        ("isr_change_controller", "fenced", {"previous_isr": [1, 2, 3], "isr": [1, 2]}),
        ("isr_shrink", "observed", {"removed": [2], "isr": [1]})]
    assert [e.event_type for e in partition_events(1, ("t", 0), before, now, 10)] == ["isr_shrink"]



def test_the_describe_topic_partitions_answer_replaces_the_older_metadata_of_a_partition() -> None:
    """Metadata said leader 3, ISR [1, 3]; by the DescribeTopicPartitions answer broker 3 had left the ISR (ISR [1],
    ELR [3], leader 1): the partition is the latter, whole, never ISR [1, 3] with ELR [3]."""
    from kafka.protocol.admin.topics import DescribeTopicPartitionsResponse

    topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
    part = topic.DescribeTopicPartitionsResponsePartition
    answer = DescribeTopicPartitionsResponse(throttle_time_ms=0, next_cursor=None, topics=[
        topic(error_code=0, name="orders", is_internal=False, partitions=[
            part(error_code=0, partition_index=0, leader_id=1, leader_epoch=5, replica_nodes=[2, 3, 1], isr_nodes=[1],
                 eligible_leader_replicas=[3], last_known_elr=None, offline_replicas=[]),
            part(error_code=9, partition_index=1, leader_id=-1, leader_epoch=-1, replica_nodes=[], isr_nodes=[],
                 eligible_leader_replicas=None, last_known_elr=None, offline_replicas=[])])])

    class Answers:
        def request(self, message: Any, response_class: Any, version: int) -> Any:
            return answer

        def close(self) -> None:
            pass

    reader = ClusterReader(["127.0.0.1:1"])
    reader.connections = {1: Answers()}  # type: ignore[dict-item]
    older = {("orders", 0): Partition("orders", 0, 3, 4, (2, 3, 1), (1, 3), (), ()),
             ("orders", 1): Partition("orders", 1, 3, 4, (2, 3, 1), (1, 3), (), ())}
    view = reader._with_elr(1, older)
    assert view[("orders", 0)] == Partition("orders", 0, 1, 5, (2, 3, 1), (1,), (3,), ())
    assert view[("orders", 1)] == older[("orders", 1)], "a partition the answer has an error for keeps its metadata"
    reader.close()


def test_a_broker_that_leaves_the_metadata_while_still_answering_stopped_with_a_controlled_shutdown() -> None:
    """Broker 2 answered 1 s before it left the metadata (a controlled shutdown: Kafka moved its leaderships first),
    broker 3 had been silent 9 s (crashed or paused, fenced by its session timeout): only broker 2's departure is a
    controlled shutdown, and both are fenced."""
    got = broker_events(20_000, {1, 2, 3}, {1}, {3: "timed out"}, {3: "timed out"},
                        last_answered_ms={1: 20_000, 2: 19_000, 3: 11_000}, shutdown_silence_ms=3_000)
    assert [(e.event_type, e.cause, e.broker_id) for e in got] == [
        ("broker_state", "controlled_shutdown", 2), ("fenced", "left_metadata", 2), ("fenced", "left_metadata", 3)]
    assert [controlled_shutdown_silence_ms(ms) for ms in (500, 1_000, 2_000, 10_000)] == [3_000, 3_000, 5_000, 6_000]


def test_a_broker_whose_leaderships_moved_and_that_left_every_isr_while_answering_is_shutting_down() -> None:
    """Kafka begins a controlled shutdown of broker 2 by moving its leaderships and taking it out of every ISR, ~4 s
    before it leaves the metadata. Seen in one view: broker 2 is shutting down from that view on (its removals are
    the controller's, cause controlled_shutdown; one broker_state event, none again when it leaves). The same view
    with broker 2 not answering (stalled: its leaders dropped it), or still in one ISR, or still leading, is not."""
    def remembered(leader: int, isr: list[int]) -> Remembered:
        return Remembered(leader=leader, leader_epoch=1, isr=isr, elr=[], replicas=[1, 2, 3], partition_epoch=1,
                          high_watermark=10, log_start_offset=0)

    memory = {("t", 0): remembered(2, [1, 2, 3]), ("t", 1): remembered(1, [1, 2, 3]), ("t", 2): remembered(3, [3, 1])}
    brokers = {b: Broker(b, f"127.0.0.1:{9090 + b}", None) for b in (1, 2, 3)}

    def view(parts: dict[int, tuple[int, tuple[int, ...]]], not_answering: dict[int, str] | None = None) -> ClusterView:
        return ClusterView(5_000, "c", brokers, not_answering or {},
                           {("t", p): Partition("t", p, leader, 2, (1, 2, 3), isr, (), ()) for p, (leader, isr)
                            in parts.items()}, {}, {}, {}, False)

    shutdown = view({0: (1, (1, 3)), 1: (1, (1, 3)), 2: (3, (3, 1))})
    assert shutting_down_brokers(shutdown, memory) == {2}
    events = view_events(5_000, shutdown, memory, shutting_down_brokers(shutdown, memory))
    assert sorted((e.event_type, e.cause, e.partition) for e in events) == [
        ("election", "clean", 0), ("isr_change_controller", "controlled_shutdown", 0),
        ("isr_change_controller", "controlled_shutdown", 1)], "no isr_shrink: no leader dropped it (no thrash)"
    assert shutting_down_brokers(view({0: (1, (1, 3)), 1: (1, (1, 3)), 2: (3, (3, 1))}, {2: "timed out"}),
                                 memory) == set()
    assert shutting_down_brokers(view({0: (1, (1, 3)), 1: (1, (1, 2, 3)), 2: (3, (3, 1))}), memory) == set()
    assert shutting_down_brokers(view({0: (2, (2, 3)), 1: (1, (1, 3)), 2: (3, (3, 1))}), memory) == set()

    began = broker_events(5_000, {1, 2, 3}, {1, 2, 3}, {}, {}, {1: 5_000, 2: 5_000, 3: 5_000}, 3_000,
                          frozenset({2}), frozenset())
    assert [(e.event_type, e.cause, e.broker_id) for e in began] == [("broker_state", "controlled_shutdown", 2)]
    left = broker_events(9_000, {1, 2, 3}, {1, 3}, {}, {}, {1: 9_000, 2: 8_000, 3: 9_000}, 3_000,
                         frozenset(), frozenset({2}))
    assert [(e.event_type, e.cause, e.broker_id) for e in left] == [("fenced", "left_metadata", 2)]


class RescanRecorder:
    """The part of collector.canary.Canary that CanaryFeed.observe uses."""

    def __init__(self, topic: str) -> None:
        self.config = SimpleNamespace(topic=topic)
        self.rescanned: list[int] = []

    def rescan(self, partition: int) -> None:
        self.rescanned.append(partition)


def test_the_canary_reads_a_partition_again_after_any_election_of_its_topic() -> None:
    """A reader slower than the new leader's first writes finds its position valid again and never looks back: every
    election the collector sees on a canary partition (clean ones too: seen late, an unclean election may look clean)
    has the canary read it again from its oldest remembered record."""
    canary = RescanRecorder("__isrwatch_canary")
    feed = CanaryFeed(canary)  # type: ignore[arg-type]  # only config.topic and rescan are used
    feed.observe([Event(1, "election", "clean", topic="__isrwatch_canary", partition=0),
                  Event(1, "election", "unclean", topic="__isrwatch_canary", partition=2),
                  Event(1, "truncation", "new_leader_log_shorter", topic="__isrwatch_canary", partition=1),
                  Event(1, "isr_shrink", "lagging", topic="__isrwatch_canary", partition=0),
                  Event(1, "election", "unclean", topic="orders", partition=0)])
    assert canary.rescanned == [0, 2, 1]
    assert {p: [e.cause for e in events] for p, events in feed.history.items()} == {
        2: ["unclean"], 1: ["new_leader_log_shorter"]}
