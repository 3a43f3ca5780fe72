"""Kafka's client properties read into a ClientSecurity, without a broker: every supported key, `${env:NAME}`,
unknown and ignored keys, missing files, bad values; the TLS context in a handshake over a socket pair; the OAuth
client-credentials token provider against a token endpoint on loopback. No message shows a secret."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from pydantic import SecretStr

from collector.client_properties import (
    IGNORED_CLIENT_PROPERTIES,
    OAUTHBEARER_LOGIN_MODULE,
    security_from_file,
    security_from_properties,
)
from collector.client_security import ClientSecurity, SaslMechanism, SecurityProtocol
from collector.oauth_token import ClientCredentialsTokenProvider, OAuthClientCredentials
from collector.security_errors import SecurityConfigError, SecurityHandshakeError
from testing.kafka.certificates import IssuedCertificate, TestCertificateAuthority
from tests.collector.token_endpoint import TokenEndpoint

PASSWORD = "s3cret-Pa55word"
KEY_PASSWORD = "key-Pa55word-xyz"
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="collector" password="{}";'
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="collector" password="{}";'


@pytest.fixture(scope="module")
def ca() -> TestCertificateAuthority:
    return TestCertificateAuthority()


@pytest.fixture(scope="module")
def client_cert(ca: TestCertificateAuthority) -> IssuedCertificate:
    return ca.issue("collector", server=False)


@pytest.fixture
def ca_file(tmp_path: Path, ca: TestCertificateAuthority) -> Path:
    return ca.write_ca_pem(tmp_path / "ca.pem")


def write_properties(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def config_error(properties: dict[str, str], *, environ: dict[str, str] | None = None) -> str:
    """The SecurityConfigError's message; the test's secrets must not be in it."""
    with pytest.raises(SecurityConfigError) as caught:
        security_from_properties(properties, source="client.properties", environ=environ or {})
    message = str(caught.value)
    for secret in (PASSWORD, KEY_PASSWORD):
        assert secret not in message, f"a secret in the error message: {message}"
    assert "client.properties" in message, message
    return message


def sasl_ssl(ca_file: Path, **more: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.truststore.location": str(ca_file),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": SCRAM.format(PASSWORD), **more}


def assert_no_secret(security: ClientSecurity) -> None:
    for text in (repr(security), str(security), security.describe()):
        for secret in (PASSWORD, KEY_PASSWORD, "PRIVATE KEY"):
            assert secret not in text, text


# ---- reading the file --------------------------------------------------------------------------------------------

def test_no_properties_is_plaintext_for_every_client() -> None:
    security = security_from_properties({}, environ={})
    assert security == ClientSecurity()
    assert security.protocol is SecurityProtocol.PLAINTEXT
    assert security.librdkafka_config() == {"security.protocol": "plaintext"}
    assert security.kafka_python_config() == {"security_protocol": "PLAINTEXT"}


def test_a_sasl_ssl_scram_file_gives_the_same_settings_to_librdkafka_and_kafka_python(tmp_path: Path, ca_file: Path,
                                                                                     ca: TestCertificateAuthority
                                                                                     ) -> None:
    path = write_properties(tmp_path / "client.properties", f"""\
# as kafka-topics.sh --command-config takes it
security.protocol=SASL_SSL
ssl.truststore.location={ca_file}
ssl.truststore.type=PEM
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="collector" \\
    password="{PASSWORD}";
""")
    security = security_from_file(path, environ={})
    assert security.protocol is SecurityProtocol.SASL_SSL
    assert security.sasl_mechanism is SaslMechanism.SCRAM_SHA_512
    assert security.sasl_username == "collector"
    assert security.sasl_password is not None and security.sasl_password.get_secret_value() == PASSWORD
    assert security.ca_pem == ca.ca_pem().decode()
    assert security.check_hostname is True
    assert security.source == str(path)
    assert security.librdkafka_config() == {
        "security.protocol": "sasl_ssl", "ssl.ca.pem": ca.ca_pem().decode(),
        "ssl.endpoint.identification.algorithm": "https", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "collector", "sasl.password": PASSWORD}
    python_config = security.kafka_python_config()
    context = python_config.pop("ssl_context")
    assert python_config == {"security_protocol": "SASL_SSL", "ssl_check_hostname": True,
                             "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "collector",
                             "sasl_plain_password": PASSWORD}
    assert isinstance(context, ssl.SSLContext) and context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("organizationName", "isrwatch tests"),),
                                                              (("commonName", "isrwatch test CA"),))]
    assert_no_secret(security)


@pytest.mark.parametrize(("mechanism", "jaas"), [("SCRAM-SHA-256", SCRAM), ("PLAIN", PLAIN)])
def test_scram_sha_256_and_plain_take_their_login_modules(ca_file: Path, mechanism: str, jaas: str) -> None:
    security = security_from_properties(sasl_ssl(ca_file, **{"sasl.mechanism": mechanism,
                                                             "sasl.jaas.config": jaas.format(PASSWORD)}),
                                        environ={})
    assert (security.sasl_mechanism, security.sasl_username) == (SaslMechanism(mechanism), "collector")
    assert security.librdkafka_config()["sasl.mechanisms"] == mechanism


def test_sasl_plaintext_has_no_tls(tmp_path: Path) -> None:
    security = security_from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                                         "sasl.jaas.config": PLAIN.format(PASSWORD)}, environ={})
    assert security.protocol is SecurityProtocol.SASL_PLAINTEXT
    assert security.librdkafka_config() == {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                                            "sasl.username": "collector", "sasl.password": PASSWORD}
    with pytest.raises(ValueError, match="does not use TLS"):
        security.ssl_context()


def test_a_pkcs12_truststore_and_keystore(tmp_path: Path, ca: TestCertificateAuthority,
                                          client_cert: IssuedCertificate) -> None:
    truststore = ca.write_pkcs12_truststore(tmp_path / "truststore.p12", PASSWORD)
    keystore = client_cert.write_pkcs12(tmp_path / "keystore.p12", PASSWORD)
    security = security_from_properties({
        "security.protocol": "SSL", "ssl.truststore.location": str(truststore), "ssl.truststore.type": "PKCS12",
        "ssl.truststore.password": PASSWORD, "ssl.keystore.location": str(keystore), "ssl.keystore.type": "PKCS12",
        "ssl.keystore.password": PASSWORD, "ssl.key.password": PASSWORD}, environ={})
    assert security.ca_pem == ca.ca_pem().decode()
    assert security.certificate_chain_pem == client_cert.chain_pem().decode()
    assert security.private_key_pem is not None
    assert security.private_key_pem.get_secret_value() == client_cert.key_pem().decode()
    config = security.librdkafka_config()
    assert (config["ssl.certificate.pem"], config["ssl.key.pem"]) == (client_cert.chain_pem().decode(),
                                                                     client_cert.key_pem().decode())
    assert_no_secret(security)


def test_a_wrong_keystore_or_truststore_password_names_the_store(tmp_path: Path, ca: TestCertificateAuthority,
                                                                 client_cert: IssuedCertificate, ca_file: Path) -> None:
    keystore = client_cert.write_pkcs12(tmp_path / "keystore.p12", KEY_PASSWORD)
    message = config_error({"security.protocol": "SSL", "ssl.truststore.location": str(ca_file),
                            "ssl.keystore.location": str(keystore), "ssl.keystore.password": PASSWORD})
    assert message.startswith("ssl.keystore.location in client.properties: cannot open the PKCS12 keystore"), message
    assert "wrong ssl.keystore.password" in message
    truststore = ca.write_pkcs12_truststore(tmp_path / "truststore.p12", KEY_PASSWORD)
    message = config_error({"security.protocol": "SSL", "ssl.truststore.location": str(truststore),
                            "ssl.truststore.password": PASSWORD})
    assert "wrong ssl.truststore.password" in message, message


def test_a_pem_keystore_with_an_encrypted_key_needs_ssl_key_password(tmp_path: Path, ca_file: Path,
                                                                     client_cert: IssuedCertificate) -> None:
    keystore = client_cert.write_pem_keystore(tmp_path / "client.pem", KEY_PASSWORD)
    base = {"security.protocol": "SSL", "ssl.truststore.location": str(ca_file),
            "ssl.keystore.location": str(keystore), "ssl.keystore.type": "PEM"}
    security = security_from_properties({**base, "ssl.key.password": KEY_PASSWORD}, environ={})
    assert security.private_key_pem is not None
    assert security.private_key_pem.get_secret_value() == client_cert.key_pem().decode()
    assert "ssl.key.password in client.properties: does not decrypt" in config_error(
        {**base, "ssl.key.password": PASSWORD})
    assert "ssl.key.password in client.properties: not set, and the private key" in config_error(base)


def test_kafkas_inline_pem_forms(ca: TestCertificateAuthority, client_cert: IssuedCertificate) -> None:
    # A properties file continues a long value over lines that Java joins without their line breaks: the PEM
    # arrives as one line, as Kafka's docs write it.
    def one_line(pem: bytes) -> str:
        return " ".join(pem.decode().split("\n"))

    security = security_from_properties({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.keystore.type": "PEM",
        "ssl.truststore.certificates": one_line(ca.ca_pem()),
        "ssl.keystore.certificate.chain": one_line(client_cert.chain_pem()),
        "ssl.keystore.key": one_line(client_cert.key_pem(KEY_PASSWORD)), "ssl.key.password": KEY_PASSWORD},
        environ={})
    assert security.ca_pem == ca.ca_pem().decode()
    assert security.certificate_chain_pem == client_cert.chain_pem().decode()
    assert security.private_key_pem is not None
    assert security.private_key_pem.get_secret_value() == client_cert.key_pem().decode()
    assert "ssl.keystore.key in client.properties: missing" in config_error(
        {"security.protocol": "SSL", "ssl.keystore.certificate.chain": one_line(client_cert.chain_pem())})


def test_a_key_that_is_not_the_certificates_is_refused(tmp_path: Path, ca: TestCertificateAuthority,
                                                       client_cert: IssuedCertificate) -> None:
    other = ca.issue("someone else", server=False)
    path = tmp_path / "mixed.pem"
    path.write_bytes(other.key_pem() + client_cert.chain_pem())
    message = config_error({"security.protocol": "SSL", "ssl.keystore.location": str(path)})
    assert "ssl.keystore.location in client.properties: the private key does not belong" in message


def test_hostname_verification_is_on_by_default_and_off_when_empty(ca_file: Path) -> None:
    base = {"security.protocol": "SSL", "ssl.truststore.location": str(ca_file)}
    assert security_from_properties(base, environ={}).check_hostname is True
    assert security_from_properties({**base, "ssl.endpoint.identification.algorithm": "HTTPS"},
                                    environ={}).check_hostname is True
    off = security_from_properties({**base, "ssl.endpoint.identification.algorithm": ""}, environ={})
    assert off.check_hostname is False
    assert off.ssl_context().check_hostname is False and off.ssl_context().verify_mode == ssl.CERT_REQUIRED
    assert off.librdkafka_config()["ssl.endpoint.identification.algorithm"] == "none"
    message = config_error({**base, "ssl.endpoint.identification.algorithm": "dns"})
    assert message.startswith("ssl.endpoint.identification.algorithm in client.properties: 'dns'"), message


def test_without_a_truststore_the_system_cas_are_trusted() -> None:
    security = security_from_properties({"security.protocol": "SSL"}, environ={})
    assert security.ca_pem is None
    assert security.librdkafka_config() == {"security.protocol": "ssl", "ssl.ca.location": "probe",
                                            "ssl.endpoint.identification.algorithm": "https"}


def test_oauthbearer_client_credentials_from_the_jaas_options_or_kafka_41_properties() -> None:
    url = "https://idp.example/oauth2/token"
    security = security_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": url,
        "sasl.login.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "sasl.jaas.config": f'{OAUTHBEARER_LOGIN_MODULE} required clientId="isrwatch" clientSecret="{PASSWORD}" '
                            'scope="kafka.read";'}, environ={})
    assert security.oauth is not None
    assert (security.oauth.token_endpoint_url, security.oauth.client_id, security.oauth.scope) == (
        url, "isrwatch", "kafka.read")
    assert security.oauth.client_secret.get_secret_value() == PASSWORD
    assert security.librdkafka_config() == {
        "security.protocol": "sasl_plaintext", "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.id": "isrwatch", "sasl.oauthbearer.client.secret": PASSWORD,
        "sasl.oauthbearer.token.endpoint.url": url, "sasl.oauthbearer.scope": "kafka.read"}
    python_config = security.kafka_python_config()
    assert python_config["sasl_mechanism"] == "OAUTHBEARER"
    assert python_config["sasl_oauth_token_provider"] is security.token_provider
    assert_no_secret(security)
    assert PASSWORD not in repr(security.token_provider)

    properties = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                  "sasl.oauthbearer.token.endpoint.url": url,
                  "sasl.oauthbearer.client.credentials.client.id": "isrwatch",
                  "sasl.oauthbearer.client.credentials.client.secret": PASSWORD}
    newer = security_from_properties(properties, environ={})
    assert newer.oauth == OAuthClientCredentials(url, "isrwatch", SecretStr(PASSWORD), None)
    assert "set both here and as the clientId option" in config_error(
        {**properties, "sasl.jaas.config": f'{OAUTHBEARER_LOGIN_MODULE} required clientId="other";'})
    assert "sasl.oauthbearer.token.endpoint.url in client.properties: not set" in config_error(
        {k: v for k, v in properties.items() if k != "sasl.oauthbearer.token.endpoint.url"})
    assert "a token file is not supported" in config_error(
        {**properties, "sasl.oauthbearer.token.endpoint.url": "file:///var/run/token"})
    assert "isrwatch runs no Java code" in config_error(
        {**properties, "sasl.login.callback.handler.class": "com.example.MyHandler"})


# ---- ${env:NAME} ---------------------------------------------------------------------------------------------------

def test_secrets_come_from_the_environment_with_kafkas_config_provider_syntax(ca_file: Path) -> None:
    properties = sasl_ssl(ca_file, **{
        "config.providers": "env",
        "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "sasl.jaas.config": SCRAM.format("${env:KAFKA_PASSWORD}")})
    security = security_from_properties(properties, environ={"KAFKA_PASSWORD": PASSWORD})
    assert security.sasl_password is not None and security.sasl_password.get_secret_value() == PASSWORD
    # Without the provider lines too, as kafka-topics.sh files are often written.
    bare = security_from_properties(sasl_ssl(ca_file, **{"sasl.jaas.config": SCRAM.format("${env:PW}")}),
                                    environ={"PW": PASSWORD})
    assert bare.sasl_password == security.sasl_password
    message = config_error(properties)
    assert message == ("sasl.jaas.config in client.properties: environment variable KAFKA_PASSWORD "
                       "(${env:KAFKA_PASSWORD}) is not set"), message


def test_other_config_providers_and_disallowed_variables_are_refused(ca_file: Path) -> None:
    message = config_error(sasl_ssl(ca_file, **{"sasl.jaas.config": SCRAM.format("${file:/etc/kafka/pw:password}")}))
    assert message.startswith("sasl.jaas.config in client.properties: ${file:…}: only the environment config "
                              "provider"), message
    assert "config.providers in client.properties: 'file'" in config_error(
        sasl_ssl(ca_file, **{"config.providers": "file"}))
    message = config_error(sasl_ssl(ca_file, **{"config.providers.env.param.allowlist.pattern": "KAFKA_.*",
                                                "sasl.jaas.config": SCRAM.format("${env:HOME}")}),
                           environ={"HOME": "/root"})
    assert "environment variable HOME does not match config.providers.env.param.allowlist.pattern" in message


# ---- unknown, ignored, missing, wrong --------------------------------------------------------------------------

def test_unknown_properties_are_refused_by_name(ca_file: Path) -> None:
    message = config_error(sasl_ssl(ca_file, **{"ssl.protocol": "TLSv1.3", "ssl.cipher.suites": "x"}))
    assert message.startswith("ssl.cipher.suites in client.properties: not a client property isrwatch supports "
                              "(nor are ssl.protocol); supported: security.protocol, "), message
    assert "typo.protocol in client.properties" in config_error({"typo.protocol": "SSL"})
    assert "bootstrap.servers in client.properties: give the brokers with --bootstrap-servers" in config_error(
        {"bootstrap.servers": "127.0.0.1:9092"})


def test_harmless_client_settings_are_ignored_and_listed(ca_file: Path) -> None:
    security = security_from_properties(sasl_ssl(ca_file, **{"client.id": "ops", "request.timeout.ms": "30000"}),
                                        environ={})
    assert security.ignored_properties == ("client.id", "request.timeout.ms")
    assert {"client.id", "request.timeout.ms"} <= IGNORED_CLIENT_PROPERTIES
    assert security == security_from_properties(sasl_ssl(ca_file), environ={})


def test_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError) as caught:
        security_from_file(tmp_path / "nope.properties")
    assert str(caught.value) == f"cannot read the client properties file {tmp_path / 'nope.properties'}: " \
                                "No such file or directory"
    message = config_error({"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "ca.pem")})
    assert message == f"ssl.truststore.location in client.properties: cannot read {tmp_path / 'ca.pem'}: " \
                      "No such file or directory"


@pytest.mark.parametrize(("properties", "expected"), [
    ({"security.protocol": "TLS"}, "security.protocol in client.properties: 'TLS' is not one of PLAINTEXT, SSL, "
                                   "SASL_PLAINTEXT, SASL_SSL"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PKCS11"},
     "ssl.truststore.type in client.properties: 'PKCS11' is not one of PEM, PKCS12, JKS"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PEM"},
     "ssl.truststore.type in client.properties: set, but ssl.truststore.location is not"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism in client.properties: not set (Kafka's default, GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"},
     "sasl.mechanism in client.properties: 'GSSAPI' is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"},
     "sasl.jaas.config in client.properties: not set: SASL SCRAM-SHA-512 needs "
     "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": PLAIN.format(PASSWORD)},
     "sasl.jaas.config in client.properties: org.apache.kafka.common.security.plain.PlainLoginModule does not fit "
     "sasl.mechanism SCRAM-SHA-512"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u";'},
     "sasl.jaas.config in client.properties: org.apache.kafka.common.security.plain.PlainLoginModule has no "
     "password option"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required password="{PASSWORD}'},
     "sasl.jaas.config in client.properties: an unterminated quoted value"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f"org.apache.kafka.common.security.plain.PlainLoginModule username={PASSWORD};"},
     "sasl.jaas.config in client.properties: not one login module in JAAS syntax"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": SCRAM.format(PASSWORD)[:-1] + ' tokenauth="true";'},
     "sasl.jaas.config in client.properties: org.apache.kafka.common.security.scram.ScramLoginModule option "
     "tokenauth is not supported"),
    ({"security.protocol": "PLAINTEXT", "ssl.truststore.location": "/x"},
     "ssl.truststore.location in client.properties: a TLS setting, but security.protocol is PLAINTEXT"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN.format(PASSWORD),
      "ssl.truststore.location": "/x"},
     "ssl.truststore.location in client.properties: a TLS setting, but security.protocol is SASL_PLAINTEXT"),
    ({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"},
     "sasl.mechanism in client.properties: a SASL setting, but security.protocol is SSL"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN.format(PASSWORD),
      "sasl.oauthbearer.token.endpoint.url": "https://idp/token"},
     "sasl.oauthbearer.token.endpoint.url in client.properties: an OAUTHBEARER setting, but sasl.mechanism is PLAIN"),
])
def test_bad_values_name_the_property(properties: dict[str, str], expected: str) -> None:
    message = config_error(properties)
    assert message.startswith(expected), message


def test_a_jks_store_gets_the_keytool_command_that_converts_it(tmp_path: Path) -> None:
    jks = tmp_path / "truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + bytes(60))
    message = config_error({"security.protocol": "SSL", "ssl.truststore.location": str(jks),
                            "ssl.truststore.type": "JKS", "ssl.truststore.password": PASSWORD})
    assert message == (
        f"ssl.truststore.location in client.properties: ssl.truststore.location {jks} is a JKS keystore, which "
        "isrwatch does not read (Kafka's clients default to PKCS12): convert it once with `keytool -importkeystore "
        f"-srckeystore {jks} -srcstoretype JKS -destkeystore {jks}.p12 -deststoretype PKCS12`, then set "
        f"ssl.truststore.location={jks}.p12 and ssl.truststore.type=PKCS12")


def test_a_declared_type_that_is_not_the_files_is_refused(tmp_path: Path, client_cert: IssuedCertificate) -> None:
    keystore = client_cert.write_pkcs12(tmp_path / "keystore.p12", PASSWORD)
    message = config_error({"security.protocol": "SSL", "ssl.keystore.location": str(keystore),
                            "ssl.keystore.type": "PEM", "ssl.keystore.password": PASSWORD})
    assert message == f"ssl.keystore.type in client.properties: PEM, but {keystore} is a PKCS12 file"


# ---- the TLS context in a handshake -------------------------------------------------------------------------------

def handshake(client: ssl.SSLContext, server: ssl.SSLContext, server_hostname: str) -> x509.Certificate | None:
    """A TLS handshake over a socket pair; the client certificate the server received (None: none). Raises the
    client's ssl.SSLError."""
    left, right = socket.socketpair()
    received: list[x509.Certificate | None] = []
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(right, server_side=True) as tls:
                der = tls.getpeercert(binary_form=True)
                received.append(None if der is None else x509.load_der_x509_certificate(der))
                tls.recv(1)
        except (OSError, ssl.SSLError) as e:
            errors.append(e)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        left.settimeout(10)
        with client.wrap_socket(left, server_hostname=server_hostname) as tls:
            tls.sendall(b"x")
            thread.join(10)
    finally:
        right.close()
    assert not thread.is_alive()
    assert received, f"the server side failed: {errors}"
    return received[0]


def server_context(ca: TestCertificateAuthority, tmp_path: Path, require_client_certificate: bool) -> ssl.SSLContext:
    broker = ca.issue_broker()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(broker.write_pem_keystore(tmp_path / "broker.pem")))
    if require_client_certificate:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=ca.ca_pem().decode())
    return context


def test_the_tls_context_verifies_the_broker_and_presents_the_client_certificate(
        tmp_path: Path, ca: TestCertificateAuthority, client_cert: IssuedCertificate, ca_file: Path) -> None:
    keystore = client_cert.write_pkcs12(tmp_path / "keystore.p12", PASSWORD)
    security = security_from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(ca_file),
                                         "ssl.keystore.location": str(keystore),
                                         "ssl.keystore.password": PASSWORD}, environ={})
    presented = handshake(security.ssl_context(), server_context(ca, tmp_path, True), "127.0.0.1")
    assert presented == client_cert.certificate
    assert handshake(security.ssl_context(), server_context(ca, tmp_path, True), "localhost") == \
        client_cert.certificate
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(security.ssl_context(), server_context(ca, tmp_path, True), "kafka.example")
    unverified = security_from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(ca_file),
                                           "ssl.endpoint.identification.algorithm": ""}, environ={})
    assert handshake(unverified.ssl_context(), server_context(ca, tmp_path, False), "kafka.example") is None
    stranger = security_from_properties({"security.protocol": "SSL", "ssl.truststore.location": str(
        TestCertificateAuthority("another CA").write_ca_pem(tmp_path / "other-ca.pem"))}, environ={})
    with pytest.raises(ssl.SSLCertVerificationError, match="self-signed certificate in certificate chain"):
        handshake(stranger.ssl_context(), server_context(ca, tmp_path, False), "127.0.0.1")


# ---- OAuth client credentials -------------------------------------------------------------------------------------

@pytest.fixture
def token_endpoint() -> Iterator[TokenEndpoint]:
    with TokenEndpoint() as endpoint:
        yield endpoint


def test_the_token_provider_asks_as_kafka_does_and_keeps_the_token(token_endpoint: TokenEndpoint) -> None:
    secret = "se:cret/&" + PASSWORD
    provider = ClientCredentialsTokenProvider(
        OAuthClientCredentials(token_endpoint.url, "isrwatch client", SecretStr(secret), "kafka"))
    token_endpoint.replies.append((200, {"access_token": "token-1", "expires_in": 3600, "token_type": "bearer"}))
    assert provider.token() == "token-1"
    assert provider.token_within(time.monotonic() + 1) == "token-1"
    assert provider.fetches == 1, "a token within its lifetime is reused"
    basic = base64.b64encode(f"isrwatch%20client:{urllib.parse.quote(secret, safe='')}".encode()).decode()
    assert token_endpoint.requests == [{"authorization": f"Basic {basic}",
                                        "form": {"grant_type": "client_credentials", "scope": "kafka"}}]


def test_librdkafka_is_given_the_client_credentials_url_encoded_as_the_token_provider_sends_them(
        token_endpoint: TokenEndpoint) -> None:
    """librdkafka puts the id and secret into HTTP Basic unencoded: handed them encoded, the canary's token requests
    carry the same credentials as the collector's own (RFC 6749 §2.3.1, Kafka's Java clients)."""
    security = security_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": token_endpoint.url,
        "sasl.jaas.config": f'{OAUTHBEARER_LOGIN_MODULE} required clientId="isrwatch client" '
                            'clientSecret="a+b/c%d:e";'},
        environ={})
    config = security.librdkafka_config()
    assert (config["sasl.oauthbearer.client.id"], config["sasl.oauthbearer.client.secret"]) == (
        "isrwatch%20client", "a%2Bb%2Fc%25d%3Ae")
    token_endpoint.replies.append((200, {"access_token": "token-1", "expires_in": 3600}))
    assert security.token_provider.token() == "token-1"
    sent = base64.b64decode(token_endpoint.requests[0]["authorization"].removeprefix("Basic ")).decode()
    assert sent == "isrwatch%20client:a%2Bb%2Fc%25d%3Ae"


def test_a_token_past_most_of_its_lifetime_is_fetched_again(token_endpoint: TokenEndpoint) -> None:
    provider = ClientCredentialsTokenProvider(OAuthClientCredentials(token_endpoint.url, "c", SecretStr(PASSWORD)))
    token_endpoint.replies += [(200, {"access_token": "short", "expires_in": 0.2}),
                               (200, {"access_token": "next", "expires_in": 3600})]
    assert provider.token() == "short"
    time.sleep(0.25)
    assert provider.token() == "next"
    assert provider.fetches == 2


def test_a_refused_token_request_is_a_handshake_error_without_the_secret(token_endpoint: TokenEndpoint) -> None:
    provider = ClientCredentialsTokenProvider(OAuthClientCredentials(token_endpoint.url, "c", SecretStr(PASSWORD)))
    token_endpoint.replies.append((401, {"error": "invalid_client", "echo": PASSWORD}))
    with pytest.raises(SecurityHandshakeError) as caught:
        provider.token()
    assert str(caught.value) == (f"OAuth token endpoint {token_endpoint.url} answered HTTP 401: "
                                 '{"error": "invalid_client", "echo": "[redacted]"}')


def test_oauthbearer_authentication_sends_the_token_and_shows_the_brokers_refusal(
        token_endpoint: TokenEndpoint) -> None:
    """The SaslHandshake and SaslAuthenticate requests the collector sends, answered as a broker answers."""
    from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

    security = security_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.token.endpoint.url": token_endpoint.url,
        "sasl.jaas.config": f'{OAUTHBEARER_LOGIN_MODULE} required clientId="c" clientSecret="{PASSWORD}";'},
        environ={})
    token_endpoint.replies += [(200, {"access_token": "jwt-abc", "expires_in": 3600})]
    sent: list[tuple[str, Any]] = []
    answers = [SaslHandshakeResponse(error_code=0, mechanisms=["OAUTHBEARER"]),
               SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=60_000)]

    def exchange(request: Any, response_class: Any, version: int) -> Any:
        sent.append((type(request).__name__, getattr(request, "mechanism", None) or request.auth_bytes))
        answer = answers.pop(0)
        assert isinstance(answer, response_class)
        return answer

    assert security.authenticate(exchange, "127.0.0.1", time.monotonic() + 5) == 60_000
    assert sent == [("SaslHandshakeRequest", "OAUTHBEARER"),
                    ("SaslAuthenticateRequest", b"n,,\x01auth=Bearer jwt-abc\x01\x01")]
    answers[:] = [SaslHandshakeResponse(error_code=0, mechanisms=["OAUTHBEARER"]),
                  SaslAuthenticateResponse(error_code=58, error_message="invalid token: expired", auth_bytes=b"",
                                           session_lifetime_ms=0)]
    with pytest.raises(SecurityHandshakeError) as caught:
        security.authenticate(exchange, "127.0.0.1", time.monotonic() + 5)
    assert str(caught.value) == "SASL authentication failed (OAUTHBEARER as client 'c'): invalid token: expired"
    answers[:] = [SaslHandshakeResponse(error_code=33, mechanisms=["SCRAM-SHA-512"])]
    with pytest.raises(SecurityHandshakeError, match=r"does not offer SASL mechanism OAUTHBEARER \(it offers "
                                                     r"SCRAM-SHA-512; UnsupportedSaslMechanismError\)"):
        security.authenticate(exchange, "127.0.0.1", time.monotonic() + 5)

