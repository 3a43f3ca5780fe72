"""The dashboard pages: what each shows and reads, its JSON payload, and its HTML.

A page is addressed by a path: `overview`, `isr-heatmap`, `topics` (the topic index), `topics/<topic>`,
`slos`, `posture`; the index (`render_index`) links them all. A page's version token is the Delta
versions of the tables it reads, so an unchanged lakehouse gives an unchanged token and a polling page
redraws nothing; the token is taken before the data is read, so a write racing a request at worst
causes one redraw too many, never a missed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import urlencode

import plotly.graph_objects as go
import plotly.io as pio

from dashboards import data
from dashboards.figure_cache import FigureCache
from dashboards.figures import (
    alerts_figure,
    isr_heatmap_figure,
    isr_membership_figure,
    metrics_coverage_figure,
    offsets_figure,
    overview_figure,
    rejections_figure,
)
from dashboards.html import (
    DEFAULT_REFRESH_SECONDS,
    FigureJson,
    Links,
    ServedLinks,
    body_end,
    body_start,
    controls_form,
    document_head,
    figure_section,
    script_safe,
)
from dashboards.posture_figures import findings_figure, posture_table_figure
from dashboards.scope import PARTITION_STATE, Scope, check_window_minutes, resolve_scope
from dashboards.slo_figures import burn_rate_figure, error_budget_figure, slo_table_figure
from dashboards.style import NO_DATA, finish
from lakehouse_read.reader import LakehouseReader, UnknownTable

TOPIC_PREFIX = "topics/"


class UnknownPage(LookupError):
    """Raised when a page path names no dashboard page."""


class UnknownTopic(LookupError):
    """Raised when a topic page names a topic the cluster does not have (in its latest snapshot or configs)."""


@dataclass(frozen=True)
class DashboardParams:
    """The query every page takes: the cluster (default: the latest) and the window in minutes."""

    cluster: str | None = None
    window_minutes: int | None = None

    def query(self) -> str:
        values = {"cluster": self.cluster, "window_minutes": self.window_minutes}
        return urlencode({k: v for k, v in values.items() if v is not None})


# A page's figures, (id, figure), in the order the page shows them: yielded one at a time so that a served page
# can send each to the browser as soon as it is built.
Build = Callable[[LakehouseReader, Scope, str | None], Iterator[tuple[str, go.Figure]]]
Body = Callable[[LakehouseReader, Scope, Links], str]


@dataclass(frozen=True)
class Page:
    slug: str
    title: str
    description: str
    tables: tuple[str, ...]
    build: Build
    body: Body | None = None

    @property
    def has_figures(self) -> bool:
        return self.build is not _no_figures


# -- what each page draws ----------------------------------------------------------------------------------
def _overview(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    yield "partition-health", overview_figure(data.broker_metrics(reader, scope), data.data_loss_events(reader, scope))
    alerts_empty = "no pending or firing alerts" if scope.has_data and reader.exists(data.ALERTS) else NO_DATA
    yield "active-alerts", alerts_figure(data.active_alerts(reader, scope.cluster), empty_text=alerts_empty)
    yield "metrics-coverage", metrics_coverage_figure(data.node_metrics_coverage(reader, scope.cluster))


def _isr_heatmap(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    cells = data.isr_cells(reader, scope)
    yield "isr-heatmap", isr_heatmap_figure(cells.frame, bucket_seconds=cells.bucket_seconds,
                                            partitions_total=cells.partitions_total)


def _topic(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    if topic is None:
        raise ValueError("topic is required for a topic page")
    state = data.topic_state(reader, scope, topic)
    yield "isr-membership", isr_membership_figure(data.isr_membership(state, scope), topic)
    yield "offsets", offsets_figure(data.offsets(state, scope), topic)
    yield "produce-errors", rejections_figure(data.topic_rejections(reader, scope, topic), topic)


def _slos(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    status = data.slo_status(reader, scope)
    yield "slo-status", slo_table_figure(status)
    yield "error-budget", error_budget_figure(status)
    yield "burn-rates", burn_rate_figure(status)


def _posture(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    frame = data.posture(reader, scope.cluster)
    yield "posture", posture_table_figure(frame)
    yield "findings", findings_figure(frame)


def _no_figures(reader: LakehouseReader, scope: Scope, topic: str | None) -> Iterator[tuple[str, go.Figure]]:
    yield from ()


def _topic_index(reader: LakehouseReader, scope: Scope, links: Links) -> str:
    topics = data.topic_names(reader, scope)
    if not topics:
        return f'<p class="empty">{NO_DATA}</p>'
    frame = data.posture(reader, scope.cluster)
    verdicts = {} if frame.empty else dict(zip(frame["topic"], frame["verdict_class"], strict=True))
    cards = "".join(f'<a href="{escape(links.topic(t))}"><strong>{escape(t)}</strong>'
                    f'<span>{escape(verdicts.get(t, "posture not computed yet"))}</span></a>' for t in topics)
    return f'<div class="grid">{cards}</div>'


PAGES: dict[str, Page] = {p.slug: p for p in (
    Page("overview", "Overview", "Partition health by broker, data-loss events, the active alerts and what each "
         "node's metrics cover.", (PARTITION_STATE, data.BROKER_METRICS, data.CLUSTER_EVENTS, data.ACK_LEDGER,
                                   data.ALERTS, data.METRICS_COVERAGE), _overview),
    Page("isr-heatmap", "ISR heatmap", "Every partition's ISR size against its effective min ISR, over time.",
         (PARTITION_STATE,), _isr_heatmap),
    Page("topics", "Topics", "One page per topic: ISR membership, offsets and produce errors.",
         (PARTITION_STATE, data.TOPIC_CONFIGS, data.POSTURE), _no_figures, _topic_index),
    Page("slos", "SLOs", "Error budget left and burn rates of every durability and availability SLO.",
         (PARTITION_STATE, data.SLO_STATUS), _slos),
    Page("posture", "Posture", "Configuration verdict and findings per topic.",
         (PARTITION_STATE, data.POSTURE), _posture),
)}
TOPIC_PAGE = Page("topic", "Topic", "ISR membership per replica, high watermark against log end offsets, and "
                  "produce errors by acks level.", (PARTITION_STATE, data.ACK_LEDGER, data.TOPIC_CONFIGS), _topic)


# -- payload -----------------------------------------------------------------------------------------------
def resolve_page(path: str) -> tuple[Page, str | None]:
    """The page a path names and, for a topic page, the topic."""
    if path.startswith(TOPIC_PREFIX) and len(path) > len(TOPIC_PREFIX):
        return TOPIC_PAGE, path[len(TOPIC_PREFIX):]
    page = PAGES.get(path)
    if page is None:
        raise UnknownPage(f"unknown dashboard page '{path}'")
    return page, None


def version_token(reader: LakehouseReader, page: Page) -> str:
    """`<table>=<version>` of each table the page reads (`-` for one not created yet)."""
    parts = []
    for name in page.tables:
        try:
            parts.append(f"{name}={reader.version(name)}")
        except UnknownTable:
            parts.append(f"{name}=-")
    return ";".join(parts)


def _scope_json(scope: Scope) -> dict[str, Any]:
    end = None if scope.end is None else scope.end.strftime("%Y-%m-%d %H:%M:%S")
    return {"cluster": scope.cluster, "window_minutes": scope.window_minutes, "end": end}


def figure_json(fig: go.Figure) -> FigureJson:
    """A figure as JSON text a page can embed (numpy arrays, timestamps and NaN converted by plotly's encoder)."""
    return FigureJson(script_safe(pio.to_json(fig, validate=False)), int(fig.layout.height or 450))


# Every trace type the pages draw (tests/dashboards/test_plotly_bundle.py checks the pages draw no other).
WARMED_TRACES: tuple[type[Any], ...] = (go.Scatter, go.Bar, go.Heatmap, go.Table)


def warm_up() -> None:
    """Build and serialise a figure of every trace type the pages draw. plotly.py creates the classes behind
    a trace type's properties on first use (~0.1 s for these four here): done at server start, the first page
    opened after a restart does not wait for it."""
    fig = go.Figure(data=[trace() for trace in WARMED_TRACES])
    finish(fig, "warm-up", x_title="x", y_title="y", height=100)
    figure_json(fig)


def _resolve(reader: LakehouseReader, path: str, params: DashboardParams, *, topic_checked: bool = False
             ) -> tuple[Page, str | None, Scope, str]:
    """The page, its topic, scope and version token. The token is taken before anything is read (module
    docstring)."""
    page, topic = resolve_page(path)
    token = version_token(reader, page)
    scope = resolve_scope(reader, params.cluster or None, params.window_minutes)
    if topic is not None and not topic_checked:
        _check_topic(reader, topic, scope)
    return page, topic, scope, token


def _check_topic(reader: LakehouseReader, topic: str, scope: Scope) -> None:
    if topic not in data.topic_names(reader, scope):
        raise UnknownTopic(f"unknown topic '{topic}'")


# The default pages, the recently opened ones and the topic pages the API's page keeper keeps built: a page's
# figures are 10-300 KB of JSON, so at most ~75 MB.
FIGURES: FigureCache[FigureJson] = FigureCache(max_pages=256)


def _figure_key(reader: LakehouseReader, page: Page, topic: str | None, scope: Scope, token: str) -> tuple[Any, ...]:
    return (reader.serial, page.slug, topic, scope.cluster, scope.window_minutes, scope.end, token)


def _figures(reader: LakehouseReader, page: Page, topic: str | None, scope: Scope,
             token: str) -> Iterator[tuple[str, FigureJson]]:
    """A page's figures as JSON text, each as soon as it is built; remembered for its version token and scope
    (dashboards.figure_cache)."""
    def build() -> Iterator[tuple[str, FigureJson]]:
        for fid, fig in page.build(reader, scope, topic):
            yield fid, figure_json(fig)

    return FIGURES.figures(_figure_key(reader, page, topic, scope, token), build)


def keep_built(reader: LakehouseReader, path: str, params: DashboardParams | None = None) -> bool:
    """Have the figures of the page at `path` built for its tables' current versions (the API's page keeper
    calls this ahead of the browsers); whether they were not when asked (then built here, or by a request's
    build under way, waited for). Raises like `page_payload`."""
    found, topic, scope, token = _resolve(reader, path, params or DashboardParams())
    if not found.has_figures or FIGURES.get(_figure_key(reader, found, topic, scope, token)) is not None:
        return False
    for _ in _figures(reader, found, topic, scope, token):
        pass
    return True


def page_payload_json(reader: LakehouseReader, page: str, params: DashboardParams | None = None, *,
                      since: str | None = None, notices: Sequence[str] = ()) -> str:
    """`{"version", "scope", "notices", "figures": {id: figure}}` of a page as JSON text (the figures are kept as
    text); `figures` is empty when `since` is the current version (the client already shows it); `notices` are
    always there (what the page cannot show now, lakehouse_read/freshness.py). Raises UnknownPage, UnknownTopic, and
    ValueError/TypeError for a bad window."""
    found, topic, scope, token = _resolve(reader, page, params or DashboardParams())
    figures = () if since == token else _figures(reader, found, topic, scope, token)
    body = ",".join(f"{json.dumps(fid)}:{figure.text}" for fid, figure in figures)
    return (f'{{"version":{json.dumps(token)},"scope":{json.dumps(_scope_json(scope))},'
            f'"notices":{json.dumps(list(notices))},"figures":{{{body}}}}}')


def page_payload(reader: LakehouseReader, page: str, params: DashboardParams | None = None, *,
                 since: str | None = None, notices: Sequence[str] = ()) -> dict[str, Any]:
    """`page_payload_json` as values."""
    value: dict[str, Any] = json.loads(page_payload_json(reader, page, params, since=since, notices=notices))
    return value


# -- HTML --------------------------------------------------------------------------------------------------
def _nav(links: Links, current: str) -> list[tuple[str, str, bool]]:
    return [(p.title, links.page(p.slug), current == p.slug or (p.slug == "topics" and current == "topic"))
            for p in PAGES.values()]


def _scope_text(scope: Scope) -> str:
    described = _scope_json(scope)
    if not scope.has_data:
        return NO_DATA if scope.cluster is None else f"cluster {scope.cluster}: {NO_DATA}"
    return f"cluster {described['cluster']} · {described['window_minutes']} min to {described['end']} UTC"


def render_page(reader: LakehouseReader, page: str, params: DashboardParams | None = None, *,
                links: Links | None = None, refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
                notices: Sequence[str] = ()) -> str:
    """The HTML of a page. Served (default links) it polls its figures every `refresh_seconds` (0: never);
    with `StaticLinks` it is a standalone file. Raises like `page_payload`."""
    head, rest = page_parts(reader, page, params, links=links, refresh_seconds=refresh_seconds, notices=notices)
    return head + "".join(rest())


def page_parts(reader: LakehouseReader, page: str, params: DashboardParams | None = None, *,
               links: Links | None = None, refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
               notices: Sequence[str] = ()) -> tuple[str, Callable[[], Iterator[str]]]:
    """A page as its head, which needs no figures (so a server can send it at once), and a function giving
    the rest in parts: the body up to the figures, then each figure (with the script drawing it) as soon as it
    is built, then the end. `notices` are said above the figures. What would make the page a 404 (an unknown
    page or topic, a bad window) raises here, before anything is sent."""
    if refresh_seconds < 0:
        raise ValueError(f"refresh_seconds must be >= 0, got {refresh_seconds}")
    params = params or DashboardParams()
    links = links or ServedLinks(query=params.query())
    found, topic = resolve_page(page)
    if topic is not None:
        _check_topic(reader, topic, resolve_scope(reader, params.cluster or None, params.window_minutes))
    else:
        check_window_minutes(params.window_minutes)
    heading = f"Topic {topic}" if topic is not None else found.title

    def rest() -> Iterator[str]:
        found, topic, scope, token = _resolve(reader, page, params, topic_checked=True)
        figures_url = links.figures(page) if found.has_figures and refresh_seconds > 0 else None
        served = isinstance(links, ServedLinks)
        yield body_start(
            heading=heading, lead=found.description, nav=_nav(links, found.slug), scope_text=_scope_text(scope),
            status_text=_status_text(served, figures_url, refresh_seconds),
            controls=controls_form(params.cluster, scope.window_minutes) if served else "",
            body=found.body(reader, scope, links) if found.body else "", links=links, notices=notices)
        for fid, figure in _figures(reader, found, topic, scope, token):
            yield figure_section(fid, figure)
        yield body_end(version=token, scope=_scope_json(scope), figures_url=figures_url,
                       refresh_seconds=refresh_seconds)

    return document_head(title=heading, links=links), rest


def render_index(reader: LakehouseReader, params: DashboardParams | None = None, *,
                 links: Links | None = None, notices: Sequence[str] = ()) -> str:
    """The landing page: every dashboard page, and the cluster's topics."""
    params = params or DashboardParams()
    links = links or ServedLinks(query=params.query())
    scope = resolve_scope(reader, params.cluster or None, params.window_minutes)
    cards = "".join(f'<a href="{escape(links.page(p.slug))}"><strong>{escape(p.title)}</strong>'
                    f'<span>{escape(p.description)}</span></a>' for p in PAGES.values())
    body = f'<div class="grid">{cards}</div><h1>Topics</h1>{_topic_index(reader, scope, links)}'
    served = isinstance(links, ServedLinks)
    return (document_head(title="Dashboards", links=links)
            + body_start(heading="Dashboards", lead="Kafka durability: ISR health, data loss, SLOs and posture.",
                         nav=_nav(links, ""), scope_text=_scope_text(scope),
                         status_text="" if served else "exported snapshot",
                         controls=controls_form(params.cluster, scope.window_minutes) if served else "", body=body,
                         links=links, notices=notices)
            + body_end(version="", scope=_scope_json(scope), figures_url=None, refresh_seconds=0))


def _status_text(served: bool, figures_url: str | None, refresh_seconds: float) -> str:
    if not served:
        return "exported snapshot"
    return f"live · every {refresh_seconds:g} s" if figures_url else "auto-refresh off"
