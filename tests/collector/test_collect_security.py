"""`isrwatch collect --command-config` against a real Kafka 4.3 cluster with TLS and SASL listeners.

One cluster for the module (tests/collector/secured_cluster.py: 1 controller + 2 brokers with SASL_SSL, SCRAM-SHA-512,
OAUTHBEARER and mutual-TLS listeners, a token endpoint on loopback). The collector runs as the CLI in a subprocess whose
Python logs (librdkafka's lines included) go to a file; afterwards its argv, output, logs, state files and every
string column of every bronze table are searched for the secrets. No assertion is on wall-clock time: a process
that hangs fails by its subprocess timeout, and elapsed times appear in the failure messages only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from collector.client_properties import security_from_file, security_from_properties
from collector.kafka_wire import BrokerConnection, BrokerSecurityError, BrokerUnavailable
from foundation.delta_io import read_rows
from schemas.bronze import ACK_LEDGER, BRONZE_TABLES, PARTITION_STATE, RUNS
from testing.kafka.certificates import TestCertificateAuthority
from testing.kafka.secure_listeners import MTLS_LISTENER, SASL_SSL_LISTENER
from tests.collector.secured_cluster import (
    OAUTH_CLIENT,
    OAUTH_SCOPE,
    PASSWORD_ENV,
    TOPIC,
    USER,
    Secured,
    mtls_properties,
    oauthbearer_properties,
    sasl_ssl_properties,
    secured_cluster,
)

ROOT = Path(__file__).resolve().parents[2]
# The collector with every Python log record, librdkafka's forwarded lines too, written to a file (argv[1]).
LOGGING_MAIN = """\
import logging, sys
handler = logging.FileHandler(sys.argv[1])
handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG)
logging.getLogger("collector.canary.librdkafka").addHandler(handler)
from isrwatch.cli import main
sys.exit(main(sys.argv[2:]))
"""

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_cluster(tmp_path_factory.mktemp("kafka-security")) as cluster:
        yield cluster


@dataclass
class Run:
    returncode: int | None
    stdout: str
    stderr: str
    python_log: str
    cmdline: str
    elapsed_s: float

    def explain(self) -> str:
        return (f"exit {self.returncode} after {self.elapsed_s:.1f} s\nstdout:\n{self.stdout[-3000:]}\n"
                f"stderr:\n{self.stderr[-3000:]}")


def collect(work: Path, bootstrap: str, *args: str, env_password: str | None = None,
            timeout_s: float = 180) -> Run:
    """`isrwatch collect` in a subprocess, its argv read from /proc while it runs."""
    log_file = work / "python.log"
    env = {**os.environ, **({PASSWORD_ENV: env_password} if env_password is not None else {})}
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", LOGGING_MAIN, str(log_file), "collect", "--bootstrap-servers",
                                bootstrap, "--lakehouse", str(work / "lakehouse"), "--quiet", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        running = process.poll() is None
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert running, "the collector had exited before its argv was read"
    return Run(process.returncode, stdout, stderr, log_file.read_text() if log_file.exists() else "", cmdline,
               time.monotonic() - started)


def bronze_strings(lakehouse: Path) -> dict[str, list[str]]:
    """Every string value of every bronze table, by table."""
    found: dict[str, list[str]] = {}
    for td in BRONZE_TABLES:
        path = Path(td.path(str(lakehouse)))
        if not path.exists():
            continue
        table = DeltaTable(str(path)).to_pyarrow_table()
        values: list[str] = []
        for name in table.column_names:
            if pa.types.is_string(table.schema.field(name).type) or pa.types.is_large_string(
                    table.schema.field(name).type):
                values += [v for v in table.column(name).to_pylist() if v is not None]
        found[td.name] = values
    return found


def assert_no_secret_anywhere(secured: Secured, run: Run, work: Path, *more_secrets: str) -> None:
    places = {"argv": run.cmdline, "stdout": run.stdout, "stderr": run.stderr, "python log": run.python_log}
    for path in (work / "lakehouse" / "_collector").rglob("*.json"):
        places[str(path.relative_to(work))] = path.read_text()
    for table, values in bronze_strings(work / "lakehouse").items():
        places[f"bronze.{table}"] = "\n".join(values)
    assert "bronze.runs" in places, "the run wrote no bronze table to search"
    for place, text in places.items():
        for secret in (*secured.secrets, *more_secrets):
            assert secret not in text, f"a secret appears in {place}"


def assert_partition_state_matches_the_cluster(secured: Secured, lakehouse: Path) -> None:
    metadata = secured.cluster.admin_client().list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    expected = {p: (m.leader, sorted(m.replicas), sorted(m.isrs)) for p, m in metadata.items()}
    rows = read_rows(PARTITION_STATE, str(lakehouse)).to_pylist()
    last = {r["partition"]: r for r in sorted(rows, key=lambda r: r["ts"]) if r["topic"] == TOPIC}
    assert sorted(last) == [0, 1, 2, 3]
    assert {p: (r["leader"], sorted(r["replicas"]), sorted(r["isr"])) for p, r in last.items()} == expected
    assert all(len(r["isr"]) == 2 for r in last.values()), "both replicas of every partition in sync"


def runs_summaries(lakehouse: Path) -> list[dict[str, object]]:
    return [json.loads(r["summary"]) for r in read_rows(RUNS, str(lakehouse)).to_pylist()]


def assert_collected(secured: Secured, run: Run, lakehouse: Path, *, canary: bool, over: str) -> None:
    """What a 6 s run wrote: the topic's partitions as the cluster has them, every broker answering in every
    interval, and with the canary, records acknowledged on both of its partitions and none lost."""
    assert_partition_state_matches_the_cluster(secured, lakehouse)
    summaries = runs_summaries(lakehouse)
    assert len(summaries) >= 3, run.explain()
    assert all(s["not_answering"] == {} for s in summaries), summaries
    if canary:
        ledger = read_rows(ACK_LEDGER, str(lakehouse)).to_pylist()
        acked: dict[int, int] = {}
        for row in ledger:
            acked[row["partition"]] = acked.get(row["partition"], 0) + row["records_acked"]
        assert sorted(acked) == [0, 1], ledger
        assert all(n > 0 for n in acked.values()), f"the canary's records were acknowledged over {over}: {acked}"
        assert sum(r["records_lost"] for r in ledger) == 0


# ---- collecting over TLS and SASL ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("listener", "canary"), [(SASL_SSL_LISTENER, False), (SASL_SSL_LISTENER, True),
                                                  (MTLS_LISTENER, True)],
                         ids=["sasl_ssl-scram-no-canary", "sasl_ssl-scram-canary", "mtls-canary"])
def test_collect_over_a_secured_listener_writes_the_clusters_state(secured: Secured, tmp_path: Path, listener: str,
                                                                   canary: bool) -> None:
    if listener == SASL_SSL_LISTENER:
        config = sasl_ssl_properties(secured, tmp_path / "client.properties", more="client.id=ops-tools\n")
        password = secured.scram_password
    else:
        config, password = mtls_properties(secured, tmp_path / "client.properties"), secured.keystore_password
    run = collect(tmp_path, secured.cluster.bootstrap_for(listener), "--command-config", str(config),
                  "--interval", "1s", "--timeout", "2s", "--duration", "6s",
                  *(["--canary-topic", f"__canary_{listener.lower()}", "--canary-rate", "20"] if canary
                    else ["--no-canary"]), env_password=password)
    assert run.returncode == 0, run.explain()
    first = run.stdout.splitlines()[0]
    assert first.startswith("isrwatch collect: cluster "), run.explain()
    assert f"connecting over {listener}" in first, first
    if listener == SASL_SSL_LISTENER:
        assert f"SCRAM-SHA-512 as '{USER}'" in first, first
        assert run.stderr.splitlines()[0] == (f"isrwatch collect: warning: client.id in {config} is ignored (the "
                                              "collector has its own timeouts and client ids)"), run.explain()
    assert_collected(secured, run, tmp_path / "lakehouse", canary=canary, over=listener)
    assert_no_secret_anywhere(secured, run, tmp_path)


def test_kafka_python_clients_connect_with_the_same_settings(secured: Secured, tmp_path: Path) -> None:
    """kafka_python_config(), for a consumer built on kafka-python: its KafkaConsumer lists the topic's partitions
    over SASL_SSL with SCRAM-SHA-512, and over mutual TLS."""
    from kafka import KafkaConsumer

    for listener, config, password in (
            (SASL_SSL_LISTENER, sasl_ssl_properties(secured, tmp_path / "sasl.properties"), secured.scram_password),
            (MTLS_LISTENER, mtls_properties(secured, tmp_path / "mtls.properties"), secured.keystore_password)):
        security = security_from_file(config, environ={PASSWORD_ENV: password})
        consumer = KafkaConsumer(bootstrap_servers=secured.cluster.bootstrap_for(listener).split(","),
                                 request_timeout_ms=10_000, **security.kafka_python_config())
        try:
            assert consumer.partitions_for_topic(TOPIC) == {0, 1, 2, 3}, listener
        finally:
            consumer.close()


# ---- OAUTHBEARER with OAuth client credentials ---------------------------------------------------------------------

def test_collect_over_oauthbearer_gets_tokens_for_itself_and_the_canary(secured: Secured, tmp_path: Path) -> None:
    """The collector's own connections authenticate with the token its provider fetched (one for the whole run),
    the canary's librdkafka clients with the tokens their OIDC support fetched, at the same endpoint."""
    config = oauthbearer_properties(secured, tmp_path / "client.properties")
    before = len(secured.token_issuer.requests)
    run = collect(tmp_path, secured.cluster.bootstrap_for(SASL_SSL_LISTENER), "--command-config", str(config),
                  "--interval", "1s", "--timeout", "2s", "--duration", "6s", "--canary-topic", "__canary_oauthbearer",
                  "--canary-rate", "20", env_password=secured.oauth_client_secret)
    assert run.returncode == 0, run.explain()
    first = run.stdout.splitlines()[0]
    assert (f"connecting over SASL_SSL, OAUTHBEARER as client '{OAUTH_CLIENT}' from {secured.token_endpoint.url}, "
            "trusting the configured CAs, without a client certificate, hostname verification on") in first, first
    assert_collected(secured, run, tmp_path / "lakehouse", canary=True, over="OAUTHBEARER")
    requests = secured.token_issuer.requests[before:]
    assert all(r.granted and r.scope == OAUTH_SCOPE for r in requests), requests
    by_collector = [(r.user_agent or "").startswith("python-httpx/") for r in requests]   # librdkafka sends none
    assert by_collector.count(True) == 1, f"one token for the collector's connections and its canary's reader: " \
                                          f"{requests}"
    assert by_collector.count(False) >= 1, f"the canary's librdkafka clients fetched their own tokens: {requests}"
    assert_no_secret_anywhere(secured, run, tmp_path, urllib.parse.quote(secured.oauth_client_secret, safe=""),
                              *(r.token for r in requests if r.token is not None))


def test_a_wrong_client_secret_exits_2_naming_the_token_endpoints_refusal(secured: Secured, tmp_path: Path) -> None:
    wrong = "wrong-" + os.urandom(6).hex()
    config = oauthbearer_properties(secured, tmp_path / "c.properties")
    bootstrap = secured.cluster.bootstrap_for(SASL_SSL_LISTENER)
    before = len(secured.token_issuer.requests)
    run = collect(tmp_path, bootstrap, "--command-config", str(config), env_password=wrong, timeout_s=60)
    assert_failed_fast_with(run, f"isrwatch collect: cannot connect to Kafka: broker {bootstrap.split(',')[0]}: OAuth "
                                 f"token endpoint {secured.token_endpoint.url} answered HTTP 401: "
                                 '{"error": "invalid_client"}', tmp_path / "lakehouse")
    assert [r.granted for r in secured.token_issuer.requests[before:]] == [False], "one refused token request"
    assert wrong not in run.stderr + run.python_log + run.cmdline


def test_the_brokers_check_the_tokens_scope_and_kafka_python_connects_with_it(secured: Secured,
                                                                               tmp_path: Path) -> None:
    """A token without the scope the brokers require is refused by the broker, whose reason is shown; with it, the
    collector's connection and kafka-python's consumer (kafka_python_config()) are let in."""
    from kafka import KafkaConsumer

    environ = {PASSWORD_ENV: secured.oauth_client_secret}
    address = secured.cluster.bootstrap_for(SASL_SSL_LISTENER).split(",")[0]
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    unscoped = security_from_file(oauthbearer_properties(secured, tmp_path / "unscoped.properties", scope=None),
                                  environ=environ)
    refused = BrokerConnection(address, 10.0, unscoped)
    with pytest.raises(BrokerSecurityError) as caught:
        refused.request(request, MetadataResponse, 12)
    refused.close()
    # The broker's answer is RFC 7628's error JSON, naming the scope the token lacks.
    assert str(caught.value) == (f"broker {address}: SASL authentication failed (OAUTHBEARER as client "
                                 f"'{OAUTH_CLIENT}'): " + '{"status":"insufficient_scope", "scope":"[kafka]"}')
    security = security_from_file(oauthbearer_properties(secured, tmp_path / "client.properties"), environ=environ)
    connection = BrokerConnection(address, 10.0, security)
    answer = connection.request(request, MetadataResponse, 12)
    connection.close()
    assert sorted(b.node_id for b in answer.brokers) == secured.cluster.broker_ids()
    consumer = KafkaConsumer(bootstrap_servers=secured.cluster.bootstrap_for(SASL_SSL_LISTENER).split(","),
                             request_timeout_ms=10_000, **security.kafka_python_config())
    try:
        assert consumer.partitions_for_topic(TOPIC) == {0, 1, 2, 3}
    finally:
        consumer.close()


# ---- what a misconfigured client is told ---------------------------------------------------------------------------

class CountingProxy:
    """A TCP forwarder on loopback in front of one broker that counts the connections made through it: how many
    times a client tried that broker."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self._sockets: list[socket.socket] = [self.listener]
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:   # closed: the proxy is done
                return
            self.connections += 1
            upstream = socket.create_connection(self.target, timeout=10)
            self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in self._sockets:
            sock.close()
        self._thread.join(5)


def assert_failed_fast_with(run: Run, expected: str, lakehouse: Path) -> None:
    assert run.returncode == 2, run.explain()
    assert run.stdout == "", run.explain()
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.explain()
    assert lines[0].startswith("isrwatch collect: "), run.explain()
    assert expected in lines[0], run.explain()
    assert not (lakehouse / "bronze").exists(), "nothing is written"


def test_a_wrong_password_exits_2_with_the_brokers_error_after_one_attempt(secured: Secured, tmp_path: Path) -> None:
    """The broker's refusal ends the run: one connection to the first bootstrap broker, none to the second."""
    wrong = "wrong-" + os.urandom(6).hex()
    config = sasl_ssl_properties(secured, tmp_path / "c.properties", password=wrong)
    brokers = secured.cluster.bootstrap_for(SASL_SSL_LISTENER).split(",")
    with CountingProxy(brokers[0]) as first, CountingProxy(brokers[1]) as second:
        run = collect(tmp_path, f"{first.address},{second.address}", "--command-config", str(config), timeout_s=60)
    assert_failed_fast_with(run, f"isrwatch collect: cannot connect to Kafka: broker {first.address}: SASL "
                                 f"authentication failed (SCRAM-SHA-512 as '{USER}'): Authentication failed during "
                                 "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
                            tmp_path / "lakehouse")
    assert (first.connections, second.connections) == (1, 0), run.explain()
    assert wrong not in run.stderr + run.python_log + run.cmdline


def test_an_unknown_ca_is_a_clear_error(secured: Secured, tmp_path: Path) -> None:
    other = TestCertificateAuthority("someone else's CA").write_ca_pem(tmp_path / "other-ca.pem")
    config = tmp_path / "c.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={other}\nssl.keystore.location="
                      f"{secured.keystore}\nssl.keystore.password=${{env:{PASSWORD_ENV}}}\n")
    bootstrap = secured.cluster.bootstrap_for(MTLS_LISTENER)
    run = collect(tmp_path, bootstrap, "--command-config", str(config), env_password=secured.keystore_password,
                  timeout_s=60)
    assert_failed_fast_with(run, f"broker {bootstrap.split(',')[0]}: TLS: the broker's certificate is not trusted "
                                 "(self-signed certificate in certificate chain): set ssl.truststore.location",
                            tmp_path / "lakehouse")


def test_a_plaintext_client_against_the_tls_listener_is_told_to_set_the_security_protocol(
        secured: Secured, tmp_path: Path) -> None:
    bootstrap = secured.cluster.bootstrap_for(MTLS_LISTENER)
    run = collect(tmp_path, bootstrap, timeout_s=60)
    assert_failed_fast_with(run, f"broker {bootstrap.split(',')[0]}: the broker closed the connection without "
                                 "answering a PLAINTEXT client: is the listener TLS? set security.protocol",
                            tmp_path / "lakehouse")


def test_a_tls_client_against_the_plaintext_listener_is_a_clear_error(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={secured.ca_file}\n")
    run = collect(tmp_path, secured.cluster.bootstrap_servers, "--command-config", str(config), timeout_s=60)
    assert_failed_fast_with(run, "TLS handshake failed", tmp_path / "lakehouse")
    assert "is the listener plaintext? check security.protocol" in run.stderr, run.explain()


def test_a_bad_properties_file_exits_2_naming_the_key(secured: Secured, tmp_path: Path) -> None:
    config = tmp_path / "c.properties"
    config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    run = collect(tmp_path, secured.cluster.bootstrap_for(SASL_SSL_LISTENER), "--command-config", str(config),
                  timeout_s=60)
    assert_failed_fast_with(run, f"isrwatch collect: sasl.mechanism in {config}: 'GSSAPI' is not one of PLAIN, "
                                 "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER", tmp_path / "lakehouse")


# ---- deadlines -----------------------------------------------------------------------------------------------------

def test_a_paused_broker_costs_a_secured_connection_one_timeout_not_a_hang(secured: Secured) -> None:
    """TLS and SASL happen inside the request's deadline: against a SIGSTOPped broker (the kernel still accepts
    the connection) a fresh connection reports the broker unavailable, a timeout rather than a security error."""
    security = security_from_properties(
        {"security.protocol": "SASL_SSL", "ssl.truststore.location": str(secured.ca_file),
         "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.jaas.config": f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" '
                             f'password="{secured.scram_password}";'})
    broker = secured.cluster.broker_ids()[-1]
    address = secured.cluster.bootstrap_for(SASL_SSL_LISTENER).split(",")[-1]
    connection = BrokerConnection(address, 1.0, security)
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    secured.cluster.pause(broker)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            started = time.monotonic()
            attempt = pool.submit(connection.request, request, MetadataResponse, 12)
            with pytest.raises(BrokerUnavailable) as caught:
                attempt.result(timeout=30)
            elapsed = time.monotonic() - started
    finally:
        secured.cluster.resume(broker)
    assert not isinstance(caught.value, BrokerSecurityError), f"{caught.value} ({elapsed:.1f} s)"
    assert str(caught.value) == f"broker {address}: timed out", f"{caught.value} ({elapsed:.1f} s)"
    answer = connection.request(request, MetadataResponse, 12)
    assert sorted(b.node_id for b in answer.brokers) == secured.cluster.broker_ids()
    connection.close()
