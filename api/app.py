"""The isrwatch HTTP API and dashboards: `create_app(settings)` builds the FastAPI app over one lakehouse."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool

from api import routes_alerts, routes_health, routes_query, routes_silences, routes_slos, routes_topics
from api.errors import install_handlers
from api.page_keeper import PageKeeper
from api.response_cache import ResponseCache, ResponseCacheMiddleware
from api.sql_limits import ClientSlots
from api.sql_pool import SqlWorkerPool
from foundation.settings import PipelineSettings
from lakehouse_read.freshness import Freshness
from lakehouse_read.reader import LakehouseReader
from pipelines.silence_store import SilenceStore
from pipelines.slo_config import load_slos

TOKEN_ENV = "ISRWATCH_API_TOKEN"


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    sql_pool: SqlWorkerPool = app.state.sql_pool
    sql_pool.start()   # the workers warm up while the dashboards do
    try:
        async with _dashboards_lifespan(app):
            yield
    finally:
        await run_in_threadpool(sql_pool.stop)


@asynccontextmanager
async def _dashboards_lifespan(app: FastAPI) -> AsyncIterator[None]:
    from dashboards.pages import warm_up

    await run_in_threadpool(warm_up)
    # What start-up built (modules, plotly.py's validators) lives as long as the process: moved out of the
    # cyclic collector's reach (after collecting start-up's garbage), a full collection no longer walks it.
    # Measured with bench/api.py: with the warm-up's objects tracked, /topics/{t} at 50 clients had a p99 of
    # 80-105 ms in two of three runs (collections stalling the event loop); frozen, 10-14 ms, as without it.
    gc.collect()
    gc.freeze()
    keeper: PageKeeper | None = app.state.page_keeper
    if keeper is not None:
        keeper.start()
    try:
        yield
    finally:
        if keeper is not None:
            await run_in_threadpool(keeper.stop)
        gc.unfreeze()  # a process that starts another app (tests) must not keep this one's objects forever


def create_app(settings: PipelineSettings) -> FastAPI:
    """The app over `settings.lakehouse`. The bearer token is read from ISRWATCH_API_TOKEN when the settings
    carry none; without one, mutations answer 503."""
    settings.use_storage()
    api = settings.api
    if api.token is None and os.environ.get(TOKEN_ENV):
        api = api.model_validate({**api.model_dump(), "token": os.environ[TOKEN_ENV]})
    app = FastAPI(title="isrwatch", version="0.1.0", lifespan=_lifespan,
                  description="Kafka durability analytics: alerts, durability SLOs, configuration posture, "
                              "partition state and read-only SQL over the isrwatch lakehouse.")
    app.state.settings = api
    app.state.reader = LakehouseReader(settings.lakehouse, refresh_s=api.refresh.total_seconds())
    app.state.freshness = Freshness(settings.lakehouse, settings.checkpoint_root)
    app.state.silences = SilenceStore(settings.lakehouse, refresh_s=api.refresh.total_seconds())
    app.state.slos = load_slos(settings.slo.specs)
    app.state.responses = ResponseCache()
    app.state.sql_pool = SqlWorkerPool(settings.lakehouse, workers=api.query_workers,
                                       spare=api.query_spare_worker, memory_mb=api.query_worker_memory_mb,
                                       refresh_s=api.refresh.total_seconds())
    app.state.sql_clients = ClientSlots(api.query_max_per_client)
    app.state.page_keeper = (PageKeeper(app.state.reader, api.dashboard_prebuild.total_seconds())
                             if api.dashboard_prebuild.total_seconds() > 0 else None)
    app.add_middleware(ResponseCacheMiddleware)
    install_handlers(app)
    from api import dashboard_routes  # after the API routes: the dashboards own `/`

    for module in (routes_health, routes_alerts, routes_slos, routes_topics, routes_query, routes_silences,
                   dashboard_routes):
        app.include_router(module.router)
    return app
