"""Kafka's client properties read into a `ClientSecurity`: the file `kafka-topics.sh --command-config` takes.

`security_from_file` reads `security.protocol`, the trust and key stores (PKCS12 or PEM, as files or inline PEM;
a JKS store is refused with the keytool command that converts it), hostname verification, and SASL PLAIN,
SCRAM-SHA-256/512 or OAUTHBEARER with OAuth client credentials, given in `sasl.jaas.config` or Kafka 4.1's
properties. A value may name an environment variable with Kafka's config-provider syntax, `${env:NAME}`, so that
secrets stay out of the file. Which keys are supported, ignored (a Java client's own timing and naming) or refused
is decided here.

Key material is decoded once, when the file is read, so that a wrong password or a bad file is reported before the
first connection, naming the property. No message repeats a secret.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import javaproperties
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from pydantic import SecretStr

from collector.client_security import ClientSecurity, SaslMechanism, SecurityProtocol
from collector.oauth_token import OAuthClientCredentials
from collector.security_errors import SecurityConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The login callback handler Java clients need for OAuth client credentials: accepted, since it is what
# isrwatch does anyway; any other handler class is code isrwatch cannot run.
OAUTHBEARER_LOGIN_HANDLERS = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
)
ENV_CONFIG_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
JAAS_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

JKS_MAGIC = b"\xfe\xed\xfe\xed"
JCEKS_MAGIC = b"\xce\xce\xce\xce"

# Kafka client settings that tune a Java client's own timing or naming: isrwatch has its own (--timeout, its
# client ids), so they are ignored with a warning rather than refused, and a file shared with kafka-topics.sh works.
IGNORED_CLIENT_PROPERTIES = frozenset({
    "client.id", "client.dns.lookup", "request.timeout.ms", "default.api.timeout.ms", "retries", "retry.backoff.ms",
    "retry.backoff.max.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms", "connections.max.idle.ms",
    "metadata.max.age.ms", "socket.connection.setup.timeout.ms", "socket.connection.setup.timeout.max.ms",
    "sasl.login.connect.timeout.ms", "sasl.login.read.timeout.ms", "sasl.login.retry.backoff.ms",
    "sasl.login.retry.backoff.max.ms", "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
})

SUPPORTED_PROPERTIES = (
    "security.protocol",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type", "ssl.truststore.certificates",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.endpoint.identification.algorithm",
    "sasl.mechanism", "sasl.jaas.config", "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope", "sasl.login.callback.handler.class",
    "config.providers", "config.providers.env.class", "config.providers.env.param.allowlist.pattern",
)
_TLS_PROPERTIES = tuple(k for k in SUPPORTED_PROPERTIES if k.startswith("ssl."))
_SASL_PROPERTIES = tuple(k for k in SUPPORTED_PROPERTIES if k.startswith("sasl."))
_CONFIG_REFERENCE = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def security_from_file(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> ClientSecurity:
    """Read a Kafka client properties file. Raises SecurityConfigError naming the file and the property."""
    source = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            properties = javaproperties.load(f)
    except OSError as e:
        raise SecurityConfigError(f"cannot read the client properties file {source}: "
                                  f"{e.strerror or type(e).__name__}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise SecurityConfigError(f"{source} is not a Java properties file: {e}") from None
    return security_from_properties(properties, source=source, environ=environ)


def security_from_properties(properties: Mapping[str, str], *, source: str = "the client properties",
                             environ: Mapping[str, str] | None = None) -> ClientSecurity:
    """Build from Kafka's client properties (names and values as strings); `${env:NAME}` is read from `environ`
    (default: the process environment). Raises SecurityConfigError."""
    return _PropertiesReader(properties, source, os.environ if environ is None else environ).security()


# ---- key and trust store material -----------------------------------------------------------------------------

def _pem_blocks(text: str) -> list[tuple[str, bytes]]:
    """(label, DER) of every PEM block, read as leniently as Kafka's PEM store reads them: the base64 may be
    wrapped anywhere or not at all, as in a one-line property value."""
    blocks = []
    for label, body in _PEM_BLOCK.findall(text):
        if ":" in body:   # RFC 1421 headers (Proc-Type, DEK-Info): a traditionally encrypted key
            raise ValueError(f"the {label} block is encrypted the traditional OpenSSL way: Kafka and isrwatch read "
                             "PKCS#8 keys (BEGIN ENCRYPTED PRIVATE KEY); convert it with `openssl pkcs8 -topk8`")
        try:
            blocks.append((label, base64.b64decode("".join(body.split()), validate=True)))
        except binascii.Error:
            raise ValueError(f"the {label} block is not valid base64") from None
    return blocks


def _pem(certificates: list[x509.Certificate]) -> str:
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)


def _key_pem(key: Any) -> SecretStr:
    return SecretStr(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()).decode())


def _same_public_key(key: Any, certificate: x509.Certificate) -> bool:
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(key.public_key().public_bytes(*spki) == certificate.public_key().public_bytes(*spki))


def _store_kind(data: bytes) -> str:
    if data.startswith(JKS_MAGIC):
        return "JKS"
    if data.startswith(JCEKS_MAGIC):
        return "JCEKS"
    if b"-----BEGIN " in data[:4096]:
        return "PEM"
    return "PKCS12"


def _keytool_conversion(key: str, path: str, kind: str) -> str:
    return (f"{key} {path} is a {kind} keystore, which isrwatch does not read (Kafka's clients default to PKCS12): "
            f"convert it once with `keytool -importkeystore -srckeystore {path} -srcstoretype {kind} "
            f"-destkeystore {path}.p12 -deststoretype PKCS12`, then set {key}={path}.p12 and "
            f"{key.rsplit('.', 1)[0]}.type=PKCS12")


# ---- the properties reader ------------------------------------------------------------------------------------

class _PropertiesReader:
    """Takes the properties one by one; whatever is left at the end is unknown and refused."""

    def __init__(self, properties: Mapping[str, str], source: str, environ: Mapping[str, str]) -> None:
        self.source = source
        self.environ = environ
        self.raw = dict(properties)

    def error(self, key: str, problem: str) -> SecurityConfigError:
        return SecurityConfigError(f"{key} in {self.source}: {problem}")

    # ---- values --------------------------------------------------------------------------------------------

    def _resolve(self, key: str, value: str) -> str:
        allowlist = self.raw.get("config.providers.env.param.allowlist.pattern")

        def substitute(match: re.Match[str]) -> str:
            provider, path, name = match.group(1), match.group(2), match.group(3)
            if provider != "env" or path:
                raise self.error(key, f"${{{provider}:…}}: only the environment config provider, ${{env:NAME}}, "
                                      "is supported")
            if allowlist is not None and not re.fullmatch(allowlist, name):
                raise self.error(key, f"environment variable {name} does not match "
                                      "config.providers.env.param.allowlist.pattern")
            if name not in self.environ:
                raise self.error(key, f"environment variable {name} (${{env:{name}}}) is not set")
            return self.environ[name]

        return _CONFIG_REFERENCE.sub(substitute, value)

    def get(self, key: str) -> str | None:
        """The value with `${env:NAME}` resolved; None when absent or empty (Kafka's clients treat an empty
        location, type or password as not set)."""
        if key not in self.raw:
            return None
        value = self._resolve(key, self.raw[key]).strip()
        return value or None

    def secret(self, key: str) -> SecretStr | None:
        value = self.get(key)
        return None if value is None else SecretStr(value)

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.get(key)
        if value is None:
            return default
        if value.upper() not in allowed:
            raise self.error(key, f"{value!r} is not one of {', '.join(allowed)}")
        return value.upper()

    def read_file(self, key: str) -> tuple[str, bytes] | None:
        path = self.get(key)
        if path is None:
            return None
        try:
            return path, Path(path).expanduser().read_bytes()
        except OSError as e:
            raise self.error(key, f"cannot read {path}: {e.strerror or type(e).__name__}") from None

    # ---- the whole file ------------------------------------------------------------------------------------

    def security(self) -> ClientSecurity:
        if "bootstrap.servers" in self.raw:
            raise self.error("bootstrap.servers", "give the brokers with --bootstrap-servers, not in this file")
        unknown = sorted(k for k in self.raw if k not in SUPPORTED_PROPERTIES and k not in IGNORED_CLIENT_PROPERTIES)
        if unknown:
            raise self.error(unknown[0], "not a client property isrwatch supports"
                                         + (f" (nor are {', '.join(unknown[1:])})" if unknown[1:] else "")
                                         + f"; supported: {', '.join(SUPPORTED_PROPERTIES)}")
        ignored = tuple(sorted(k for k in self.raw if k in IGNORED_CLIENT_PROPERTIES))
        self._check_config_providers()
        protocol = SecurityProtocol(self.choice("security.protocol", tuple(SecurityProtocol), "PLAINTEXT"))
        ca_pem = certificate_chain = private_key = None
        check_hostname = True
        if protocol.uses_tls:
            ca_pem = self._truststore()
            certificate_chain, private_key = self._keystore()
            check_hostname = self._hostname_verification()
        else:
            self._refuse_present(_TLS_PROPERTIES, protocol, "TLS", "SSL or SASL_SSL")
        mechanism = None
        username = password = None
        oauth = None
        if protocol.uses_sasl:
            mechanism, username, password, oauth = self._sasl()
        else:
            self._refuse_present(_SASL_PROPERTIES, protocol, "SASL", "SASL_SSL or SASL_PLAINTEXT")
        try:
            return ClientSecurity(protocol, ca_pem, certificate_chain, private_key, check_hostname, mechanism,
                                  username, password, oauth, self.source, ignored)
        except ValueError as e:
            raise SecurityConfigError(f"{self.source}: {e}") from None

    def _check_config_providers(self) -> None:
        providers = self.raw.get("config.providers")
        if providers is not None and [p.strip() for p in providers.split(",")] != ["env"]:
            raise self.error("config.providers", f"{providers!r}: only the environment provider, env, is supported")
        provider_class = self.raw.get("config.providers.env.class")
        if provider_class is not None and provider_class.strip() != ENV_CONFIG_PROVIDER:
            raise self.error("config.providers.env.class", f"{provider_class!r}: only {ENV_CONFIG_PROVIDER} is "
                                                           "supported")
        allowlist = self.raw.get("config.providers.env.param.allowlist.pattern")
        if allowlist is not None:
            try:
                re.compile(allowlist)
            except re.error as e:
                raise self.error("config.providers.env.param.allowlist.pattern", f"not a regular expression: "
                                                                                 f"{e}") from None

    def _refuse_present(self, keys: tuple[str, ...], protocol: SecurityProtocol, what: str, wanted: str) -> None:
        present = [k for k in keys if k in self.raw]
        if present:
            raise self.error(present[0], f"a {what} setting, but security.protocol is {protocol}: set "
                                         f"security.protocol to {wanted}, or remove it")

    # ---- TLS -----------------------------------------------------------------------------------------------

    def _truststore(self) -> str | None:
        inline = self.get("ssl.truststore.certificates")
        store_type = self.choice("ssl.truststore.type", ("PEM", "PKCS12", "JKS"), "")
        password = self.secret("ssl.truststore.password")
        if inline is not None:
            if "ssl.truststore.location" in self.raw:
                raise self.error("ssl.truststore.certificates", "set either it or ssl.truststore.location, not both")
            if store_type not in ("", "PEM"):
                raise self.error("ssl.truststore.type", f"{store_type}: ssl.truststore.certificates is PEM")
            return self._certificates_pem("ssl.truststore.certificates", inline.encode())
        read = self.read_file("ssl.truststore.location")
        if read is None:
            if store_type or password is not None:
                key = "ssl.truststore.type" if store_type else "ssl.truststore.password"
                raise self.error(key, "set, but ssl.truststore.location is not")
            return None
        path, data = read
        kind = self._kind("ssl.truststore", path, data, store_type)
        if kind == "PEM":
            return self._certificates_pem("ssl.truststore.location", data)
        try:
            store = pkcs12.load_pkcs12(data, None if password is None else password.get_secret_value().encode())
        except ValueError:
            raise self.error("ssl.truststore.location", f"cannot open the PKCS12 truststore {path}: wrong "
                                                        "ssl.truststore.password, or not a PKCS12 file") from None
        certificates = ([store.cert.certificate] if store.cert is not None else []) + \
            [c.certificate for c in store.additional_certs]
        if not certificates:
            raise self.error("ssl.truststore.location", f"the truststore {path} holds no certificate")
        return _pem(certificates)

    def _kind(self, prefix: str, path: str, data: bytes, declared: str) -> str:
        kind = _store_kind(data)
        if kind in ("JKS", "JCEKS"):
            raise self.error(f"{prefix}.location", _keytool_conversion(f"{prefix}.location", path, kind))
        if declared == "JKS":
            # Java's JKS keystore type reads PKCS12 files too (keystore.type.compat); so does isrwatch.
            declared = "PKCS12" if kind == "PKCS12" else ""
        if declared and declared != kind:
            raise self.error(f"{prefix}.type", f"{declared}, but {path} is a {kind} file")
        return kind

    def _certificates_pem(self, key: str, data: bytes) -> str:
        try:
            blocks = _pem_blocks(data.decode("ascii", errors="replace"))
            certificates = [x509.load_der_x509_certificate(der) for label, der in blocks if label == "CERTIFICATE"]
        except ValueError as e:
            raise self.error(key, f"not valid PEM certificates: {e}") from None
        if not certificates:
            raise self.error(key, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        return _pem(certificates)

    def _keystore(self) -> tuple[str | None, SecretStr | None]:
        inline_chain = self.get("ssl.keystore.certificate.chain")
        inline_key = self.secret("ssl.keystore.key")
        store_type = self.choice("ssl.keystore.type", ("PEM", "PKCS12", "JKS"), "")
        store_password = self.secret("ssl.keystore.password")
        key_password = self.secret("ssl.key.password")
        if inline_chain is not None or inline_key is not None:
            if inline_chain is None or inline_key is None:
                missing = "ssl.keystore.certificate.chain" if inline_chain is None else "ssl.keystore.key"
                raise self.error(missing, "missing: ssl.keystore.certificate.chain and ssl.keystore.key go together")
            if "ssl.keystore.location" in self.raw:
                raise self.error("ssl.keystore.key", "set either the inline PEM keystore or ssl.keystore.location, "
                                                     "not both")
            if store_type not in ("", "PEM"):
                raise self.error("ssl.keystore.type", f"{store_type}: the inline keystore is PEM")
            return self._pem_keystore("ssl.keystore.key", inline_chain + "\n" + inline_key.get_secret_value(),
                                      key_password)
        read = self.read_file("ssl.keystore.location")
        if read is None:
            if store_type or store_password is not None or key_password is not None:
                orphan = next(k for k in ("ssl.keystore.type", "ssl.keystore.password", "ssl.key.password")
                              if k in self.raw)
                raise self.error(orphan, "set, but ssl.keystore.location is not")
            return None, None
        path, data = read
        if self._kind("ssl.keystore", path, data, store_type) == "PEM":
            return self._pem_keystore("ssl.keystore.location", data.decode("ascii", errors="replace"), key_password)
        # keytool makes a PKCS12 key's password the store's (it ignores -keypass for PKCS12): the store password
        # opens both, as in Kafka's clients.
        try:
            key, certificate, chain = pkcs12.load_key_and_certificates(
                data, None if store_password is None else store_password.get_secret_value().encode())
        except ValueError:
            raise self.error("ssl.keystore.location", f"cannot open the PKCS12 keystore {path}: wrong "
                                                      "ssl.keystore.password, or not a PKCS12 file") from None
        if key is None or certificate is None:
            raise self.error("ssl.keystore.location", f"the keystore {path} holds no private key with its "
                                                      "certificate")
        if not _same_public_key(key, certificate):
            raise self.error("ssl.keystore.location", f"the private key in {path} does not belong to its certificate")
        return _pem([certificate, *chain]), _key_pem(key)

    def _pem_keystore(self, key: str, text: str, key_password: SecretStr | None) -> tuple[str, SecretStr]:
        try:
            blocks = _pem_blocks(text)
        except ValueError as e:
            raise self.error(key, str(e)) from None
        certificates = [der for label, der in blocks if label == "CERTIFICATE"]
        keys = [(label, der) for label, der in blocks if label.endswith("PRIVATE KEY")]
        if not certificates:
            raise self.error(key, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        if len(keys) != 1:
            raise self.error(key, f"holds {len(keys)} private keys, not one")
        label, der = keys[0]
        encrypted = label == "ENCRYPTED PRIVATE KEY"
        if encrypted and key_password is None:
            raise self.error("ssl.key.password", f"not set, and the private key of {key} is encrypted")
        try:
            private_key = serialization.load_der_private_key(
                der, key_password.get_secret_value().encode() if encrypted and key_password is not None else None)
            chain = [x509.load_der_x509_certificate(c) for c in certificates]
        except (ValueError, TypeError, NotImplementedError):
            if encrypted:
                raise self.error("ssl.key.password", f"does not decrypt the private key of {key}") from None
            raise self.error(key, "the private key or a certificate cannot be read") from None
        if not _same_public_key(private_key, chain[0]):
            raise self.error(key, "the private key does not belong to the first certificate (the client's own)")
        return _pem(chain), _key_pem(private_key)

    def _hostname_verification(self) -> bool:
        if "ssl.endpoint.identification.algorithm" not in self.raw:
            return True   # Kafka's default: https
        value = self._resolve("ssl.endpoint.identification.algorithm",
                              self.raw["ssl.endpoint.identification.algorithm"]).strip()
        if value.lower() == "https":
            return True
        if value == "":
            return False
        raise self.error("ssl.endpoint.identification.algorithm", f"{value!r}: https (verify the broker's host name) "
                                                                  "or empty (do not)")

    # ---- SASL ----------------------------------------------------------------------------------------------

    def _sasl(self) -> tuple[SaslMechanism, str | None, SecretStr | None, OAuthClientCredentials | None]:
        if self.get("sasl.mechanism") is None:
            raise self.error("sasl.mechanism", "not set (Kafka's default, GSSAPI, is not supported): set PLAIN, "
                                               "SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
        name = self.choice("sasl.mechanism", tuple(SaslMechanism), "")
        mechanism = SaslMechanism(name)
        module, options = self._jaas()
        if mechanism is SaslMechanism.OAUTHBEARER:
            return mechanism, None, None, self._oauth(module, options)
        for key in ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.credentials.client.id",
                    "sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.scope",
                    "sasl.login.callback.handler.class"):
            if key in self.raw:
                raise self.error(key, f"an OAUTHBEARER setting, but sasl.mechanism is {mechanism}")
        wanted = PLAIN_LOGIN_MODULE if mechanism is SaslMechanism.PLAIN else SCRAM_LOGIN_MODULE
        if module is None:
            raise self.error("sasl.jaas.config", f"not set: SASL {mechanism} needs {wanted} required "
                                                 'username="…" password="…";')
        if module != wanted:
            raise self.error("sasl.jaas.config", f"{module} does not fit sasl.mechanism {mechanism}: use {wanted}")
        self._only_options(options, ("username", "password"), module)
        for option in ("username", "password"):
            if not options.get(option):
                raise self.error("sasl.jaas.config", f"{module} has no {option} option")
        return mechanism, options["username"], SecretStr(options["password"]), None

    def _jaas(self) -> tuple[str | None, dict[str, str]]:
        """(login module class, options) of `sasl.jaas.config`: `Module flag name="value" …;`. The text holds
        a password: no message repeats it."""
        text = self.get("sasl.jaas.config")
        if text is None:
            return None, {}
        lexer = shlex.shlex(text, posix=True, punctuation_chars="=;")
        lexer.whitespace_split = False
        try:
            tokens = list(lexer)
        except ValueError:
            raise self.error("sasl.jaas.config", "an unterminated quoted value") from None
        if len(tokens) < 3 or tokens[-1] != ";" or tokens[1] not in JAAS_CONTROL_FLAGS:
            raise self.error("sasl.jaas.config", "not one login module in JAAS syntax: "
                                                 'LoginModuleClass required name="value" … ;')
        module, body = tokens[0], tokens[2:-1]
        if ";" in body:
            raise self.error("sasl.jaas.config", "more than one login module: isrwatch takes one")
        options: dict[str, str] = {}
        if len(body) % 3 != 0 or any(body[i + 1] != "=" for i in range(0, len(body), 3)):
            raise self.error("sasl.jaas.config", f"the options of {module} are not name=\"value\" pairs")
        for i in range(0, len(body), 3):
            options[body[i]] = body[i + 2]
        return module, options

    def _only_options(self, options: dict[str, str], allowed: tuple[str, ...], module: str) -> None:
        extra = sorted(set(options) - set(allowed))
        if extra:
            raise self.error("sasl.jaas.config", f"{module} option {extra[0]} is not supported (supported: "
                                                 f"{', '.join(allowed)})")

    def _oauth(self, module: str | None, options: dict[str, str]) -> OAuthClientCredentials:
        if module is not None and module != OAUTHBEARER_LOGIN_MODULE:
            raise self.error("sasl.jaas.config", f"{module} does not fit sasl.mechanism OAUTHBEARER: use "
                                                 f"{OAUTHBEARER_LOGIN_MODULE}")
        self._only_options(options, ("clientId", "clientSecret", "scope"), OAUTHBEARER_LOGIN_MODULE)
        handler = self.get("sasl.login.callback.handler.class")
        if handler is not None and handler not in OAUTHBEARER_LOGIN_HANDLERS:
            raise self.error("sasl.login.callback.handler.class", f"{handler}: isrwatch runs no Java code; it gets "
                                                                  "tokens by OAuth client credentials itself")
        url = self.get("sasl.oauthbearer.token.endpoint.url")
        if url is None:
            raise self.error("sasl.oauthbearer.token.endpoint.url", "not set: OAUTHBEARER needs the token endpoint "
                                                                    "of the OAuth client credentials grant")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise self.error("sasl.oauthbearer.token.endpoint.url", f"{url}: an http(s) URL (a token file is not "
                                                                    "supported)")
        # Kafka 4.1 added properties for what the JAAS options say; either place will do, not both.
        client_id = self._either(options, "clientId", "sasl.oauthbearer.client.credentials.client.id")
        secret = self._either(options, "clientSecret", "sasl.oauthbearer.client.credentials.client.secret")
        scope = self._either(options, "scope", "sasl.oauthbearer.scope")
        if client_id is None or secret is None:
            missing = "clientId" if client_id is None else "clientSecret"
            raise self.error("sasl.jaas.config", f"no OAuth {missing}: set it in {OAUTHBEARER_LOGIN_MODULE}'s options "
                                                 "or in sasl.oauthbearer.client.credentials.*")
        return OAuthClientCredentials(url, client_id, SecretStr(secret), scope)

    def _either(self, options: dict[str, str], option: str, key: str) -> str | None:
        value = self.get(key)
        if value is not None and option in options:
            raise self.error(key, f"set both here and as the {option} option of sasl.jaas.config: keep one")
        return value if value is not None else (options.get(option) or None)
