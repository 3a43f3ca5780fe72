"""What a canary partition's log holds, read by a plain consumer: the tests' oracle, independent of the canary's
own evidence rules."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from collector.canary_state import decode_value
from collector.canary_topic import quiet_librdkafka_logger
from testing.kafka import KafkaCluster


def read_log(cluster: KafkaCluster, topic: str, partitions: list[int], instance_id: str) -> dict[int, dict[int, int]]:
    """Offset -> seq of the canary's records in each partition, from the start of its log to its high watermark."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "test-canary-oracle",
                         "enable.auto.commit": False, "logger": quiet_librdkafka_logger()})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        log: dict[int, dict[int, int]] = {p: {} for p in partitions}
        deadline = time.monotonic() + 30
        while any(ends[p] > 0 and max(log[p], default=-1) < ends[p] - 1 for p in partitions):
            assert time.monotonic() < deadline, f"could not read {topic} to {ends}"
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                record = decode_value(message.value())
                p, offset = message.partition(), message.offset()
                assert p is not None and offset is not None
                log[p][offset] = record.seq if record is not None and record.instance_id == instance_id else -1
        return log
    finally:
        consumer.close()
