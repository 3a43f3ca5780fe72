"""TLS and SASL for every connection `isrwatch collect` makes: `ClientSecurity`, the settings of Kafka's client
properties once read (collector/client_properties.py reads them), applied to connections.

One `ClientSecurity` serves three kinds of client: the collector's own per-broker connections (`ssl_context()` and
`authenticate()`, which runs SaslHandshake and SaslAuthenticate over a freshly connected socket with kafka-python's
mechanism implementations; OAUTHBEARER takes its token from collector/oauth_token.py), librdkafka
(`librdkafka_config()`, for the canary) and kafka-python (`kafka_python_config()`).

Secrets are held as pydantic `SecretStr`: the repr, the str and every error message of this module show none. The
key material arrives decoded and checked, so a connection fails only on what the broker says.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from kafka.errors import for_code
from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pydantic import SecretStr

from collector.oauth_token import ClientCredentialsTokenProvider, OAuthClientCredentials
from collector.security_errors import SecurityHandshakeError

SASL_HANDSHAKE_VERSION = 1       # v1: the exchange that follows is framed in SaslAuthenticate requests
SASL_AUTHENTICATE_VERSION = 2
SASL_ROUNDS_MAX = 8              # PLAIN takes 1 round, SCRAM 2, OAUTHBEARER 1 (2 when the broker refuses)


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"


# A request sent on the connection being authenticated: (request, response class, version) -> decoded response.
KafkaExchange = Callable[[Any, Any, int], Any]


@dataclass(frozen=True, repr=False)
class ClientSecurity:
    """How to reach the brokers: plaintext by default; TLS material decoded to PEM, secrets as SecretStr."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    # TLS: the CAs to trust (None: the system's), the client certificate chain (leaf first) and its key (PKCS#8,
    # decrypted), and whether the broker's certificate must name the host connected to.
    ca_pem: str | None = None
    certificate_chain_pem: str | None = None
    private_key_pem: SecretStr | None = None
    check_hostname: bool = True
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    oauth: OAuthClientCredentials | None = None
    source: str = field(default="the defaults", compare=False)   # the file the settings came from, for messages
    ignored_properties: tuple[str, ...] = field(default=(), compare=False)   # harmless keys not applied

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, SecurityProtocol):
            raise TypeError(f"protocol must be a SecurityProtocol, got {self.protocol!r}")
        tls_material = (self.ca_pem, self.certificate_chain_pem, self.private_key_pem)
        if not self.protocol.uses_tls and any(v is not None for v in tls_material):
            raise ValueError(f"TLS material given for security protocol {self.protocol}, which does not use TLS")
        if (self.certificate_chain_pem is None) != (self.private_key_pem is None):
            raise ValueError("a client certificate needs its private key and a private key its certificate")
        if self.protocol.uses_sasl:
            if self.sasl_mechanism is None:
                raise ValueError(f"security protocol {self.protocol} needs a SASL mechanism")
            if self.sasl_mechanism is SaslMechanism.OAUTHBEARER:
                if self.oauth is None:
                    raise ValueError("SASL OAUTHBEARER needs OAuth client credentials")
            elif self.sasl_username is None or self.sasl_password is None:
                raise ValueError(f"SASL {self.sasl_mechanism} needs a username and a password")
        elif self.sasl_mechanism is not None or self.sasl_username is not None or self.oauth is not None:
            raise ValueError(f"SASL settings given for security protocol {self.protocol}, which does not use SASL")

    # ---- what it is, without secrets ---------------------------------------------------------------------

    def describe(self) -> str:
        """One line for logs and messages: the protocol, the mechanism and user, the TLS settings."""
        parts = [str(self.protocol)]
        if self.sasl_mechanism is SaslMechanism.OAUTHBEARER and self.oauth is not None:
            parts.append(f"OAUTHBEARER as client {self.oauth.client_id!r} from {self.oauth.token_endpoint_url}")
        elif self.sasl_mechanism is not None:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username!r}")
        if self.protocol.uses_tls:
            parts.append("trusting " + ("the configured CAs" if self.ca_pem else "the system's CAs"))
            parts.append("with a client certificate" if self.certificate_chain_pem else "without a client certificate")
            parts.append("hostname verification " + ("on" if self.check_hostname else "off"))
        return ", ".join(parts) + f" ({self.source})"

    def __repr__(self) -> str:
        return f"ClientSecurity({self.describe()})"

    __str__ = __repr__

    @property
    def uses_tls(self) -> bool:
        return self.protocol.uses_tls

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.uses_sasl

    # ---- TLS ---------------------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context every connection shares (built once): TLS 1.2 or later, as Kafka's defaults."""
        if not self.uses_tls:
            raise ValueError(f"security protocol {self.protocol} does not use TLS")
        return self._ssl_context

    @cached_property
    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.ca_pem is not None:
            context.load_verify_locations(cadata=self.ca_pem)
        else:
            context.load_default_certs()
        context.check_hostname = self.check_hostname
        if self.certificate_chain_pem is not None and self.private_key_pem is not None:
            _load_client_certificate(context, self.certificate_chain_pem, self.private_key_pem)
        return context

    # ---- SASL --------------------------------------------------------------------------------------------

    def authenticate(self, exchange: KafkaExchange, host: str, deadline: float) -> int:
        """SASL over a freshly connected (and, for SASL_SSL, TLS-wrapped) socket: SaslHandshake, then
        SaslAuthenticate rounds with kafka-python's mechanism until it is done. `exchange` sends one request on
        that socket within `deadline` (time.monotonic()). Returns the session lifetime the broker grants in ms
        (0: unlimited). Raises SecurityHandshakeError; the exchange's own errors pass through."""
        if not self.uses_sasl or self.sasl_mechanism is None:
            return 0
        mechanism_name = str(self.sasl_mechanism)
        handshake = exchange(SaslHandshakeRequest(mechanism=mechanism_name), SaslHandshakeResponse,
                             SASL_HANDSHAKE_VERSION)
        if handshake.error_code != 0:
            offered = ", ".join(handshake.mechanisms or []) or "none"
            raise SecurityHandshakeError(f"the broker does not offer SASL mechanism {mechanism_name} (it offers "
                                         f"{offered}; {for_code(handshake.error_code).__name__}): set sasl.mechanism")
        if self.oauth is not None:
            self.token_provider.token_within(deadline)    # fetched within the deadline; the mechanism reuses it
        mechanism = get_sasl_mechanism(mechanism_name)(host=host, **self._kafka_python_sasl())
        session_lifetime_ms = 0
        for _ in range(SASL_ROUNDS_MAX):
            if mechanism.is_done():
                break
            response = exchange(SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes()), SaslAuthenticateResponse,
                                SASL_AUTHENTICATE_VERSION)
            if response.error_code != 0:
                raise SecurityHandshakeError(
                    f"SASL authentication failed ({self._principal()}): "
                    f"{response.error_message or for_code(response.error_code).__name__}")
            session_lifetime_ms = int(response.session_lifetime_ms or 0)
            try:
                mechanism.receive(response.auth_bytes)
            except (ValueError, KeyError) as e:
                raise SecurityHandshakeError(f"SASL authentication failed ({self._principal()}): the broker's "
                                             f"answer does not verify: {e}") from None
        if not mechanism.is_authenticated():
            raise SecurityHandshakeError(f"SASL authentication failed ({self._principal()}): not done after "
                                         f"{SASL_ROUNDS_MAX} rounds")
        return session_lifetime_ms

    def _principal(self) -> str:
        if self.oauth is not None:
            return f"{self.sasl_mechanism} as client {self.oauth.client_id!r}"
        return f"{self.sasl_mechanism} as {self.sasl_username!r}"

    @cached_property
    def token_provider(self) -> ClientCredentialsTokenProvider:
        """The OAuth token provider every connection and client of this configuration shares."""
        if self.oauth is None:
            raise ValueError("no OAuth client credentials configured")
        return ClientCredentialsTokenProvider(self.oauth)

    def _kafka_python_sasl(self) -> dict[str, Any]:
        config: dict[str, Any] = {"security_protocol": str(self.protocol), "sasl_mechanism": str(self.sasl_mechanism)}
        if self.sasl_mechanism is SaslMechanism.OAUTHBEARER:
            config["sasl_oauth_token_provider"] = self.token_provider
        else:
            assert self.sasl_password is not None
            config["sasl_plain_username"] = self.sasl_username
            config["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return config

    # ---- other clients' settings -------------------------------------------------------------------------

    def librdkafka_config(self) -> dict[str, str]:
        """The same settings in librdkafka's names (CONFIGURATION.md), for confluent-kafka clients."""
        config = {"security.protocol": str(self.protocol).lower()}
        if self.uses_tls:
            if self.ca_pem is not None:
                config["ssl.ca.pem"] = self.ca_pem
            else:
                # The wheels link OpenSSL statically: without `probe` librdkafka finds no system CA.
                config["ssl.ca.location"] = "probe"
            if self.certificate_chain_pem is not None and self.private_key_pem is not None:
                config["ssl.certificate.pem"] = self.certificate_chain_pem
                config["ssl.key.pem"] = self.private_key_pem.get_secret_value()
            config["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
        if self.sasl_mechanism is not None:
            config["sasl.mechanisms"] = str(self.sasl_mechanism)
            if self.oauth is not None:
                # librdkafka (2.16) puts the id and secret into HTTP Basic as they are, where RFC 6749 §2.3.1, Kafka's
                # Java clients and the collector's own token requests URL-encode each: given them encoded, it sends
                # what they send, and a secret with `+`, `%` or `:` is accepted for the canary as for the collector.
                client_id, client_secret = self.oauth.basic_auth_pair()
                config.update({"sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client_id,
                               "sasl.oauthbearer.client.secret": client_secret,
                               "sasl.oauthbearer.token.endpoint.url": self.oauth.token_endpoint_url})
                if self.oauth.scope:
                    config["sasl.oauthbearer.scope"] = self.oauth.scope
            elif self.sasl_username is not None and self.sasl_password is not None:
                config["sasl.username"] = self.sasl_username
                config["sasl.password"] = self.sasl_password.get_secret_value()
        return config

    def kafka_python_config(self) -> dict[str, Any]:
        """The same settings in kafka-python 3.0's names, for its KafkaConsumer, KafkaProducer, KafkaAdminClient."""
        config: dict[str, Any] = {"security_protocol": str(self.protocol)}
        if self.uses_tls:
            config["ssl_context"] = self.ssl_context()
            config["ssl_check_hostname"] = self.check_hostname
        if self.uses_sasl:
            config.update(self._kafka_python_sasl())
        return config


PLAINTEXT_SECURITY = ClientSecurity()    # Kafka's default: no TLS, no SASL


def _load_client_certificate(context: ssl.SSLContext, chain_pem: str, key_pem: SecretStr) -> None:
    """Python's ssl module loads a certificate chain from files only: the key goes to a private temporary file
    encrypted with a one-time password (the decrypted key never touches the disk), removed once loaded."""
    key = serialization.load_pem_private_key(key_pem.get_secret_value().encode(), password=None)
    one_time = os.urandom(32).hex().encode()
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(one_time))
    with tempfile.TemporaryDirectory(prefix="isrwatch-tls-") as directory:
        path = Path(directory) / "client.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(chain_pem.encode() + encrypted)
        context.load_cert_chain(str(path), password=one_time)

