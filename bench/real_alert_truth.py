"""bench/real_alerts.py's ground truth: the cluster as the bench itself sees it, never through isrwatch.

- `ClusterHistory`: the bench's own Metadata and DescribeTopicPartitions requests every 200 ms (broker by broker with
  a timeout, bench/collect_cluster.py's Probe): the registered brokers and each partition's leader, ISR, eligible
  leader replicas and replicas, kept as the snapshots that differ from the one before, with their wall time;
- `expected_alerts`: what a correct monitor fires from those, rule by rule, with the moment the cluster showed it
  (the condition's start in the snapshots, or the fault's start for what only the fault itself tells).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from bench.collect_cluster import Probe
from pipelines.broker_reports import RESTART_SETTLES_MS

POLL_S = 0.2
# conf/alerts.yaml's flap_detection quiet: incidents of one alert closer than this are one flapping incident, whose
# notifications are held back until it settles; apart by more, they are separate incidents.
SEPARATE_AFTER_S = 30.0
RESTART_SETTLES_S = RESTART_SETTLES_MS / 1000   # a restart lasts until a minute after the broker is back
PartitionKey = tuple[str, int]


@dataclass(frozen=True)
class PartitionView:
    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    elr: tuple[int, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    at: float                                   # wall clock, epoch s
    brokers: frozenset[int]                     # registered (unfenced) brokers
    partitions: dict[PartitionKey, PartitionView]


class ClusterHistory:
    """Polls the cluster every POLL_S and keeps the snapshots that changed, for `topics` only."""

    def __init__(self, probe: Probe, topics: Iterable[str]) -> None:
        self.probe = probe
        self.topics = set(topics)
        self.snapshots: list[Snapshot] = []
        self.polls = self.failed_polls = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bench-cluster-history", daemon=True)

    def start(self) -> ClusterHistory:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            brokers = self.probe.brokers()
            answer = self.probe.topic_partitions(sorted(self.topics)) if brokers is not None else None
            at = time.time()
            self.polls += 1
            if brokers is None or answer is None:
                self.failed_polls += 1
            else:
                parts = {(topic, p.partition_index): PartitionView(
                    p.leader_id, tuple(sorted(p.isr_nodes)), tuple(p.replica_nodes),
                    tuple(sorted(p.eligible_leader_replicas or ()))) for topic, p in answer}
                snap = Snapshot(at, frozenset(brokers), parts)
                with self._lock:
                    last = self.snapshots[-1] if self.snapshots else None
                    if last is None or (last.brokers, last.partitions) != (snap.brokers, snap.partitions):
                        self.snapshots.append(snap)
            self._stop.wait(max(0.0, POLL_S - (time.monotonic() - began)))

    def between(self, start: float, end: float) -> list[Snapshot]:
        """The snapshots in force during [start, end]: the last one before start, then every change until end."""
        with self._lock:
            snaps = list(self.snapshots)
        before = [s for s in snaps if s.at <= start]
        return ([before[-1]] if before else []) + [s for s in snaps if start < s.at <= end]

    def fence_times(self, broker: int, start: float, end: float) -> list[float]:
        """When `broker` left the registered brokers within [start, end]."""
        snaps = self.between(start, end)
        return [b.at for a, b in itertools.pairwise(snaps) if broker in a.brokers and broker not in b.brokers]

    def last_isr_leave(self) -> float:
        """When a replica last left an ISR (0 if never)."""
        with self._lock:
            snaps = list(self.snapshots)
        return max((b.at for a, b in itertools.pairwise(snaps) for k, v in b.partitions.items()
                    if k in a.partitions and set(a.partitions[k].isr) - set(v.isr)), default=0.0)

    def whole(self) -> bool:
        """The latest snapshot: every partition led with its whole ISR, and every broker registered."""
        with self._lock:
            last = self.snapshots[-1] if self.snapshots else None
        return last is not None and bool(last.partitions) and all(
            p.leader >= 0 and len(p.isr) == len(p.replicas) for p in last.partitions.values())


@dataclass(frozen=True)
class Expected:
    """One alert a correct monitor fires: its rule, entity labels, the moment the cluster showed it (`shown`) and
    until when the condition held (`until`)."""

    rule: str
    entity: tuple[tuple[str, str], ...]          # sorted (label, value) pairs beyond cluster
    shown: float
    until: float

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.entity)


@dataclass
class Fault:
    """One fault a plan injected: what (`stall`, `kill`, `controlled_restart`), on which brokers, from when to when
    (resumed, or restarted and registered again)."""

    kind: str
    brokers: tuple[int, ...]
    start: float
    end: float = 0.0
    notes: dict[str, float] = field(default_factory=dict)


def _intervals(snaps: list[Snapshot], end: float,
               holds: Callable[[str, PartitionView], bool]) -> dict[PartitionKey, list[tuple[float, float]]]:
    """Per partition, the maximal [start, stop) spans of the snapshots in which `holds(topic, view)`."""
    out: dict[PartitionKey, list[tuple[float, float]]] = defaultdict(list)
    open_at: dict[PartitionKey, float] = {}
    for snap in snaps:
        for key, view in snap.partitions.items():
            if holds(key[0], view):
                open_at.setdefault(key, snap.at)
            elif key in open_at:
                out[key].append((open_at.pop(key), snap.at))
        for key in [k for k in open_at if k not in snap.partitions]:
            out[key].append((open_at.pop(key), snap.at))
    for key, began in open_at.items():
        out[key].append((began, end))
    return out


def _outside(spans: list[tuple[float, float]], windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of `spans` outside every window."""
    out = list(spans)
    for w0, w1 in windows:
        out = [piece for a, b in out for piece in ((a, min(b, w0)), (max(a, w1), b)) if piece[0] < piece[1]]
    return out


def expected_alerts(history: ClusterHistory, faults: list[Fault], min_isr: dict[str, int], acks_all: set[str],
                    canary_topic: str, start: float, end: float) -> list[Expected]:
    """What should fire between `start` and `end` (the plan's run, until 60 s after recovery), rule by rule. A
    condition shorter than one collection interval and a bit (1.5 s) may fall between two of the collector's views
    and is not counted: the collector reads the cluster once a second, as documented."""
    snaps = history.between(start, end)
    out: list[Expected] = []

    def part(topic: str, partition: int) -> tuple[tuple[str, str], ...]:
        return (("partition", str(partition)), ("topic", topic))

    # A broker restarting after a controlled shutdown (the rolling restart's) is BrokerRestarting until a minute after
    # it is back (info: the shipped receiver takes critical and warning only); meanwhile UnderMinIsr,
    # ProduceNotEnoughReplicas and WritesStalled of its cluster are held from the receivers, and what still holds then
    # is delivered then (conf/alerts.yaml). WritesStalled is expected of stalls and kills only.
    restarts = [(f.start, f.end + RESTART_SETTLES_S) for f in faults if f.kind == "controlled_restart"]
    under_min = _intervals(snaps, end, lambda t, v: v.leader >= 0 and len(v.isr) < min(min_isr[t], len(v.replicas)))
    for (topic, p), spans in under_min.items():
        out += [Expected("UnderMinIsr", part(topic, p), a, b) for a, b in _outside(spans, restarts) if b - a >= 1.5]
    under_rep = _intervals(snaps, end, lambda t, v: v.leader >= 0 and len(v.isr) < len(v.replicas))
    for (topic, p), spans in under_rep.items():
        out += [Expected("UnderReplicated", part(topic, p), a + 30, b) for a, b in spans if b - a >= 31.5]
    offline = sorted(span for spans in _intervals(snaps, end, lambda t, v: v.leader < 0).values() for span in spans
                     if span[1] - span[0] >= 1.5)
    if offline:
        out.append(Expected("OfflinePartitions", (), offline[0][0], max(b for _, b in offline)))
    # A leader from outside the ISR and the eligible leader replicas, with no member of that ISR left in the new one
    # (with one left, the leader joined between two polls: a clean election, as collector/observed_events.py reads
    # it). A leader from the ELR is a clean election (KIP-966).
    unclean = [b.at for a, b in itertools.pairwise(snaps) for k, v in b.partitions.items()
               if k in a.partitions and v.leader >= 0 and v.leader != a.partitions[k].leader
               and v.leader not in a.partitions[k].isr and v.leader not in a.partitions[k].elr
               and not set(v.isr) & set(a.partitions[k].isr)]
    if unclean:
        out.append(Expected("UncleanLeaderElection", (), min(unclean), max(unclean) + 5))
    for fault in faults:
        if fault.kind in ("stall", "kill") and fault.end - fault.start >= 17:
            out += [Expected("BrokerNotReporting", (("broker_id", str(b)),), fault.start + 15, fault.end)
                    for b in fault.brokers]
        if fault.kind in ("stall", "kill") and fault.end - fault.start >= 3.5:
            # The canary's acks=all writes wait on every partition whose ISR holds a stalled or killed broker.
            before = [snap for snap in snaps if snap.at <= fault.start]
            views = before[-1].partitions.items() if before else ()
            out += [Expected("WritesStalled", part(topic, p), fault.start + 2, fault.end)
                    for (topic, p), view in views
                    if topic == canary_topic and set(view.isr) & set(fault.brokers)]
    # A replica its leader dropped (its broker still registered) three times within 5 minutes.
    leaves: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for a, b in itertools.pairwise(snaps):
        for key, view in b.partitions.items():
            before = a.partitions.get(key)
            if before is not None:
                for r in before.isr:
                    if r not in view.isr and r in b.brokers:
                        leaves[(key[0], key[1], r)].append(b.at)
    for (topic, p, r), times in leaves.items():
        thrash = [t for i, t in enumerate(times) if i >= 2 and t - times[i - 2] <= 300]
        if thrash:
            out.append(Expected("IsrThrash", (("broker_id", str(r)), *part(topic, p)), thrash[0], thrash[-1] + 300))
    # A leader refuses acks=all writes (ErrorsPerSec NOT_ENOUGH_REPLICAS) while its partition is under min ISR and
    # a producer writes to it with acks=all: every acks=all topic here has writes on every partition each second.
    # The producers' own reports cannot say it: librdkafka retries the refusal and reports _MSG_TIMED_OUT.
    refused: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for (topic, p), spans in under_min.items():
        if topic in acks_all:
            for a, b in spans:
                if b - a >= 1.5:
                    began = next(snap for snap in snaps if snap.at == a)
                    refused[began.partitions[(topic, p)].leader] += [s for s in _outside([(a, b)], restarts)
                                                                     if s[1] - s[0] >= 1.5]
    refused = {b: spans for b, spans in refused.items() if spans}
    out += [Expected("ProduceNotEnoughReplicas", (("broker_id", str(b)),), min(a for a, _ in spans),
                     max(e for _, e in spans)) for b, spans in refused.items()]
    # ISR at min.insync.replicas (below the replica count) for the rule's 10 s `for`: one failure from refusals.
    at_min = _intervals(snaps, end, lambda t, v: v.leader >= 0 and len(v.isr) == min_isr[t] < len(v.replicas))
    for (topic, p), spans in at_min.items():
        out += [Expected("AtMinIsr", part(topic, p), a + 10, b) for a, b in spans if b - a >= 11.5]
    return merge_flapping(out)


def merge_flapping(expected: list[Expected]) -> list[Expected]:
    """Incidents of one rule and entity apart by less than SEPARATE_AFTER_S merged into one (a follower stalling every
    20 s is one flapping WritesStalled, and IsrThrash, not eight pages)."""
    out: list[Expected] = []
    last: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for e in sorted(expected, key=lambda e: (e.rule, e.entity, e.shown)):
        key = (e.rule, e.entity)
        i = last.get(key)
        if i is not None and e.shown - out[i].until < SEPARATE_AFTER_S:
            out[i] = Expected(e.rule, e.entity, out[i].shown, max(out[i].until, e.until))
        else:
            last[key] = len(out)
            out.append(e)
    return out
