"""One Kafka request to one broker, bounded by a deadline.

The collector asks every broker separately, so a broker that does not answer is reported as not reporting
and never holds up the others. Client libraries route a request to whichever broker they think best and
wait on it: librdkafka's admin client stalls while a broker is SIGSTOPped, because the kernel still accepts
its connections. Here each broker has its own connection, every read and write has a timeout, and a
connection that failed or timed out is dropped and opened again next time.

The messages are kafka-python's, generated from Kafka's own JSON message specs; only the transport (a
blocking socket per broker) is ours.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

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


class BrokerConnection:
    """A connection to one broker, opened on first use and reopened after any failure."""

    def __init__(self, address: str, timeout_s: float) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"broker address {address!r} is not HOST:PORT")
        self.address = address
        self.host, self.port = host, int(port)
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._correlation_id = 0
        # One request at a time on the socket: two threads' frames must not interleave.
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

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
        self._correlation_id = (self._correlation_id + 1) % 2**31
        if isinstance(message, PreEncoded) and version != message.API_VERSION:
            raise ValueError(f"request encoded at version {message.API_VERSION}, asked to send at {version}")
        message.API_VERSION = version
        message.with_header(correlation_id=self._correlation_id, client_id=CLIENT_ID)
        frame = message.encode(header=True, framed=True)
        try:
            sock = self._connected(deadline)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            sock.sendall(frame)
            size = struct.unpack(">i", self._read(sock, 4, deadline))[0]
            body = self._read(sock, size, deadline)
        except (OSError, BrokerUnavailable) as e:
            self.close()
            raise BrokerUnavailable(f"broker {self.address}: {e or type(e).__name__}") from e
        # Every response header starts with the request's correlation id (int32).
        if len(body) < 4 or struct.unpack_from(">i", body)[0] != self._correlation_id:
            self.close()
            raise BrokerUnavailable(f"broker {self.address}: response out of order")
        return body

    def _connected(self, deadline: float) -> socket.socket:
        if self._sock is None:
            timeout = max(deadline - time.monotonic(), 0.001)
            self._sock = socket.create_connection((self.host, self.port), timeout=timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._sock

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
                raise BrokerUnavailable("connection closed")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)
