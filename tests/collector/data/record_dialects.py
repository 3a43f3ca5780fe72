"""Records the expositions tests/collector/test_exporter_dialects.py reads: one broker and the active controller
of a real Kafka 4.3.1 cluster, each scraped under the four exporter namings isrwatch recognises at one moment.

    .venv/bin/python tests/collector/data/record_dialects.py [--out tests/collector/data] [--raw DIR]

The fixture cluster (testing/kafka/: 1 KRaft controller, node 3000, and brokers 1 and 2) runs the JMX exporter
agent with conf/jmx_exporter.yaml on every node, and on broker 1 and the controller three more exporters as
processes of their own over remote JMX (testing.kafka.cluster.StandaloneExporter), with the rules beside this
file: Strimzi's (strimzi-kafka-metrics.yaml), Confluent's (confluent-kafka-broker.yml) and the exporter's default
naming (agent-default.yaml). Before the scrapes: 300 records produced to `scrape-meters` (4 partitions, RF 2) and
three Produce requests sent to broker 1 for a partition broker 2 leads (NOT_LEADER_OR_FOLLOWER), then the
cluster left idle until two rounds of scrapes a second apart give the same values. Each node's four endpoints
are then scraped back to back, and that round is written as `<node>-<rules>.prom`.

A file keeps the kafka_*, process_* and jmx_exporter_build_info families without their HELP lines, less the
RequestMetrics timing families (request times, sizes and throttling: ~20 series per request type) and, of the
default naming, the rate and histogram attributes (…_OneMinuteRate, …_99thPercentile, …), so they stay small; the
other per-partition and per-request series are kept, so the parser's line filter has what a production
exposition has to skip.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import NewTopic
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecordsBuilder

from collector.kafka_wire import BrokerConnection
from collector.metrics_scrape import parse_exposition
from schemas.bronze import ExporterRules
from testing.kafka import KafkaCluster
from testing.kafka.cluster import CONTROLLER_ID

DATA = Path(__file__).resolve().parent
RULES = {"strimzi": DATA / "strimzi-kafka-metrics.yaml", "confluent": DATA / "confluent-kafka-broker.yml",
         "agent-default": DATA / "agent-default.yaml"}
TOPIC = "scrape-meters"
RECORDED_NODES = (1, CONTROLLER_ID)
PRODUCE_VERSION = 9
# RequestMetrics' timing and size families: per request type, under the project's and the lower-cased names
# (…_requestmetrics_totaltimems) and the default naming's (…_RequestMetrics_Count{name="TotalTimeMs",…}).
TIMING = re.compile(r"(?i)requestmetrics.*(TimeMs|Bytes|ThrottleTime|MessageConversions)")
ATTRIBUTES = re.compile(r"_(MeanRate|OneMinuteRate|FiveMinuteRate|FifteenMinuteRate|\d+thPercentile|Mean|Min|Max|"
                        r"StdDev)$")


def kept(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if line.startswith("# HELP"):
            continue
        name = line.split(" ")[2] if line.startswith("# TYPE") else re.split(r"[{ ]", line, maxsplit=1)[0]
        if (not name.startswith(("kafka_", "process_", "jmx_exporter_build_info")) or TIMING.search(line)
                or ATTRIBUTES.search(name)):
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def not_leader_errors(cluster: KafkaCluster, times: int) -> None:
    """Produce requests to broker 1 for a partition broker 2 leads: Kafka answers NOT_LEADER_OR_FOLLOWER and counts
    them in broker 1's ErrorsPerSec{request=Produce,error=NOT_LEADER_OR_FOLLOWER}."""
    admin = cluster.admin_client()
    topic = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30)
    partition = next(p.id for p in topic.partitions if p.leader.id == 2 and 1 in [r.id for r in p.replicas])
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    builder.append(int(time.time() * 1000), key=None, value=b"not for a follower", headers=[])
    builder.close()
    records = bytes(builder.buffer())
    connection = BrokerConnection(cluster.nodes[1].address, timeout_s=5.0)
    try:
        for _ in range(times):
            request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records)])])
            response = connection.request(request, ProduceResponse, PRODUCE_VERSION)
            codes = [p.error_code for t in response.responses for p in t.partition_responses]
            assert codes == [6], f"expected NOT_LEADER_OR_FOLLOWER (6), got {codes}"
    finally:
        connection.close()


def scrape_round(client: httpx.Client, cluster: KafkaCluster) -> dict[tuple[int, str], str]:
    texts = {}
    for node_id in RECORDED_NODES:
        node = cluster.nodes[node_id]
        assert node.metrics_url is not None
        for rules, url in {"isrwatch": node.metrics_url, **node.exporter_urls}.items():
            texts[node_id, rules] = client.get(url, timeout=30).raise_for_status().text
    return texts


def values_of(texts: dict[tuple[int, str], str]) -> dict[tuple[int, str], dict[str, float]] | None:
    """Each endpoint's values, None while one is not read under its own rules yet (a standalone exporter that has
    not connected to the node answers with no Kafka series)."""
    parsed = {key: parse_exposition(text) for key, text in texts.items()}
    if any(p.rules != ExporterRules(rules) for (_, rules), p in parsed.items()):
        return None
    return {key: dict(p.values) for key, p in parsed.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DATA, help="where the .prom files go")
    ap.add_argument("--raw", type=Path, default=None, help="also keep the whole expositions here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="record-dialects-") as work, \
            KafkaCluster(Path(work), brokers=2, extra_exporters={n: RULES for n in RECORDED_NODES}) as cluster, \
            httpx.Client() as client:
        admin = cluster.admin_client()
        admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=2)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "log_level": 0})
        for i in range(300):
            producer.produce(TOPIC, f"record {i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0
        not_leader_errors(cluster, 3)
        previous: dict[tuple[int, str], dict[str, float]] | None = None
        deadline = time.monotonic() + 180
        while True:
            texts = scrape_round(client, cluster)
            current = values_of(texts)
            if current is not None and current == previous:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no two equal rounds within 180 s; last: {current}")
            previous = current
            time.sleep(1.0)
        for (node_id, rules), text in sorted(texts.items()):
            name = f"{'controller' if node_id == CONTROLLER_ID else 'broker'}-{node_id}-{rules}.prom"
            (args.out / name).write_text(kept(text))
            if args.raw is not None:
                args.raw.mkdir(parents=True, exist_ok=True)
                (args.raw / name).write_text(text)
            print(f"{name}: {len(text.splitlines())} lines, {len(kept(text).splitlines())} kept")


if __name__ == "__main__":
    main()
