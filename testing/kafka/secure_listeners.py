"""TLS and SASL on the fixture's brokers: a SASL_SSL listener (SCRAM-SHA-512, optionally OAUTHBEARER) and an SSL
listener requiring a client certificate, beside PLAINTEXT."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from testing.kafka.certificates import IssuedCertificate

SASL_SSL_LISTENER = "SASL_SSL"
MTLS_LISTENER = "SSL"
SCRAM_MECHANISM = "SCRAM-SHA-512"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@dataclass(frozen=True)
class SecureListeners:
    """Two more listeners on every broker, beside PLAINTEXT (which stays the inter-broker listener and the one
    `bootstrap_servers` names): SASL_SSL with SCRAM-SHA-512 for `scram_users` (name -> password, created when the
    storage is formatted; passwords without `,` `]` `=`), and SSL requiring a client certificate signed by a CA in
    `client_ca_pem` (mutual TLS). Both present `broker_certificate`, as PEM key and trust stores.

    With `oauthbearer_scope`, the SASL_SSL listener takes OAUTHBEARER too, validated by Kafka's default for it
    without a JWKS URL, OAuthBearerUnsecuredValidatorCallbackHandler: an unsecured JWT (`alg: none`, no signature)
    with `sub`, `exp` and this scope in its `scope` claim. Inter-broker traffic stays PLAINTEXT; the brokers' own login
    on the listener still makes an unsecured token (`unsecuredLoginStringClaim_sub`), never used: Kafka 4.3 logs in
    without a token only when the login module has no option at all."""

    broker_certificate: IssuedCertificate
    client_ca_pem: bytes
    scram_users: dict[str, str] = field(default_factory=dict)
    oauthbearer_scope: str | None = None


def scram_format_args(secure: SecureListeners) -> list[str]:
    """`kafka-storage format` arguments that create the SCRAM users: their credentials live in the metadata log, so
    the controller's bootstrap records create them."""
    return [arg for name, password in secure.scram_users.items()
            for arg in ("--add-scram", f"{SCRAM_MECHANISM}=[name={name},password={password}]")]


def secure_listener_config(secure: SecureListeners, address: str, directory: Path,
                           ports: dict[str, int]) -> dict[str, str]:
    """A broker's settings for both listeners on `ports` (listener name -> port) beside PLAINTEXT on `address`, with
    its PEM stores written in `directory`."""
    keystore = secure.broker_certificate.write_pem_keystore(directory / "broker-keystore.pem")
    truststore = directory / "client-ca.pem"
    truststore.write_bytes(secure.client_ca_pem)
    listeners = ",".join([f"PLAINTEXT://{address}", *(f"{name}://127.0.0.1:{port}" for name, port in ports.items())])
    return {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          f"{SASL_SSL_LISTENER}:SASL_SSL,{MTLS_LISTENER}:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
        "sasl.enabled.mechanisms": SCRAM_MECHANISM + (",OAUTHBEARER" if secure.oauthbearer_scope else ""),
        f"listener.name.{SASL_SSL_LISTENER.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        **({f"listener.name.{SASL_SSL_LISTENER.lower()}.oauthbearer.sasl.jaas.config":
            f'{OAUTHBEARER_LOGIN_MODULE} required unsecuredLoginStringClaim_sub="broker" '
            f'unsecuredValidatorRequiredScope="{secure.oauthbearer_scope}";'}
           if secure.oauthbearer_scope else {}),
        f"listener.name.{MTLS_LISTENER.lower()}.ssl.client.auth": "required",
    }
