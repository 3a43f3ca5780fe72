"""The canary's intervals as bronze rows: ack_ledger per canary partition, and the refusals and losses as
cluster_events, each loss attributed to the unclean election or truncation the collector saw on that partition.

A loss is attributed to the first election that was not clean (`unclean`, or `elr` when the new leader's log is
shorter) or truncation the collector recorded on the partition at or after the lost records were acknowledged;
with none, `lost_by` is `unattributed` (the collector missed a change faster than its interval).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from collector.canary import Canary
from collector.canary_fetch import Connect
from collector.canary_state import CanaryInterval
from collector.canary_topic import CanaryConfig
from collector.cluster_view import Partition, TopicPartition
from collector.kafka_wire import BrokerConnection
from collector.observed_events import Event
from schemas.bronze import ElectionKind, EventType

LOSS_CAUSES = {(EventType.ELECTION, ElectionKind.UNCLEAN): "unclean_election",
               (EventType.ELECTION, ElectionKind.ELR): "elr_election",
               (EventType.TRUNCATION, "new_leader_log_shorter"): "truncation"}
HISTORY_PER_PARTITION = 64
# Any election: the collector may read a leader change too late to tell a clean election from an unclean one.
RESCAN_EVENTS = frozenset({EventType.ELECTION, EventType.TRUNCATION})


class CanaryFeed:
    """Adapts a started Canary to the collector loop (collect_loop.CanarySource)."""

    def __init__(self, canary: Canary) -> None:
        self.canary = canary
        self.topic = canary.config.topic
        self.history: dict[int, deque[Event]] = {}
        self.last: CanaryInterval | None = None

    def observe(self, events: list[Event]) -> None:
        """Remember the collector's elections and truncations on the canary's partitions (seq assigned), and have the
        canary read each partition whose leader changed again from its oldest remembered record."""
        for e in events:
            if e.topic != self.topic or e.partition is None:
                continue
            if (e.event_type, e.cause) in LOSS_CAUSES:
                self.history.setdefault(e.partition, deque(maxlen=HISTORY_PER_PARTITION)).append(e)
            if e.event_type in RESCAN_EVENTS:
                self.canary.rescan(e.partition)

    def cause_of(self, partition: int, acked_from_ms: int) -> tuple[str, int | None]:
        for e in self.history.get(partition, ()):
            if e.ts_ms >= acked_from_ms:
                return LOSS_CAUSES[e.event_type, e.cause], e.seq
        return "unattributed", None

    def interval_rows(self, now_ms: int, next_seq: int, partitions: Mapping[TopicPartition, Partition]
                      ) -> tuple[list[dict[str, Any]], list[Event]]:
        """(ack_ledger rows, events numbered from next_seq) for the interval ending at now_ms; `partitions` is the
        collector's view of that moment, which gives each row its partition's leader and ISR."""
        interval = self.canary.take_interval(now_ms)
        self.last = interval
        ts = now_ms * 1000
        ledger: list[dict[str, Any]] = []
        events: list[Event] = []

        def add(event: Event) -> Event:
            event.seq = next_seq + len(events)
            events.append(event)
            return event

        for p in interval.partitions:
            leader = p.leader if p.leader >= 0 else None
            for error, n in sorted(p.failed_by_error.items()):
                add(Event(now_ms, EventType.PRODUCE_REJECTED, error, broker_id=leader, topic=self.topic,
                          partition=p.partition, records=n, detail={"acks": "all", "source": "canary"}))
            lost_by: str | None = None
            lost_seq: int | None = None
            for lost in p.lost:
                cause, cause_seq = self.cause_of(p.partition, lost.acked_between_ms[0])
                event = add(Event(now_ms, EventType.RECORDS_LOST, cause,
                                  broker_id=lost.leader if lost.leader >= 0 else None, topic=self.topic,
                                  partition=p.partition, records=lost.count,
                                  detail={"acks": "all", "source": "canary", "first_offset": lost.first_offset,
                                          "first_seq": lost.first_seq, "cause_event_seq": cause_seq,
                                          "acked_between_ms": list(lost.acked_between_ms)}))
                lost_by, lost_seq = cause, event.seq
            seen = partitions.get((self.topic, p.partition))
            ledger.append({"ts": ts, "topic": self.topic, "partition": p.partition, "acks": "all",
                           "records_sent": p.records_sent, "records_acked": p.records_acked,
                           "records_failed": p.records_failed, "records_lost": p.records_lost,
                           "lost_by_event_seq": lost_seq, "lost_by": lost_by, "unacked_for_ms": p.unacked_for_ms,
                           "leader": seen.leader if seen is not None and seen.leader >= 0 else None,
                           "isr": list(seen.isr) if seen is not None else None})
        return ledger, events

    def save_state(self) -> None:
        self.canary.save_state()

    def stop(self) -> None:
        self.canary.stop()

    def summary(self) -> dict[str, Any]:
        """The last interval's latencies and counts, for bronze.runs.summary."""
        if self.last is None:
            return {}
        out: dict[str, Any] = {"topic": self.topic, "partitions": {}}
        for p in self.last.partitions:
            out["partitions"][str(p.partition)] = {
                "leader": p.leader, "in_flight": p.records_in_flight, "unconfirmed": p.records_unconfirmed,
                "confirmed": p.records_confirmed, "duplicated": p.records_duplicated,
                "produce_latency_ms": None if p.produce_latency_ms is None else
                json.loads(json.dumps(p.produce_latency_ms.__dict__)),
                "round_trip_latency_ms": None if p.round_trip_latency_ms is None else
                json.loads(json.dumps(p.round_trip_latency_ms.__dict__))}
        return out


def canary_for_collector(bootstrap_servers: str, *, state_root: str, topic: str, rate_per_partition: float,
                         topic_config: dict[str, str] | None = None, min_insync_replicas: int = 2,
                         client_config: Mapping[str, str] | None = None,
                         connect: Connect = BrokerConnection) -> Callable[[str, Path], CanaryFeed]:
    """A factory the Collector calls once it knows the cluster: the canary starts then (creating its topic).
    `client_config`: librdkafka settings for the canary's producer and admin client
    (ClientSecurity.librdkafka_config()); `connect(address, timeout_s)`: how its reader opens a connection to a
    broker (the collector's BrokerConnection with the same security settings)."""

    def start(_run_id: str, _state_dir: Path) -> CanaryFeed:
        config = CanaryConfig(bootstrap_servers, topic=topic, records_per_second=rate_per_partition,
                              topic_config=topic_config or {}, min_insync_replicas=min_insync_replicas,
                              client_config=client_config or {})
        return CanaryFeed(Canary(config, state_root, connect).start())

    return start
