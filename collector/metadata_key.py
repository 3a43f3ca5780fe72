"""Comparing Metadata v12 answers by their bytes: equal keys, equal answers, so the decoded one is reused."""

from __future__ import annotations

import struct
from typing import Any


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def controller_id_offset(body: bytes) -> int:
    """Where controller_id sits in a Metadata v12 response (a flexible version: compact arrays and strings,
    tagged fields), header first: after the header, throttle_time_ms, the brokers and cluster_id."""
    pos = _skip_tagged_fields(body, 4)              # response header v1: correlation id, tagged fields
    pos += 4                                        # throttle_time_ms
    brokers, pos = _uvarint(body, pos)              # compact array: length + 1
    for _ in range(brokers - 1):
        pos += 4                                    # node_id
        length, pos = _uvarint(body, pos)           # host: compact string
        pos += length - 1 + 4                       # ... and port
        length, pos = _uvarint(body, pos)           # rack: compact nullable string (0: null)
        pos = _skip_tagged_fields(body, pos + max(length - 1, 0))
    length, pos = _uvarint(body, pos)               # cluster_id: compact nullable string
    return pos + max(length - 1, 0)


def metadata_key(body: bytes) -> bytes:
    """A Metadata v12 response without its correlation id and controller_id: equal keys, equal answers."""
    try:
        at = controller_id_offset(body)
    except IndexError:
        return body[4:]
    return body[4:at] + body[at + 4:]


def metadata_key_checked(body: bytes, meta: Any) -> bool:
    """metadata_key found controller_id where the decoded answer has it: the cluster id just before it, the
    controller id in it, the number of topics just after it. Otherwise the answer is not kept for reuse."""
    try:
        at = controller_id_offset(body)
        topics, _ = _uvarint(body, at + 4)
    except IndexError:
        return False
    cluster_id = (meta.cluster_id or "").encode()
    return (body[at - len(cluster_id):at] == cluster_id and struct.unpack_from(">i", body, at)[0] == meta.controller_id
            and topics - 1 == len(meta.topics))
