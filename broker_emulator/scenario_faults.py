"""The `faults:` list of a scenario: each entry validated into a `Fault` (faults.py), naming the key at fault."""

from __future__ import annotations

import dataclasses

from broker_emulator.config import ClusterSpec, ProducerSpec, TopicConfig, TopicSpec
from broker_emulator.faults import CONTROLLER, FAULT_KINDS, Fault
from broker_emulator.scenario_reader import TOPIC_KEYS, Reader, read_settings


def _brokers(f: Reader, cluster: ClusterSpec, required: bool = True) -> tuple[int, ...]:
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


def parse_faults(r: Reader, source: str, cluster: ClusterSpec, topics: dict[str, TopicSpec],
                 producers: dict[str, ProducerSpec]) -> tuple[Fault, ...]:
    out: list[Fault] = []
    for i, item in enumerate(r.get("faults", []) or []):
        f = Reader(source, item, f"faults[{i}]")
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
                                        delay_ms=f.duration("delay", 0) if kind == "slow_follower" else 0,
                                        clean=f.boolean("clean") if kind == "restart" else None)
        elif kind == "produce":
            fault = _produce(f, cluster, topics, producers, fault)
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
                read_settings(Reader(source, {"set": settings}, f"faults[{i}]"), "set", TOPIC_KEYS, TopicConfig, source)
                fault = dataclasses.replace(fault, topic=topic,
                                            settings=tuple(sorted((TOPIC_KEYS[k], v) for k, v in settings.items())))
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


def _produce(f: Reader, cluster: ClusterSpec, topics: dict[str, TopicSpec], producers: dict[str, ProducerSpec],
             fault: Fault) -> Fault:
    """One request from a workload producer to a broker it names, whoever leads: a client with stale metadata."""
    name = f.require("producer")
    if name not in producers:
        raise f.fail("producer", name, f"unknown producer; the workload has {sorted(producers)}")
    (broker,) = _brokers(f, cluster)
    topic = producers[name].topic
    part = f.get("partition", 0)
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < topics[topic].partitions:
        raise f.fail("partition", part, f"expected a partition of {topic} (0 to {topics[topic].partitions - 1})")
    return dataclasses.replace(fault, producer=name, brokers=(broker,), topic=topic, partition=part,
                               records=f.integer("records", 1, minimum=1))
