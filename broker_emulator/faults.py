"""Faults as data: each fault is a value with its timing, expanded into primitive actions.

The scenario runner schedules the primitive actions on the event queue; nothing in the model knows
which scenario or swarm profile produced them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from random import Random

# Every fault kind a scenario may use, with the keys it accepts beyond `at`.
FAULT_KINDS: dict[str, frozenset[str]] = {
    "crash": frozenset({"broker", "brokers", "duration"}),
    "restart": frozenset({"broker", "brokers", "clean"}),
    "power_loss": frozenset({"broker", "brokers", "duration"}),
    "pause": frozenset({"broker", "brokers", "duration"}),
    "resume": frozenset({"broker", "brokers"}),
    "network_partition": frozenset({"groups", "duration"}),
    "heal_network": frozenset(),
    "slow_follower": frozenset({"broker", "brokers", "delay", "duration"}),
    "rack_outage": frozenset({"rack", "duration", "power_loss"}),
    "controlled_shutdown": frozenset({"broker", "brokers", "duration"}),
    "rolling_restart": frozenset({"brokers", "interval", "downtime"}),
    "config_change": frozenset({"topic", "set"}),
    "elect_leaders": frozenset({"topic", "partition", "election_type"}),
    "disk_loss": frozenset({"broker", "brokers", "duration"}),
    "produce": frozenset({"producer", "broker", "partition", "records"}),
}

CONTROLLER = "controller"


@dataclass(frozen=True)
class Action:
    """One primitive fault action at a virtual time (ms since run start)."""

    at_ms: int
    kind: str
    brokers: tuple[int, ...] = ()
    groups: tuple[tuple[int | str, ...], ...] = ()
    delay_ms: int = 0
    topic: str | None = None
    partition: int | None = None
    settings: tuple[tuple[str, object], ...] = ()
    election_type: str = "preferred"
    clean: bool | None = None     # restart: as after a clean shutdown (None: as the broker went down)
    producer: str | None = None   # produce: the workload producer that sends
    records: int = 1              # produce: how many records
    origin: str = ""  # the scenario fault this came from, for the cluster_events table


@dataclass(frozen=True)
class Fault:
    """A fault as written in a scenario; `expand()` turns it into primitive actions."""

    at_ms: int
    kind: str
    brokers: tuple[int, ...] = ()
    duration_ms: int | None = None
    groups: tuple[tuple[int | str, ...], ...] = ()
    delay_ms: int = 0
    rack: str | None = None
    power_loss: bool = False
    interval_ms: int = 30_000
    downtime_ms: int = 10_000
    topic: str | None = None
    partition: int | None = None
    settings: tuple[tuple[str, object], ...] = ()
    election_type: str = "preferred"
    rack_members: tuple[int, ...] = field(default=())
    clean: bool | None = None
    producer: str | None = None
    records: int = 1

    def describe(self) -> str:
        target = ",".join(map(str, self.brokers)) or self.rack or self.topic or ""
        return f"{self.kind}@{self.at_ms}ms[{target}]"

    def expand(self) -> list[Action]:
        origin = self.describe()
        end = None if self.duration_ms is None else self.at_ms + self.duration_ms
        a: list[Action] = []
        if self.kind in ("crash", "power_loss", "disk_loss"):
            a.append(Action(self.at_ms, self.kind, self.brokers, origin=origin))
            if end is not None:
                a.append(Action(end, "restart", self.brokers, origin=origin))
        elif self.kind == "restart":
            a.append(Action(self.at_ms, "restart", self.brokers, clean=self.clean, origin=origin))
        elif self.kind == "pause":
            a.append(Action(self.at_ms, "pause", self.brokers, origin=origin))
            if end is not None:
                a.append(Action(end, "resume", self.brokers, origin=origin))
        elif self.kind == "resume":
            a.append(Action(self.at_ms, "resume", self.brokers, origin=origin))
        elif self.kind == "network_partition":
            a.append(Action(self.at_ms, "network_partition", groups=self.groups, origin=origin))
            if end is not None:
                a.append(Action(end, "heal_network", origin=origin))
        elif self.kind == "heal_network":
            a.append(Action(self.at_ms, "heal_network", origin=origin))
        elif self.kind == "slow_follower":
            a.append(Action(self.at_ms, "slow_follower", self.brokers, delay_ms=self.delay_ms, origin=origin))
            if end is not None:
                a.append(Action(end, "slow_follower", self.brokers, delay_ms=0, origin=origin))
        elif self.kind == "rack_outage":
            kind = "power_loss" if self.power_loss else "crash"
            a.append(Action(self.at_ms, kind, self.rack_members, origin=origin))
            if end is not None:
                a.append(Action(end, "restart", self.rack_members, origin=origin))
        elif self.kind == "controlled_shutdown":
            a.append(Action(self.at_ms, "controlled_shutdown", self.brokers, origin=origin))
            if end is not None:
                a.append(Action(end, "restart", self.brokers, origin=origin))
        elif self.kind == "rolling_restart":
            for i, b in enumerate(self.brokers):
                t = self.at_ms + i * self.interval_ms
                a.append(Action(t, "controlled_shutdown", (b,), origin=origin))
                a.append(Action(t + self.downtime_ms, "restart", (b,), origin=origin))
        elif self.kind == "config_change":
            a.append(Action(self.at_ms, "config_change", topic=self.topic, settings=self.settings, origin=origin))
        elif self.kind == "elect_leaders":
            a.append(Action(self.at_ms, "elect_leaders", topic=self.topic, partition=self.partition,
                            election_type=self.election_type, origin=origin))
        elif self.kind == "produce":
            a.append(Action(self.at_ms, "produce", self.brokers, topic=self.topic, partition=self.partition,
                            producer=self.producer, records=self.records, origin=origin))
        else:  # validated by the scenario loader; reaching here is a programming error
            raise AssertionError(f"unknown fault kind {self.kind}")
        return a


@dataclass(frozen=True)
class SwarmProfile:
    """Random fault schedules generated from the seed (after FoundationDB/VOPR swarm testing).

    Faults happen during the safety phase [start_ms, heal_ms); every fault is healed by heal_ms so
    the liveness phase that follows can check that the cluster converges.
    """

    faults: int
    start_ms: int
    heal_ms: int
    kinds: tuple[str, ...] = ("crash", "power_loss", "pause", "network_partition", "slow_follower",
                              "controlled_shutdown")
    max_duration_ms: int = 40_000

    def generate(self, rng: Random, broker_ids: tuple[int, ...]) -> list[Fault]:
        out: list[Fault] = []
        for _ in range(self.faults):
            kind = self.kinds[rng.randrange(len(self.kinds))]
            at = rng.randrange(self.start_ms, max(self.start_ms + 1, self.heal_ms - 1_000))
            duration = min(rng.randrange(1_000, self.max_duration_ms), self.heal_ms - at)
            count = 1 + int(rng.random() < 0.3)
            brokers = tuple(sorted(rng.sample(list(broker_ids), min(count, len(broker_ids)))))
            if kind == "network_partition":
                side = tuple(b for b in broker_ids if b not in brokers)
                out.append(Fault(at, kind, duration_ms=duration, groups=(brokers, (*side, CONTROLLER))))
            elif kind == "slow_follower":
                out.append(Fault(at, kind, brokers=brokers, duration_ms=duration,
                                 delay_ms=rng.randrange(50, 2_000)))
            else:
                out.append(Fault(at, kind, brokers=brokers, duration_ms=duration))
        return out
