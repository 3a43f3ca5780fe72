"""Consumer groups: read up to the leader's high watermark, never beyond it.

Each group's position per partition advances towards the HW at up to `rate` records/s. When the HW
falls below a position - an unclean election replaced the log the group had already read - the
fetch is out of range and the position resets to the new HW (auto.offset.reset); the records
between are ones a consumer saw that no longer exist anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from broker_emulator.config import ConsumerSpec
from broker_emulator.state import NO_BROKER
from schemas.bronze import EventType

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from broker_emulator.brokers import Brokers
    from broker_emulator.events import EventLog
    from broker_emulator.state import PartitionTable


@dataclass
class GroupState:
    spec: ConsumerSpec
    first: int
    position: np.ndarray
    consumed: np.ndarray   # this interval
    reset: np.ndarray      # records read then lost, this interval
    total_consumed: int = 0
    total_reset: int = 0


class Consumers:
    def __init__(self, specs: Iterable[ConsumerSpec], topic_range: Mapping[str, tuple[int, int]],
                 table: PartitionTable, brokers: Brokers, events: EventLog) -> None:
        self.t = table
        self.brokers = brokers
        self.events = events
        self.groups: list[GroupState] = []
        for spec in specs:
            first, end = topic_range[spec.topic]
            n = end - first
            self.groups.append(GroupState(spec, first, np.zeros(n, np.int64), np.zeros(n, np.int64),
                                          np.zeros(n, np.int64)))

    def poll(self, interval_ms: int) -> None:
        """One metric interval of consumption."""
        t = self.t
        for g in self.groups:
            ps = np.arange(g.first, g.first + len(g.position))
            leader = t.leader[ps]
            ok = leader != NO_BROKER
            ok &= np.fromiter((self.brokers.running(int(b)) if b >= 0 else False for b in leader), bool, len(ps))
            ls = np.argmax(t.replicas[ps] == leader[:, None], axis=1)
            hw = t.hw[ps, ls]
            behind = ok & (hw < g.position)
            for i in np.flatnonzero(behind).tolist():
                lost = int(g.position[i] - hw[i])
                g.reset[i] += lost
                g.total_reset += lost
                self.events.emit(EventType.CONSUMER_OFFSET_RESET, p=int(ps[i]), broker_id=int(leader[i]),
                                 cause="offset_out_of_range", records=lost,
                                 detail={"group": g.spec.group, "from": int(g.position[i]), "to": int(hw[i])})
                g.position[i] = hw[i]
            budget = np.inf if g.spec.rate_per_s is None else g.spec.rate_per_s * interval_ms / 1000 / len(ps)
            step = np.where(ok, np.minimum(hw - g.position, budget), 0).astype(np.int64)
            step = np.maximum(step, 0)
            g.position += step
            g.consumed += step
            g.total_consumed += int(step.sum())

    def drain(self) -> list[tuple[str, int, int, int, int, int, int]]:
        """(group, p, position, hw, lag, consumed, reset) per partition, and reset the interval counters."""
        t = self.t
        rows = []
        for g in self.groups:
            for i in range(len(g.position)):
                p = g.first + i
                leader = int(t.leader[p])
                hw = int(t.hw[p, t.slot_of(p, leader)]) if leader >= 0 else -1
                lag = max(hw - int(g.position[i]), 0)
                rows.append((g.spec.group, p, int(g.position[i]), hw, lag, int(g.consumed[i]), int(g.reset[i])))
            g.consumed[:] = 0
            g.reset[:] = 0
        return rows
