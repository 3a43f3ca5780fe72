"""Serialized responses remembered per URL with what they were computed from (table versions, the active
silences), so a burst of identical requests on an unchanged lakehouse costs one computation and no JSON
encoding. Bounded: the least recently used entries leave first.

A repeated request is answered before FastAPI sees it (`ResponseCacheMiddleware`): FastAPI's parameter
parsing and dependency resolution cost more than half of a cached request (bench/api.py), and a URL that
was answered once parses to the same parameters every time. The middleware re-checks only what can change
under the same URL, the entry's `basis` (table versions, active silences), and the read token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from api.deps import read_allowed
from lakehouse_read.lru import Lru

Basis = Callable[[], Hashable]


@dataclass(frozen=True)
class _Answered:
    """What a URL was last answered with, and the basis it was computed from."""

    basis: Basis
    computed_from: Hashable
    body: bytes


class ResponseCache:
    def __init__(self, max_entries: int = 512) -> None:
        self._by_url: Lru[_Answered] = Lru(max_entries)
        self.url_hits = 0   # requests the middleware answered (tests look)

    async def respond(self, request: Request, basis: Basis, compute: Callable[[], dict[str, Any]]) -> Response:
        """`compute()` run off the event loop (it may read Delta files) and encoded, remembered for this URL
        with `basis()` (what can change under the same URL) for `ResponseCacheMiddleware` to answer repeats."""
        computed_from = basis()
        result = await run_in_threadpool(compute)
        body = json.dumps(result, separators=(",", ":"), allow_nan=False).encode()
        self._by_url.put(_url_key(request.scope), _Answered(basis, computed_from, body))
        return Response(body, media_type="application/json")

    def answered(self, scope: Scope) -> bytes | None:
        """The body a GET of this URL got, if what it was computed from is unchanged."""
        hit = self._by_url.get(_url_key(scope))
        if hit is None or hit.basis() != hit.computed_from:
            return None
        return hit.body


def _url_key(scope: Scope) -> tuple[str, bytes]:
    return scope["path"], scope.get("query_string", b"")


class ResponseCacheMiddleware:
    """Answers a GET whose URL `ResponseCache` remembers, when its basis is unchanged and the request may read;
    everything else goes to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            state = scope["app"].state
            cache: ResponseCache = state.responses
            authorization = Headers(scope=scope).get("authorization", "")
            body = cache.answered(scope) if read_allowed(authorization, state.settings) else None
            if body is not None:
                cache.url_hits += 1
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-length", str(len(body)).encode()),
                                        (b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

