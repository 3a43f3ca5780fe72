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
from broker_emulator.faults import Fault, SwarmProfile
from broker_emulator.scenario_faults import parse_faults
from broker_emulator.scenario_reader import BROKER_KEYS, TOPIC_KEYS, Reader, read_settings

__all__ = ["Scenario", "load_scenario", "parse_scenario"]

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


def _acks(r: Reader, k: str) -> int:
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
    r = Reader(source, data, "")
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
    faults = parse_faults(r, source, cluster, {t.name: t for t in topics}, {p.name: p for p in producers})
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


def _cluster(r: Reader, source: str) -> ClusterSpec:
    n = r.integer("brokers", minimum=1)
    racks = r.get("racks")
    if racks is not None and (not isinstance(racks, list) or not racks or not all(isinstance(x, str) for x in racks)):
        raise r.fail("racks", racks, "expected a non-empty list of rack names")
    brokers = tuple(Broker(i, racks[(i - 1) % len(racks)] if racks else None) for i in range(1, n + 1))
    config = read_settings(r, "config", BROKER_KEYS, BrokerConfig, source)
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


def _topics(r: Reader, source: str, cluster: ClusterSpec) -> tuple[TopicSpec, ...]:
    raw = r.require("topics")
    if not isinstance(raw, list) or not raw:
        raise r.fail("topics", raw, "expected a non-empty list")
    out: list[TopicSpec] = []
    for i, item in enumerate(raw):
        t = Reader(source, item, f"topics[{i}]")
        name = t.require("name")
        if not isinstance(name, str) or not name or any(o.name == name for o in out):
            raise t.fail("name", name, "expected a unique topic name")
        rf = t.integer("replication.factor", minimum=1)
        if rf > len(cluster.brokers):
            raise t.fail("replication.factor", rf,
                         f"INVALID_REPLICATION_FACTOR: only {len(cluster.brokers)} brokers")
        parts = t.integer("partitions", minimum=1)
        config = read_settings(t, "config", TOPIC_KEYS, TopicConfig, source)
        if config.segment_bytes < 14:
            raise t.fail("config.segment.bytes", config.segment_bytes, "must be at least 14")
        assignment = t.get("assignment")
        if assignment is not None:
            assignment = _assignment(t, assignment, parts, rf, cluster)
        t.finish()
        out.append(TopicSpec(name, parts, rf, config, assignment))
    return tuple(out)


def _assignment(t: Reader, raw: Any, parts: int, rf: int, cluster: ClusterSpec) -> tuple[tuple[int, ...], ...]:
    if not isinstance(raw, list) or len(raw) != parts:
        raise t.fail("assignment", raw, f"expected one replica list per partition ({parts})")
    out = []
    for p, reps in enumerate(raw):
        if (not isinstance(reps, list) or len(reps) != rf or len(set(reps)) != rf
                or any(b not in cluster.broker_ids for b in reps)):
            raise t.fail(f"assignment[{p}]", reps, f"expected {rf} distinct broker ids from {list(cluster.broker_ids)}")
        out.append(tuple(reps))
    return tuple(out)


def _workload(r: Reader, source: str, topics: set[str]) -> tuple[tuple[ProducerSpec, ...], tuple[ConsumerSpec, ...]]:
    producers: list[ProducerSpec] = []
    for i, item in enumerate(r.get("producers", []) or []):
        p = Reader(source, item, f"workload.producers[{i}]")
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
            max_in_flight=p.integer("max.in.flight.requests.per.connection", 5, minimum=1),
            socket_timeout_ms=p.duration("socket.timeout.ms", 60_000, minimum=1),
            metadata_max_age_ms=p.duration("metadata.max.age.ms", 300_000, minimum=1),
            idempotent=bool(p.boolean("enable.idempotence", False)),
            sticky_linger_ms=(p.duration("sticky.partitioning.linger.ms", minimum=1)
                              if p.get("sticky.partitioning.linger.ms") is not None else None),
            start_ms=p.duration("start", 0), stop_ms=p.duration("stop") if p.get("stop") is not None else None,
        )
        p.finish()
        producers.append(spec)
    consumers: list[ConsumerSpec] = []
    for i, item in enumerate(r.get("consumers", []) or []):
        c = Reader(source, item, f"workload.consumers[{i}]")
        topic = c.require("topic")
        if topic not in topics:
            raise c.fail("topic", topic, f"unknown topic; known: {sorted(topics)}")
        rate = c.number("rate", minimum=0.0) if c.get("rate") is not None else None
        consumers.append(ConsumerSpec(str(c.get("group", f"group-{i}")), topic, rate))
        c.finish()
    r.finish()
    return tuple(producers), tuple(consumers)
