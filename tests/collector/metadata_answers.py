"""Metadata answers as a broker encodes them, and connections that give them, for the collector's unit tests."""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata.metadata import MetadataResponse

from collector.cluster_view import METADATA_VERSION


def metadata_body(controller_id: int, isr: list[int], correlation_id: int = 7, leader_epoch: int = 4) -> bytes:
    broker = MetadataResponse.MetadataResponseBroker
    topic = MetadataResponse.MetadataResponseTopic
    part = topic.MetadataResponsePartition
    response = MetadataResponse(
        throttle_time_ms=0, cluster_id="P7D0XCJJMY4TWfb4RZJ36w", controller_id=controller_id,
        brokers=[broker(node_id=b, host="127.0.0.1", port=9000 + b, rack=None if b == 2 else f"rack-{b}")
                 for b in (1, 2, 3)],
        topics=[topic(error_code=0, name="orders", is_internal=False, partitions=[
            part(error_code=0, partition_index=p, leader_id=1, leader_epoch=leader_epoch, replica_nodes=[1, 2, 3],
                 isr_nodes=isr, offline_replicas=[]) for p in range(4)])])
    response.API_VERSION = METADATA_VERSION
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True))


class FakeConnection:
    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies

    def request_bytes(self, message: Any, version: int) -> bytes:
        return self.bodies.pop(0)

    def close(self) -> None:
        pass
