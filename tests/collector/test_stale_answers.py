"""A broker whose metadata lags the controller's (resumed after a pause, or asked because the last one went
silent) must not take the collector's view back in time: Kafka's leader epochs never decrease, and validation
quarantines a partition_state row whose epoch does."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from collector.cluster_view import METADATA_VERSION, ClusterReader, ClusterView, Partition
from collector.kafka_wire import BrokerUnavailable
from collector.observed_events import Remembered, hold_stale_partitions, view_events
from tests.collector.metadata_answers import metadata_body


def remembered(leader: int, epoch: int, isr: list[int], hw: int) -> Remembered:
    return Remembered(leader=leader, leader_epoch=epoch, isr=isr, elr=[], replicas=[1, 2, 3], partition_epoch=5,
                      high_watermark=hw, log_start_offset=0)


def view_of(partitions: list[Partition], hws: dict[tuple[str, int], int]) -> ClusterView:
    return ClusterView(ts_ms=1_000, cluster_id="c", brokers={}, not_answering={},
                       partitions={(p.topic, p.partition): p for p in partitions}, high_watermarks=dict(hws),
                       log_end_offsets={}, log_start_offsets={}, elr_enabled=True)


def test_a_partition_answered_at_an_older_leader_epoch_keeps_its_recorded_state() -> None:
    memory = {("t", 0): remembered(leader=2, epoch=3, isr=[2, 3], hw=210),
              ("t", 1): remembered(leader=1, epoch=3, isr=[1, 2, 3], hw=50),
              ("t", 2): remembered(leader=1, epoch=3, isr=[1, 2, 3], hw=70)}
    stale = Partition("t", 0, 1, 2, (1, 2, 3), (1,), (), (3,))        # what broker 1 knew before the election
    same = Partition("t", 1, 1, 3, (1, 2, 3), (1, 2), (), ())           # same epoch, ISR shrunk: news
    newer = Partition("t", 2, 2, 4, (1, 2, 3), (2, 3), (), ())          # a newer election: news
    first = Partition("u", 0, 1, 0, (1, 2, 3), (1, 2, 3), (), ())       # never seen: news
    view = view_of([stale, same, newer, first], {("t", 0): 180, ("t", 1): 55, ("t", 2): 72, ("u", 0): 9})

    assert hold_stale_partitions(view, memory) == [("t", 0)]
    assert view.partitions[("t", 0)] == Partition("t", 0, 2, 3, (1, 2, 3), (2, 3), (), (3,))
    assert ("t", 0) not in view.high_watermarks, "a HW read from the stale answer's leader is dropped"
    assert view.partitions[("t", 1)] is same and view.partitions[("t", 2)] is newer
    assert view.high_watermarks == {("t", 1): 55, ("t", 2): 72, ("u", 0): 9}
    events = view_events(view.ts_ms, view, memory)
    assert sorted((e.partition, e.event_type) for e in events if e.topic == "t") == [
        (1, "isr_shrink"), (2, "election"), (2, "isr_shrink")], "the held partition shows no change"


class Broker:
    """A broker answering Metadata with its own view of the partitions (leader epoch `epoch`), or silent."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.silent = False
        self.asked_for_topics = 0

    def request(self, message: Any, response_class: Any, version: int) -> Any:
        if self.silent or not isinstance(message, MetadataRequest):
            raise BrokerUnavailable("no answer")
        return MetadataResponse.decode(metadata_body(1, [1, 2, 3], leader_epoch=self.epoch),
                                       version=METADATA_VERSION, header=True)

    def request_bytes(self, message: Any, version: int) -> bytes:
        if self.silent:
            raise BrokerUnavailable("no answer")
        self.asked_for_topics += 1
        return metadata_body(1, [1, 2, 3], leader_epoch=self.epoch)

    def close(self) -> None:
        pass


def test_the_broker_that_gave_the_last_view_keeps_giving_it_while_it_answers() -> None:
    """Broker 1 goes silent: broker 2 gives the view. Broker 1 answers again with the epochs it had when it went
    silent: broker 2 still gives the view, and no partition goes back to broker 1's epoch."""
    brokers = {1: Broker(epoch=4), 2: Broker(epoch=4), 3: Broker(epoch=4)}
    reader = ClusterReader(["127.0.0.1:9001"])
    reader.connections = dict(brokers)  # type: ignore[arg-type]
    reader.addresses = {b: f"127.0.0.1:{9000 + b}" for b in brokers}

    assert {p.leader_epoch for p in reader.read(1).partitions.values()} == {4}
    assert [b.asked_for_topics for b in brokers.values()] == [1, 0, 0]
    brokers[1].silent = True
    brokers[2].epoch = brokers[3].epoch = 5
    view = reader.read(2)
    assert sorted(view.not_answering) == [1] and {p.leader_epoch for p in view.partitions.values()} == {5}
    brokers[1].silent = False
    for now in (3, 4):
        assert {p.leader_epoch for p in reader.read(now).partitions.values()} == {5}
    assert [b.asked_for_topics for b in brokers.values()] == [1, 3, 0]
    reader.close()
