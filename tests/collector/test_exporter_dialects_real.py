"""The exporter namings against a real Kafka 4.3 cluster (testing/kafka/): one broker and the active controller read
at once through the JMX exporter agent with conf/jmx_exporter.yaml and through three standalone exporters over
remote JMX with Strimzi's, Confluent's and the default rules (tests/collector/data/*.yaml), by `isrwatch collect`.

The cluster: 1 controller + brokers 1 and 2, an idle topic written once, and three Produce requests sent to
broker 1 for a partition it follows (NOT_LEADER_OR_FOLLOWER), so its produce error meter exists.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from collector.collect_loop import Collector, CollectSettings
from collector.metrics_scrape import parse_exposition
from foundation.delta_io import read_rows
from pipelines.rule_metrics import metrics_read_by_rules_file
from schemas.bronze import BROKER_METRICS, METRICS_COVERAGE, ExporterRules
from testing.kafka import KafkaCluster
from testing.kafka.cluster import CONTROLLER_ID
from tests.collector.data.record_dialects import RULES, TOPIC, not_leader_errors
from tests.collector.real_cluster import wait_for

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
NODES = (1, CONTROLLER_ID)
PRODUCE_ERRORS = ["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER", "ErrorsPerSec:NOT_ENOUGH_REPLICAS",
                  "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND", "ErrorsPerSec:REQUEST_TIMED_OUT"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka"), brokers=2, extra_exporters={n: RULES for n in NODES})
    try:
        kafka.start()
        admin = kafka.admin_client()
        admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=2)])[TOPIC].result(30)
        del admin
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "acks": "all", "log_level": 0})
        for i in range(200):
            producer.produce(TOPIC, f"record {i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0
        not_leader_errors(kafka, 3)
        every_exporter_reads_its_node(kafka)
        yield kafka
    finally:
        kafka.stop()
    assert kafka.running_processes() == [] and kafka.leftover_process_groups() == [], \
        "every JVM the fixture started (the standalone exporters too) is gone"


def every_exporter_reads_its_node(cluster: KafkaCluster, answers: int = 30) -> None:
    """Return once every standalone exporter's answer is read under its own rules. Counted in answers, not seconds
    (each scrape of a node over remote JMX takes 0.5-4 s here idle, many times that on a loaded machine): fails when
    an exporter has answered `answers` times and never so, with what each one last said."""
    last: dict[str, str] = {}
    counts: dict[str, int] = {}
    pending = {url: ExporterRules(rules) for n in NODES for rules, url in cluster.nodes[n].exporter_urls.items()}
    with httpx.Client() as client:
        while pending:
            for url, rules in list(pending.items()):
                counts[url] = counts.get(url, 0) + 1
                try:
                    answer = client.get(url, timeout=60)
                except httpx.TransportError as e:
                    last[url] = repr(e)
                    continue
                read = parse_exposition(answer.text)
                if read.rules == rules:
                    del pending[url]
                    continue
                errors = [line for line in answer.text.splitlines() if line.startswith("jmx_scrape_error")]
                last[url] = (f"HTTP {answer.status_code}, {len(answer.text)} characters read as {read.rules.value}, "
                             f"{errors}")
            if any(counts[url] >= answers for url in pending):
                raise AssertionError(f"standalone exporters not reading their node after {answers} answers each: "
                                     + "; ".join(f"{url} ({pending[url].value}): {last[url]}" for url in pending))


def urls_of(cluster: KafkaCluster, rules: str) -> dict[int | None, list[str]]:
    def url(node: int) -> str:
        found = cluster.nodes[node].metrics_url if rules == "isrwatch" else cluster.nodes[node].exporter_urls[rules]
        assert found is not None
        return found
    return {node: [url(node)] for node in NODES}


def rescraped(collectors: Iterable[Collector]) -> None:
    """Return once every metrics URL of every collector has ended a scrape it had not when called."""
    before = [(c, c.scrapes.counts()) for c in collectors]
    def all_again() -> bool:
        return all(c.scrapes.counts()[url][0] > ended for c, counts in before for url, (ended, _) in counts.items())
    wait_for(all_again, 300, "a new scrape of every metrics URL")


def metric_values(lake: str, batch_id: int) -> dict[tuple[int, str], tuple[str, float]]:
    """(node, MBean) -> (kind, a gauge's value or a meter's count) of one batch of broker_metrics."""
    rows = read_rows(BROKER_METRICS, lake).to_pylist()
    return {(r["broker_id"], r["mbean"]): (r["kind"], r["value"] if r["kind"] == "gauge" else r["count"])
            for r in rows if r["batch_id"] == batch_id}


def test_strimzi_default_and_confluent_rules_give_the_projects_broker_metrics_rows(cluster: KafkaCluster,
                                                                                    tmp_path: Path) -> None:
    rule_metrics = metrics_read_by_rules_file()
    collectors = {rules: Collector(CollectSettings(cluster.bootstrap_servers.split(","), str(tmp_path / rules),
                                                   metrics_urls=urls_of(cluster, rules),
                                                   alert_rule_metrics=rule_metrics))
                  for rules in ("isrwatch", *RULES)}
    try:
        # The endpoints are read back to back, the project's rules before and after the others: a round in which
        # those two agree (the topic idle, no meter moved) and every endpoint answered in time is compared. Each
        # round starts once every URL has been scraped again (each is scraped at its exporter's own pace).
        for _ in range(6):
            rescraped(collectors.values())
            before = collectors["isrwatch"].step()["batch"]
            batches = {rules: collectors[rules].step()["batch"] for rules in RULES}
            after = collectors["isrwatch"].step()["batch"]
            ours = metric_values(str(tmp_path / "isrwatch"), before)
            theirs = {rules: metric_values(str(tmp_path / rules), batch) for rules, batch in batches.items()}
            answered = all({node for node, _ in values} == set(NODES) for values in theirs.values())
            if answered and ours == metric_values(str(tmp_path / "isrwatch"), after):
                break
        else:
            raise AssertionError(f"no round of scrapes with the cluster still and every endpoint answering; the "
                                 f"last: ours {ours}, theirs {theirs}")
    finally:
        for collector in collectors.values():
            collector.close()

    assert {name for (_, name) in ours} >= {"kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
                                            "kafka.controller:type=KafkaController,name=OfflinePartitionsCount"}
    # Three sent to it as a follower (and any the producer's first requests met while leadership settled).
    assert ours[(1, "kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=Produce,error=NOT_LEADER_OR_FOLLOWER")
                ][1] >= 3
    assert ours[(1, "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec")][1] > 0
    assert len(ours) == 15 + 6
    assert theirs["agent-default"] == ours
    assert theirs["confluent"] == ours
    # Strimzi's rules leave RequestMetrics out: no produce error rows at all (missing, not zero), the rest equal.
    assert theirs["strimzi"] == {k: v for k, v in ours.items() if "RequestMetrics" not in k[1]}

    # Each node's coverage as of the round compared: its newest row (one at the start, one per change).
    compared = {"isrwatch": before, **batches}
    coverage = {rules: {r["node_id"]: r for r in sorted(read_rows(METRICS_COVERAGE, str(tmp_path / rules)).to_pylist(),
                                                        key=lambda r: r["batch_id"]) if r["batch_id"] <= batch}
                for rules, batch in compared.items()}
    for rules, by_node in coverage.items():
        assert {n: (r["exporter_rules"], r["metrics_found"], r["metrics_expected"]) for n, r in by_node.items()} == {
            1: (rules, 11 if rules == "strimzi" else 15, 15), CONTROLLER_ID: (rules, 6, 6)}, (rules, by_node)
    assert (coverage["strimzi"][1]["missing"], coverage["strimzi"][1]["rules_blind"]) == (
        PRODUCE_ERRORS, ["ProduceNotEnoughReplicas"])


def test_collect_warns_of_a_partial_exporter_and_of_a_url_it_cannot_place(cluster: KafkaCluster,
                                                                           tmp_path: Path) -> None:
    strimzi_broker = cluster.nodes[1].exporter_urls["strimzi"]
    confluent_broker = cluster.nodes[1].exporter_urls["confluent"]   # no app-info, and both brokers on 127.0.0.1
    strimzi_controller = cluster.nodes[CONTROLLER_ID].exporter_urls["strimzi"]   # placed by CurrentControllerId
    broker_2 = cluster.nodes[2].metrics_url
    assert broker_2 is not None
    lake = tmp_path / "lake"
    # The subject is what the warnings say, not a deadline: a scrape over remote JMX that takes 0.5-4 s idle has
    # taken over 10 s (the default scrape timeout) with the other worker's JVMs on the 2 cores, so every bound is
    # a minute here and a slow answer is waited for rather than reported as a silent node.
    done = subprocess.run(
        [sys.executable, "-m", "isrwatch.cli", "collect", "--bootstrap-servers", cluster.bootstrap_servers,
         "--lakehouse", str(lake), "--no-canary", "--interval", "6s", "--timeout", "60s", "--scrape-timeout", "60s",
         "--duration", "7s", "--metrics-url", f"1={strimzi_broker}", "--metrics-url", strimzi_controller,
         "--metrics-url", broker_2, "--metrics-url", confluent_broker],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr

    missing = ", ".join(PRODUCE_ERRORS)
    warnings = [line for line in done.stderr.splitlines() if line.startswith("isrwatch collect: ")]
    assert warnings == [
        f"isrwatch collect: broker 1 ({strimzi_broker}): 11 of 15 metrics (strimzi rules); missing: {missing} "
        "(ProduceNotEnoughReplicas cannot fire)",
        f"isrwatch collect: metrics URL {confluent_broker}: cannot tell which node this is; pass ID=URL"]
    progress = [line for line in done.stdout.splitlines() if line.startswith("collect batch ")]
    assert len(progress) >= 2
    assert all(line.endswith(f"; metrics incomplete: broker 1 11/15 (strimzi), {confluent_broker} 15/15 "
                             "(confluent), node unknown") for line in progress), progress

    rows = read_rows(METRICS_COVERAGE, str(lake)).to_pylist()
    assert {(r["node_id"], r["metrics_url"], r["exporter_rules"], r["metrics_found"], r["metrics_expected"])
            for r in rows} == {(1, strimzi_broker, "strimzi", 11, 15), (2, broker_2, "isrwatch", 15, 15),
                               (CONTROLLER_ID, strimzi_controller, "strimzi", 6, 6),
                               (None, confluent_broker, "confluent", 15, 15)}
    assert len(rows) == 4 and {r["batch_id"] for r in rows} == {0}, "a row per URL at the start, none after"
    metrics: Any = read_rows(BROKER_METRICS, str(lake)).to_pandas()
    assert set(metrics["broker_id"]) == {1, 2, CONTROLLER_ID}


@pytest.fixture
def slow_exporter(cluster: KafkaCluster) -> Iterator[str]:
    """Broker 1's exporter (the project's rules) behind a proxy that answers each scrape 1.5 s late: slower than
    the collector's 0.5 s request timeout, as Strimzi's rules are on a busy broker."""
    upstream = cluster.nodes[1].metrics_url
    assert upstream is not None

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = httpx.get(upstream, timeout=30).content
            threading.Event().wait(SLOW_S)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


SLOW_S = 1.5


def test_an_exporter_slower_than_the_request_timeout_reports_every_interval(cluster: KafkaCluster, slow_exporter: str,
                                                                           tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    collector = Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake, metrics_urls={1: [slow_exporter]},
                                          interval_s=0.5, timeout_s=0.5))
    try:
        batches = collector.run(duration_s=9)
        (scrapes, late), = collector.scrapes.counts().values()
    finally:
        collector.close()

    rows = read_rows(BROKER_METRICS, lake).to_pandas()
    written = rows.groupby("batch_id")["broker_id"].agg(set)
    # Every interval wrote broker 1's metrics (its latest answer, again until the next one), though a scrape took
    # three intervals and three request timeouts; no interval found it silent.
    assert batches >= 8 and list(written.index) == list(range(batches)), written
    assert set(map(frozenset, written)) == {frozenset({1})}
    assert late == 0 and 2 <= scrapes <= batches / 2, (scrapes, batches)
    coverage = read_rows(METRICS_COVERAGE, lake).to_pylist()
    assert [(r["batch_id"], r["reporting"], r["metrics_found"]) for r in coverage] == [(0, True, 15)]
