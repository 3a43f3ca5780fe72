"""Broker liveness (alive, paused, crashed, shutting down, stopped, recovering) and the network.

A paused broker (a GC stall) keeps its connections: requests sent to it wait and are processed when
it resumes, unless their sender gave them up first (a producer's socket.timeout.ms). A crashed or stopped
broker refuses connections at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from broker_emulator.faults import CONTROLLER

if TYPE_CHECKING:
    from collections.abc import Iterable

    from broker_emulator.clock import EventQueue
    from broker_emulator.config import Broker


class Liveness(Enum):
    ALIVE = "alive"
    PAUSED = "paused"
    CRASHED = "crashed"
    SHUTTING_DOWN = "shutting_down"
    STOPPED = "stopped"
    RECOVERING = "recovering"


@dataclass
class BrokerState:
    broker_id: int
    rack: str | None
    liveness: Liveness = Liveness.ALIVE
    fetch_delay_ms: int = 0
    stalled: list[tuple[str, Any]] = field(default_factory=list)
    epoch: int = 1  # broker epoch: bumped on every registration (a restart)
    paused_at_ms: int = 0  # when it was last paused (no follower's fetch reached it since)


class Brokers:
    def __init__(self, brokers: Iterable[Broker], queue: EventQueue) -> None:
        self.queue = queue  # a paused broker's held requests go back on it when it resumes
        self.by_id: dict[int, BrokerState] = {b.broker_id: BrokerState(b.broker_id, b.rack) for b in brokers}

    @property
    def ids(self) -> list[int]:
        return sorted(self.by_id)

    def running(self, b: int) -> bool:
        """Processing requests: alive, or shutting down (still serving until the controller lets it go)."""
        return self.by_id[b].liveness in (Liveness.ALIVE, Liveness.SHUTTING_DOWN)

    def is_paused(self, b: int) -> bool:
        return self.by_id[b].liveness is Liveness.PAUSED

    def accepts_requests(self, b: int) -> bool:
        return self.by_id[b].liveness in (Liveness.ALIVE, Liveness.SHUTTING_DOWN, Liveness.PAUSED)

    def fetch_delay_ms(self, b: int) -> int:
        return self.by_id[b].fetch_delay_ms

    def stall(self, b: int, kind: str, payload: Any) -> None:
        self.by_id[b].stalled.append((kind, payload))

    def release(self, b: int) -> None:
        """A paused broker resumes: replay what arrived meanwhile, in arrival order."""
        stalled, self.by_id[b].stalled = self.by_id[b].stalled, []
        for kind, payload in stalled:
            self.queue.schedule(self.queue.clock.now_ms, kind, payload)


class Network:
    """Which nodes can talk. A partition splits nodes into groups; unlisted nodes reach everyone."""

    def __init__(self) -> None:
        self.group_of: dict[int | str, int] = {}

    def partition(self, groups: tuple[tuple[int | str, ...], ...]) -> None:
        self.group_of = {node: i for i, g in enumerate(groups) for node in g}

    def heal(self) -> None:
        self.group_of = {}

    @property
    def partitioned(self) -> bool:
        return bool(self.group_of)

    def reachable(self, a: int | str, b: int | str) -> bool:
        ga, gb = self.group_of.get(a), self.group_of.get(b)
        return ga is None or gb is None or ga == gb

    def reaches_controller(self, b: int) -> bool:
        return self.reachable(b, CONTROLLER)
