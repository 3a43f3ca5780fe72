"""collector.metrics_scrape against expositions recorded from a real cluster; no JVM needed.

The samples in data/ come from the Kafka 4.3.1 fixture cluster (1 KRaft controller, node 3000, and brokers
1-3, each with the JMX exporter and conf/jmx_exporter.yaml): broker 2 scraped twice, 2.47 s apart, with 214
records produced to its leader partitions of `scrape-meters` in between and three Produce requests sent to it
as a follower beforehand (NOT_LEADER_OR_FOLLOWER), and the controller once. They keep the kafka_* and process_*
families (less the RequestMetrics timing families) without their HELP lines.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from collector.metrics_scrape import (
    BROKER_KEYS,
    Exposition,
    ExpositionError,
    MeterState,
    MetricRow,
    NodeScrape,
    missing_keys,
    parse_exposition,
    reported_node_id,
    scrape_node,
)
from schemas.bronze import ExporterRules
from schemas.kafka_metrics import BROKER_METERS, MBEANS

DATA = Path(__file__).parent / "data"
BROKER_START_S = 1795581583.518
CONTROLLER_START_S = 1795581583.495
WALL_AT_MONOTONIC_ZERO_S = 1795581700.0
TEMPLATE_TOPIC = "scrape-meters"


def sample(name: str) -> str:
    return (DATA / name).read_text()


BROKER_A = sample("broker-2-a.prom")  # MessagesInPerSec 337, BytesInPerSec 38033
BROKER_B = sample("broker-2-b.prom")  # MessagesInPerSec 551, BytesInPerSec 83567
CONTROLLER = sample("controller-3000.prom")


def replace_line(text: str, old: str, new: str) -> str:
    """The sample with one exact line changed (asserting it was there)."""
    lines = text.splitlines()
    assert lines.count(old) == 1, old
    return "\n".join(new if line == old else line for line in lines) + "\n"


def scrape_of(text: str, monotonic_s: float) -> NodeScrape:
    return NodeScrape("http://node/metrics", WALL_AT_MONOTONIC_ZERO_S + monotonic_s, monotonic_s, 0.01,
                      parse_exposition(text))


def not_reporting(monotonic_s: float) -> NodeScrape:
    return NodeScrape("http://node/metrics", WALL_AT_MONOTONIC_ZERO_S + monotonic_s, monotonic_s, 0.5, None,
                      "no answer within 0.5 s (ReadTimeout)")


def by_key(rows: list[MetricRow]) -> dict[str, MetricRow]:
    return {row.key: row for row in rows}


# --- parsing -------------------------------------------------------------------------------------------


def test_broker_gauges_are_the_replica_manager_and_fetcher_values() -> None:
    rows = MeterState().rows(2, scrape_of(BROKER_B, 100.0))

    gauges = {row.key: row.value for row in rows if row.kind == "gauge"}
    assert gauges == {"UnderReplicatedPartitions": 0.0, "UnderMinIsrPartitionCount": 0.0,
                      "AtMinIsrPartitionCount": 0.0, "PartitionCount": 12.0, "LeaderCount": 4.0, "MaxLag": 0.0}


def test_broker_rows_are_the_emulators_broker_vocabulary_gauges_first() -> None:
    rows = MeterState().rows(2, scrape_of(BROKER_B, 100.0))

    assert [row.key for row in rows] == [k for k in BROKER_KEYS if k not in BROKER_METERS] + [
        k for k in BROKER_KEYS if k in BROKER_METERS]
    assert {row.key for row in rows if row.kind == "meter"} == set(BROKER_METERS)
    for row in rows:
        assert row.broker_id == 2
        assert row.mbean == MBEANS[row.key]
        assert row.process_start_s == BROKER_START_S
        assert row.value >= 0
        assert (row.count is None) == (row.kind == "gauge")
    assert by_key(rows)["ErrorsPerSec:NOT_ENOUGH_REPLICAS"].name == "ErrorsPerSec"


def test_all_topics_series_is_read_not_the_per_topic_one() -> None:
    exposition = parse_exposition(replace_line(
        BROKER_B, 'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count",topic="scrape-meters"} 551.0',
        'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count",topic="scrape-meters"} 7.0'))

    assert exposition.values["MessagesInPerSec"] == 551.0


def test_produce_error_meters_absent_until_the_first_error_count_zero() -> None:
    rows = by_key(MeterState().rows(2, scrape_of(BROKER_B, 100.0)))

    assert rows["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER"].count == 3
    assert rows["ErrorsPerSec:NOT_ENOUGH_REPLICAS"].count == 0
    assert rows["ErrorsPerSec:REQUEST_TIMED_OUT"].count == 0
    assert missing_keys(parse_exposition(BROKER_B)) == []


def test_without_process_start_the_kafka_servers_start_from_app_info_is_taken() -> None:
    text = replace_line(BROKER_B, "process_start_time_seconds 1.795581583518E9", "")

    app_info_start_ms = next(float(line.split(" ")[1]) for line in BROKER_B.splitlines()
                             if line.startswith("kafka_server_app_info_StartTimeMs{"))
    assert parse_exposition(text).process_start_s == app_info_start_ms / 1000
    bare = "\n".join(line for line in text.splitlines() if "app_info" not in line) + "\n"
    assert parse_exposition(bare).process_start_s is None


def test_a_standalone_exporters_own_process_start_is_not_the_brokers() -> None:
    exporter_started = replace_line(BROKER_B, "process_start_time_seconds 1.795581583518E9",
                                    "process_start_time_seconds 1.7955817E9")
    build = 'jmx_exporter_build_info{{name="{}",version="1.0.1"}} 1\n'

    agent = parse_exposition(exporter_started + build.format("jmx_prometheus_javaagent"))
    standalone = parse_exposition(exporter_started + build.format("jmx_prometheus_httpserver"))

    assert agent.process_start_s == 1795581700.0   # the javaagent runs in the broker's JVM
    assert standalone.process_start_s == BROKER_START_S   # app-info's, not the exporter's own process's


def test_garbage_is_refused() -> None:
    with pytest.raises(ExpositionError, match="unparseable exposition"):
        parse_exposition("process_start_time_seconds not-a-number\n")


# --- controller ----------------------------------------------------------------------------------------


def test_controller_rows_come_from_the_active_controller_only() -> None:
    rows = MeterState().rows(3000, scrape_of(CONTROLLER, 100.0))

    assert [(row.key, row.kind, row.value, row.count) for row in rows] == [
        ("OfflinePartitionsCount", "gauge", 0.0, None), ("ActiveControllerCount", "gauge", 1.0, None),
        ("FencedBrokerCount", "gauge", 0.0, None), ("ActiveBrokerCount", "gauge", 3.0, None),
        ("GlobalPartitionCount", "gauge", 12.0, None), ("UncleanLeaderElectionsPerSec", "meter", 0.0, 0)]
    assert {row.process_start_s for row in rows} == {CONTROLLER_START_S}
    # The KRaft controller has no LeaderElectionRateAndTimeMs (the ZooKeeper controller's timer): no row, and not
    # missing either.
    assert "LeaderElectionRateAndTimeMs" not in parse_exposition(CONTROLLER).values
    assert missing_keys(parse_exposition(CONTROLLER)) == []


def test_standby_controller_reports_no_rows() -> None:
    standby = replace_line(CONTROLLER, 'kafka_controller_KafkaController_ActiveControllerCount{attribute="Value"} 1.0',
                           'kafka_controller_KafkaController_ActiveControllerCount{attribute="Value"} 0.0')

    assert MeterState().rows(3001, scrape_of(standby, 100.0)) == []
    assert reported_node_id(parse_exposition(standby)) == 3000  # its own id still names it (app-info)


def test_controller_is_no_broker_though_it_exports_broker_topic_metrics() -> None:
    exposition = parse_exposition(CONTROLLER)

    assert "MessagesInPerSec" in exposition.values
    assert not exposition.is_broker
    assert exposition.is_active_controller


def test_node_id_known_from_the_exposition() -> None:
    assert reported_node_id(parse_exposition(CONTROLLER)) == 3000
    assert reported_node_id(parse_exposition(BROKER_B)) == 2
    assert parse_exposition(BROKER_B).current_controller_id == 3000
    # An exporter without the app-info rule: only the active controller can be told apart.
    bare = "\n".join(line for line in BROKER_B.splitlines() if "app_info" not in line) + "\n"
    assert reported_node_id(parse_exposition(bare)) is None
    bare_controller = "\n".join(line for line in CONTROLLER.splitlines() if "app_info" not in line) + "\n"
    assert reported_node_id(parse_exposition(bare_controller)) == 3000


# --- meters --------------------------------------------------------------------------------------------


def test_first_scrape_reports_the_count_with_rate_zero() -> None:
    rows = by_key(MeterState().rows(2, scrape_of(BROKER_A, 100.0)))

    assert (rows["MessagesInPerSec"].count, rows["MessagesInPerSec"].value) == (337, 0.0)
    assert (rows["BytesInPerSec"].count, rows["BytesInPerSec"].value) == (38033, 0.0)


def test_meter_rate_between_two_real_scrapes() -> None:
    state = MeterState()
    state.rows(2, scrape_of(BROKER_A, 100.0))

    rows = by_key(state.rows(2, scrape_of(BROKER_B, 102.5)))

    assert rows["MessagesInPerSec"].count == 551
    assert rows["MessagesInPerSec"].value == pytest.approx((551 - 337) / 2.5)
    assert rows["BytesInPerSec"].value == pytest.approx((83567 - 38033) / 2.5)
    assert (rows["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER"].count, rows["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER"].value) == (
        3, 0.0)


def test_restart_gives_the_new_count_over_the_interval() -> None:
    restarted = replace_line(BROKER_B, "process_start_time_seconds 1.795581583518E9",
                             "process_start_time_seconds 1.7955817E9")
    restarted = replace_line(restarted, 'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count"} 551.0',
                             'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count"} 40.0')
    state = MeterState()
    state.rows(2, scrape_of(BROKER_A, 100.0))

    rows = state.rows(2, scrape_of(restarted, 105.0))

    messages_in = by_key(rows)["MessagesInPerSec"]
    assert (messages_in.count, messages_in.value, messages_in.process_start_s) == (40, 40 / 5.0, 1795581700.0)
    assert all(row.value >= 0 for row in rows)
    # The restarted process's own meters: 83567 bytes counted since it started, all within these 5 s.
    assert by_key(rows)["BytesInPerSec"].value == pytest.approx(83567 / 5.0)


def test_count_drop_in_the_same_process_is_a_reset_not_a_negative_rate() -> None:
    reset = replace_line(BROKER_B, 'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count"} 551.0',
                         'kafka_server_BrokerTopicMetrics_MessagesInPerSec{attribute="Count"} 10.0')
    state = MeterState()
    state.rows(2, scrape_of(BROKER_A, 100.0))

    messages_in = by_key(state.rows(2, scrape_of(reset, 102.0)))["MessagesInPerSec"]

    assert (messages_in.count, messages_in.value) == (10, 5.0)


def test_node_not_reporting_has_no_rows_and_keeps_its_counts_for_when_it_resumes() -> None:
    state = MeterState()
    state.rows(2, scrape_of(BROKER_A, 100.0))

    assert state.rows(2, not_reporting(101.0)) == []
    rows = by_key(state.rows(2, scrape_of(BROKER_B, 110.0)))

    assert rows["MessagesInPerSec"].value == pytest.approx((551 - 337) / 10.0)


def test_forgotten_node_starts_over_with_rate_zero() -> None:
    state = MeterState()
    state.rows(2, scrape_of(BROKER_A, 100.0))
    state.forget(2)

    assert by_key(state.rows(2, scrape_of(BROKER_B, 102.5)))["MessagesInPerSec"].value == 0.0


# --- fetching ------------------------------------------------------------------------------------------


class SteppingClock:
    """Wall and monotonic time that advance by `step_s` at every reading."""

    def __init__(self, step_s: float) -> None:
        self.now_s = 0.0
        self.step_s = step_s

    def wall_s(self) -> float:
        return WALL_AT_MONOTONIC_ZERO_S + self.now_s

    def monotonic_s(self) -> float:
        self.now_s += self.step_s
        return self.now_s


def mock_client(handler: httpx.MockTransport) -> httpx.Client:
    return httpx.Client(transport=handler)


def test_scrape_over_http_reads_the_exposition() -> None:
    with mock_client(httpx.MockTransport(lambda request: httpx.Response(200, text=CONTROLLER))) as client:
        scrape = scrape_node(client, "http://controller/metrics", timeout_s=0.5)

    assert scrape.reporting
    assert scrape.reason == ""
    assert isinstance(scrape.exposition, Exposition)
    assert scrape.exposition.values["ActiveBrokerCount"] == 3.0


def test_http_error_is_not_reporting() -> None:
    with mock_client(httpx.MockTransport(lambda request: httpx.Response(503, text="busy"))) as client:
        scrape = scrape_node(client, "http://broker/metrics", timeout_s=0.5)

    assert (scrape.reporting, scrape.reason) == (False, "HTTP 503")


def test_an_answer_without_any_series_read_here_is_unrecognised() -> None:
    with mock_client(httpx.MockTransport(lambda request: httpx.Response(200, text="<html>oops</html>"))) as client:
        scrape = scrape_node(client, "http://broker/metrics", timeout_s=0.5)

    # Lines of no series read here never reach the parser: it answered, with none of the metrics.
    assert scrape.exposition is not None and scrape.reporting
    assert (scrape.exposition.rules, dict(scrape.exposition.values)) == (ExporterRules.UNRECOGNISED, {})


def test_answer_trickling_past_the_deadline_is_not_reporting() -> None:
    def trickle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=iter([CONTROLLER[:100].encode(), CONTROLLER[100:].encode()]))

    with mock_client(httpx.MockTransport(trickle)) as client:
        scrape = scrape_node(client, "http://broker/metrics", timeout_s=1.5, clock=SteppingClock(step_s=1.0))

    assert (scrape.reporting, scrape.reason) == (False, "answer not complete within 1.5 s")


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """A port that accepts connections and never answers, as a SIGSTOPped JVM's does (the kernel completes
    the handshake from the listen backlog)."""
    with socket.create_server(("127.0.0.1", 0), backlog=8) as server:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/metrics"


@pytest.fixture
def closed_endpoint() -> str:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_silent_endpoint_is_not_reporting_within_the_timeout(silent_endpoint: str) -> None:
    with httpx.Client() as client:
        scrape = scrape_node(client, silent_endpoint, timeout_s=0.5)

    assert not scrape.reporting
    assert scrape.reason == "no answer within 0.5 s (ReadTimeout)"


def test_refused_connection_is_not_reporting(closed_endpoint: str) -> None:
    with httpx.Client() as client:
        scrape = scrape_node(client, closed_endpoint, timeout_s=0.5)

    assert not scrape.reporting
    assert scrape.reason.startswith("ConnectError")
