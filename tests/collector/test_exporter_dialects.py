"""The four exporter namings, on expositions recorded from a real cluster; no JVM needed.

data/<node>-<rules>.prom: broker 1 and the active controller (3000) of the Kafka 4.3.1 fixture cluster, each
scraped at one moment through the JMX exporter agent with conf/jmx_exporter.yaml (`isrwatch`) and three standalone
exporters over remote JMX with the rules beside them: the exporter's defaults (agent-default.yaml), Strimzi's
(strimzi-kafka-metrics.yaml), Confluent's (confluent-kafka-broker.yml). Broker 1 had been sent three Produce
requests for a partition it follows (NOT_LEADER_OR_FOLLOWER); the cluster was idle. Recorded by
data/record_dialects.py, which says what the files keep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.exporter_dialects import (
    DIALECTS,
    MBean,
    agent_default_naming,
    confluent_naming,
    isrwatch_naming,
    strimzi_naming,
)
from collector.metrics_coverage import coverage_of, node_of_url
from collector.metrics_scrape import (
    Exposition,
    MeterState,
    NodeScrape,
    missing_keys,
    parse_exposition,
    reported_node_id,
    reported_values,
)
from schemas.bronze import ExporterRules, NodeRole
from schemas.kafka_metrics import BROKER_KEYS, CONTROLLER_KEYS, MBEANS

DATA = Path(__file__).parent / "data"
OTHER_RULES = ("agent-default", "strimzi", "confluent")
PRODUCE_ERRORS = [k for k in BROKER_KEYS if k.startswith("ErrorsPerSec:")]
# conf/alerts.yaml's rules over broker_metrics and the keys their conditions read (pipelines.rule_metrics).
RULE_METRICS = {"OfflinePartitions": frozenset({"OfflinePartitionsCount"}),
                "ActiveControllerCount": frozenset({"ActiveControllerCount"}),
                "UncleanLeaderElection": frozenset({"UncleanLeaderElectionsPerSec"}),
                "ProduceNotEnoughReplicas": frozenset({"ErrorsPerSec:NOT_ENOUGH_REPLICAS"})}
URL = "http://127.0.0.1:9404/metrics"


def recorded(node: str, rules: str) -> str:
    return (DATA / f"{node}-{rules}.prom").read_text()


def parsed(node: str, rules: str) -> Exposition:
    return parse_exposition(recorded(node, rules))


def scrape(exposition: Exposition | None, url: str = URL, at_s: float = 100.0) -> NodeScrape:
    return NodeScrape(url, 1795823400.0 + at_s, at_s, 0.01, exposition, "" if exposition else "HTTP 503")


# --- the same broker and controller under every naming ----------------------------------------------------------


@pytest.mark.parametrize("rules", OTHER_RULES)
@pytest.mark.parametrize("node", ["broker-1", "controller-3000"])
def test_each_naming_is_recognised_and_gives_the_projects_keys_and_values(node: str, rules: str) -> None:
    ours, theirs = parsed(node, "isrwatch"), parsed(node, rules)

    assert (ours.rules, theirs.rules) == (ExporterRules.ISRWATCH, ExporterRules(rules))
    without_errors = {k: v for k, v in reported_values(ours).items() if k not in PRODUCE_ERRORS}
    assert {k: v for k, v in reported_values(theirs).items() if k not in PRODUCE_ERRORS} == without_errors
    assert (theirs.is_broker, theirs.is_active_controller) == (ours.is_broker, ours.is_active_controller)
    assert theirs.current_controller_id == ours.current_controller_id == 3000


def test_the_broker_values_are_what_the_cluster_did() -> None:
    values = reported_values(parsed("broker-1", "isrwatch"))

    assert {k: values[k] for k in ("PartitionCount", "LeaderCount", "MessagesInPerSec", "BytesInPerSec")} == {
        "PartitionCount": 4.0, "LeaderCount": 2.0, "MessagesInPerSec": 150.0, "BytesInPerSec": 2639.0}
    assert {k: values[k] for k in PRODUCE_ERRORS} == {
        "ErrorsPerSec:NOT_LEADER_OR_FOLLOWER": 3.0, "ErrorsPerSec:NOT_ENOUGH_REPLICAS": 0.0,
        "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND": 0.0, "ErrorsPerSec:REQUEST_TIMED_OUT": 0.0}


@pytest.mark.parametrize("rules", ["agent-default", "confluent"])
def test_namings_exporting_request_metrics_read_the_produce_error_meters(rules: str) -> None:
    exposition = parsed("broker-1", rules)

    assert exposition.values["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER"] == 3.0   # the series itself, not a zero
    assert {k: reported_values(exposition)[k] for k in PRODUCE_ERRORS} == {k: reported_values(
        parsed("broker-1", "isrwatch"))[k] for k in PRODUCE_ERRORS}
    assert missing_keys(exposition) == []


def test_strimzi_rules_export_no_produce_error_meters_so_they_are_missing_not_zero() -> None:
    exposition = parsed("broker-1", "strimzi")

    assert missing_keys(exposition) == PRODUCE_ERRORS
    assert not set(PRODUCE_ERRORS) & set(reported_values(exposition))
    rows = MeterState().rows(1, scrape(exposition))
    assert len(rows) == 11 and not [r for r in rows if r.name == "ErrorsPerSec"]


def test_the_node_id_is_in_the_isrwatch_and_default_namings_and_the_active_controllers_everywhere() -> None:
    assert {r: parsed("broker-1", r).node_id for r in ("isrwatch", *OTHER_RULES)} == {
        "isrwatch": 1, "agent-default": 1, "strimzi": None, "confluent": None}
    assert {r: reported_node_id(parsed("controller-3000", r)) for r in ("isrwatch", *OTHER_RULES)} == {
        "isrwatch": 3000, "agent-default": 3000, "strimzi": 3000, "confluent": 3000}


def test_the_process_start_is_the_agents_jvm_else_app_info_else_unknown() -> None:
    assert parsed("broker-1", "isrwatch").process_start_s == 1795823300.492   # process_start_time_seconds
    # A standalone exporter has no process metrics: the default naming's app-info says when the server started.
    assert parsed("broker-1", "agent-default").process_start_s == 1795823314.074
    assert parsed("broker-1", "strimzi").process_start_s is None
    assert parsed("broker-1", "confluent").process_start_s is None


@pytest.mark.parametrize(("key", "expected"), [
    ("UnderMinIsrPartitionCount", {
        "isrwatch": ("kafka_server_ReplicaManager_UnderMinIsrPartitionCount", {"attribute": "Value"}),
        "agent-default": ("kafka_server_ReplicaManager_Value", {"name": "UnderMinIsrPartitionCount"}),
        "strimzi": ("kafka_server_replicamanager_underminisrpartitioncount", {}),
        "confluent": ("kafka_server_replicamanager_underminisrpartitioncount", {})}),
    ("IsrShrinksPerSec", {
        "isrwatch": ("kafka_server_ReplicaManager_IsrShrinksPerSec", {"attribute": "Count"}),
        "agent-default": ("kafka_server_ReplicaManager_Count", {"name": "IsrShrinksPerSec"}),
        "strimzi": ("kafka_server_replicamanager_isrshrinks_total", {}),
        "confluent": ("kafka_server_replicamanager_isrshrinkspersec", {})}),
    ("MaxLag", {
        "isrwatch": ("kafka_server_ReplicaFetcherManager_MaxLag", {"clientId": "Replica", "attribute": "Value"}),
        "agent-default": ("kafka_server_ReplicaFetcherManager_Value", {"name": "MaxLag", "clientId": "Replica"}),
        "strimzi": ("kafka_server_replicafetchermanager_maxlag", {"clientId": "Replica"}),
        "confluent": ("kafka_server_replicafetchermanager_maxlag", {"clientid": "Replica"})}),
    ("ErrorsPerSec:NOT_ENOUGH_REPLICAS", {
        "isrwatch": ("kafka_network_RequestMetrics_ErrorsPerSec",
                     {"request": "Produce", "error": "NOT_ENOUGH_REPLICAS", "attribute": "Count"}),
        "agent-default": ("kafka_network_RequestMetrics_Count",
                          {"name": "ErrorsPerSec", "request": "Produce", "error": "NOT_ENOUGH_REPLICAS"}),
        "strimzi": None,
        "confluent": ("kafka_network_requestmetrics_errorspersec",
                      {"request": "Produce", "error": "NOT_ENOUGH_REPLICAS"})}),
    ("OfflinePartitionsCount", {
        "isrwatch": ("kafka_controller_KafkaController_OfflinePartitionsCount", {"attribute": "Value"}),
        "agent-default": ("kafka_controller_KafkaController_Value", {"name": "OfflinePartitionsCount"}),
        "strimzi": ("kafka_controller_kafkacontroller_offlinepartitionscount", {}),
        "confluent": ("kafka_controller_kafkacontroller_offlinepartitionscount", {})}),
])
def test_the_series_each_naming_gives_an_mbean(key: str, expected: dict[str, tuple[str, dict[str, str]] | None]
                                               ) -> None:
    bean = MBean.parse(MBEANS[key])
    attribute = "Count" if key in ("IsrShrinksPerSec", "ErrorsPerSec:NOT_ENOUGH_REPLICAS") else "Value"
    namings = {"isrwatch": isrwatch_naming, "agent-default": agent_default_naming, "strimzi": strimzi_naming,
               "confluent": confluent_naming}
    assert {rules: naming(bean, attribute) for rules, naming in namings.items()} == expected


def test_an_mbean_name_is_read_with_its_keys_in_order() -> None:
    bean = MBean.parse(MBEANS["ErrorsPerSec:NOT_ENOUGH_REPLICAS"])

    assert (bean.domain, bean.type, bean.name, bean.others) == (
        "kafka.network", "RequestMetrics", "ErrorsPerSec", (("request", "Produce"), ("error", "NOT_ENOUGH_REPLICAS")))
    for malformed in ("kafka.server:name=MaxLag,type=ReplicaFetcherManager", "kafka.server", "kafka.server:type"):
        with pytest.raises(ValueError, match="not an MBean name with its type first"):
            MBean.parse(malformed)


def test_app_info_is_named_alike_by_the_project_and_the_default_rules_and_not_by_strimzi_or_confluent() -> None:
    assert {d.rules: d.node_id_series for d in DIALECTS} == {
        ExporterRules.ISRWATCH: "kafka_server_app_info_StartTimeMs",
        ExporterRules.AGENT_DEFAULT: "kafka_server_app_info_StartTimeMs",
        ExporterRules.STRIMZI: None, ExporterRules.CONFLUENT: None}


def test_a_tie_goes_to_the_projects_rules() -> None:
    both = recorded("broker-1", "agent-default") + recorded("broker-1", "isrwatch")

    assert parse_exposition(both).rules == ExporterRules.ISRWATCH


def test_only_the_lines_of_series_read_here_reach_the_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    from collector import metrics_scrape

    lines: list[str] = []
    real = metrics_scrape.text_string_to_metric_families
    monkeypatch.setattr(metrics_scrape, "text_string_to_metric_families",
                        lambda text: (lines.extend(text.splitlines()), real(text))[1])
    text = recorded("broker-1", "agent-default")
    parse_exposition(text)

    # Of ~1,400 lines (650 more per broker in production, RequestMetrics' timers): the 15 broker metrics (MessagesIn
    # and BytesIn also per topic), the controller's id, app-info, the build, and the error meters of other requests
    # and errors (their exact labels are matched after the parser).
    assert len(text.splitlines()) > 1300
    assert len(lines) == 21, lines
    assert all('name="ErrorsPerSec"' in line for line in lines if line.startswith("kafka_network_RequestMetrics_"))


# --- coverage and warnings --------------------------------------------------------------------------------------


def test_strimzi_broker_coverage_names_the_missing_meters_and_the_rule_that_cannot_fire() -> None:
    coverage = coverage_of(scrape(parsed("broker-1", "strimzi")), 1, NodeRole.BROKER, RULE_METRICS)

    assert (coverage.exporter_rules, coverage.found, len(coverage.expected)) == (ExporterRules.STRIMZI, 11, 15)
    assert coverage.missing == tuple(PRODUCE_ERRORS)
    assert coverage.rules_blind == ("ProduceNotEnoughReplicas",)
    assert coverage.warning() == (
        f"broker 1 ({URL}): 11 of 15 metrics (strimzi rules); missing: ErrorsPerSec:NOT_LEADER_OR_FOLLOWER, "
        "ErrorsPerSec:NOT_ENOUGH_REPLICAS, ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND, "
        "ErrorsPerSec:REQUEST_TIMED_OUT (ProduceNotEnoughReplicas cannot fire)")


@pytest.mark.parametrize("rules", ["isrwatch", *OTHER_RULES])
def test_the_active_controller_gives_all_its_metrics_under_every_naming(rules: str) -> None:
    coverage = coverage_of(scrape(parsed("controller-3000", rules)), 3000, NodeRole.UNKNOWN, RULE_METRICS)

    # Kafka 4's controller has no LeaderElectionRateAndTimeMs (ZooKeeper's): not expected of it.
    assert (coverage.role, coverage.found, len(coverage.expected)) == (NodeRole.CONTROLLER, 6, 6)
    assert (coverage.missing, coverage.rules_blind, coverage.warning()) == ((), (), None)


@pytest.mark.parametrize("rules", ["isrwatch", "agent-default", "confluent"])
def test_a_broker_under_a_naming_with_every_metric_is_complete(rules: str) -> None:
    coverage = coverage_of(scrape(parsed("broker-1", rules)), 1, NodeRole.BROKER, RULE_METRICS)

    assert (coverage.found, len(coverage.expected), coverage.complete, coverage.warning()) == (15, 15, True, None)


def jvm_only(text: str) -> str:
    """An exporter exporting the JVM's metrics but none of Kafka's."""
    return "\n".join(line for line in text.splitlines() if "kafka_" not in line) + "\n"


def test_an_exposition_with_none_of_the_names_is_unrecognised() -> None:
    exposition = parse_exposition(jvm_only(recorded("broker-1", "isrwatch")))

    assert (exposition.rules, dict(exposition.values), exposition.node_id) == (ExporterRules.UNRECOGNISED, {}, None)
    as_broker = coverage_of(scrape(exposition), 2, NodeRole.BROKER, RULE_METRICS)
    assert (as_broker.found, len(as_broker.expected), as_broker.rules_blind) == (0, 15, ("ProduceNotEnoughReplicas",))
    assert as_broker.warning() == (f"broker 2 ({URL}): exports none of the metrics isrwatch reads (unrecognised "
                                   "exporter rules) (ProduceNotEnoughReplicas cannot fire)")
    # Whose it is unknown: a broker's and a controller's metrics are expected, and every rule over them is blind.
    unknown = coverage_of(scrape(exposition), None, NodeRole.UNKNOWN, RULE_METRICS)
    assert (unknown.found, len(unknown.expected)) == (0, len(BROKER_KEYS) + len(CONTROLLER_KEYS) - 1)
    assert unknown.rules_blind == ("ActiveControllerCount", "OfflinePartitions", "ProduceNotEnoughReplicas",
                                   "UncleanLeaderElection")
    assert unknown.warning() == (
        f"metrics URL {URL}: exports none of the metrics isrwatch reads (unrecognised exporter rules) "
        "(ActiveControllerCount, OfflinePartitions, ProduceNotEnoughReplicas, UncleanLeaderElection cannot fire); "
        "cannot tell which node this is; pass ID=URL")


def standing_by(text: str) -> str:
    """The lower-cased controller exposition of a standby controller."""
    active = "kafka_controller_kafkacontroller_activecontrollercount 1.0"
    assert text.count(active) == 1
    return text.replace(active, "kafka_controller_kafkacontroller_activecontrollercount 0.0")


def test_a_strimzi_broker_is_told_by_its_host_when_one_broker_has_it() -> None:
    broker, controller = parsed("broker-1", "strimzi"), parsed("controller-3000", "strimzi")
    addresses = {1: "kafka-1.example:9092", 2: "kafka-2.example:9092", 3: "kafka-3.example:9092"}

    assert node_of_url("http://kafka-2.example:9404/metrics", broker, addresses) == 2
    assert node_of_url("http://kafka-9.example:9404/metrics", broker, addresses) is None
    assert node_of_url("http://127.0.0.1:9404/metrics", broker, {1: "127.0.0.1:9092", 2: "127.0.0.1:9093"}) is None
    # The active controller names itself; a controller is never given a broker's id by its host.
    assert node_of_url("http://kafka-2.example:9405/metrics", controller, addresses) == 3000
    standby = parse_exposition(standing_by(recorded("controller-3000", "strimzi")))
    assert node_of_url("http://kafka-2.example:9405/metrics", standby, addresses) is None
    strimzi_unknown = coverage_of(scrape(broker), None, NodeRole.UNKNOWN, RULE_METRICS)
    assert strimzi_unknown.warning() == (
        f"metrics URL {URL}: 11 of 15 metrics (strimzi rules); missing: ErrorsPerSec:NOT_LEADER_OR_FOLLOWER, "
        "ErrorsPerSec:NOT_ENOUGH_REPLICAS, ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND, "
        "ErrorsPerSec:REQUEST_TIMED_OUT (ProduceNotEnoughReplicas cannot fire); cannot tell which node this is; "
        "pass ID=URL")


def test_a_standby_controller_expects_nothing() -> None:
    standby = parse_exposition(standing_by(recorded("controller-3000", "confluent")))

    coverage = coverage_of(scrape(standby), 3001, NodeRole.UNKNOWN, RULE_METRICS)
    assert (coverage.role, coverage.found, coverage.expected, coverage.complete) == (NodeRole.CONTROLLER, 0, (), True)


# --- a process start the exposition does not give ----------------------------------------------------------------


def with_counts(text: str, counts: dict[str, float]) -> str:
    lines = text.splitlines()
    for name, value in counts.items():
        (i,) = [i for i, line in enumerate(lines) if line.startswith(f"{name} ")]
        lines[i] = f"{name} {value}"
    return "\n".join(lines) + "\n"


MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"


def test_without_a_process_start_the_first_scrape_starts_the_process_and_all_meters_going_down_restart_it() -> None:
    text = recorded("broker-1", "strimzi")
    state = MeterState()

    first = state.rows(1, scrape(parse_exposition(text), at_s=100.0))
    assert {r.process_start_s for r in first} == {1795823500.0}   # first seen
    one_reset = with_counts(text, {MESSAGES_IN: 10.0})   # one meter registered again, the process the same
    second = {r.key: r for r in state.rows(1, scrape(parse_exposition(one_reset), at_s=102.0))}
    assert second["BytesInPerSec"].process_start_s == 1795823500.0 and second["BytesInPerSec"].value == 0.0
    assert second["MessagesInPerSec"].value == 5.0
    restarted = with_counts(text, {MESSAGES_IN: 4.0, BYTES_IN: 100.0})   # every meter that had counted, lower
    third = {r.key: r for r in state.rows(1, scrape(parse_exposition(restarted), at_s=104.0))}
    assert {r.process_start_s for r in third.values()} == {1795823504.0}
    assert (third["MessagesInPerSec"].value, third["BytesInPerSec"].value) == (2.0, 50.0)
