"""The client security at work, without a broker: the TLS context in a handshake over a socket pair (the broker
verified, the client certificate presented), and the OAuth client-credentials token provider against a token
endpoint on loopback. No message shows a secret."""

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

from collector.client_properties import OAUTHBEARER_LOGIN_MODULE, security_from_properties
from collector.oauth_token import ClientCredentialsTokenProvider, OAuthClientCredentials
from collector.security_errors import SecurityHandshakeError
from testing.kafka.certificates import IssuedCertificate, TestCertificateAuthority
from tests.collector.test_client_security import PASSWORD
from tests.collector.token_endpoint import TokenEndpoint


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
