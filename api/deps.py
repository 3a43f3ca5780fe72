"""FastAPI dependencies shared by the routers: the lakehouse reader and the bearer-token checks.

The dependencies are `async def` although none awaits: FastAPI runs a plain `def` dependency in its
thread pool, a hop that cost more than the rest of a cached request (measured with bench/api.py).
"""

from __future__ import annotations

import hmac

from fastapi import Request

from api.errors import ApiError
from foundation.settings import ApiSettings
from lakehouse_read.freshness import Freshness
from lakehouse_read.reader import LakehouseReader


async def get_reader(request: Request) -> LakehouseReader:
    reader: LakehouseReader = request.app.state.reader
    return reader


def get_freshness(request: Request) -> Freshness:
    freshness: Freshness = request.app.state.freshness
    return freshness


def get_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.settings
    return settings


async def current_settings(request: Request) -> ApiSettings:
    """`get_settings` as a dependency."""
    return get_settings(request)


def _bearer_matches(authorization: str, token: str) -> bool:
    scheme, _, given = authorization.partition(" ")
    # Constant-time comparison: the token must not leak through response timing.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _check_token(request: Request, token: str | None) -> None:
    if token is None:
        raise ApiError(503, "mutations are disabled: set ISRWATCH_API_TOKEN to enable them")
    if not _bearer_matches(request.headers.get("authorization", ""), token):
        raise ApiError(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})


def read_allowed(authorization: str, settings: ApiSettings) -> bool:
    """Whether a request with this Authorization header may read (what `require_read` lets through)."""
    if not settings.read_auth:
        return True
    return settings.token is not None and _bearer_matches(authorization, settings.token)


async def require_write(request: Request) -> None:
    """Mutations always need the token (ISRWATCH_API_TOKEN)."""
    _check_token(request, get_settings(request).token)


async def require_read(request: Request) -> None:
    """Reads need the token only when `api.read_auth` is on."""
    settings = get_settings(request)
    if settings.read_auth:
        _check_token(request, settings.token)


async def require_query(request: Request) -> None:
    """POST /api/v1/query needs the token when `api.read_auth` or `api.query_auth` is on."""
    settings = get_settings(request)
    if settings.read_auth:
        _check_token(request, settings.token)
    elif settings.query_auth:
        if settings.token is None:
            raise ApiError(503, "queries are disabled: api.query_auth is on and ISRWATCH_API_TOKEN is not set")
        _check_token(request, settings.token)
