"""What each primitive fault action does to the simulated cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from broker_emulator.brokers import Liveness
from broker_emulator.faults import Action
from broker_emulator.scenario_reader import TOPIC_KEYS
from schemas.bronze import EventType

if TYPE_CHECKING:
    from random import Random

    from broker_emulator.brokers import Brokers, Network
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.config import BrokerConfig
    from broker_emulator.controller import Controller
    from broker_emulator.events import EventLog
    from broker_emulator.ledger import Ledger
    from broker_emulator.logs import Logs
    from broker_emulator.output import Recorder
    from broker_emulator.produce import Produce
    from broker_emulator.replication import Replication
    from broker_emulator.state import PartitionTable

_DOWN = (Liveness.CRASHED, Liveness.STOPPED)


class FaultTarget(Protocol):
    """The parts of the simulation a fault acts on: a fault reaches into every layer, as a real one does."""

    @property
    def clock(self) -> SimClock: ...
    @property
    def queue(self) -> EventQueue: ...
    @property
    def cfg(self) -> BrokerConfig: ...
    @property
    def table(self) -> PartitionTable: ...
    @property
    def topic_range(self) -> dict[str, tuple[int, int]]: ...
    @property
    def brokers(self) -> Brokers: ...
    @property
    def network(self) -> Network: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def controller(self) -> Controller: ...
    @property
    def replication(self) -> Replication: ...
    @property
    def produce(self) -> Produce: ...
    @property
    def recorder(self) -> Recorder: ...
    @property
    def data_loss_by_broker(self) -> dict[int, str]: ...
    @property
    def rng_timing(self) -> Random:
        """The seeded stream of brokers' own timing (restart durations)."""
    @property
    def stale_view(self) -> set[int]:
        """Brokers that missed a metadata update and must catch up when they can hear the controller."""
    def resync(self, b: int) -> None: ...


def apply_action(sim: FaultTarget, a: Action) -> None:
    detail: dict[str, object] = {"origin": a.origin}
    if a.brokers:
        detail["brokers"] = list(a.brokers)
    if a.groups:
        detail["groups"] = [list(map(str, g)) for g in a.groups]
    sim.events.emit(EventType.FAULT, cause=a.kind, detail=detail,
                    broker_id=a.brokers[0] if len(a.brokers) == 1 else None,
                    p=sim.topic_range[a.topic][0] if a.topic else None)
    handler = _HANDLERS[a.kind]
    handler(sim, a)


def _crash(sim: FaultTarget, a: Action, loss: str | None = None) -> None:
    t = sim.table
    for b in a.brokers:
        st = sim.brokers.by_id[b]
        if st.liveness in _DOWN:
            continue
        st.liveness = Liveness.CRASHED
        close_connections(sim, b)
        if loss is None:
            continue
        sim.data_loss_by_broker[b] = loss
        ps, ss = np.nonzero(t.replicas[: t.count] == b)
        for p, s in zip(ps.tolist(), ss.tolist(), strict=True):
            removed = t.wipe(p, s) if loss == "disk_loss" else sim.logs.power_loss(p, s)
            if removed:
                sim.events.emit(EventType.TRUNCATION, broker_id=b, p=p, cause=loss, records=removed,
                                detail={"to_offset": int(t.leo[p, s])})
                sim.ledger.check_all_replicas(p)


def close_connections(sim: FaultTarget, b: int) -> None:
    """`b` crashed or stopped: what it held fails as a closed connection does.

    Requests that reached it while it was paused are answered by no one: producers retry their
    batches, fetchers back off and re-send, and a response the paused follower never read ends that
    follower's session (it starts afresh when the broker registers again). Fetches parked at it fail.
    """
    st = sim.brokers.by_id[b]
    stalled, st.stalled = st.stalled, []
    for kind, payload in stalled:
        if kind == "fetch_leader":
            sim.replication.retry_after_backoff((payload.follower, payload.leader))
        elif kind == "fetch_apply":
            sim.replication.busy[(payload.request.follower, payload.request.leader)] = False
        # "produce_arrive": the producers' connections close just below, failing what they had in flight.
        # "fetch_wake": the parked fetch it would have answered fails just below.
    sim.produce.client.broker_gone(b)
    sim.produce.connections_closed(b)
    sim.replication.leader_gone(b)


def _power_loss(sim: FaultTarget, a: Action) -> None:
    _crash(sim, a, "power_loss")


def _disk_loss(sim: FaultTarget, a: Action) -> None:
    _crash(sim, a, "disk_loss")


def _restart(sim: FaultTarget, a: Action) -> None:
    for b in a.brokers:
        st = sim.brokers.by_id[b]
        if st.liveness is Liveness.PAUSED:
            _resume(sim, Action(a.at_ms, "resume", (b,)))
        elif st.liveness in _DOWN:
            # After a crash the log has no clean-shutdown marker; `clean: true` says it has (the broker had
            # flushed and closed its logs, as after a SIGTERM with controlled shutdown off).
            unclean = st.liveness is Liveness.CRASHED if a.clean is None else not a.clean
            st.liveness = Liveness.RECOVERING
            cfg = sim.cfg
            spread = sim.rng_timing.uniform(-cfg.log_recovery_jitter, cfg.log_recovery_jitter)
            sim.queue.schedule(sim.clock.now_ms + max(1, round(cfg.log_recovery_ms * (1 + spread))),
                               "broker_registered", (b, unclean))


def _pause(sim: FaultTarget, a: Action) -> None:
    for b in a.brokers:
        st = sim.brokers.by_id[b]
        if st.liveness is Liveness.ALIVE:
            st.liveness = Liveness.PAUSED
            st.paused_at_ms = sim.clock.now_ms


def _resume(sim: FaultTarget, a: Action) -> None:
    for b in a.brokers:
        st = sim.brokers.by_id[b]
        if st.liveness is not Liveness.PAUSED:
            continue
        st.liveness = Liveness.ALIVE
        sim.brokers.release(b)
        if b in sim.stale_view:
            # Its overdue ISR-expiration task runs before the metadata it missed arrives: a leader the
            # controller has replaced shrinks on stale state, and is refused.
            sim.controller.stale_leader_shrinks(b, st.paused_at_ms)
            sim.resync(b)
        sim.replication.start_sessions(b)


def _partition(sim: FaultTarget, a: Action) -> None:
    sim.network.partition(a.groups)
    sim.replication.network_cut()


def _heal(sim: FaultTarget, a: Action) -> None:
    sim.network.heal()
    sim.replication.network_healed()
    for b in sim.brokers.ids:
        if b in sim.stale_view and sim.brokers.running(b):
            sim.resync(b)
        if sim.brokers.running(b):
            sim.replication.start_sessions(b)


def _slow(sim: FaultTarget, a: Action) -> None:
    for b in a.brokers:
        sim.brokers.by_id[b].fetch_delay_ms = a.delay_ms


def _controlled_shutdown(sim: FaultTarget, a: Action) -> None:
    for b in a.brokers:
        st = sim.brokers.by_id[b]
        if st.liveness is not Liveness.ALIVE:
            continue
        if sim.cfg.controlled_shutdown_enable:
            st.liveness = Liveness.SHUTTING_DOWN
            sim.controller.controlled_shutdown(b)
        else:
            st.liveness = Liveness.STOPPED  # the controller finds out by the session timeout
            close_connections(sim, b)


def _config_change(sim: FaultTarget, a: Action) -> None:
    t = sim.table
    assert a.topic is not None
    first, end = sim.topic_range[a.topic]
    settings = dict(a.settings)
    for p in range(first, end):
        if "min_insync_replicas" in settings:
            t.configured_min_isr[p] = int(settings["min_insync_replicas"])  # type: ignore[call-overload]
        if "unclean_leader_election_enable" in settings:
            t.unclean[p] = bool(settings["unclean_leader_election_enable"])
        lg = sim.logs
        for attr in ("segment_bytes", "segment_ms", "flush_messages", "flush_ms", "retention_ms", "retention_bytes"):
            if attr in settings:
                getattr(lg, attr)[p] = settings[attr]
    sim.events.emit(EventType.CONFIG_CHANGE, p=first, cause="alter_configs",
                    detail={k: v for k, v in sorted(settings.items())}, broker_id=None)
    sim.recorder.topic_configs(list(range(first, end)))
    sim.replication.advance_hw(np.arange(first, end))
    if settings.get("unclean_leader_election_enable"):
        for p in range(first, end):
            if t.leader[p] < 0:
                sim.controller.change(p, cause="unclean_enabled")


def _produce(sim: FaultTarget, a: Action) -> None:
    assert a.topic is not None and a.partition is not None and a.producer is not None
    sim.produce.client.send_to(a.producer, a.brokers[0], sim.topic_range[a.topic][0] + a.partition, a.records)


def _elect(sim: FaultTarget, a: Action) -> None:
    assert a.topic is not None
    first, end = sim.topic_range[a.topic]
    ps = [first + a.partition] if a.partition is not None else list(range(first, end))
    for p, code in sim.controller.elect_leaders(ps, a.election_type).items():
        # What the admin client's ElectLeaders answer says for the partition.
        sim.events.emit(EventType.ADMIN_ELECTION, p=p, cause=code, detail={"election_type": a.election_type})


_HANDLERS = {
    "crash": _crash,
    "power_loss": _power_loss,
    "disk_loss": _disk_loss,
    "restart": _restart,
    "pause": _pause,
    "resume": _resume,
    "network_partition": _partition,
    "heal_network": _heal,
    "slow_follower": _slow,
    "controlled_shutdown": _controlled_shutdown,
    "config_change": _config_change,
    "elect_leaders": _elect,
    "produce": _produce,
}

# Every topic setting a config_change may carry is one the handler applies.
assert set(TOPIC_KEYS.values()) <= {"min_insync_replicas", "unclean_leader_election_enable", "segment_bytes",
                                     "segment_ms", "flush_messages", "flush_ms", "retention_ms", "retention_bytes"}
