"""Cluster events read off the difference between two views of a real cluster.

A real cluster does not tell a client what happened, only how things stand; the collector compares each
interval's view with the previous one and names the change the way the emulator's event log does, so the
same rules and dashboards read both:

- a new leader is an `election`: `clean` when it was in the previous ISR, `elr` when it was an eligible
  leader replica, `unclean` when it was neither and no member of the previous ISR is in the new one (with one
  there, the leader joined the ISR between the two views); no leader is an election with cause `offline`;
- replicas leaving or joining the ISR are `isr_shrink` / `isr_expand` (broker_id: the leader); a replica whose
  broker has left the metadata (fenced) was removed by the controller, not by its leader: `isr_change_controller`
  with cause `fenced`, as the emulator records it (Kafka's IsrShrinksPerSec does not count those either); so was
  one whose broker is in a controlled shutdown (`shutting_down_brokers`): cause `controlled_shutdown`;
- a new leader whose log ends below the previous high watermark is a `truncation` of the committed
  records it does not hold;
- a broker that drops out of the metadata is `fenced`, one that comes back `unfenced`; one that stops
  answering (or answers again) is a `broker_state` change;
- a topic seen for the first time is `topic_created`, a changed topic config a `config_change`.

Changes faster than the interval are merged (an ISR that shrank and expanded between two views shows
nothing): the collector's metrics (IsrShrinksPerSec, UncleanLeaderElectionsPerSec) still count them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from collector.cluster_view import ClusterView, Partition, TopicConfig, TopicPartition
from schemas.bronze import BrokerStateCause, ElectionKind, EventType


@dataclass
class Event:
    ts_ms: int
    event_type: EventType
    cause: str
    broker_id: int | None = None
    topic: str | None = None
    partition: int | None = None
    leader_epoch: int | None = None
    records: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    seq: int = -1

    def detail_json(self) -> str:
        return json.dumps(self.detail, sort_keys=True)


@dataclass
class Remembered:
    """What the collector keeps of a partition between intervals (and across restarts)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    elr: list[int]
    replicas: list[int]
    partition_epoch: int
    high_watermark: int
    log_start_offset: int
    recovering: bool = False

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Remembered:
        return cls(**raw)

    def to_json(self) -> dict[str, Any]:
        # What dataclasses.asdict gives (the fields in order, the lists copied) without its recursive deep copy,
        # which cost ~100 ms of CPU per interval at 3,000 partitions (~7 ms this way).
        out = dict(self.__dict__)
        for name in _REMEMBERED_LISTS:
            out[name] = list(out[name])
        return out


_REMEMBERED_LISTS = tuple(f.name for f in fields(Remembered) if str(f.type).startswith("list"))


def election_kind(previous: Remembered, new_leader: int, new_isr: tuple[int, ...] | list[int]) -> str:
    """`clean` from the previous ISR, `elr` from its eligible leader replicas, `unclean` otherwise; but an unclean
    election happens only when no member of the ISR can lead, so a leader from outside the previous view with a
    member of the previous ISR still in the new one joined between the two views (an expansion, then a clean
    election: a rolling restart seen at a 2 s interval) and the election was clean. The new leader being alone in
    the ISR is no sign either way: a recovered leader takes followers back within a second."""
    if new_leader in previous.isr:
        return ElectionKind.CLEAN
    if new_leader in previous.elr:
        return ElectionKind.ELR
    if set(new_isr) & set(previous.isr):
        return ElectionKind.CLEAN
    return ElectionKind.UNCLEAN


def partition_events(ts_ms: int, tp: TopicPartition, before: Remembered | None, now: Partition,
                     leader_leo: int | None, registered: set[int] | None = None,
                     shutting_down: frozenset[int] = frozenset()) -> list[Event]:
    """What changed in one partition between two views (nothing for a partition seen the first time).
    `registered`: the brokers the view lists (None: unknown, every removal is its leader's); `shutting_down`: brokers
    in a controlled shutdown, whose removal is the controller's."""
    if before is None:
        return []
    if now.leader == before.leader and list(now.isr) == before.isr:
        return []  # the common case, no change: no election, no ISR change, no truncation (needs a new leader)
    topic, partition = tp
    out: list[Event] = []

    def event(event_type: EventType, cause: str, **kw: Any) -> None:
        out.append(Event(ts_ms, event_type, cause, topic=topic, partition=partition, leader_epoch=now.leader_epoch,
                         **kw))

    if now.leader != before.leader:
        if now.leader < 0:
            event(EventType.ELECTION, ElectionKind.OFFLINE, detail={"previous_leader": before.leader})
        else:
            event(EventType.ELECTION, election_kind(before, now.leader, now.isr), broker_id=now.leader,
                  detail={"previous_leader": before.leader, "previous_isr": before.isr,
                          "leader_epoch": now.leader_epoch})
    removed = [b for b in before.isr if b not in now.isr]
    added = [b for b in now.isr if b not in before.isr]
    leader = now.leader if now.leader >= 0 else None
    fenced = [b for b in removed if registered is not None and b not in registered]
    stopping = [b for b in removed if b in shutting_down and b not in fenced]
    dropped = [b for b in removed if b not in fenced and b not in stopping]
    for cause, gone in (("fenced", fenced), (BrokerStateCause.CONTROLLED_SHUTDOWN, stopping)):
        if gone:
            event(EventType.ISR_CHANGE_CONTROLLER, cause,
                  detail={"previous_isr": before.isr, "isr": [b for b in before.isr if b not in gone]})
    if dropped and now.leader >= 0:
        event(EventType.ISR_SHRINK, "observed", broker_id=leader, detail={"removed": dropped, "isr": list(now.isr)})
    if added:
        event(EventType.ISR_EXPAND, "observed", broker_id=leader, detail={"added": added, "isr": list(now.isr)})
    # A new leader whose log ends below the old high watermark lost committed records (a clean leader holds
    # them all: its HW may start lower, its log does not). Followers then truncate to it.
    if now.leader != before.leader and now.leader >= 0 and leader_leo is not None \
            and leader_leo < before.high_watermark:
        event(EventType.TRUNCATION, "new_leader_log_shorter", broker_id=now.leader,
              records=before.high_watermark - leader_leo,
              detail={"previous_high_watermark": before.high_watermark, "leader_log_end_offset": leader_leo})
    return out


def shutting_down_brokers(view: ClusterView, memory: dict[TopicPartition, Remembered]) -> frozenset[int]:
    """Brokers in a controlled shutdown, seen as Kafka carries one out: a broker asking to shut down has its
    leaderships moved and is taken out of every ISR at once by the controller (ReplicationControlManager's
    handleBrokerInControlledShutdown), while it is still registered and answering, about 4 s before it leaves the
    metadata. So: registered and answering, it led a partition in the previous view, leads none now and is in no ISR.
    A stalled or crashed broker stops answering first; a lagging follower keeps its leaderships."""
    if not view.brokers:
        return frozenset()
    moved = set()
    for tp, p in view.partitions.items():
        before = memory.get(tp)
        if before is not None and before.leader != p.leader:
            moved.add(before.leader)
    candidates = moved & (set(view.brokers) - set(view.not_answering))
    if not candidates:
        return frozenset()   # the common case: no leadership moved away from an answering broker
    for p in view.partitions.values():
        candidates -= {p.leader, *p.isr}
    return frozenset(candidates)


def controlled_shutdown_silence_ms(interval_ms: int) -> int:
    """How recently a broker must have answered, when it leaves the metadata, to have stopped with a controlled
    shutdown. Kafka moves its leaderships and removes it from the ISRs while it still answers, and it leaves the
    metadata as it stops (seen on Kafka 4.3: about 4 s from the ISR removals to the fence, answering until then); a
    crashed or paused broker stops answering first and is fenced a session timeout (9 s) later. Two intervals and a
    second, within 3 to 6 s: below the session timeout, whatever the interval."""
    return min(max(3_000, 2 * interval_ms + 1_000), 6_000)


def broker_events(ts_ms: int, registered_before: set[int], registered_now: set[int],
                  silent_before: dict[int, str], silent_now: dict[int, str],
                  last_answered_ms: dict[int, int] | None = None, shutdown_silence_ms: int = 3_000,
                  shutting_down: frozenset[int] = frozenset(), announced: frozenset[int] = frozenset()) -> list[Event]:
    """Brokers leaving or joining the metadata, and stopping or resuming answering. A broker in a controlled shutdown
    (`shutting_down`, not yet `announced`) gets a `broker_state` event with cause `controlled_shutdown` (state
    `stopped`), as the emulator writes one when the shutdown begins. One not seen shutting down that leaves the
    metadata having answered within `shutdown_silence_ms` (`last_answered_ms`: when each last answered) stopped
    with a controlled shutdown too (one that led nothing keeps no leadership to move): the event comes before its
    `fenced`."""
    out: list[Event] = []
    for b in sorted(shutting_down - announced):
        out.append(Event(ts_ms, EventType.BROKER_STATE, BrokerStateCause.CONTROLLED_SHUTDOWN, broker_id=b,
                         detail={"state": "stopped", "seen": "leaderships moved, out of every ISR"}))
    for b in sorted(registered_before - registered_now):
        answered = (last_answered_ms or {}).get(b)
        seen_shutting_down = b in shutting_down or b in announced
        if not seen_shutting_down and answered is not None and ts_ms - answered <= shutdown_silence_ms:
            out.append(Event(ts_ms, EventType.BROKER_STATE, BrokerStateCause.CONTROLLED_SHUTDOWN, broker_id=b,
                             detail={"state": "stopped", "last_answered_ms": answered}))
        out.append(Event(ts_ms, EventType.FENCED, "left_metadata", broker_id=b))
    for b in sorted(registered_now - registered_before):
        out.append(Event(ts_ms, EventType.UNFENCED, "joined_metadata", broker_id=b))
    for b in sorted(set(silent_now) - set(silent_before)):
        out.append(Event(ts_ms, EventType.BROKER_STATE, BrokerStateCause.NOT_ANSWERING, broker_id=b,
                         detail={"state": "not_answering", "reason": silent_now[b]}))
    for b in sorted(set(silent_before) - set(silent_now)):
        out.append(Event(ts_ms, EventType.BROKER_STATE, BrokerStateCause.ANSWERING, broker_id=b,
                         detail={"state": "answering"}))
    return out


def topic_events(ts_ms: int, before: dict[str, TopicConfig], now: dict[str, TopicConfig]) -> list[Event]:
    out: list[Event] = []
    for topic in sorted(now):
        if topic not in before:
            out.append(Event(ts_ms, EventType.TOPIC_CREATED, "observed", topic=topic, partition=0,
                             detail={"partitions": now[topic].partitions}))
        elif now[topic] != before[topic]:
            changed = {k: v for k, v in asdict(now[topic]).items() if asdict(before[topic])[k] != v}
            out.append(Event(ts_ms, EventType.CONFIG_CHANGE, "observed", topic=topic, partition=0, detail=changed))
    return out


def hold_stale_partitions(view: ClusterView, memory: dict[TopicPartition, Remembered]) -> list[TopicPartition]:
    """Keep the recorded state of the partitions `view` shows at an older leader epoch than `memory` holds.

    A broker's metadata is the controller's as of its last fetch: one resumed after a pause, or the next broker
    asked when the last one stopped answering, can show a leader and ISR the cluster has left. Kafka's leader
    epochs never go back, so a lower one is such an answer, not news: the partition keeps what was recorded
    (its high watermark too, as the one just read came from the stale answer's leader). Returns the partitions
    held, in the view's order."""
    held = []
    for tp, p in view.partitions.items():
        before = memory.get(tp)
        if before is None or p.leader_epoch >= before.leader_epoch:
            continue
        view.partitions[tp] = Partition(tp[0], tp[1], before.leader, before.leader_epoch, tuple(before.replicas),
                                        tuple(before.isr), tuple(before.elr), p.offline_replicas)
        view.high_watermarks.pop(tp, None)
        held.append(tp)
    return held


def view_events(ts_ms: int, view: ClusterView, memory: dict[TopicPartition, Remembered],
                shutting_down: frozenset[int] = frozenset()) -> list[Event]:
    out: list[Event] = []
    registered = set(view.brokers) if view.brokers else None
    for tp, p in view.partitions.items():
        leo = view.log_end_offsets.get(tp, {}).get(p.leader)
        out.extend(partition_events(ts_ms, tp, memory.get(tp), p, leo, registered, shutting_down))
    return out
