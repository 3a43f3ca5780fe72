"""JMX metrics under their real MBean names, with Kafka's semantics.

Partition gauges are leader-side: a broker counts only partitions it leads (in its own view), using
the ISR as it knows it; a leaderless partition counts on no broker. OfflinePartitionsCount and
ActiveControllerCount come from the active controller only. Meters are a cumulative count (reset when
the broker process restarts, as JMX counters are) plus the rate over the metric interval. A broker
that is down or paused reports nothing, as an unreachable JMX endpoint does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from broker_emulator.state import NO_BROKER
from schemas.kafka_metrics import BROKER_METERS, CONTROLLER_METERS, CONTROLLER_NODE_ID

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers
    from broker_emulator.clock import SimClock
    from broker_emulator.ports import ControllerPort
    from broker_emulator.state import PartitionTable


class Metrics:
    def __init__(self, clock: SimClock, table: PartitionTable, brokers: Brokers, controller: ControllerPort) -> None:
        self.clock = clock
        self.t = table
        self.brokers = brokers
        self.controller = controller  # the controller's own gauges (fenced brokers) come from it
        self.counts: dict[tuple[int, str], int] = {}
        self.previous: dict[tuple[int, str], int] = {}
        self.totals: dict[str, int] = {}
        # Virtual ms each broker process last started (a scraper reads it from the JVM's Runtime
        # StartTime): meters count from there, so a drop in a count with a new start is no error.
        self.process_start_ms: dict[int, int] = {}

    def mark(self, node: int, meter: str, n: int = 1) -> None:
        key = (node, meter)
        self.counts[key] = self.counts.get(key, 0) + n
        self.totals[meter] = self.totals.get(meter, 0) + n

    def messages_in(self, broker: int, records: int, size_bytes: int) -> None:
        self.mark(broker, "MessagesInPerSec", records)
        self.mark(broker, "BytesInPerSec", size_bytes)

    def produce_error(self, broker: int, error: str) -> None:
        self.mark(broker, f"ErrorsPerSec:{error}")

    def reset_broker(self, broker: int) -> None:
        """The broker process restarted: its in-memory meters start from zero."""
        self.process_start_ms[broker] = self.clock.now_ms
        for m in BROKER_METERS:
            self.counts.pop((broker, m), None)
            self.previous.pop((broker, m), None)

    def snapshot(self, interval_ms: int) -> list[tuple[int, str, str, float, int | None]]:
        """(node, name, kind, value, count) for every reporting node, gauges first."""
        t, brokers = self.t, self.brokers
        n = t.count
        seconds = interval_ms / 1000.0
        rows: list[tuple[int, str, str, float, int | None]] = []
        reps = t.replicas[:n]
        size = max(brokers.ids) + 1
        acting = (t.known_leader[:n] == reps) & (reps >= 0)
        rows_p, rows_s = np.nonzero(acting)
        lead_b = reps[rows_p, rows_s]
        isr_size = t.leader_isr[rows_p].sum(axis=1)
        eff_min = np.minimum(t.configured_min_isr[rows_p], t.rf[rows_p])
        led = np.bincount(lead_b, minlength=size)
        under_rep = np.bincount(lead_b, weights=isr_size < t.rf[rows_p], minlength=size)
        under_min = np.bincount(lead_b, weights=isr_size < eff_min, minlength=size)
        at_min = np.bincount(lead_b, weights=isr_size == eff_min, minlength=size)
        hosted = np.bincount(reps[reps >= 0], minlength=size)
        # MaxLag: the largest (leader LEO - follower LEO) over the broker's follower replicas.
        has_leader = t.leader[:n] >= 0
        leader_slot = np.argmax(reps == t.leader[:n, None], axis=1)
        leader_leo = t.leo[np.arange(n), leader_slot]
        follows = (reps >= 0) & ~acting & has_leader[:, None] & (reps != t.leader[:n, None])
        fp, fs = np.nonzero(follows)
        max_lag = np.zeros(size, np.int64)
        np.maximum.at(max_lag, reps[fp, fs], np.maximum(leader_leo[fp] - t.leo[fp, fs], 0))
        for b in brokers.ids:
            if not brokers.running(b):
                continue
            gauges = {
                "UnderReplicatedPartitions": int(under_rep[b]),
                "UnderMinIsrPartitionCount": int(under_min[b]),
                "AtMinIsrPartitionCount": int(at_min[b]),
                "PartitionCount": int(hosted[b]),
                "LeaderCount": int(led[b]),
                "MaxLag": int(max_lag[b]),
            }
            rows.extend((b, k, "gauge", float(v), None) for k, v in gauges.items())
            rows.extend(self._meter_rows(b, BROKER_METERS, seconds))
        ctl = self.controller
        fenced = sum(1 for b in brokers.ids if ctl.fenced[b])
        gauges = {
            "ActiveControllerCount": 1,
            "OfflinePartitionsCount": int((t.leader[:n] == NO_BROKER).sum()),
            "FencedBrokerCount": fenced,
            "ActiveBrokerCount": len(brokers.ids) - fenced,
            "GlobalPartitionCount": n,
        }
        rows.extend((CONTROLLER_NODE_ID, k, "gauge", float(v), None) for k, v in gauges.items())
        rows.extend(self._meter_rows(CONTROLLER_NODE_ID, CONTROLLER_METERS, seconds))
        return rows

    def _meter_rows(self, node: int, meters: tuple[str, ...],
                    seconds: float) -> list[tuple[int, str, str, float, int | None]]:
        out: list[tuple[int, str, str, float, int | None]] = []
        for m in meters:
            key = (node, m)
            count = self.counts.get(key, 0)
            rate = (count - self.previous.get(key, 0)) / seconds
            self.previous[key] = count
            out.append((node, m, "meter", rate, count))
        return out
