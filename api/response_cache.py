"""Serialized responses remembered by what they were computed from (table versions, the query string, the
active silences), so a burst of identical requests on an unchanged lakehouse costs one computation and no
JSON encoding. Bounded: the least recently used entries leave first."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response


class ResponseCache:
    def __init__(self, max_entries: int = 512) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, bytes] = OrderedDict()
        self._lock = threading.Lock()

    async def respond(self, key: Hashable, compute: Callable[[], dict[str, Any]]) -> Response:
        """The cached body for `key`, or `compute()` run off the event loop (it may read Delta files),
        encoded once and kept."""
        with self._lock:
            body = self._entries.get(key)
            if body is not None:
                self._entries.move_to_end(key)
        if body is None:
            result = await run_in_threadpool(compute)
            body = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
            with self._lock:
                self._entries[key] = body
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return Response(body, media_type="application/json")
