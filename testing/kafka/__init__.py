"""A real Apache Kafka cluster on loopback for the collector's tests, bench and demo (not part of the product)."""

from testing.kafka.cluster import KafkaCluster, KafkaFixtureError

__all__ = ["KafkaCluster", "KafkaFixtureError"]
