"""One Kafka request to one broker, bounded by a deadline.

The collector asks every broker separately, so a broker that does not answer is reported as not reporting
and never holds up the others. Client libraries route a request to whichever broker they think best and
wait on it: librdkafka's admin client stalls while a broker is SIGSTOPped, because the kernel still accepts
its connections. Here each broker has its own connection, every read and write has a timeout, and a
connection that failed or timed out is dropped and opened again next time.

The messages are kafka-python's, generated from Kafka's own JSON message specs; only the transport (a
blocking socket per broker) is ours. TLS and SASL (collector/client_security.py) happen inside the connect of the
request that opens the connection, within that request's deadline: a broker that stops answering mid-handshake
costs one timeout, like any other request.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from typing import Any

from collector.client_security import PLAINTEXT_SECURITY, ClientSecurity
from collector.security_errors import SecurityHandshakeError

CLIENT_ID = "isrwatch-collect"


class PreEncoded:
    """A request whose body is encoded once and sent again and again, only its header (correlation id) new.

    kafka-python builds and encodes a request field by field in Python: a ListOffsets for 3,000 partitions costs
    20-35 ms of CPU to build and encode, every interval, for the same partitions (0.2 ms pre-encoded).
    `BrokerConnection.request` takes this in place of the message: the bytes on the wire are the same.
    """

    def __init__(self, message: Any, version: int) -> None:
        self.message = message
        self.API_VERSION = version
        self.body = message.encode(version=version)

    def with_header(self, *, correlation_id: int, client_id: str) -> None:
        self.message.API_VERSION = self.API_VERSION
        self.message.with_header(correlation_id=correlation_id, client_id=client_id)

    def encode(self, *, header: bool, framed: bool) -> bytes:
        if not (header and framed):
            raise ValueError("PreEncoded only encodes framed requests with their header")
        head = self.message.encode_header(flexible=self.message.flexible_version_q(self.API_VERSION))
        return struct.pack(">i", len(head) + len(self.body)) + head + self.body


class BrokerUnavailable(Exception):
    """The broker did not answer in time, refused the connection or closed it."""


class BrokerSecurityError(BrokerUnavailable):
    """The broker and the client disagree on security: a refused SASL login, a certificate that does not verify,
    a listener of another security protocol. A configuration problem rather than an outage: retrying the same
    settings cannot help."""


CLOSED = "connection closed"

# A SASL session the broker limits (KIP-368, connections.max.reauth.ms) is renewed by reconnecting this long
# before it ends: Kafka closes the connection at the first request after expiry, which would cost a request.
SESSION_RENEWAL_MARGIN_S = 5.0


class BrokerConnection:
    """A connection to one broker, opened on first use and reopened after any failure."""

    def __init__(self, address: str, timeout_s: float, security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"broker address {address!r} is not HOST:PORT")
        if not isinstance(security, ClientSecurity):
            raise TypeError(f"security must be a ClientSecurity, got {type(security).__name__}")
        self.address = address
        self.host, self.port = host, int(port)
        self.timeout_s = timeout_s
        self.security = security
        self._sock: socket.socket | None = None
        self._session_ends_at: float | None = None   # monotonic time the SASL session expires, None: never
        # Whether the broker ever answered these settings: until it has, a connection it closes without a word
        # means another security protocol rather than an outage.
        self._answered = False
        self._correlation_id = 0
        # One request at a time on the socket: two threads' frames must not interleave.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, {self.security.protocol}, timeout {self.timeout_s} s)"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._session_ends_at = None

    def request(self, message: Any, response_class: Any, version: int) -> Any:
        """Send `message` at `version` and return the decoded response; BrokerUnavailable within the timeout."""
        return response_class.decode(self.request_bytes(message, version), version=version, header=True)

    def request_bytes(self, message: Any, version: int) -> bytes:
        """Send `message` at `version` and return the response undecoded (its header first, the correlation id
        checked); BrokerUnavailable within the timeout."""
        with self._lock:
            return self._exchange(message, version)

    def _exchange(self, message: Any, version: int) -> bytes:
        """Send the request and return the response's bytes (its header first), checked to be this request's."""
        deadline = time.monotonic() + self.timeout_s
        if isinstance(message, PreEncoded) and version != message.API_VERSION:
            raise ValueError(f"request encoded at version {message.API_VERSION}, asked to send at {version}")
        fresh = self._sock is None
        try:
            sock = self._connected(deadline)
            body = self._round_trip(sock, message, version, deadline)
        except BrokerSecurityError:
            self.close()
            raise
        except ssl.SSLError as e:
            self.close()
            if fresh:
                # After a TLS 1.3 handshake the broker's verdict on the client certificate arrives as an alert at
                # the first read.
                raise BrokerSecurityError(f"broker {self.address}: TLS: {_tls_reason(e, self.security)}") from e
            raise BrokerUnavailable(f"broker {self.address}: TLS: {e.reason or e}") from e
        except (OSError, BrokerUnavailable) as e:
            self.close()
            if not self._answered and str(e) == CLOSED:
                raise BrokerSecurityError(f"broker {self.address}: {self._closed_at_once()}") from e
            # A socket's timeout says "timed out", a TLS handshake's names OpenSSL's source line: one wording.
            reason = "timed out" if isinstance(e, TimeoutError) else (e or type(e).__name__)
            raise BrokerUnavailable(f"broker {self.address}: {reason}") from e
        self._answered = True
        return body

    def _round_trip(self, sock: socket.socket, message: Any, version: int, deadline: float) -> bytes:
        self._correlation_id = (self._correlation_id + 1) % 2**31
        message.API_VERSION = version
        message.with_header(correlation_id=self._correlation_id, client_id=CLIENT_ID)
        frame = message.encode(header=True, framed=True)
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        sock.sendall(frame)
        size = struct.unpack(">i", self._read(sock, 4, deadline))[0]
        body = self._read(sock, size, deadline)
        # Every response header starts with the request's correlation id (int32).
        if len(body) < 4 or struct.unpack_from(">i", body)[0] != self._correlation_id:
            raise BrokerUnavailable("response out of order")
        return body

    def _connected(self, deadline: float) -> socket.socket:
        if self._sock is not None and self._session_ends_at is not None and time.monotonic() >= self._session_ends_at:
            self.close()
        if self._sock is None:
            timeout = max(deadline - time.monotonic(), 0.001)
            sock = socket.create_connection((self.host, self.port), timeout=timeout)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.security.uses_tls:
                    sock = self._tls_handshake(sock, deadline)
                lifetime_ms = self._authenticate(sock, deadline)
            except BaseException:
                sock.close()
                raise
            self._sock = sock
            self._session_ends_at = (time.monotonic() + lifetime_ms / 1000 - SESSION_RENEWAL_MARGIN_S
                                     if lifetime_ms > 0 else None)
        return self._sock

    def _tls_handshake(self, sock: socket.socket, deadline: float) -> ssl.SSLSocket:
        """The TLS handshake within the deadline (CPython bounds the whole handshake by the socket's timeout)."""
        # wrap_socket takes over the socket's descriptor: from here on only `tls` can close it.
        tls = self.security.ssl_context().wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
        tls.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            tls.do_handshake()
        except BaseException as e:
            tls.close()
            refusal = self._handshake_refusal(e)
            if refusal is None:
                raise   # a timeout: the broker is not answering, as with any request
            raise refusal from e
        return tls

    def _handshake_refusal(self, error: BaseException) -> BrokerSecurityError | None:
        if isinstance(error, ssl.SSLCertVerificationError):
            return BrokerSecurityError(f"broker {self.address}: TLS: {_certificate_problem(error)}")
        if isinstance(error, ssl.SSLError):
            return BrokerSecurityError(f"broker {self.address}: TLS handshake failed: "
                                       f"{_tls_reason(error, self.security)}")
        if isinstance(error, ConnectionResetError | BrokenPipeError):
            return BrokerSecurityError(f"broker {self.address}: TLS handshake failed: the broker closed the "
                                       "connection: is the listener plaintext? check security.protocol")
        return None

    def _authenticate(self, sock: socket.socket, deadline: float) -> int:
        """SASL, when configured; the session lifetime the broker granted in ms (0: unlimited)."""
        if not self.security.uses_sasl:
            return 0

        def exchange(message: Any, response_class: Any, version: int) -> Any:
            body = self._round_trip(sock, message, version, deadline)
            return response_class.decode(body, version=version, header=True)

        try:
            return self.security.authenticate(exchange, self.host, deadline)
        except SecurityHandshakeError as e:
            raise BrokerSecurityError(f"broker {self.address}: {e}") from e
        except BrokerUnavailable as e:
            if str(e) == CLOSED:
                raise BrokerSecurityError(f"broker {self.address}: {self._closed_at_once()}") from e
            raise

    def _closed_at_once(self) -> str:
        """Why a broker closes a new connection without answering: it speaks another security protocol."""
        protocol = self.security.protocol
        if not protocol.uses_tls:
            return (f"the broker closed the connection without answering a {protocol} client: is the listener "
                    "TLS? set security.protocol (SSL or SASL_SSL) in the --command-config file")
        if not protocol.uses_sasl:
            return (f"the broker closed the connection without answering a {protocol} client: does the listener "
                    "want SASL? set security.protocol=SASL_SSL and sasl.mechanism in the --command-config file")
        return (f"the broker closed the connection without answering a {protocol} client: check security.protocol "
                "and sasl.mechanism in the --command-config file against the listener's")

    @staticmethod
    def _read(sock: socket.socket, n: int, deadline: float) -> bytes:
        chunks: list[bytes] = []
        while n > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerUnavailable("timed out")
            sock.settimeout(remaining)
            chunk = sock.recv(min(n, 1 << 20))
            if not chunk:
                raise BrokerUnavailable(CLOSED)
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


def _tls_reason(error: ssl.SSLError, security: ClientSecurity) -> str:
    """OpenSSL's reason in words, with what to change for the alerts a misconfigured client gets."""
    reason = error.reason or str(error)
    refused = ("CERTIFICATE_REQUIRED", "UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "HANDSHAKE_FAILURE")
    if any(alert in reason for alert in refused):
        if security.certificate_chain_pem is None:
            return f"{reason}: the broker requires a client certificate: set ssl.keystore.location"
        return f"{reason}: the broker does not accept the client certificate (is it signed by a CA the broker trusts?)"
    if "WRONG_VERSION_NUMBER" in reason or "UNEXPECTED_EOF" in reason or "EOF" in reason.upper():
        return f"{reason}: the broker does not speak TLS on this port: is the listener plaintext? check " \
               "security.protocol"
    return reason


def _certificate_problem(error: ssl.SSLCertVerificationError) -> str:
    message = error.verify_message or str(error)
    if "mismatch" in message.lower():
        return (f"the broker's certificate does not name this host ({message}): connect by a name it holds, or set "
                "ssl.endpoint.identification.algorithm= (empty) to turn hostname verification off")
    return (f"the broker's certificate is not trusted ({message}): set ssl.truststore.location (or "
            "ssl.truststore.certificates) to the CA that signed it")
