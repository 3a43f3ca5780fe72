"""Kafka's client properties read into a ClientSecurity, without a broker: every supported key, `${env:NAME}`,
unknown and ignored keys, missing files, bad values (the TLS context and the OAuth token provider at work:
test_security_at_work.py). No message shows a secret."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from pydantic import SecretStr

from collector.client_properties import (
    IGNORED_CLIENT_PROPERTIES,
    OAUTHBEARER_LOGIN_MODULE,
    security_from_file,
    security_from_properties,
)
from collector.client_security import ClientSecurity, SaslMechanism, SecurityProtocol
from collector.oauth_token import OAuthClientCredentials
from collector.security_errors import SecurityConfigError
from testing.kafka.certificates import IssuedCertificate, TestCertificateAuthority

PASSWORD = "s3cret-Pa55word"
KEY_PASSWORD = "key-Pa55word-xyz"
SCRAM = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="collector" password="{}";'
PLAIN = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="collector" password="{}";'


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
