"""What the collector's tests share: the real cluster (tests/conftest.py puts every file that asks for it in one xdist
group, so one worker starts it once): 1 controller + 3 brokers on loopback, replica.lag.time.max.ms 3 s so a
stalled follower leaves the ISR within seconds, a 6 s session timeout, and `orders` (RF 3, min ISR 2, 6 partitions);
and the security tests' certificates: one test CA per module, a client certificate it issued."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from testing.kafka import KafkaCluster
from testing.kafka.certificates import IssuedCertificate, TestCertificateAuthority
from tests.collector.real_cluster import TOPIC


@pytest.fixture(scope="module")
def ca() -> TestCertificateAuthority:
    return TestCertificateAuthority()


@pytest.fixture(scope="module")
def client_cert(ca: TestCertificateAuthority) -> IssuedCertificate:
    return ca.issue("collector", server=False)


@pytest.fixture
def ca_file(tmp_path: Path, ca: TestCertificateAuthority) -> Path:
    return ca.write_ca_pem(tmp_path / "ca.pem")


@pytest.fixture(scope="package")
def collect_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("kafka"), brokers=3,
                         broker_config={"replica.lag.time.max.ms": "3000"},
                         controller_config={"broker.session.timeout.ms": "6000"})
    try:
        kafka.start()
        admin = kafka.admin_client()
        futures = admin.create_topics([NewTopic(TOPIC, num_partitions=6, replication_factor=3,
                                                config={"min.insync.replicas": "2"})])
        futures[TOPIC].result(30)
        del admin   # a client left alive while the cluster stops logs a refused connection every 50 ms
        yield kafka
    finally:
        kafka.stop()
    assert kafka.running_processes() == [] and kafka.leftover_process_groups() == [], \
        "every JVM the fixture started is gone"
