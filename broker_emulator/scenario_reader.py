"""Reading scenario YAML: a mapping walker whose errors name the dotted key, durations, and config keys.

Shared by the scenario parser (scenario.py) and the fault parser (scenario_faults.py).
"""

from __future__ import annotations

from typing import Any

from broker_emulator.errors import ScenarioError
from foundation.durations import EXAMPLES, duration_ms


class Reader:
    """Walks a mapping, remembering the dotted path so errors can name the key."""

    def __init__(self, source: str, data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise ScenarioError(source, path or "<root>", data, "expected a mapping")
        self.source, self.data, self.path = source, data, path
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def fail(self, k: str, value: Any, problem: str) -> ScenarioError:
        return ScenarioError(self.source, self.key(k), value, problem)

    def get(self, k: str, default: Any = None) -> Any:
        self.used.add(k)
        return self.data.get(k, default)

    def require(self, k: str) -> Any:
        self.used.add(k)
        if k not in self.data:
            raise self.fail(k, None, "is required")
        return self.data[k]

    def integer(self, k: str, default: int | None = None, *, minimum: int | None = None) -> int:
        v = self.get(k, default) if default is not None else self.require(k)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(k, v, "expected an integer")
        if minimum is not None and v < minimum:
            raise self.fail(k, v, f"must be >= {minimum}")
        return v

    def number(self, k: str, default: float | None = None, *, minimum: float = 0.0) -> float:
        v = self.get(k, default) if default is not None else self.require(k)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(k, v, "expected a number")
        if v < minimum:
            raise self.fail(k, v, f"must be >= {minimum}")
        return float(v)

    def boolean(self, k: str, default: bool | None = None) -> bool | None:
        v = self.get(k, default)
        if v is not None and not isinstance(v, bool):
            raise self.fail(k, v, "expected true or false")
        return v

    def duration(self, k: str, default: int | str | None = None, *, minimum: int = 0) -> int:
        v = self.get(k, default) if default is not None else self.require(k)
        ms = parse_duration_ms(v)
        if ms is None:
            raise self.fail(k, v, f"expected a duration such as {EXAMPLES}, or an integer of ms")
        if ms < minimum:
            raise self.fail(k, v, f"must be at least {minimum} ms")
        return ms

    def child(self, k: str, default: Any = None) -> Reader:
        return Reader(self.source, self.get(k, default if default is not None else {}), self.key(k))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.fail(unknown[0], self.data[unknown[0]], "unknown key")


def parse_duration_ms(v: Any) -> int | None:
    """A duration as written (foundation/durations.py), or an integer of milliseconds as Kafka's `.ms` keys take;
    None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    try:
        return duration_ms(v)
    except ValueError:
        return None


BROKER_KEYS = {
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.min.bytes": "replica_fetch_min_bytes",
    "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
    "replica.socket.timeout.ms": "replica_socket_timeout_ms",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "metadata.propagation.ms": "metadata_propagation_ms",
    "network.latency.ms": "network_latency_ms",
    "request.handling.ms": "request_handling_ms",
    "page.cache.writeback.ms": "page_cache_writeback_ms",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "eligible.leader.replicas.enable": "eligible_leader_replicas_enable",
    "truncation": "truncation",
    "controlled.shutdown.enable": "controlled_shutdown_enable",
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
    "log.recovery.ms": "log_recovery_ms",
    "log.recovery.jitter": "log_recovery_jitter",
}
TOPIC_KEYS = {
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
}
_FRACTION_FIELDS = {"log_recovery_jitter"}
_BOOL_FIELDS = {"unclean_leader_election_enable", "eligible_leader_replicas_enable", "controlled_shutdown_enable",
                "auto_leader_rebalance_enable"}


def read_settings(r: Reader, k: str, mapping: dict[str, str], cls: type, source: str) -> Any:
    raw = r.get(k, {}) or {}
    if not isinstance(raw, dict):
        raise r.fail(k, raw, "expected a mapping of configuration keys")
    values: dict[str, Any] = {}
    for key, v in raw.items():
        if key not in mapping:
            raise ScenarioError(source, r.key(f"{k}.{key}"), v, f"unknown configuration key; known: {sorted(mapping)}")
        attr = mapping[key]
        if attr == "truncation":
            if v not in ("epoch", "kip101", "high_watermark"):
                raise ScenarioError(source, r.key(f"{k}.{key}"), v, "expected 'epoch', 'kip101' or 'high_watermark'")
        elif attr in _BOOL_FIELDS:
            if not isinstance(v, bool):
                raise ScenarioError(source, r.key(f"{k}.{key}"), v, "expected true or false")
        elif attr in _FRACTION_FIELDS:
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1:
                raise ScenarioError(source, r.key(f"{k}.{key}"), v, "expected a fraction from 0 up to (not) 1")
            v = float(v)
        else:
            ms = parse_duration_ms(v) if attr.endswith("_ms") else v
            if isinstance(ms, bool) or not isinstance(ms, int) or ms < (-1 if "retention" in attr else 0):
                raise ScenarioError(source, r.key(f"{k}.{key}"), v, "expected a non-negative integer")
            v = ms
        values[attr] = v
    return cls(**values)
