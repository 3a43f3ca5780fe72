"""The scenario runner: builds the cluster from a scenario, runs the event loop, applies faults.

One root `Random(seed)`; every subsystem gets its own generator derived from it, so adding
randomness in one place does not shift another's stream.

This is the one module that knows every component. A component is handed the narrow pieces it uses
(the clock, the scheduler, the partition table) or, where it calls peers built after it, sees the
simulation through a host protocol declared beside it; the controller, the fetch loop and the produce
path see one another through `ports`. So the emulator's modules import one another in one direction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from random import Random
from typing import Any

import numpy as np

from broker_emulator.brokers import Brokers, Liveness, Network
from broker_emulator.clock import EventQueue, SimClock
from broker_emulator.config import BrokerConfig
from broker_emulator.consumers import Consumers
from broker_emulator.controller import Controller
from broker_emulator.errors import InvalidReplicationFactor, InvariantViolation
from broker_emulator.events import EventLog
from broker_emulator.fault_actions import apply_action, close_connections
from broker_emulator.faults import Action, Fault
from broker_emulator.invariants import Invariants
from broker_emulator.ledger import Ledger
from broker_emulator.logs import Logs
from broker_emulator.metrics import Metrics
from broker_emulator.output import Recorder
from broker_emulator.placement import place_replicas
from broker_emulator.produce import Produce
from broker_emulator.replication import Replication
from broker_emulator.scenario import Scenario
from broker_emulator.state import NO_BROKER, PartitionTable
from schemas.bronze import BrokerStateCause, EventType

MAX_EVENTS_PER_SIM_SECOND = 5_000_000  # a bound on every run: a runaway loop fails instead of hanging


# How far apart brokers started together register: their heartbeat phases are drawn within it.
STARTUP_SPREAD_MS = 1_100

class Simulation:
    def __init__(self, scenario: Scenario, sink: Any = None) -> None:
        self.scenario = scenario
        self.cfg: BrokerConfig = scenario.cluster.config
        self.clock = SimClock(0)
        self.queue = EventQueue(self.clock)
        root = Random(scenario.seed)
        self.rng_placement = Random(root.getrandbits(64))
        self.rng_workload = Random(root.getrandbits(64))
        self.rng_faults = Random(root.getrandbits(64))
        # Brokers' own timing (heartbeat phases, restart durations): drawn last, so the streams before it
        # (and every run recorded with them) stay as they were.
        self.rng_timing = Random(root.getrandbits(64))
        self.run_id = f"{scenario.name}-s{scenario.seed}"
        capacity = sum(t.partitions for t in scenario.topics)
        self.table = PartitionTable(capacity, max(t.replication_factor for t in scenario.topics))
        self.topic_names = [t.name for t in scenario.topics]
        self.topic_range: dict[str, tuple[int, int]] = {}
        self.events = EventLog(self.clock, self.table, self.topic_names)
        self.brokers = Brokers(scenario.cluster.brokers, self.queue)
        self.network = Network()
        self.controller = Controller(self)  # before the metrics, which report its fencing
        self.metrics = Metrics(self.clock, self.table, self.brokers, self.controller)
        self.ledger = Ledger(self)
        self.logs = Logs(self.clock, self.table)
        self.logs.resize(capacity)
        self.replication = Replication(self)
        self.produce = Produce(self)
        self.client_leader = np.full(capacity, NO_BROKER, np.int32)
        self.stale_view: set[int] = set()
        self.data_loss_by_broker: dict[int, str] = {}
        self.stale_leader_writes: dict[int, bool] = {}
        self.faults: list[Fault] = list(scenario.faults)
        if scenario.swarm is not None:
            self.faults += scenario.swarm.generate(self.rng_faults, tuple(self.brokers.ids))
        self._create_topics()
        self.consumers = Consumers(scenario.consumers, self.topic_range, self.table, self.brokers, self.events)
        self.invariants = Invariants(self)
        self.recorder = Recorder(self, sink)
        self._schedule_initial()

    # --- set-up ------------------------------------------------------------------------------------
    def _create_topics(self) -> None:
        t, cfg = self.table, self.cfg
        brokers = [(b.broker_id, b.rack) for b in self.scenario.cluster.brokers]
        rack_rng = self.rng_placement
        for ti, spec in enumerate(self.scenario.topics):
            try:
                assignment = list(spec.assignment) if spec.assignment else place_replicas(
                    brokers, spec.partitions, spec.replication_factor, rack_rng)
            except InvalidReplicationFactor as e:  # the scenario loader checks this first
                raise AssertionError(str(e)) from e
            record_bytes = next((p.record_bytes for p in self.scenario.producers if p.topic == spec.name), 512)
            first = t.count
            for i, reps in enumerate(assignment):
                p = t.add_partition(ti, i, reps, 0, record_bytes)
                t.set_topic_config(p, spec.config, cfg.min_insync_replicas, cfg.unclean_leader_election_enable)
                self._set_log_config(p, spec.config)
                rf = len(reps)
                t.isr[p, :rf] = True
                t.leader[p] = reps[0]
                t.known_leader[p, :rf] = reps[0]
                t.known_epoch[p, :rf] = 0
                t.leader_isr[p, :rf] = True
                self.client_leader[p] = reps[0]
            self.topic_range[spec.name] = (first, t.count)
            for p in range(first, t.count):
                self.events.emit(EventType.TOPIC_CREATED, p=p, broker_id=None, cause="scenario",
                                 detail={"replicas": t.replica_list(p)})
        self.replication.topology_changed()

    def _set_log_config(self, p: int, c: Any) -> None:
        lg = self.logs
        lg.segment_bytes[p], lg.segment_ms[p] = c.segment_bytes, c.segment_ms
        lg.flush_messages[p], lg.flush_ms[p] = c.flush_messages, c.flush_ms
        lg.retention_ms[p], lg.retention_bytes[p] = c.retention_ms, c.retention_bytes

    def _schedule_initial(self) -> None:
        q, cfg, sc = self.queue, self.cfg, self.scenario
        for fault in sorted(self.faults, key=lambda f: (f.at_ms, f.kind, f.brokers)):
            for action in fault.expand():
                if action.at_ms <= sc.duration_ms:
                    q.schedule(action.at_ms, "fault", action, priority=1)
        for i, spec in enumerate(sc.producers):
            ps = np.arange(*self.topic_range[spec.topic])
            self.produce.client.add_producer(spec, ps, Random(self.rng_workload.getrandbits(64) + i))
        # Each broker heartbeats on its own phase (BrokerLifecycleManager schedules the next heartbeat after the
        # previous answer, from when the broker registered): brokers stopped together are fenced apart. Brokers
        # started together register within about a second of each other: real 4.3 brokers stopped together were
        # fenced up to 1.1 s apart (issue 23), and within one collector read of each other in bench/fidelity.py.
        # Where the group sits in the heartbeat interval is the seed's too, so a fault at a round time finds the
        # brokers anywhere in their cycle.
        interval = cfg.broker_heartbeat_interval_ms
        group = self.rng_timing.randrange(interval)
        for b in self.brokers.ids:
            own = self.rng_timing.randrange(min(STARTUP_SPREAD_MS, interval))
            q.schedule(1 + (group + own) % interval, "heartbeat", b, priority=2)
            q.schedule(cfg.broker_session_timeout_ms + 1, "session_expiry", (b, 0), priority=2)
        q.schedule(cfg.replica_lag_time_max_ms // 2, "isr_check", priority=3)
        q.schedule(min(5_000, cfg.page_cache_writeback_ms), "writeback", priority=3)
        q.schedule(300_000, "retention", priority=3)
        q.schedule(sc.metric_interval_ms, "metrics", priority=9)
        for b in self.brokers.ids:
            self.replication.start_sessions(b)

    # --- the loop ----------------------------------------------------------------------------------
    def run(self, on_interval: Callable[[int], None] | None = None,
            wait_until: Callable[[int], None] | None = None) -> dict[str, Any]:
        """Run to the scenario's duration. `wait_until(virtual_ms)` paces live runs."""
        self.run_until(self.scenario.duration_ms, on_interval, wait_until)
        self.invariants.check(full=True)
        return self.recorder.finish()

    def run_until(self, until_ms: int, on_interval: Callable[[int], None] | None = None,
                  wait_until: Callable[[int], None] | None = None) -> None:
        """Process every event due at or before `until_ms` (scripted tests step with this)."""
        budget = self.queue.processed + MAX_EVENTS_PER_SIM_SECOND * max(1, (until_ms - self.clock.now_ms) // 1000)
        handlers = self._handlers
        while True:
            at = self.queue.next_time()
            if at is None or at > until_ms:
                break
            if wait_until is not None:
                wait_until(at)
            kind, payload = self.queue.pop()
            handlers[kind](payload)
            if kind == "metrics" and on_interval is not None:
                on_interval(self.clock.now_ms)
            if self.queue.processed > budget:
                raise InvariantViolation(f"event budget exceeded at t={self.clock.now_ms}ms; "
                                         f"reproduce with --seed {self.scenario.seed}")
        self.clock.now_ms = max(self.clock.now_ms, until_ms)

    @functools.cached_property
    def _handlers(self) -> dict[str, Callable[[Any], None]]:
        rep, prod, ctl = self.replication, self.produce, self.controller
        return {
            "fetch_send": rep.send,
            "fetch_leader": lambda r: rep.at_leader([r, *self.queue.pop_same("fetch_leader")]),
            "fetch_apply": lambda r: rep.at_follower([r, *self.queue.pop_same("fetch_apply")]),
            "fetch_wake": rep.wake,
            "fetch_timeout": rep.fetch_timeout,
            "produce_tick": prod.client.tick,
            "produce_arrive": lambda r: prod.arrive([r, *self.queue.pop_same("produce_arrive")]),
            "produce_timeout": prod.complete,
            "produce_response": prod.client.response,
            "produce_request_timeout": prod.client.request_timeout,
            "producer_metadata": prod.client.metadata_answered,
            "alter_partition": ctl.handle_alter,
            "alter_reply": ctl.alter_reply,
            "alter_retry": ctl.alter_retry,
            "leader_recovered": ctl.recovered,
            "metadata": self._deliver_metadata,
            "shutdown_complete": self._shutdown_complete,
            "broker_registered": self._registered,
            "heartbeat": self._heartbeat,
            "session_expiry": self.controller.session_expiry,
            "balance_leaders": ctl.balance_leaders,
            "isr_check": self._isr_check,
            "writeback": self._writeback,
            "retention": self._retention,
            "metrics": self._metrics,
            "fault": self._fault,
        }

    # --- metadata propagation ---------------------------------------------------------------------
    def publish(self, ps: list[int]) -> None:
        self.queue.schedule(self.clock.now_ms + self.cfg.metadata_propagation_ms, "metadata", ps, priority=4)

    def _deliver_metadata(self, ps: list[int]) -> None:
        t = self.table
        touched: set[int] = set()
        for p in ps:
            self.client_leader[p] = t.leader[p]
            for s in range(int(t.rf[p])):
                b = int(t.replicas[p, s])
                if self.brokers.running(b) and self.network.reaches_controller(b):
                    self._apply_view(p, s)
                    touched.add(b)
                else:
                    self.stale_view.add(b)
        for b in sorted(touched):
            self.replication.view_changed(b)
            self.replication.start_sessions(b)

    def resync(self, b: int) -> None:
        """A broker that missed metadata (down, paused, cut off) catches up with the whole log."""
        t = self.table
        self.stale_view.discard(b)
        ps, ss = np.nonzero(t.replicas[: t.count] == b)
        for p, s in zip(ps.tolist(), ss.tolist(), strict=True):
            self._apply_view(p, s)
        self.replication.view_changed(b)
        self.replication.start_sessions(b)

    def _apply_view(self, p: int, s: int) -> None:
        t = self.table
        b = int(t.replicas[p, s])
        new_leader, new_epoch = int(t.leader[p]), int(t.leader_epoch[p])
        was_leader = t.known_leader[p, s] == b
        epoch_changed = t.known_epoch[p, s] != new_epoch
        t.known_leader[p, s] = new_leader
        t.known_epoch[p, s] = new_epoch
        t.fetch_dirty[p] = True
        if new_leader == b:
            if epoch_changed or not was_leader:
                self._become_leader(p, s)
            else:
                t.leader_isr[p] = t.isr[p]
                t.leader_partition_epoch[p] = t.partition_epoch[p]
                self.replication.advance_hw(np.asarray([p]))
        elif epoch_changed or was_leader:
            t.needs_truncation[p, s] = True
            if self.cfg.truncation == "high_watermark":
                # Pre-KIP-101: a new follower cut its log to its own HW at once, asking no one.
                t.needs_truncation[p, s] = False
                removed = t.truncate(p, s, int(t.hw[p, s]))
                if removed:
                    self.events.emit(EventType.TRUNCATION, broker_id=b, p=p, cause="high_watermark", records=removed,
                                     detail={"to_offset": int(t.leo[p, s]), "leader": new_leader})
            if was_leader:
                self.produce.leadership_changed(p)

    def _become_leader(self, p: int, s: int) -> None:
        t, now = self.table, self.clock.now_ms
        t.needs_truncation[p, s] = False
        leo = int(t.leo[p, s])
        t.epoch_start_offset[p] = leo
        t.assign_epoch(p, s, int(t.leader_epoch[p]), leo)
        t.leader_isr[p] = t.isr[p]
        t.leader_partition_epoch[p] = t.partition_epoch[p]
        t.pending_add[p] = False
        t.alter_inflight[p] = False
        t.last_caught_up_ms[p] = np.where(t.isr[p], now, 0)
        t.seen_leo[p] = -1
        t.last_fetch_leader_leo[p] = 0
        t.last_fetch_ms[p] = 0
        self.ledger.check_leader(p, s)
        self.produce.leadership_changed(p)

    # --- periodic work -----------------------------------------------------------------------------
    def _heartbeat(self, b: int) -> None:
        self.controller.heartbeat(b)
        self.queue.schedule(self.clock.now_ms + self.cfg.broker_heartbeat_interval_ms, "heartbeat", b, priority=2)

    def _isr_check(self, _: Any) -> None:
        self.replication.check_shrinks()
        self.queue.schedule(self.clock.now_ms + self.cfg.replica_lag_time_max_ms // 2, "isr_check", priority=3)

    def _writeback(self, _: Any) -> None:
        running = np.zeros(max(self.brokers.ids) + 1, bool)
        for b in self.brokers.ids:
            running[b] = self.brokers.running(b) or self.brokers.is_paused(b)
        self.logs.writeback(running, self.cfg.page_cache_writeback_ms)
        self.queue.schedule(self.clock.now_ms + min(5_000, self.cfg.page_cache_writeback_ms), "writeback", priority=3)

    def _retention(self, _: Any) -> None:
        self.logs.enforce_retention()
        self.queue.schedule(self.clock.now_ms + 300_000, "retention", priority=3)

    def _metrics(self, _: Any) -> None:
        self.recorder.interval()
        self.invariants.check()
        self.queue.schedule(self.clock.now_ms + self.scenario.metric_interval_ms, "metrics", priority=9)

    # --- faults ------------------------------------------------------------------------------------
    def _fault(self, a: Action) -> None:
        apply_action(self, a)

    def _shutdown_complete(self, b: int) -> None:
        st = self.brokers.by_id[b]
        if st.liveness is not Liveness.SHUTTING_DOWN:
            return
        st.liveness = Liveness.STOPPED
        close_connections(self, b)
        self.controller.fenced[b] = True
        self.events.emit(EventType.BROKER_STATE, broker_id=b, cause=BrokerStateCause.CONTROLLED_SHUTDOWN,
                         detail={"state": "stopped"})

    def _registered(self, payload: tuple[int, bool]) -> None:
        b, unclean = payload
        st = self.brokers.by_id[b]
        if st.liveness is not Liveness.RECOVERING:
            return
        st.liveness = Liveness.ALIVE
        st.epoch += 1
        self.metrics.reset_broker(b)
        self.events.emit(EventType.BROKER_STATE, broker_id=b, cause=BrokerStateCause.REGISTERED,
                         detail={"state": "alive", "unclean_shutdown": unclean})
        self.controller.registered(b, unclean)
        # A restarted broker knows nothing of leadership: every replica goes through becoming
        # leader/follower again (and, before KIP-101, truncation to its checkpointed HW).
        t = self.table
        hosted = t.replicas[: t.count] == b
        t.known_epoch[: t.count][hosted] = -1
        t.known_leader[: t.count][hosted] = NO_BROKER
        self.resync(b)

    def describe(self, p: int) -> str:
        t = self.table
        return f"{self.topic_names[int(t.topic_index[p])]}-{int(t.partition_index[p])}"
