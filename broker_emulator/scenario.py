"""Scenario files (YAML in conf/scenarios/): parse and validate into a `Scenario` value.

Every problem raises `ScenarioError` naming the file, the dotted key and the value, before anything
is simulated or written.
"""

from __future__ import annotations

import dataclasses
import re
from calendar import timegm
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from broker_emulator.config import (
    Broker,
    BrokerConfig,
    ClusterSpec,
    ConsumerSpec,
    ProducerSpec,
    TopicConfig,
    TopicSpec,
)
from broker_emulator.errors import ScenarioError
from broker_emulator.faults import CONTROLLER, FAULT_KINDS, Fault, SwarmProfile

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, None: 1}


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    seed: int
    duration_ms: int
    metric_interval_ms: int
    partition_state_interval_ms: int
    start_epoch_ms: int
    cluster: ClusterSpec
    topics: tuple[TopicSpec, ...]
    producers: tuple[ProducerSpec, ...]
    consumers: tuple[ConsumerSpec, ...]
    faults: tuple[Fault, ...]
    swarm: SwarmProfile | None = None
    description: str = ""
    flush_every_intervals: int = 60
    expect: dict[str, Any] = field(default_factory=dict)

    def with_overrides(self, *, seed: int | None = None, duration_ms: int | None = None) -> Scenario:
        changes: dict[str, Any] = {}
        if seed is not None:
            changes["seed"] = seed
        if duration_ms is not None:
            changes["duration_ms"] = duration_ms
        return dataclasses.replace(self, **changes)


class _Reader:
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
            raise self.fail(k, v, "expected a duration such as 500ms, 30s, 5m, 2h or an integer of ms")
        if ms < minimum:
            raise self.fail(k, v, f"must be at least {minimum} ms")
        return ms

    def child(self, k: str, default: Any = None) -> _Reader:
        return _Reader(self.source, self.get(k, default if default is not None else {}), self.key(k))

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.fail(unknown[0], self.data[unknown[0]], "unknown key")


def parse_duration_ms(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        m = _DURATION.match(v)
        if m:
            return int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    return None


_BROKER_KEYS = {
    "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
    "replica.fetch.max.bytes": "replica_fetch_max_bytes",
    "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
    "replica.socket.timeout.ms": "replica_socket_timeout_ms",
    "broker.session.timeout.ms": "broker_session_timeout_ms",
    "broker.heartbeat.interval.ms": "broker_heartbeat_interval_ms",
    "metadata.propagation.ms": "metadata_propagation_ms",
    "network.latency.ms": "network_latency_ms",
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
_TOPIC_KEYS = {
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


def _settings(r: _Reader, k: str, mapping: dict[str, str], cls: type, source: str) -> Any:
    raw = r.get(k, {}) or {}
    if not isinstance(raw, dict):
        raise r.fail(k, raw, "expected a mapping of configuration keys")
    values: dict[str, Any] = {}
    for key, v in raw.items():
        if key not in mapping:
            raise ScenarioError(source, r.key(f"{k}.{key}"), v, f"unknown configuration key; known: {sorted(mapping)}")
        attr = mapping[key]
        if attr == "truncation":
            if v not in ("epoch", "high_watermark"):
                raise ScenarioError(source, r.key(f"{k}.{key}"), v, "expected 'epoch' or 'high_watermark'")
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


def _acks(r: _Reader, k: str) -> int:
    v = r.get(k, "all")
    table = {"all": -1, "-1": -1, -1: -1, 0: 0, "0": 0, 1: 1, "1": 1}
    if isinstance(v, bool) or v not in table:
        raise r.fail(k, v, "INVALID_REQUIRED_ACKS: acks must be all, -1, 0 or 1")
    return table[v]


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ScenarioError(source, "<file>", str(path), f"cannot read: {e.strerror}") from e
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(source, "<yaml>", getattr(e, "problem_mark", ""), f"not valid YAML: {e}") from e
    return parse_scenario(data, source)


def parse_scenario(data: Any, source: str) -> Scenario:
    r = _Reader(source, data, "")
    name = r.require("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise r.fail("name", name, "expected letters, digits, '.', '_' or '-'")
    description = r.get("description", "")
    seed = r.integer("seed", 1)
    duration_ms = r.duration("duration", minimum=1)
    metric_interval_ms = r.duration("metric_interval", "1s", minimum=1)
    ps_interval_ms = r.duration("partition_state_interval", metric_interval_ms, minimum=1)
    if ps_interval_ms % metric_interval_ms:
        raise r.fail("partition_state_interval", r.get("partition_state_interval"),
                     "must be a multiple of metric_interval")
    flush_every = r.integer("flush_every_intervals", 60, minimum=1)
    start = r.get("start_time", "2026-01-01T00:00:00Z")
    start_epoch_ms = _parse_utc(source, start)
    cluster = _cluster(r.child("cluster"), source)
    topics = _topics(r, source, cluster)
    producers, consumers = _workload(r.child("workload"), source, {t.name for t in topics})
    faults = _faults(r, source, cluster, {t.name: t for t in topics})
    swarm = None
    if r.get("swarm") is not None:
        s = r.child("swarm")
        swarm = SwarmProfile(faults=s.integer("faults", minimum=0), start_ms=s.duration("from", "10s"),
                             heal_ms=s.duration("heal_by", max(duration_ms - 60_000, 1)),
                             max_duration_ms=s.duration("max_duration", "40s", minimum=1_001))
        kinds = s.get("kinds")
        if kinds is not None:
            bad = [k for k in kinds if k not in swarm.kinds]
            if bad or not kinds:
                raise s.fail("kinds", kinds, f"choose from {list(swarm.kinds)}")
            swarm = dataclasses.replace(swarm, kinds=tuple(kinds))
        s.finish()
        if swarm.heal_ms > duration_ms or swarm.start_ms >= swarm.heal_ms:
            raise ScenarioError(source, "swarm.heal_by", swarm.heal_ms, "must be after swarm.from and within duration")
    expect = r.get("expect", {}) or {}
    r.finish()
    return Scenario(name=name, source=source, seed=seed, duration_ms=duration_ms,
                    metric_interval_ms=metric_interval_ms, partition_state_interval_ms=ps_interval_ms,
                    start_epoch_ms=start_epoch_ms, cluster=cluster, topics=topics, producers=producers,
                    consumers=consumers, faults=faults, swarm=swarm, description=str(description),
                    flush_every_intervals=flush_every, expect=dict(expect))


def _parse_utc(source: str, v: Any) -> int:
    if not isinstance(v, str) or not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", v):
        raise ScenarioError(source, "start_time", v, "expected UTC time like 2026-01-01T00:00:00Z")
    import time as _time  # strptime only parses text; no clock is read

    return timegm(_time.strptime(v, "%Y-%m-%dT%H:%M:%SZ")) * 1000


def _cluster(r: _Reader, source: str) -> ClusterSpec:
    n = r.integer("brokers", minimum=1)
    racks = r.get("racks")
    if racks is not None and (not isinstance(racks, list) or not racks or not all(isinstance(x, str) for x in racks)):
        raise r.fail("racks", racks, "expected a non-empty list of rack names")
    brokers = tuple(Broker(i, racks[(i - 1) % len(racks)] if racks else None) for i in range(1, n + 1))
    config = _settings(r, "config", _BROKER_KEYS, BrokerConfig, source)
    # Kafka's own rule (KafkaConfig.validateValues): at most replica.lag.time.max.ms, equal allowed.
    if config.replica_fetch_wait_max_ms > config.replica_lag_time_max_ms:
        raise ScenarioError(source, "cluster.config.replica.fetch.wait.max.ms", config.replica_fetch_wait_max_ms,
                            "must be at most replica.lag.time.max.ms, or every idle follower would drop out of "
                            "the ISR")
    if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms:
        raise ScenarioError(source, "cluster.config.broker.heartbeat.interval.ms",
                            config.broker_heartbeat_interval_ms, "must be below broker.session.timeout.ms")
    r.finish()
    return ClusterSpec(brokers, config)


def _topics(r: _Reader, source: str, cluster: ClusterSpec) -> tuple[TopicSpec, ...]:
    raw = r.require("topics")
    if not isinstance(raw, list) or not raw:
        raise r.fail("topics", raw, "expected a non-empty list")
    out: list[TopicSpec] = []
    for i, item in enumerate(raw):
        t = _Reader(source, item, f"topics[{i}]")
        name = t.require("name")
        if not isinstance(name, str) or not name or any(o.name == name for o in out):
            raise t.fail("name", name, "expected a unique topic name")
        rf = t.integer("replication.factor", minimum=1)
        if rf > len(cluster.brokers):
            raise t.fail("replication.factor", rf,
                         f"INVALID_REPLICATION_FACTOR: only {len(cluster.brokers)} brokers")
        parts = t.integer("partitions", minimum=1)
        config = _settings(t, "config", _TOPIC_KEYS, TopicConfig, source)
        if config.segment_bytes < 14:
            raise t.fail("config.segment.bytes", config.segment_bytes, "must be at least 14")
        assignment = t.get("assignment")
        if assignment is not None:
            assignment = _assignment(t, assignment, parts, rf, cluster)
        t.finish()
        out.append(TopicSpec(name, parts, rf, config, assignment))
    return tuple(out)


def _assignment(t: _Reader, raw: Any, parts: int, rf: int, cluster: ClusterSpec) -> tuple[tuple[int, ...], ...]:
    if not isinstance(raw, list) or len(raw) != parts:
        raise t.fail("assignment", raw, f"expected one replica list per partition ({parts})")
    out = []
    for p, reps in enumerate(raw):
        if (not isinstance(reps, list) or len(reps) != rf or len(set(reps)) != rf
                or any(b not in cluster.broker_ids for b in reps)):
            raise t.fail(f"assignment[{p}]", reps, f"expected {rf} distinct broker ids from {list(cluster.broker_ids)}")
        out.append(tuple(reps))
    return tuple(out)


def _workload(r: _Reader, source: str, topics: set[str]) -> tuple[tuple[ProducerSpec, ...], tuple[ConsumerSpec, ...]]:
    producers: list[ProducerSpec] = []
    for i, item in enumerate(r.get("producers", []) or []):
        p = _Reader(source, item, f"workload.producers[{i}]")
        topic = p.require("topic")
        if topic not in topics:
            raise p.fail("topic", topic, f"unknown topic; known: {sorted(topics)}")
        spec = ProducerSpec(
            name=str(p.get("name", f"producer-{i}")), topic=topic, acks=_acks(p, "acks"),
            rate_per_s=p.number("rate", minimum=0.0), record_bytes=p.integer("record.bytes", 512, minimum=1),
            linger_ms=p.duration("linger.ms", 5, minimum=1), batch_size=p.integer("batch.size", 16_384, minimum=1),
            request_timeout_ms=p.duration("request.timeout.ms", 30_000, minimum=1),
            delivery_timeout_ms=p.duration("delivery.timeout.ms", 120_000, minimum=1),
            retries=p.integer("retries", 2_147_483_647, minimum=0),
            retry_backoff_ms=p.duration("retry.backoff.ms", 100, minimum=1),
            retry_backoff_max_ms=p.duration("retry.backoff.max.ms", 1_000, minimum=1),
            start_ms=p.duration("start", 0), stop_ms=p.duration("stop") if p.get("stop") is not None else None,
        )
        p.finish()
        producers.append(spec)
    consumers: list[ConsumerSpec] = []
    for i, item in enumerate(r.get("consumers", []) or []):
        c = _Reader(source, item, f"workload.consumers[{i}]")
        topic = c.require("topic")
        if topic not in topics:
            raise c.fail("topic", topic, f"unknown topic; known: {sorted(topics)}")
        rate = c.number("rate", minimum=0.0) if c.get("rate") is not None else None
        consumers.append(ConsumerSpec(str(c.get("group", f"group-{i}")), topic, rate))
        c.finish()
    r.finish()
    return tuple(producers), tuple(consumers)


def _brokers(f: _Reader, cluster: ClusterSpec, required: bool = True) -> tuple[int, ...]:
    raw = f.get("brokers")
    key = "brokers"
    if raw is None and f.get("broker") is not None:
        raw, key = [f.get("broker")], "broker"
    if raw == "all":
        return cluster.broker_ids
    if raw is None:
        if required:
            raise f.fail("broker", None, "is required")
        return ()
    if not isinstance(raw, list) or not raw or any(b not in cluster.broker_ids for b in raw):
        raise f.fail(key, f.get(key), f"unknown fault target; brokers are {list(cluster.broker_ids)}")
    return tuple(raw)


def _faults(r: _Reader, source: str, cluster: ClusterSpec, topics: dict[str, TopicSpec]) -> tuple[Fault, ...]:
    out: list[Fault] = []
    for i, item in enumerate(r.get("faults", []) or []):
        f = _Reader(source, item, f"faults[{i}]")
        kind = f.require("kind")
        if kind not in FAULT_KINDS:
            raise f.fail("kind", kind, f"unknown fault kind; known: {sorted(FAULT_KINDS)}")
        allowed = FAULT_KINDS[kind] | {"kind", "at"}
        for k in item:
            if k not in allowed:
                raise f.fail(k, item[k], f"not a key of a {kind} fault; allowed: {sorted(allowed)}")
        at = f.duration("at")
        duration = f.duration("duration") if f.get("duration") is not None else None
        fault = Fault(at, kind, duration_ms=duration)
        if kind in ("crash", "restart", "power_loss", "pause", "resume", "slow_follower",
                    "controlled_shutdown", "disk_loss"):
            fault = dataclasses.replace(fault, brokers=_brokers(f, cluster),
                                        delay_ms=f.duration("delay", 0) if kind == "slow_follower" else 0)
        elif kind == "rolling_restart":
            fault = dataclasses.replace(fault, brokers=_brokers(f, cluster, required=False) or cluster.broker_ids,
                                        interval_ms=f.duration("interval", "30s", minimum=1),
                                        downtime_ms=f.duration("downtime", "10s", minimum=1))
        elif kind == "rack_outage":
            rack = f.require("rack")
            members = tuple(b.broker_id for b in cluster.brokers if b.rack == rack)
            if not members:
                raise f.fail("rack", rack, "unknown fault target: no broker has this rack")
            fault = dataclasses.replace(fault, rack=rack, rack_members=members,
                                        power_loss=bool(f.boolean("power_loss", False)))
        elif kind == "network_partition":
            groups = f.require("groups")
            valid = set(cluster.broker_ids) | {CONTROLLER}
            if (not isinstance(groups, list) or len(groups) < 2
                    or any(not isinstance(g, list) or not g or any(x not in valid for x in g) for g in groups)):
                raise f.fail("groups", groups, f"expected two or more lists of brokers {sorted(cluster.broker_ids)} "
                                               "or 'controller'")
            fault = dataclasses.replace(fault, groups=tuple(tuple(g) for g in groups))
        elif kind in ("config_change", "elect_leaders"):
            topic = f.require("topic")
            if topic not in topics:
                raise f.fail("topic", topic, f"unknown fault target; topics are {sorted(topics)}")
            if kind == "config_change":
                settings = f.require("set")
                _settings(_Reader(source, {"set": settings}, f"faults[{i}]"), "set", _TOPIC_KEYS, TopicConfig, source)
                fault = dataclasses.replace(fault, topic=topic,
                                            settings=tuple(sorted((_TOPIC_KEYS[k], v) for k, v in settings.items())))
            else:
                part = f.get("partition")
                if part is not None and (not isinstance(part, int) or not 0 <= part < topics[topic].partitions):
                    raise f.fail("partition", part, f"unknown fault target; {topic} has "
                                                    f"{topics[topic].partitions} partitions")
                etype = f.get("election_type", "preferred")
                if etype not in ("preferred", "unclean"):
                    raise f.fail("election_type", etype, "expected preferred or unclean")
                fault = dataclasses.replace(fault, topic=topic, partition=part, election_type=etype)
        out.append(fault)
    return tuple(out)
