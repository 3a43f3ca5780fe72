"""Keeps the dashboards' figures built ahead of the browsers that open them.

A page whose tables changed since its figures were last built makes its next visitor wait for the build:
~0.3 s for the overview or a 96-partition topic of a 30-broker day on an idle core, up to ~1 s while the
cores are busy, on top of what the browser needs to load plotly.js and draw. The keeper, a background thread
of `isrwatch serve`, checks every `interval_s` the version tokens of the pages an operator is likely to open
next, and builds the ones that changed:

- every dashboard page at its default scope (the latest cluster, the default window): the links the index
  and the navigation bar point at;
- every page (any topic, cluster or window) opened in the last `recent_s`: a page left open polls for its
  figures every few seconds, and a topic just looked at is likely to be looked at again;
- then, in a pass that found those unchanged (the lakehouse is quiet: between pipeline runs, or the
  pipeline has caught up), the topic pages at their default scope, in turn from where the previous pass
  stopped, for at most `background_share` of the interval: a topic page is then ready when opened, and the
  keeper's work stays bounded. While data lands every few seconds a topic page would go stale before anyone
  opened it, and the cores are better left to the pipeline: topic pages are then built when opened (and kept
  built while they are open).

A check of an unchanged page only reads the tables' versions (cached by the reader for its refresh
interval); a build of a page a browser is building at the same moment is not repeated (FigureCache).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from starlette.requests import Request

from dashboards.data import topic_names
from dashboards.pages import PAGES, TOPIC_PREFIX, DashboardParams, UnknownPage, UnknownTopic, keep_built
from dashboards.scope import resolve_scope
from lakehouse_read.reader import LakehouseReader

log = logging.getLogger(__name__)

DEFAULT_PATHS = tuple(slug for slug, page in PAGES.items() if page.has_figures)
RECENT_SECONDS = 15 * 60.0
MAX_RECENT_PAGES = 32  # bounded however many distinct pages and scopes are opened
BACKGROUND_SHARE = 0.25
MAX_BACKGROUND_TOPICS = 128  # with the pages above, within dashboards.pages.FIGURES's bound (256)


class PageKeeper:
    def __init__(self, reader: LakehouseReader, interval_s: float, *, recent_s: float = RECENT_SECONDS,
                 max_recent: int = MAX_RECENT_PAGES, background_share: float = BACKGROUND_SHARE,
                 max_background_topics: int = MAX_BACKGROUND_TOPICS) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.reader = reader
        self.interval_s = interval_s
        self.recent_s = recent_s
        self.max_recent = max_recent
        self.background_share = background_share
        self.max_background_topics = max_background_topics
        self._next_topic = ""  # where the next pass's topic round starts (topic names sort)
        self.builds = 0  # pages the keeper built since it started
        self.passes = 0  # passes completed
        self.last_pass_built = 0  # 0 after a pass: every page it keeps is built for the current data
        self._recent: OrderedDict[tuple[str, DashboardParams], float] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[tuple[str, DashboardParams]] = set()

    def opened(self, path: str, params: DashboardParams) -> None:
        """A browser opened (or polled) the page at `path`: keep it built for the next `recent_s`."""
        with self._lock:
            self._recent[(path, params)] = time.monotonic()
            self._recent.move_to_end((path, params))
            while len(self._recent) > self.max_recent:
                self._recent.popitem(last=False)

    def targets(self) -> list[tuple[str, DashboardParams]]:
        """What the next pass checks: the default pages, then the recently opened ones, newest first."""
        now = time.monotonic()
        with self._lock:
            for key in [k for k, seen in self._recent.items() if now - seen > self.recent_s]:
                del self._recent[key]
            recent = list(reversed(self._recent))
        defaults = [(path, DashboardParams()) for path in DEFAULT_PATHS]
        return defaults + [key for key in recent if key not in defaults]

    def run_once(self) -> int:
        """Build what changed; how many pages were built. A page that fails is logged once (until it builds
        again) and does not stop the others."""
        targets = self.targets()
        built = sum(self._keep(path, params) for path, params in targets)
        if built == 0:  # quiet: nothing changed since the last pass
            built += self._keep_topics({path for path, params in targets if params == DashboardParams()})
        self.builds += built
        self.passes += 1
        self.last_pass_built = built
        return built

    def _keep_topics(self, done: set[str]) -> int:
        """The default scope's topic pages, in turn from `_next_topic`, until the pass's background budget is
        spent; where the round stopped is where the next pass starts."""
        try:
            topics = topic_names(self.reader, resolve_scope(self.reader))[:self.max_background_topics]
        except Exception:
            log.exception("page keeper: listing the topics failed")
            return 0
        start = next((i for i, t in enumerate(topics) if t >= self._next_topic), 0)
        budget_ends = time.monotonic() + self.interval_s * self.background_share
        built = 0
        for topic in topics[start:] + topics[:start]:
            if self._stop.is_set() or time.monotonic() >= budget_ends:
                self._next_topic = topic
                return built
            path = f"{TOPIC_PREFIX}{topic}"
            if path not in done:
                built += self._keep(path, DashboardParams())
        self._next_topic = ""
        return built

    def _keep(self, path: str, params: DashboardParams) -> int:
        if self._stop.is_set():
            return 0
        try:
            built = keep_built(self.reader, path, params)
            self._failing.discard((path, params))
            return int(built)
        except (UnknownPage, UnknownTopic):
            with self._lock:  # gone (a topic deleted, a cluster aged out): stop keeping it
                self._recent.pop((path, params), None)
        except Exception:
            if (path, params) not in self._failing:
                log.exception("page keeper: building dashboard page %s (%s) failed", path, params)
                self._failing.add((path, params))
        return 0

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the page keeper is already running")
        self._stop.clear()  # an app's lifespan may run again (tests enter one app twice)
        self._thread = threading.Thread(target=self._run, name="isrwatch-page-keeper", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop after the page being built (a pass checks for the stop before each page)."""
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("page keeper: still building after %.0f s; left to end on its own", timeout_s)
        else:
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval_s)


def app_page_keeper(request: Request) -> PageKeeper | None:
    """The app's keeper; None when prebuilding is off (or the app mounts the dashboard routes alone)."""
    keeper: PageKeeper | None = getattr(request.app.state, "page_keeper", None)
    return keeper
