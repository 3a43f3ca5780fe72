"""Collects the emulator's rows per bronze table and hands them to a sink in numbered batches.

A batch is flushed every `flush_every_intervals` metric intervals (and at the end), so a fast run
makes few, large Delta commits and a live run (flush every interval) makes data visible each second.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pyarrow as pa

from broker_emulator.config import acks_label
from broker_emulator.ledger import Counters
from broker_emulator.summary import SummaryHost, build_summary
from schemas.bronze import (
    ACK_LEDGER,
    BROKER_METRICS,
    CLUSTER_EVENTS,
    CONSUMER_PROGRESS,
    METRICS_COVERAGE,
    PARTITION_STATE,
    RUNS,
    TOPIC_CONFIGS,
    ExporterRules,
    NodeRole,
)
from schemas.kafka_metrics import BROKER_KEYS, CONTROLLER_KEYS, CONTROLLER_NODE_ID, MBEANS, metric_name
from schemas.table import TableDef

if TYPE_CHECKING:
    from broker_emulator.config import BrokerConfig
    from broker_emulator.logs import Logs


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building hundreds of thousands of small rows.

    Every few hundred allocations it would scan the young objects, and ever more often the whole
    growing heap: on 200,000 partitions that doubles the cost of a snapshot. The rows hold no cycles.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Sink(Protocol):
    def write_batch(self, batch_id: int, tables: dict[TableDef, pa.Table]) -> list[str]: ...


class RecorderHost(SummaryHost, Protocol):
    """What the recorder reads of the simulation: everything the summary reads, and the topics' layout."""

    @property
    def cfg(self) -> BrokerConfig: ...
    @property
    def logs(self) -> Logs: ...
    @property
    def topic_names(self) -> list[str]: ...
    @property
    def topic_range(self) -> dict[str, tuple[int, int]]:
        """Topic -> its [first, end) range of partition indices."""


class Recorder:
    def __init__(self, sim: RecorderHost, sink: Sink | None) -> None:
        self.sim = sim
        self.sink = sink
        self.batch_id = 0
        self.intervals = 0
        self.cols: dict[TableDef, dict[str, list[Any]]] = {}
        self.rows_written: dict[str, int] = {}
        self.topic_configs(list(range(sim.table.count)))
        self.metrics_coverage()

    def _ts(self, now_ms: int | None = None) -> int:
        return (self.sim.scenario.start_epoch_ms + (self.sim.clock.now_ms if now_ms is None else now_ms)) * 1000

    def _extend(self, td: TableDef, **columns: list[Any]) -> None:
        fresh: dict[str, list[Any]] = {n: [] for n in td.arrow_schema.names if n not in ("run_id", "batch_id")}
        cols = self.cols.setdefault(td, fresh)
        n = None
        for name, values in columns.items():
            cols[name].extend(values)
            n = len(values)
        if n is not None and set(columns) != set(cols):
            missing = sorted(set(cols) - set(columns))
            raise AssertionError(f"{td.qualified_name}: rows without columns {missing}")

    # --- per interval ----------------------------------------------------------------------------
    def interval(self) -> None:
        sim = self.sim
        self.intervals += 1
        ts = self._ts()
        rows = sim.metrics.snapshot(sim.scenario.metric_interval_ms)
        self._extend(BROKER_METRICS, ts=[ts] * len(rows), broker_id=[r[0] for r in rows],
                     mbean=[MBEANS[r[1]] for r in rows], name=[metric_name(r[1]) for r in rows],
                     kind=[r[2] for r in rows], value=[r[3] for r in rows], count=[r[4] for r in rows],
                     process_start_ts=[self._ts(sim.metrics.process_start_ms.get(r[0], 0)) for r in rows])
        every = sim.scenario.partition_state_interval_ms // sim.scenario.metric_interval_ms
        if self.intervals % every == 0:
            self.partition_state()
        self._ledger(ts)
        sim.consumers.poll(sim.scenario.metric_interval_ms)
        self._consumers(ts)
        self._events()
        if self.intervals % sim.scenario.flush_every_intervals == 0:
            self.flush(final=False)

    def _ledger(self, ts: int) -> None:
        t = self.sim.table
        counters = self.sim.ledger.drain_interval()
        now_ms = self.sim.clock.now_ms
        # A partition whose writes all wait (nothing sent, acknowledged or failed this interval) still has a row:
        # how long they have waited is the news.
        waiting = self.sim.produce.client.oldest_waiting_ms()
        for key in waiting.keys() - counters.keys():
            counters[key] = Counters()
        keys = sorted(counters)
        ps = [p for p, _ in keys]
        leaders = t.leader[ps].tolist()
        self._extend(ACK_LEDGER, ts=[ts] * len(keys),
                     unacked_for_ms=[now_ms - waiting[k] if k in waiting else 0 for k in keys],
                     leader=[leader if leader >= 0 else None for leader in leaders],
                     isr=[t.members(p, t.isr[p]) for p in ps],
                     topic=[self.sim.topic_names[int(t.topic_index[p])] for p, _ in keys],
                     partition=[int(t.partition_index[p]) for p, _ in keys],
                     acks=[acks_label(a) for _, a in keys],
                     records_sent=[counters[k].sent for k in keys], records_acked=[counters[k].acked for k in keys],
                     records_failed=[counters[k].failed for k in keys], records_lost=[counters[k].lost for k in keys],
                     lost_by_event_seq=[counters[k].lost_by_seq for k in keys],
                     lost_by=[counters[k].lost_by for k in keys])

    def _consumers(self, ts: int) -> None:
        t, names = self.sim.table, self.sim.topic_names
        rows = self.sim.consumers.drain()
        self._extend(CONSUMER_PROGRESS, ts=[ts] * len(rows), group=[r[0] for r in rows],
                     topic=[names[int(t.topic_index[r[1]])] for r in rows],
                     partition=[int(t.partition_index[r[1]]) for r in rows], position=[r[2] for r in rows],
                     high_watermark=[r[3] for r in rows], lag=[r[4] for r in rows],
                     records_consumed=[r[5] for r in rows], records_read_then_lost=[r[6] for r in rows])

    def _events(self) -> None:
        rows = self.sim.events.drain()
        names = ("ts", "seq", "event_type", "broker_id", "topic", "partition", "leader_epoch", "cause", "records",
                 "detail")
        cols = {n: [r[i] for r in rows] for i, n in enumerate(names)}
        cols["ts"] = [self._ts(x) for x in cols["ts"]]
        self._extend(CLUSTER_EVENTS, **cols)

    def partition_state(self) -> None:
        with _gc_paused():
            self._partition_state()

    def _partition_state(self) -> None:
        sim, t = self.sim, self.sim.table
        n = t.count
        rf = t.rf[:n]
        leader = t.leader[:n]
        ls = np.argmax(t.replicas[:n] == leader[:, None], axis=1)
        rows = np.arange(n)
        hw = np.where(leader >= 0, t.hw[rows, ls], -1)
        log_start = np.where(leader >= 0, t.log_start[rows, ls], 0)
        reps = t.replicas[:n].tolist()
        isr, elr, leo = t.isr[:n].tolist(), t.elr[:n].tolist(), t.leo[:n].tolist()
        rf_l = rf.tolist()
        self._extend(
            PARTITION_STATE, ts=[self._ts()] * n,
            topic=[sim.topic_names[i] for i in t.topic_index[:n].tolist()],
            partition=t.partition_index[:n].tolist(), leader=leader.tolist(),
            leader_epoch=t.leader_epoch[:n].tolist(), partition_epoch=t.partition_epoch[:n].tolist(),
            replicas=[r[:k] for r, k in zip(reps, rf_l, strict=True)],
            isr=[[b for b, m in zip(r[:k], i[:k], strict=True) if m] for r, i, k in zip(reps, isr, rf_l, strict=True)],
            elr=[[b for b, m in zip(r[:k], e[:k], strict=True) if m] for r, e, k in zip(reps, elr, rf_l, strict=True)],
            leader_recovery_state=["RECOVERING" if x else "RECOVERED" for x in t.recovery_state[:n].tolist()],
            high_watermark=hw.tolist(), log_start_offset=log_start.tolist(),
            replica_leos=[lo[:k] for lo, k in zip(leo, rf_l, strict=True)],
            configured_min_isr=t.configured_min_isr[:n].tolist(),
            effective_min_isr=np.minimum(t.configured_min_isr[:n], rf).tolist())

    def topic_configs(self, ps: list[int]) -> None:
        sim, t, lg = self.sim, self.sim.table, self.sim.logs
        cluster = sim.scenario.cluster
        counts = {name: hi - lo for name, (lo, hi) in sim.topic_range.items()} if sim.topic_range else {}
        reps = [t.replica_list(p) for p in ps]
        self._extend(
            TOPIC_CONFIGS, ts=[self._ts()] * len(ps),
            topic=[sim.topic_names[int(t.topic_index[p])] for p in ps],
            partition=[int(t.partition_index[p]) for p in ps],
            partitions=[counts.get(sim.topic_names[int(t.topic_index[p])], 0) for p in ps],
            replication_factor=[int(t.rf[p]) for p in ps],
            min_insync_replicas=[int(t.configured_min_isr[p]) for p in ps],
            effective_min_isr=[int(min(t.configured_min_isr[p], t.rf[p])) for p in ps],
            unclean_leader_election_enable=[bool(t.unclean[p]) for p in ps],
            elr_enabled=[sim.cfg.eligible_leader_replicas_enable] * len(ps),
            replicas=reps, replica_racks=[[cluster.rack_of(b) or "" for b in r] for r in reps],
            segment_bytes=[int(lg.segment_bytes[p]) for p in ps], retention_ms=[int(lg.retention_ms[p]) for p in ps],
            flush_messages=[int(lg.flush_messages[p]) for p in ps])

    def metrics_coverage(self) -> None:
        """Once, at the start: every broker and the controller report every metric of their role (the model has
        them all), under the emulator's own naming."""
        nodes = [(b, NodeRole.BROKER, BROKER_KEYS) for b in sorted(self.sim.brokers.ids)]
        nodes.append((CONTROLLER_NODE_ID, NodeRole.CONTROLLER, CONTROLLER_KEYS))
        n = len(nodes)
        self._extend(METRICS_COVERAGE, ts=[self._ts()] * n, node_id=[node for node, _, _ in nodes],
                     metrics_url=[None] * n, role=[role.value for _, role, _ in nodes], reporting=[True] * n,
                     reason=[""] * n, exporter_rules=[ExporterRules.EMULATOR.value] * n,
                     metrics_found=[len(keys) for _, _, keys in nodes],
                     metrics_expected=[len(keys) for _, _, keys in nodes], missing=[[] for _ in nodes],
                     rules_blind=[[] for _ in nodes])

    # --- flushing ----------------------------------------------------------------------------------
    def flush(self, final: bool) -> None:
        with _gc_paused():
            self._flush(final)

    def _flush(self, final: bool) -> None:
        sim = self.sim
        self._events()
        self._extend(RUNS, scenario=[sim.scenario.name], seed=[sim.scenario.seed], start_ts=[self._ts(0)],
                     end_ts=[self._ts()], metric_interval_ms=[sim.scenario.metric_interval_ms],
                     brokers=[len(sim.brokers.ids)], broker_ids=[sorted(sim.brokers.ids)],
                     controller_ids=[[CONTROLLER_NODE_ID]], final=[final],
                     summary=[json.dumps(build_summary(sim), sort_keys=True)])
        tables: dict[TableDef, pa.Table] = {}
        for td, cols in self.cols.items():
            n = len(next(iter(cols.values())))
            full = {"run_id": [sim.run_id] * n, "batch_id": [self.batch_id] * n, **cols}
            tables[td] = pa.Table.from_pydict({k: full[k] for k in td.arrow_schema.names}, schema=td.arrow_schema)
            self.rows_written[td.name] = self.rows_written.get(td.name, 0) + n
        self.cols = {}
        if self.sink is not None:
            self.sink.write_batch(self.batch_id, tables)
        self.batch_id += 1

    def finish(self) -> dict[str, Any]:
        if self.intervals % self.sim.scenario.flush_every_intervals != 0 or self.cols or self.batch_id == 0:
            self._ledger(self._ts())
        self.flush(final=True)
        return build_summary(self.sim)
