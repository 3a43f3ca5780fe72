"""Serialized responses remembered by what they were computed from (table versions, the query string, the
active silences), so a burst of identical requests on an unchanged lakehouse costs one computation and no
JSON encoding. Bounded: the least recently used entries leave first."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from api.lru import Lru


class ResponseCache:
    def __init__(self, max_entries: int = 512) -> None:
        self._bodies: Lru[bytes] = Lru(max_entries)

    async def respond(self, key: Hashable, compute: Callable[[], dict[str, Any]]) -> Response:
        """The cached body for `key`, or `compute()` run off the event loop (it may read Delta files),
        encoded once and kept."""
        body = self._bodies.get(key)
        if body is None:
            result = await run_in_threadpool(compute)
            body = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
            self._bodies.put(key, body)
        return Response(body, media_type="application/json")
