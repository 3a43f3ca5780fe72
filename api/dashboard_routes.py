"""The dashboards over HTTP: the HTML pages, their figures as JSON for live refresh, and plotly.js.

GET /                                        the index of dashboards
GET /dashboards/{page}                       overview, isr-heatmap, topics, slos, posture
GET /dashboards/topics/{topic}               one topic
GET /api/v1/dashboards/{page}/figures        {"version", "scope", "notices", "figures"}; `since=<version>` → no figures
GET /api/v1/dashboards/topics/{topic}/figures
GET /static/plotly.min.js                    the installed plotly package's copy (no CDN: hosts may be offline)

Every page takes `cluster` (default: the one with the latest data) and `window_minutes` (default 30).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.concurrency import iterate_in_threadpool, run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, Response, StreamingResponse

from api.deps import current_settings, get_freshness, get_reader, require_read
from api.page_keeper import app_page_keeper
from dashboards.html import ServedLinks, failed_tail, plotly_js_path
from dashboards.pages import (
    TOPIC_PREFIX,
    DashboardParams,
    UnknownPage,
    UnknownTopic,
    page_parts,
    page_payload_json,
    render_index,
)
from dashboards.scope import DEFAULT_WINDOW_MINUTES, MAX_WINDOW_MINUTES
from foundation.settings import ApiSettings
from lakehouse_read.reader import LakehouseReader

# With api.read_auth on, the pages need the bearer token too (they embed the same data as the API): put
# them behind a proxy that adds the Authorization header.
log = logging.getLogger(__name__)
router = APIRouter(tags=["dashboards"], dependencies=[Depends(require_read)])

# plotly.js only changes with the plotly package, and its URL carries the version: cache it for a year.
PLOTLY_CACHE_CONTROL = "public, max-age=31536000, immutable"

ReaderDep = Annotated[LakehouseReader, Depends(get_reader)]
SettingsDep = Annotated[ApiSettings, Depends(current_settings)]
ClusterQuery = Annotated[str | None, Query(max_length=200, description="cluster (emulator run id); default: the "
                                           "one with the latest partition state")]
WindowQuery = Annotated[int | None, Query(gt=0, le=MAX_WINDOW_MINUTES, description="minutes of data up to the "
                                          f"cluster's latest snapshot (default {DEFAULT_WINDOW_MINUTES})")]
RefreshQuery = Annotated[float | None, Query(ge=0, le=3600, description="seconds between refreshes, 0: none "
                                             "(default: api.dashboard_refresh)")]
SinceQuery = Annotated[str | None, Query(max_length=1000, description="the version the client shows: when it "
                                         "is still current the answer carries no figures")]
PageName = Annotated[str, Path(max_length=100)]
TopicName = Annotated[str, Path(max_length=249)]  # Kafka's limit on topic names


def _params(cluster: str | None, window_minutes: int | None) -> DashboardParams:
    # An empty `cluster` (the page's form left blank) means the default cluster.
    return DashboardParams(cluster=cluster or None, window_minutes=window_minutes)


def _links(request: Request, params: DashboardParams) -> ServedLinks:
    return ServedLinks(base=request.scope.get("root_path", "").rstrip("/"), query=params.query())


async def _html(request: Request, reader: LakehouseReader, settings: ApiSettings, page: str,
                params: DashboardParams, refresh_seconds: float | None) -> StreamingResponse:
    """The page's head at once, then the rest when its figures are computed: a browser opening the page fetches
    and compiles plotly.js meanwhile instead of after."""
    refresh = settings.dashboard_refresh.total_seconds() if refresh_seconds is None else refresh_seconds
    freshness = get_freshness(request)
    try:
        head, rest = await run_in_threadpool(lambda: page_parts(reader, page, params, links=_links(request, params),
                                                                refresh_seconds=refresh,
                                                                notices=freshness.warnings()))
    except (UnknownPage, UnknownTopic) as e:
        raise HTTPException(404, str(e)) from None
    _opened(request, page, params)

    async def parts() -> AsyncIterator[str]:
        yield head
        body_started = False
        try:
            async for part in iterate_in_threadpool(rest()):  # each figure goes out as soon as it is built
                body_started = True
                yield part
        except Exception as e:  # the status line is sent: end the page with the error instead of a cut-off page
            log.exception("dashboard page %s failed", page)
            yield failed_tail(f"{type(e).__name__}: {e}", body_started=body_started)

    return StreamingResponse(parts(), media_type="text/html; charset=utf-8")


def _opened(request: Request, page: str, params: DashboardParams) -> None:
    keeper = app_page_keeper(request)
    if keeper is not None:
        keeper.opened(page, params)


def _figures(request: Request, reader: LakehouseReader, page: str, params: DashboardParams,
             since: str | None) -> Response:
    try:
        payload = page_payload_json(reader, page, params, since=since, notices=get_freshness(request).warnings())
    except (UnknownPage, UnknownTopic) as e:
        raise HTTPException(404, str(e)) from None
    _opened(request, page, params)
    return Response(payload, media_type="application/json", headers={"Cache-Control": "no-store"})


@router.get("/", response_class=HTMLResponse, summary="Index of the dashboards")
def index(request: Request, reader: ReaderDep, cluster: ClusterQuery = None,
          window_minutes: WindowQuery = None) -> HTMLResponse:
    params = _params(cluster, window_minutes)
    return HTMLResponse(render_index(reader, params, links=_links(request, params),
                                     notices=get_freshness(request).warnings()))


@router.get("/dashboards/topics/{topic}", response_class=HTMLResponse, summary="One topic's dashboard")
async def topic_page(request: Request, reader: ReaderDep, settings: SettingsDep, topic: TopicName,
                     cluster: ClusterQuery = None, window_minutes: WindowQuery = None,
                     refresh_seconds: RefreshQuery = None) -> StreamingResponse:
    return await _html(request, reader, settings, f"{TOPIC_PREFIX}{topic}", _params(cluster, window_minutes),
                       refresh_seconds)


@router.get("/dashboards/{page}", response_class=HTMLResponse, summary="A dashboard page")
async def dashboard_page(request: Request, reader: ReaderDep, settings: SettingsDep, page: PageName,
                         cluster: ClusterQuery = None, window_minutes: WindowQuery = None,
                         refresh_seconds: RefreshQuery = None) -> StreamingResponse:
    return await _html(request, reader, settings, page, _params(cluster, window_minutes), refresh_seconds)


@router.get("/api/v1/dashboards/topics/{topic}/figures", summary="A topic dashboard's figures")
def topic_figures(request: Request, reader: ReaderDep, topic: TopicName, cluster: ClusterQuery = None,
                  window_minutes: WindowQuery = None, since: SinceQuery = None) -> Response:
    return _figures(request, reader, f"{TOPIC_PREFIX}{topic}", _params(cluster, window_minutes), since)


@router.get("/api/v1/dashboards/{page}/figures", summary="A dashboard page's figures")
def page_figures(request: Request, reader: ReaderDep, page: PageName, cluster: ClusterQuery = None,
                 window_minutes: WindowQuery = None, since: SinceQuery = None) -> Response:
    return _figures(request, reader, page, _params(cluster, window_minutes), since)


@router.get("/static/plotly.min.js", summary="plotly.js, from the installed plotly package")
def plotly_js() -> FileResponse:
    return FileResponse(plotly_js_path(), media_type="text/javascript",
                        headers={"Cache-Control": PLOTLY_CACHE_CONTROL})
