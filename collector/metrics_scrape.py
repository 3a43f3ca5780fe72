"""bronze.broker_metrics from a real cluster: each Kafka process's Prometheus JMX exporter, scraped and parsed.

Every broker and controller runs the exporter javaagent with conf/jmx_exporter.yaml, which names an MBean's
attribute `kafka_<domain>_<type>_<name>` with the MBean's other keys as labels plus `attribute="Count"|"Value"`:

    kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=Produce,error=NOT_ENOUGH_REPLICAS  Count
      ->  kafka_network_RequestMetrics_ErrorsPerSec{request="Produce",error="NOT_ENOUGH_REPLICAS",attribute="Count"}

so the series of each key in schemas.kafka_metrics.MBEANS follows from its MBean name. A scrape gives
- the metric values under their MBEANS keys (a gauge's Value, a meter's cumulative Count),
- the JVM's `process_start_time_seconds` (meters count from it: a new value means the process restarted),
- the node's own id (kafka.server:type=app-info,id=N), so a metrics URL needs no node id beside it,
and MeterState turns successive scrapes of a node into rows with Kafka's semantics, as the emulator's
broker_emulator/metrics.py writes them: broker gauges and meters from brokers, controller gauges and meters
only from the active controller, a meter as its count since the process started plus its rate over the
interval, never negative.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from schemas.kafka_metrics import BROKER_METERS, CONTROLLER_METERS, MBEANS, metric_name

Kind = Literal["gauge", "meter"]


def exporter_series(mbean: str) -> tuple[str, dict[str, str]]:
    """The exporter's series name and labels (without `attribute`) for an MBean name, per conf/jmx_exporter.yaml.

    >>> exporter_series("kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica")
    ('kafka_server_ReplicaFetcherManager_MaxLag', {'clientId': 'Replica'})
    """
    domain, key_list = mbean.split(":", 1)
    keys = dict(pair.split("=", 1) for pair in key_list.split(","))
    mbean_type, name = keys.pop("type"), keys.pop("name")
    return f"{domain.replace('.', '_')}_{mbean_type}_{name}", keys


METER_KEYS = frozenset((*BROKER_METERS, *CONTROLLER_METERS))
# Brokers register the kafka.server and kafka.network MBeans; the controller metrics are kafka.controller's.
CONTROLLER_KEYS = tuple(k for k in MBEANS if MBEANS[k].startswith("kafka.controller:"))
BROKER_KEYS = tuple(k for k in MBEANS if k not in CONTROLLER_KEYS)
assert {k for k in BROKER_KEYS if k in METER_KEYS} == set(BROKER_METERS), "a broker meter outside kafka.server/network"
assert {k for k in CONTROLLER_KEYS if k in METER_KEYS} == set(CONTROLLER_METERS), "a controller meter elsewhere"

# Kafka registers a request's error meter the first time that error is returned (RequestMetrics' ErrorMeter),
# so on a reporting broker an absent produce-error series means zero such errors since the process started.
ZERO_WHEN_ABSENT = frozenset(k for k in BROKER_METERS if metric_name(k) == "ErrorsPerSec")


def _series_index() -> dict[tuple[str, frozenset[tuple[str, str]]], str]:
    """(series name, exact label set) -> MBEANS key. Exact labels pick the all-topics BrokerTopicMetrics
    series (the per-topic ones carry a `topic` label) and the produce errors (request="Produce")."""
    index = {}
    for key, mbean in MBEANS.items():
        name, labels = exporter_series(mbean)
        attribute = "Count" if key in METER_KEYS else "Value"
        index[name, frozenset({**labels, "attribute": attribute}.items())] = key
    return index


SERIES = _series_index()
NODE_ID = "kafka_server_app_info_StartTimeMs"
PROCESS_START = "process_start_time_seconds"
CURRENT_CONTROLLER_ID = "kafka_server_MetadataLoader_CurrentControllerId"
_READ_NAMES = {name for name, _ in SERIES} | {NODE_ID, PROCESS_START, CURRENT_CONTROLLER_ID}
# A name followed by its labels or by the value: "kafka_x" must not select "kafka_x_more".
_READ_PREFIXES = tuple(sorted(f"{name}{end}" for name in _READ_NAMES for end in ("{", " ")))


class ExpositionError(ValueError):
    """Raised when a node's answer is not an exposition this module can read (garbage, or no process start)."""


@dataclass(frozen=True)
class Exposition:
    """What one scrape of one node says, in the table's vocabulary."""

    process_start_s: float
    values: Mapping[str, float]  # MBEANS key -> the gauge's Value or the meter's Count; only series present
    node_id: int | None  # the node's own id (app-info), if exported
    current_controller_id: int | None  # the node's view of the active controller (MetadataLoader), if exported

    @property
    def is_broker(self) -> bool:
        # ReplicaManager exists on brokers only; a KRaft controller also exports (idle) BrokerTopicMetrics.
        return "PartitionCount" in self.values

    @property
    def is_active_controller(self) -> bool:
        return self.values.get("ActiveControllerCount") == 1.0


def parse_exposition(text: str) -> Exposition:
    """Read an exporter's exposition with prometheus_client's parser.

    Only the lines of series read here reach the parser: an exporter configured with more than
    conf/jmx_exporter.yaml's MBeans exports ~12 series per hosted replica (kafka_log_Log_*,
    kafka_cluster_Partition_*, fetcher lag), and the pure-Python parser spends ~25 µs on each line. The
    selection looks at the metric name only; every line it keeps is parsed, labels and value, by the parser.
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
    return "\n".join(line for line in text.splitlines() if line.startswith(_READ_PREFIXES))


@dataclass
class _SampleReader:
    values: dict[str, float] = field(default_factory=dict)
    node_id: int | None = None
    process_start_s: float | None = None
    current_controller_id: int | None = None

    def take(self, sample: Sample) -> None:
        name, labels = sample.name, sample.labels
        if name == NODE_ID and labels.get("id", "").isdigit():
            self.node_id = int(labels["id"])
        elif name == PROCESS_START and not labels:
            self.process_start_s = sample.value
        elif name == CURRENT_CONTROLLER_ID and labels == {"attribute": "Value"}:
            self.current_controller_id = int(sample.value)
        else:
            key = SERIES.get((name, frozenset(labels.items())))
            if key is not None:
                self.values[key] = sample.value

    def exposition(self) -> Exposition:
        if self.process_start_s is None:
            # Meters count from the process start; without it a restart could not be told from a reset.
            raise ExpositionError(f"exposition has no {PROCESS_START}")
        return Exposition(self.process_start_s, self.values, self.node_id, self.current_controller_id)


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
    """Key -> value of each row the node reports: absent produce-error meters count 0, other absent series
    are left out (missing_keys)."""
    values = exposition.values
    return {k: values.get(k, 0.0) for k in expected_keys(exposition) if k in values or k in ZERO_WHEN_ABSENT}


def missing_keys(exposition: Exposition) -> list[str]:
    """Keys this node should report but whose series are absent, so their rows are left out: Kafka 4.x's
    KRaft controller has no LeaderElectionRateAndTimeMs (that timer was the ZooKeeper controller's)."""
    return [k for k in expected_keys(exposition) if k not in exposition.values and k not in ZERO_WHEN_ABSENT]


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


def scrape_nodes(client: httpx.Client, urls: Mapping[int, str], *, timeout_s: float,
                 clock: Clock = SYSTEM_CLOCK) -> dict[int, NodeScrape]:
    """Scrape every node at once (node id -> metrics URL): a paused node costs the interval one timeout."""
    with ThreadPoolExecutor(max_workers=max(len(urls), 1), thread_name_prefix="metrics-scrape") as pool:
        futures = {node: pool.submit(scrape_node, client, url, timeout_s=timeout_s, clock=clock)
                   for node, url in urls.items()}
        return {node: future.result() for node, future in futures.items()}


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
        self._seen[node_id] = _Seen(start, scrape.monotonic_s, counts)
        gauges = [MetricRow(node_id, k, "gauge", v, None, start) for k, v in reported.items() if k not in METER_KEYS]
        meters = [MetricRow(node_id, k, "meter", _meter_rate(k, counts[k], previous, start, scrape.monotonic_s),
                            counts[k], start) for k in reported if k in METER_KEYS]
        return gauges + meters

    def forget(self, node_id: int) -> None:
        """Drop a node removed from the cluster; if it comes back, its first scrape has rate 0 again."""
        self._seen.pop(node_id, None)


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
