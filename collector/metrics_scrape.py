"""bronze.broker_metrics from a real cluster: each Kafka process's Prometheus JMX exporter, scraped and parsed.

A node's exporter may name its MBeans under any of the configurations collector/exporter_dialects.py knows:
conf/jmx_exporter.yaml, the exporter's default rules, Strimzi's or Confluent's. Each scrape is read under the one
with the most matching series, so a scrape gives
- the metric values under their MBEANS keys (a gauge's Value, a meter's cumulative Count),
- when the process started (meters count from it: a new value means the process restarted), when it says,
- the node's own id (kafka.server:type=app-info,id=N) where the naming exports it, so a metrics URL needs no node
  id beside it, and the node's view of the active controller,
and MeterState turns successive scrapes of a node into rows with Kafka's semantics, as the emulator's
broker_emulator/metrics.py writes them: broker gauges and meters from brokers, controller gauges and meters
only from the active controller, a meter as its count since the process started plus its rate over the
interval, never negative.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from collector.exporter_dialects import DIALECTS, METER_KEYS, Dialect, Series
from schemas.bronze import ExporterRules
from schemas.kafka_metrics import (
    BROKER_KEYS,
    BROKER_METERS,
    CONTROLLER_KEYS,
    CONTROLLER_METERS,
    MBEANS,
    metric_name,
)

Kind = Literal["gauge", "meter"]

assert {k for k in BROKER_KEYS if k in METER_KEYS} == set(BROKER_METERS), "a broker meter outside kafka.server/network"
assert {k for k in CONTROLLER_KEYS if k in METER_KEYS} == set(CONTROLLER_METERS), "a controller meter elsewhere"

# Kafka registers a request's error meter the first time that error is returned (RequestMetrics' ErrorMeter),
# so on a reporting broker whose exporter exports these meters an absent produce-error series means zero such
# errors since the process started. Under rules that never export them (Strimzi's) they are missing.
ZERO_WHEN_ABSENT = frozenset(k for k in BROKER_METERS if metric_name(k) == "ErrorsPerSec")
# The ZooKeeper controller's election timer: Kafka 4's KRaft controller has none. Read when a node exports it,
# never expected of one.
ZOOKEEPER_ONLY = frozenset({"LeaderElectionRateAndTimeMs"})

PROCESS_START = "process_start_time_seconds"
# The exporter's own build (its `name` label): the javaagent's process_start_time_seconds is the broker JVM's; a
# standalone exporter (jmx_prometheus_httpserver, renamed jmx_prometheus_standalone later), reading the broker
# over remote JMX, would give its own process's.
BUILD_INFO = "jmx_exporter_build_info"
STANDALONE_BUILDS = frozenset({"jmx_prometheus_httpserver", "jmx_prometheus_standalone"})

# series -> (dialect index, MBEANS key) of every dialect naming a metric so
_BY_SERIES: dict[Series, list[tuple[int, str]]] = {}
for _i, _dialect in enumerate(DIALECTS):
    for _series, _key in _dialect.series.items():
        _BY_SERIES.setdefault(_series, []).append((_i, _key))
_CURRENT_CONTROLLER: dict[Series, list[int]] = {}
for _i, _dialect in enumerate(DIALECTS):
    if _dialect.current_controller is not None:
        _CURRENT_CONTROLLER.setdefault(_dialect.current_controller, []).append(_i)
_NODE_ID_SERIES = {d.node_id_series for d in DIALECTS if d.node_id_series is not None}

_READ_NAMES = frozenset({name for name, _ in (*_BY_SERIES, *_CURRENT_CONTROLLER)} | _NODE_ID_SERIES
                        | {PROCESS_START, BUILD_INFO})
# The default naming puts many MBeans under one series name (kafka_network_RequestMetrics_Count: ~650 series on a
# broker, one per request type and timer) and tells them apart by their `name` label: of those, only lines with one
# of the names read here go to the parser.
_NAME_LABELS: dict[str, tuple[str, ...]] = {}
for _name in {name for name, _ in (*_BY_SERIES, *_CURRENT_CONTROLLER)}:
    _labelled = [dict(labels) for name, labels in (*_BY_SERIES, *_CURRENT_CONTROLLER) if name == _name]
    if all("name" in labels for labels in _labelled):
        _NAME_LABELS[_name] = tuple(sorted({f'name="{labels["name"]}"' for labels in _labelled}))


class ExpositionError(ValueError):
    """Raised when a node's answer is not an exposition this module can read."""


@dataclass(frozen=True)
class Exposition:
    """What one scrape of one node says, in the table's vocabulary."""

    rules: ExporterRules  # the naming the exposition was read under; UNRECOGNISED when no series matched
    values: Mapping[str, float]  # MBEANS key -> the gauge's Value or the meter's Count; only series present
    node_id: int | None  # the node's own id (app-info), if exported
    current_controller_id: int | None  # the node's view of the active controller (MetadataLoader), if exported
    process_start_s: float | None  # when the node's process started, if the exposition says (else MeterState
    # estimates it)
    zero_when_absent: frozenset[str] = frozenset()  # ZERO_WHEN_ABSENT keys the naming exports

    @property
    def is_broker(self) -> bool:
        # ReplicaManager exists on brokers only; a KRaft controller also exports (idle) BrokerTopicMetrics.
        return "PartitionCount" in self.values

    @property
    def is_active_controller(self) -> bool:
        return self.values.get("ActiveControllerCount") == 1.0

    @property
    def is_controller(self) -> bool:
        return "ActiveControllerCount" in self.values


def parse_exposition(text: str) -> Exposition:
    """Read an exporter's exposition with prometheus_client's parser, under the naming with the most matching
    series (a tie goes to the earlier in exporter_dialects.DIALECTS, conf/jmx_exporter.yaml's first).

    Only the lines of series read here reach the parser: an exporter configured with more than
    conf/jmx_exporter.yaml's MBeans exports ~12 series per hosted replica (kafka_log_Log_*,
    kafka_cluster_Partition_*, fetcher lag), and the pure-Python parser spends ~25 µs on each line. The
    selection looks at the metric name (and, where a name is shared by many MBeans, their `name` label) only;
    every line it keeps is parsed, labels and value, by the parser.
    """
    reader = _SampleReader()
    try:
        for family in text_string_to_metric_families(_lines_read(text)):
            for sample in family.samples:
                reader.take(sample)
    except ValueError as e:
        raise ExpositionError(f"unparseable exposition: {e}") from e
    return reader.exposition()


def _lines_read(text: str) -> str:
    kept = []
    for line in text.splitlines():
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line.partition(" ")[0]
        if name in _READ_NAMES:
            fragments = _NAME_LABELS.get(name)
            if fragments is None or any(f in line for f in fragments):
                kept.append(line)
    return "\n".join(kept)


@dataclass
class _SampleReader:
    values: list[dict[str, float]] = field(default_factory=lambda: [{} for _ in DIALECTS])
    current_controller_id: list[int | None] = field(default_factory=lambda: [None for _ in DIALECTS])
    node_id: int | None = None
    app_info_start_ms: float | None = None
    process_start_s: float | None = None
    build: str | None = None

    def take(self, sample: Sample) -> None:
        name, labels = sample.name, sample.labels
        if name in _NODE_ID_SERIES and set(labels) == {"id"} and labels["id"].isdigit():
            self.node_id = int(labels["id"])
            self.app_info_start_ms = sample.value
        elif name == PROCESS_START and not labels:
            self.process_start_s = sample.value
        elif name == BUILD_INFO:
            self.build = labels.get("name")
        else:
            series = (name, frozenset(labels.items()))
            for i in _CURRENT_CONTROLLER.get(series, ()):
                self.current_controller_id[i] = int(sample.value)
            for i, key in _BY_SERIES.get(series, ()):
                self.values[i][key] = sample.value

    def exposition(self) -> Exposition:
        matches = [len(v) + (c is not None) for v, c in zip(self.values, self.current_controller_id, strict=True)]
        best = max(range(len(DIALECTS)), key=lambda i: (matches[i], -i))
        if matches[best] == 0:
            return Exposition(ExporterRules.UNRECOGNISED, {}, self.node_id, None, self._process_start())
        dialect: Dialect = DIALECTS[best]
        return Exposition(dialect.rules, self.values[best], self.node_id, self.current_controller_id[best],
                          self._process_start(), ZERO_WHEN_ABSENT & dialect.exported_keys)

    def _process_start(self) -> float | None:
        """The javaagent's process_start_time_seconds (the broker JVM's), else app-info's StartTimeMs (when the Kafka
        server in it started: a standalone exporter's own process is no broker's), else unknown."""
        if self.process_start_s is not None and self.build not in STANDALONE_BUILDS:
            return self.process_start_s
        if self.app_info_start_ms is not None:
            return self.app_info_start_ms / 1000
        return None


def reported_node_id(exposition: Exposition) -> int | None:
    """The node id an exposition proves by itself: its app-info id, else (an exporter without that rule) the
    active controller's, which is the current controller it reports."""
    if exposition.node_id is not None:
        return exposition.node_id
    if exposition.is_active_controller:
        return exposition.current_controller_id
    return None


def expected_keys(exposition: Exposition) -> tuple[str, ...]:
    """The MBEANS keys a node reports: the broker ones from a broker, the controller ones from the active
    controller (a standby controller reports none, as only the active one has them in the emulator)."""
    return (*(BROKER_KEYS if exposition.is_broker else ()),
            *(CONTROLLER_KEYS if exposition.is_active_controller else ()))


def reported_values(exposition: Exposition) -> dict[str, float]:
    """Key -> value of each row the node reports: absent produce-error meters count 0 where the naming exports
    them, other absent series are left out (missing_keys)."""
    values, zero = exposition.values, exposition.zero_when_absent
    return {k: values.get(k, 0.0) for k in expected_keys(exposition) if k in values or k in zero}


def missing_keys(exposition: Exposition) -> list[str]:
    """Keys this node should report but whose series are absent, so their rows are left out (a ZooKeeper-only
    metric such as LeaderElectionRateAndTimeMs, which Kafka 4's KRaft controller does not have, is not expected)."""
    return [k for k in expected_keys(exposition)
            if k not in exposition.values and k not in exposition.zero_when_absent and k not in ZOOKEEPER_ONLY]


class Clock(Protocol):
    def wall_s(self) -> float: ...

    def monotonic_s(self) -> float: ...


class SystemClock:
    def wall_s(self) -> float:
        return time.time()

    def monotonic_s(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


@dataclass(frozen=True)
class NodeScrape:
    """One scrape of one node's metrics endpoint: the exposition, or why the node is not reporting."""

    url: str
    scraped_at_s: float  # wall clock (epoch seconds) when the answer was complete: the rows' ts
    monotonic_s: float  # the same instant on the monotonic clock, for meter intervals
    elapsed_s: float
    exposition: Exposition | None
    reason: str = ""  # '' when reporting

    @property
    def reporting(self) -> bool:
        return self.exposition is not None


def fetch_exposition(client: httpx.Client, url: str, *, timeout_s: float,
                     clock: Clock = SYSTEM_CLOCK) -> tuple[str | None, str]:
    """(text, '') or (None, why): never raises for a dead, paused or unreachable endpoint.

    A SIGSTOPped JVM's kernel still accepts the connection and the exporter never answers: httpx's connect,
    read and write timeouts bound each wait, and the deadline, checked between received chunks, ends an
    answer that trickles (so the worst case is timeout_s plus one read timeout).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    deadline = clock.monotonic_s() + timeout_s
    try:
        with client.stream("GET", url, timeout=httpx.Timeout(timeout_s)) as response:
            if response.status_code != httpx.codes.OK:
                return None, f"HTTP {response.status_code}"
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if clock.monotonic_s() > deadline:
                    return None, f"answer not complete within {timeout_s:g} s"
            return body.decode(response.encoding or "utf-8"), ""
    except httpx.TimeoutException as e:
        return None, f"no answer within {timeout_s:g} s ({type(e).__name__})"
    except (httpx.HTTPError, UnicodeDecodeError) as e:
        return None, f"{type(e).__name__}: {e}"


def scrape_node(client: httpx.Client, url: str, *, timeout_s: float, clock: Clock = SYSTEM_CLOCK) -> NodeScrape:
    """Fetch and parse one node's exposition; a node that does not answer or answers garbage is not reporting."""
    started = clock.monotonic_s()
    text, reason = fetch_exposition(client, url, timeout_s=timeout_s, clock=clock)
    exposition = None
    if text is not None:
        try:
            exposition = parse_exposition(text)
        except ExpositionError as e:
            reason = str(e)
    now = clock.monotonic_s()
    return NodeScrape(url, clock.wall_s(), now, now - started, exposition, reason)


@dataclass(frozen=True)
class MetricRow:
    """One bronze.broker_metrics row, before the writer adds run_id, batch_id and ts (the scrape's)."""

    broker_id: int
    key: str  # MBEANS key, e.g. "ErrorsPerSec:NOT_ENOUGH_REPLICAS"
    kind: Kind
    value: float  # gauge: current value; meter: events per second since the node's previous scrape
    count: int | None  # meter: cumulative since process_start_s; None for gauges
    process_start_s: float

    @property
    def mbean(self) -> str:
        return MBEANS[self.key]

    @property
    def name(self) -> str:
        return metric_name(self.key)


@dataclass(frozen=True)
class _Seen:
    process_start_s: float
    monotonic_s: float
    counts: Mapping[str, int]


class MeterState:
    """Turns successive scrapes of each node into broker_metrics rows; one instance per collector.

    A meter's rate is (count - previous count) / seconds between the two scrapes, on the collector's
    monotonic clock (the broker's wall clock only tells processes apart). Then:
    - first scrape of a node: rate 0. The count accumulated over the process's whole life at unknown times;
      count / uptime would report ISR shrinks or produce errors of days ago as current and trip rate alerts
      on every collector start. The count column carries the total, and the next scrape has a true rate.
    - process restarted (a new process_start): every event counted so far happened after the previous scrape,
      so the rate is the new count over the interval, as the emulator's reset_broker gives it.
    - count lower than before in the same process (a meter unregistered and registered again): the same.
    - a node that did not answer keeps its last counts: a resumed JVM's rate spans the whole gap.

    An exposition that does not say when the process started (a standalone exporter over remote JMX, under
    rules without app-info: Strimzi's, Confluent's) gets an estimate: the time the node was first scraped, moved
    to the scrape at which every meter that had counted anything counts less than before (the process
    restarted: all of its meters start from zero). One meter counting less is a meter registered again, not a
    restart: taken for one, every other meter's whole count would show as this interval's rate.
    """

    def __init__(self) -> None:
        self._seen: dict[int, _Seen] = {}

    def rows(self, node_id: int, scrape: NodeScrape) -> list[MetricRow]:
        """The node's rows for this scrape, gauges first; none when it is not reporting."""
        exposition = scrape.exposition
        if exposition is None:
            return []
        reported = reported_values(exposition)
        # Every meter's count is remembered, emitted or not: a standby controller that becomes active then
        # has a recent previous count.
        counts = {k: int(v) for k, v in {**exposition.values, **reported}.items() if k in METER_KEYS}
        previous = self._seen.get(node_id)
        start = exposition.process_start_s
        if start is None:
            start = _estimated_start(previous, counts, scrape.scraped_at_s)
        self._seen[node_id] = _Seen(start, scrape.monotonic_s, counts)
        gauges = [MetricRow(node_id, k, "gauge", v, None, start) for k, v in reported.items() if k not in METER_KEYS]
        meters = [MetricRow(node_id, k, "meter", _meter_rate(k, counts[k], previous, start, scrape.monotonic_s),
                            counts[k], start) for k in reported if k in METER_KEYS]
        return gauges + meters

    def forget(self, node_id: int) -> None:
        """Drop a node removed from the cluster; if it comes back, its first scrape has rate 0 again."""
        self._seen.pop(node_id, None)


def _estimated_start(previous: _Seen | None, counts: Mapping[str, int], now_wall_s: float) -> float:
    """MeterState's estimate of a process start the exposition does not give."""
    if previous is None:
        return now_wall_s
    counted = {k: c for k, c in previous.counts.items() if c > 0}
    if counted and all(counts.get(k, 0) < c for k, c in counted.items()):
        return now_wall_s
    return previous.process_start_s


def _meter_rate(key: str, count: int, previous: _Seen | None, process_start_s: float, now_monotonic_s: float) -> float:
    """Events per second since the node's previous scrape (MeterState's rules), never negative."""
    if previous is None:
        return 0.0
    seconds = now_monotonic_s - previous.monotonic_s
    if seconds <= 0:
        return 0.0
    before = previous.counts.get(key, 0) if previous.process_start_s == process_start_s else 0
    if count < before:
        before = 0
    return (count - before) / seconds
