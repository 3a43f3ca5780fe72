"""`isrwatch collect`: read a real Kafka cluster every interval and append one bronze batch per interval.

Each process is one run (`kafka-<cluster id>-<start time>`), so batch ids and event sequence numbers start
at 0 and stay gap-free within it. What must outlive a process is kept per cluster under
`<lakehouse>/_collector/<cluster id>/`: the last view of every partition (a restarted collector reports
what changed while it was away, and its partition epochs keep counting up) and the canary's state.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import pyarrow as pa

from collector import bronze_rows as rows
from collector.client_security import PLAINTEXT_SECURITY, ClientSecurity
from collector.cluster_view import ClusterReader, ClusterView, Partition, TopicConfig, TopicPartition
from collector.json_file import write_json_atomic
from collector.metrics_coverage import CoverageTracker, metrics_gaps, node_of_url
from collector.metrics_scrape import MeterState, MetricRow, NodeScrape
from collector.observed_events import (
    Event,
    Remembered,
    broker_events,
    controlled_shutdown_silence_ms,
    election_kind,
    hold_stale_partitions,
    shutting_down_brokers,
    topic_events,
    view_events,
)
from collector.scrape_schedule import ScrapeSchedule, ScrapeTiming
from foundation.bronze_sink import DeltaSink
from foundation.object_store import is_object_store
from schemas import bronze
from schemas.bronze import UNCLEAN_ELECTIONS, EventType, NodeRole
from schemas.table import TableDef

log = logging.getLogger("isrwatch.collect")


class CanarySource(Protocol):
    """What the loop needs of the canary (collector/canary_feed.py)."""

    def observe(self, events: list[Event]) -> None:
        """The collector's numbered events of this interval (elections, truncations) to attribute losses to."""

    def interval_rows(self, now_ms: int, next_seq: int, partitions: dict[TopicPartition, Partition]
                      ) -> tuple[list[dict[str, Any]], list[Event]]:
        """(ack_ledger rows, events numbered from next_seq) for the interval ending at now_ms; `partitions`, the
        interval's view, gives the leader and ISR its writes wait on."""

    def save_state(self) -> None: ...

    def stop(self) -> None: ...

    def summary(self) -> dict[str, Any]: ...


@dataclass
class CollectSettings:
    bootstrap_servers: list[str]
    lakehouse: str
    metrics_urls: dict[int | None, list[str]] = field(default_factory=dict)  # node id (None: learn it) -> URLs
    interval_s: float = 1.0
    timeout_s: float = 0.5           # each Admin request to a broker; the least a metrics scrape is given
    scrape_timeout_s: float = 10.0   # the most one metrics scrape may take (collector/scrape_schedule.py)
    config_every: int = 30
    state_dir: str | None = None     # where `_collector/` goes; default the lakehouse, when it is a local one
    # Alert rule -> the broker_metrics keys its condition reads (conf/alerts.yaml, read by the CLI): the rules a
    # node's missing metrics blind, in bronze.metrics_coverage and the warnings.
    alert_rule_metrics: dict[str, frozenset[str]] = field(default_factory=dict)
    security: ClientSecurity = PLAINTEXT_SECURITY   # TLS and SASL for every Kafka connection (--command-config)

    @property
    def state_root(self) -> str:
        """The folder holding the collector's memory of each cluster (small JSON files, rewritten each interval:
        kept on a local disk, not on an object store)."""
        if self.state_dir is not None:
            return self.state_dir
        if is_object_store(self.lakehouse):
            raise ValueError(f"the lakehouse {self.lakehouse} is on an object store: give the collector a local "
                             "--state-dir for what it remembers of the cluster between runs")
        return self.lakehouse


@dataclass
class ClusterMemory:
    """What is kept per cluster across collector processes."""

    path: Path
    partitions: dict[TopicPartition, Remembered] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> ClusterMemory:
        path = directory / "partitions.json"
        if not path.exists():
            return cls(path)
        raw = json.loads(path.read_text())
        parts = {(r["topic"], r["partition"]): Remembered.from_json(r["state"]) for r in raw["partitions"]}
        return cls(path, parts)

    def save(self) -> None:
        body = {"partitions": [{"topic": t, "partition": p, "state": m.to_json()}
                               for (t, p), m in sorted(self.partitions.items())]}
        write_json_atomic(self.path, body)


def run_id_for(cluster_id: str, start_ms: int) -> str:
    stamp = datetime.fromtimestamp(start_ms / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9]", "", cluster_id)[:10] or "cluster"
    return f"kafka-{safe}-{stamp}"


class Collector:
    """One collector process: connect, then `step()` once per interval (`run()` loops it)."""

    def __init__(self, settings: CollectSettings, *, canary_factory: Callable[[str, Path], CanarySource] | None
                 = None, wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.settings = settings
        self.wall_ms = wall_ms
        self.reader = ClusterReader(settings.bootstrap_servers, timeout_s=settings.timeout_s,
                                    config_every=settings.config_every, security=settings.security)
        self.reader.connect()
        self.start_ms = wall_ms()
        self.cluster_id = self.reader.cluster_id
        self.run_id = run_id_for(self.cluster_id, self.start_ms)
        self.state_dir = Path(settings.state_root) / "_collector" / (re.sub(r"[^A-Za-z0-9_-]", "_", self.cluster_id)
                                                                   or "cluster")
        self.memory = ClusterMemory.load(self.state_dir)
        self.sink = DeltaSink(settings.lakehouse, self.run_id, writer="collector")
        self.http = httpx.Client()
        self.meters = MeterState()
        self.metric_rows: dict[int, tuple[NodeScrape, list[MetricRow]]] = {}   # node -> its latest scrape's rows
        self.metrics_urls: dict[int, str] = {n: u[0] for n, u in settings.metrics_urls.items() if n is not None}
        self.unassigned_urls: list[str] = list(settings.metrics_urls.get(None, []))
        self.unassigned_scrapes: dict[str, NodeScrape] = {}   # this interval's, of the URLs still unassigned
        self.scrapes = ScrapeSchedule(self.http, ScrapeTiming(settings.interval_s, settings.timeout_s,
                                                              settings.scrape_timeout_s))
        self.scrapes.start([*self.metrics_urls.values(), *self.unassigned_urls])
        self.scrapes.wait_first()
        self.coverage = CoverageTracker(settings.alert_rule_metrics)
        self.metrics_gaps: list[tuple[str, str]] = []   # (warning, brief): what no metrics URL watches
        self.canary = canary_factory(self.run_id, self.state_dir) if canary_factory else None
        self.batch_id = 0
        self.next_seq = 0
        self.registry: set[int] = set(self.reader.addresses)
        self.controllers: set[int] = set()
        self.racks: dict[int, str | None] = {}
        self.registered: set[int] | None = None
        self.silent: dict[int, str] = {}
        self.last_answered_ms: dict[int, int] = {}   # broker -> the last interval it answered (bounded by brokers)
        self.shutting_down: frozenset[int] = frozenset()  # brokers seen in a controlled shutdown, until back
        self.written_configs: dict[str, TopicConfig] = {}
        self.last_interval_ms = 0.0
        self.stale_answers = 0    # partitions answered at an older leader epoch than recorded, held

    def close(self) -> None:
        if self.canary is not None:
            self.canary.stop()
        self.scrapes.close()
        self.reader.close()
        self.http.close()

    # ---- one interval ------------------------------------------------------------------------------

    def step(self, *, final: bool = False) -> dict[str, Any]:
        t0 = time.perf_counter()
        now_ms = self.wall_ms()
        view = self.reader.read(now_ms)
        scrapes = self._scrapes()
        gathered_ms = (time.perf_counter() - t0) * 1000   # the network part: bounded by the request timeout
        tables, events = self._tables(view, scrapes, final)
        self.sink.write_batch(self.batch_id, tables)
        self.memory.save()
        if self.canary is not None:
            self.canary.save_state()
        self.batch_id += 1
        self.last_interval_ms = (time.perf_counter() - t0) * 1000
        return {"batch": self.batch_id - 1, "partitions": len(view.partitions), "events": len(events),
                "not_answering": sorted(view.not_answering), "elapsed_ms": round(self.last_interval_ms, 1),
                "gathered_ms": round(gathered_ms, 1), "steps_ms": {k: round(v, 1) for k, v in view.step_ms.items()},
                "metrics_warnings": [*self.coverage.warnings(), *(warning for warning, _ in self.metrics_gaps)]}

    def metrics_briefs(self) -> list[str]:
        """A few words per metrics URL or node missing, for a progress line."""
        return [*self.coverage.briefs(), *(brief for _, brief in self.metrics_gaps)]

    def _scrapes(self) -> dict[int, NodeScrape]:
        """Each node's latest scrape (collector/scrape_schedule.py); a URL not yet known as a node's is placed by
        the node id its exposition proves."""
        placed: dict[int, NodeScrape] = {}
        if self.unassigned_urls:
            unplaced = {u: self.scrapes.current(u) for u in self.unassigned_urls}
            for url, scrape in unplaced.items():
                exposition = scrape.exposition
                node = node_of_url(url, exposition, self.reader.addresses) if exposition is not None else None
                if node is not None:
                    self.metrics_urls[node] = url
                    placed[node] = scrape
            self.unassigned_urls = [u for u in self.unassigned_urls if u not in self.metrics_urls.values()]
            self.unassigned_scrapes = {u: s for u, s in unplaced.items() if u in self.unassigned_urls}
        # Each URL's current scrape is read once per interval: a late one is counted once.
        return {node: placed.get(node) or self.scrapes.current(url) for node, url in self.metrics_urls.items()}

    def _tables(self, view: ClusterView, scrapes: dict[int, NodeScrape],
                final: bool) -> tuple[dict[TableDef, pa.Table], list[Event]]:
        ts = view.ts_ms
        events: list[Event] = []
        registered = set(view.brokers)
        self.stale_answers += len(hold_stale_partitions(view, self.memory.partitions))
        shutting_down = shutting_down_brokers(view, self.memory.partitions)
        if view.brokers or not view.not_answering:
            if self.registered is not None:
                events += broker_events(ts, self.registered, registered, self.silent, view.not_answering,
                                        self.last_answered_ms, controlled_shutdown_silence_ms(self.interval_ms),
                                        shutting_down, self.shutting_down)
                self.shutting_down = (self.shutting_down | shutting_down) - (registered - self.registered)
            self.registered = registered
        self.silent = dict(view.not_answering)
        self.last_answered_ms.update({b: ts for b in view.brokers if b not in view.not_answering})
        self.racks.update({b.node_id: b.rack for b in view.brokers.values()})
        self.registry |= registered | {b for p in view.partitions.values() for b in p.replicas}
        configs = dict(self.reader.topic_configs)
        changed_topics = {t for t, c in configs.items() if self.written_configs.get(t) != c}
        events += topic_events(ts, self.written_configs, {t: configs[t] for t in changed_topics})
        events += view_events(ts, view, self.memory.partitions, shutting_down | self.shutting_down)
        self._remember(view, events)

        metric_rows = []
        for node, scrape in sorted(scrapes.items()):
            node_rows = self._metric_rows(node, scrape)
            if any(r.key == "ActiveControllerCount" for r in node_rows) or \
                    (scrape.exposition is not None and not scrape.exposition.is_broker):
                self.controllers.add(node)
            metric_rows += node_rows
        roles = {**{c: NodeRole.CONTROLLER for c in self.controllers}, **{b: NodeRole.BROKER for b in self.registry}}
        coverage = self.coverage.observe([*sorted(scrapes.items()), *((None, s) for s in
                                                                       self.unassigned_scrapes.values())], roles)
        self.metrics_gaps = metrics_gaps(self.registry, set(self.metrics_urls), self.controllers, scrapes,
                                         list(self.unassigned_scrapes.values()), self.settings.alert_rule_metrics)
        for e in events:
            e.seq = self.next_seq
            self.next_seq += 1
        ack_rows: list[dict[str, Any]] = []
        if self.canary is not None:
            self.canary.observe(events)
            ack_rows, canary_events = self.canary.interval_rows(ts, self.next_seq, view.partitions)
            self.next_seq += len(canary_events)
            events += canary_events

        summary = {"writer": "collector", "cluster_id": self.cluster_id, "interval_ms": self.interval_ms,
                   "not_answering": {str(b): why for b, why in sorted(view.not_answering.items())},
                   "last_interval_ms": round(self.last_interval_ms, 1), "stale_answers_held": self.stale_answers,
                   **({"canary": self.canary.summary()} if self.canary is not None else {})}
        r, b = self.run_id, self.batch_id
        out = {
            bronze.RUNS: rows.table(bronze.RUNS, r, b, [rows.runs_row(
                scenario="collect", start_ms=self.start_ms, end_ms=ts, interval_ms=self.interval_ms,
                broker_ids=self.registry, controller_ids=self.controllers, final=final,
                summary=json.dumps(summary, sort_keys=True))]),
            bronze.TOPIC_CONFIGS: rows.table(bronze.TOPIC_CONFIGS, r, b, rows.topic_config_rows(
                ts, changed_topics, configs, view, self.racks, view.elr_enabled)),
            bronze.PARTITION_STATE: rows.table(bronze.PARTITION_STATE, r, b, rows.partition_state_rows(
                view, self.memory.partitions, {t: c for t, c in configs.items() if t in self.written_configs
                                               or t in changed_topics})),
            bronze.BROKER_METRICS: rows.table(bronze.BROKER_METRICS, r, b, rows.broker_metric_rows(ts, metric_rows)),
            bronze.CLUSTER_EVENTS: rows.table(bronze.CLUSTER_EVENTS, r, b, rows.event_rows(events)),
            bronze.ACK_LEDGER: rows.table(bronze.ACK_LEDGER, r, b, ack_rows),
            # The canary's consumer reads by assignment, not as a group: no consumer group to report.
            bronze.CONSUMER_PROGRESS: rows.table(bronze.CONSUMER_PROGRESS, r, b, []),
        }
        out[bronze.METRICS_COVERAGE] = rows.table(bronze.METRICS_COVERAGE, r, b, [c.row(rows.us(ts)) for c in coverage])
        self.written_configs.update({t: configs[t] for t in changed_topics})
        # A table commits only when it has rows (each commit costs ~30 ms of CPU and a file readers list), except in
        # the first batch, which creates every table so that readers find them.
        return {td: t for td, t in out.items() if t.num_rows or b == 0}, events

    def _metric_rows(self, node: int, scrape: NodeScrape) -> list[MetricRow]:
        """The node's rows this interval: its latest answered scrape's, again in every interval until the next
        one ends (a gauge's value is its latest, a meter's rate the one between its last two scrapes, as a
        Prometheus query reads them); none while it is not reporting."""
        if not scrape.reporting:
            return []
        cached = self.metric_rows.get(node)
        if cached is None or cached[0] is not scrape:
            cached = self.metric_rows[node] = (scrape, self.meters.rows(node, scrape))
        return cached[1]

    @property
    def interval_ms(self) -> int:
        return int(self.settings.interval_s * 1000)

    def _remember(self, view: ClusterView, events: list[Event]) -> None:
        unclean = {(e.topic, e.partition) for e in events
                   if e.event_type == EventType.ELECTION and e.cause in UNCLEAN_ELECTIONS}
        for tp, p in view.partitions.items():
            before = self.memory.partitions.get(tp)
            changed = before is None or (p.leader, p.leader_epoch, list(p.isr), list(p.elr), list(p.replicas)) != (
                before.leader, before.leader_epoch, before.isr, before.elr, before.replicas)
            hw = view.high_watermarks.get(tp, before.high_watermark if before else 0)
            start = view.log_start_offsets.get(tp, before.log_start_offset if before else 0)
            if before is not None and p.leader == before.leader and p.leader_epoch == before.leader_epoch:
                # Within one leader epoch Kafka's HW and log start never go back; a reading that does came
                # from before a leader change the metadata had not shown yet.
                hw = max(hw, before.high_watermark)
                start = max(start, before.log_start_offset)
            self.memory.partitions[tp] = Remembered(
                leader=p.leader, leader_epoch=p.leader_epoch, isr=list(p.isr), elr=list(p.elr),
                replicas=list(p.replicas),
                partition_epoch=0 if before is None else before.partition_epoch + int(changed),
                high_watermark=hw, log_start_offset=start, recovering=tp in unclean)

    # ---- the loop ----------------------------------------------------------------------------------

    def run(self, *, duration_s: float | None = None, on_step: Callable[[dict[str, Any]], None] | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> int:
        """Step every interval until `should_stop()` or `duration_s`; the last batch is marked final."""
        started = time.monotonic()
        next_tick = started
        while True:
            ending = should_stop() or (duration_s is not None and time.monotonic() - started >= duration_s)
            status = self.step(final=ending)
            if on_step is not None:
                on_step(status)
            if ending:
                return self.batch_id
            next_tick += self.settings.interval_s
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.monotonic()  # behind: skip the missed ticks rather than burst


__all__ = ["CollectSettings", "Collector", "election_kind"]
