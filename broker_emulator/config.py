"""Typed configuration of a simulated cluster: brokers, topics, producers, consumers.

Names follow Kafka's configuration keys (snake_case, units last). Defaults are Kafka 4.x defaults
unless a comment says why the emulator differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class BrokerConfig:
    """Cluster-wide broker and controller settings (one value for every broker)."""

    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_min_bytes: int = 1   # a leader holds a follower's fetch until this much is new (or wait.max)
    replica_fetch_backoff_ms: int = 1_000
    replica_socket_timeout_ms: int = 30_000
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 2_000
    # Not a Kafka key: how long a committed metadata change takes to reach brokers and clients.
    metadata_propagation_ms: int = 20
    # Not a Kafka key: one-way latency of every request between two brokers or a client and a broker.
    network_latency_ms: int = 1
    # Not a Kafka key: how long a broker spends on a produce or fetch request, and a follower on a fetch answer,
    # before acting on it (RequestMetrics' queue and local time). 0 by default: the emulated broker is as fast as
    # the network. A loaded machine's brokers are not: bench/fidelity.py sets it from the real producer's
    # measured round trip.
    request_handling_ms: int = 0
    # Not a Kafka key: the OS writes dirty page-cache pages back after this long (Linux dirty_expire).
    page_cache_writeback_ms: int = 30_000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    eligible_leader_replicas_enable: bool = True
    # "epoch" (KIP-101/279, Kafka today), "kip101" (KIP-101 alone, Kafka 0.11 to 1.x: the follower truncates to
    # the leader's end offset for its own last epoch, which can leave logs diverged, as KIP-279 shows) or
    # "high_watermark" (pre-KIP-101, loses data on leader changes)
    truncation: str = "epoch"
    controlled_shutdown_enable: bool = True
    # Leaders move back to their preferred replica by themselves (QuorumController's
    # maybeBalancePartitionLeaders), checked leader.imbalance.check.interval.seconds after an imbalance appears.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    # How long a restarted broker takes (JVM start, log recovery) before it registers again: drawn from the seed
    # in log_recovery_ms * (1 ± log_recovery_jitter). Real Kafka 4.3 brokers on loopback with small logs
    # registered 3.6-10.7 s after their restart (issue 23), and were back in every ISR 8.6-13.7 s after it in
    # twelve of bench/fidelity.py's runs (mean 10.3 s): 9.6 s ± 30 % (6.7-12.5 s; the catch-up adds ~0.7 s).
    log_recovery_ms: int = 9_600
    log_recovery_jitter: float = 0.3


@dataclass(frozen=True)
class TopicConfig:
    """Per-topic settings; `None` fields inherit the broker default."""

    min_insync_replicas: int | None = None
    unclean_leader_election_enable: bool | None = None
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    config: TopicConfig = field(default_factory=TopicConfig)
    # "striped" (rack-aware, as StripedReplicaPlacer) or an explicit assignment per partition
    assignment: tuple[tuple[int, ...], ...] | None = None
    created_at_ms: int = 0


@dataclass(frozen=True)
class ProducerSpec:
    name: str
    topic: str
    acks: int  # -1 (all), 0 or 1
    rate_per_s: float
    record_bytes: int = 512
    linger_ms: int = 5
    batch_size: int = 16_384
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    max_in_flight: int = 5             # max.in.flight.requests.per.connection (5 with idempotence)
    socket_timeout_ms: int = 60_000    # librdkafka: a request unanswered this long fails its connection
    metadata_max_age_ms: int = 300_000  # the client refreshes its metadata at least this often
    idempotent: bool = False           # enable.idempotence (librdkafka's default; the Java client's is true)
    # librdkafka's sticky.partitioning.linger.ms: keyless records stick to one partition this long. None: the Java
    # client's adaptive sticky partitioner, which moves on after a full batch.
    sticky_linger_ms: int | None = None
    start_ms: int = 0
    stop_ms: int | None = None


@dataclass(frozen=True)
class ConsumerSpec:
    group: str
    topic: str
    rate_per_s: float | None = None  # records/s the group can process; None: keeps up with the HW


@dataclass(frozen=True)
class Broker:
    broker_id: int
    rack: str | None


@dataclass(frozen=True)
class ClusterSpec:
    brokers: tuple[Broker, ...]
    config: BrokerConfig = field(default_factory=BrokerConfig)

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(b.broker_id for b in self.brokers)

    def rack_of(self, broker_id: int) -> str | None:
        for b in self.brokers:
            if b.broker_id == broker_id:
                return b.rack
        raise KeyError(broker_id)


def acks_label(acks: int) -> str:
    return "all" if acks == -1 else str(acks)
