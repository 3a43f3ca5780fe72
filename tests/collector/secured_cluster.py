"""The secured cluster of tests/collector/test_collect_security.py and the client property files a user would write
for it: 1 controller + 2 brokers, each with a PLAINTEXT listener (inter-broker, and the tests' own admin client), a
SASL_SSL listener with SCRAM-SHA-512 and OAUTHBEARER and an SSL listener requiring a client certificate, every
certificate made by a throwaway CA; OAUTHBEARER tokens from a token endpoint on loopback (the client credentials
grant: unsecured JWTs, which the brokers' default validator checks for expiry and scope). Every secret is random,
so that finding one anywhere can only mean it leaked there."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import NewTopic

from testing.kafka import KafkaCluster
from testing.kafka.certificates import TestCertificateAuthority
from testing.kafka.secure_listeners import SecureListeners
from tests.collector.token_endpoint import ClientCredentialsIssuer, TokenEndpoint

TOPIC = "payments"
USER = "collector"
PASSWORD_ENV = "ISRWATCH_TEST_KAFKA_PASSWORD"
OAUTH_CLIENT = "isrwatch-collector"
OAUTH_SCOPE = "kafka"            # the scope the brokers require in a token


@dataclass(frozen=True)
class Secured:
    cluster: KafkaCluster
    directory: Path
    scram_password: str           # the SCRAM user's
    keystore_password: str        # the client's PKCS12 keystore's
    ca_file: Path
    keystore: Path
    oauth_client_secret: str
    token_endpoint: TokenEndpoint
    token_issuer: ClientCredentialsIssuer

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.scram_password, self.keystore_password, self.oauth_client_secret


@contextlib.contextmanager
def secured_cluster(directory: Path) -> Iterator[Secured]:
    """The cluster started in `directory`, the topic created, the token endpoint serving; all stopped on exit."""
    ca = TestCertificateAuthority()
    # Random, so that finding one anywhere can only mean it leaked there.
    scram_password = "scram-" + os.urandom(12).hex()
    keystore_password = "keystore-" + os.urandom(12).hex()
    # With characters that URL-encoding changes: the canary's librdkafka must send it encoded, as the collector does.
    oauth_client_secret = "oauth+/%:" + os.urandom(12).hex()
    keystore = ca.issue("isrwatch collector", server=False).write_pkcs12(directory / "collector.p12",
                                                                          keystore_password)
    issuer = ClientCredentialsIssuer(OAUTH_CLIENT, oauth_client_secret)
    kafka = KafkaCluster(directory / "kafka", brokers=2, secure_listeners=SecureListeners(
        ca.issue_broker(), ca.ca_pem(), {USER: scram_password}, oauthbearer_scope=OAUTH_SCOPE))
    try:
        with TokenEndpoint(issuer) as token_endpoint:
            kafka.start()
            admin = kafka.admin_client()
            admin.create_topics([NewTopic(TOPIC, num_partitions=4, replication_factor=2)])[TOPIC].result(30)
            del admin   # a client left alive while the cluster stops logs a refused connection every 50 ms
            yield Secured(kafka, directory, scram_password, keystore_password, ca.write_ca_pem(directory / "ca.pem"),
                          keystore, oauth_client_secret, token_endpoint, issuer)
    finally:
        kafka.stop()
    assert kafka.running_processes() == [] and kafka.leftover_process_groups() == [], \
        "every JVM the fixture started is gone"


def sasl_ssl_properties(secured: Secured, path: Path, password: str = f"${{env:{PASSWORD_ENV}}}",
                        more: str = "") -> Path:
    path.write_text(f"""\
security.protocol=SASL_SSL
ssl.truststore.location={secured.ca_file}
ssl.truststore.type=PEM
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="{USER}" \\
    password="{password}";
{more}""")
    return path


def oauthbearer_properties(secured: Secured, path: Path, scope: str | None = OAUTH_SCOPE) -> Path:
    """A Java client's OAUTHBEARER file: the client credentials in the login module's options, the secret from the
    environment."""
    path.write_text(f"""\
security.protocol=SASL_SSL
ssl.truststore.location={secured.ca_file}
sasl.mechanism=OAUTHBEARER
sasl.oauthbearer.token.endpoint.url={secured.token_endpoint.url}
sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\
    clientId="{OAUTH_CLIENT}" \\
    clientSecret="${{env:{PASSWORD_ENV}}}"{f' scope="{scope}"' if scope else ''};
""")
    return path


def mtls_properties(secured: Secured, path: Path) -> Path:
    path.write_text(f"""\
security.protocol=SSL
ssl.truststore.location={secured.ca_file}
ssl.keystore.location={secured.keystore}
ssl.keystore.type=PKCS12
ssl.keystore.password=${{env:{PASSWORD_ENV}}}
ssl.key.password=${{env:{PASSWORD_ENV}}}
""")
    return path
