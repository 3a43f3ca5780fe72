"""Every metrics URL scraped on a thread of its own, at the exporter's pace; each collector interval takes the latest
answer of each.

An exporter's scrape time is the exporter's: under conf/jmx_exporter.yaml's rules a broker answers in ~50 ms, under
Strimzi's kafka-metrics.yaml in 2-4.3 s here (each rule's regex against every MBean attribute). Inside the interval,
under the Admin API's 0.5 s deadline, such a node would never report; under a 10 s deadline every interval would
wait for the slowest exporter. So each URL is scraped back to back, one scrape at a time as Prometheus does, under
its own deadline (`scrape_timeout_s`, Prometheus' default 10 s), no oftener than the collector's interval, and
leaving the exporter idle at least as long as its last scrape took (the agent runs inside the broker's JVM).

A node is reporting while its last scrape answered and the one in flight has not run longer than `late_after_s`:
three times its slowest recent scrape, at least the Admin timeout, at most the scrape timeout. A fast exporter's
silence is thus seen as soon as a broker's silence is; a slow one's after three of its scrapes' time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import httpx

from collector.metrics_scrape import SYSTEM_CLOCK, Clock, NodeScrape, scrape_node

RECENT_SCRAPES = 5   # the scrapes whose time sets how long a scrape may run before its node counts as silent
LATE_FACTOR = 3


@dataclass(frozen=True)
class ScrapeTiming:
    interval_s: float        # the collector's interval: no URL is scraped oftener
    timeout_s: float         # the Admin API's per-broker timeout: the least a scrape in flight is given
    scrape_timeout_s: float  # the most one scrape may take

    def __post_init__(self) -> None:
        for name in ("interval_s", "timeout_s", "scrape_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.scrape_timeout_s < self.timeout_s:
            raise ValueError(f"the scrape timeout ({self.scrape_timeout_s:g} s) must be at least the request timeout "
                             f"({self.timeout_s:g} s)")

    def late_after_s(self, recent_elapsed_s: Sequence[float]) -> float:
        """How long a scrape may be in flight before its node is not reporting, given the node's recent answered
        scrapes' times (none yet: the scrape timeout)."""
        if not recent_elapsed_s:
            return self.scrape_timeout_s
        return min(self.scrape_timeout_s, max(self.timeout_s, LATE_FACTOR * max(recent_elapsed_s)))

    def next_start_s(self, started_s: float, scrape: NodeScrape) -> float:
        """When the next scrape of a URL starts: one interval after this one started, later after an answer that
        took more than half an interval (the exporter gets as much idle time as it spent answering); a scrape
        that failed is retried at the next interval."""
        busy = scrape.elapsed_s if scrape.reporting else 0.0
        return started_s + max(self.interval_s, 2 * busy)


@dataclass
class _UrlState:
    latest: NodeScrape | None = None            # the last scrape that ended, answered or not
    in_flight_since_s: float | None = None      # monotonic start of the scrape under way
    recent_elapsed_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_SCRAPES))
    scrapes: int = 0                            # scrapes ended
    late: int = 0                               # intervals that found this URL's scrape in flight past its bound
    first: threading.Event = field(default_factory=threading.Event)


class ScrapeSchedule:
    """The scraping threads of one collector (one per URL given: bounded by the command line)."""

    def __init__(self, client: httpx.Client, timing: ScrapeTiming, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._client = client
        self.timing = timing
        self._clock = clock
        self._states: dict[str, _UrlState] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, urls: Iterable[str]) -> None:
        for url in urls:
            if url in self._states:
                continue
            self._states[url] = _UrlState()
            thread = threading.Thread(target=self._scrape_forever, args=(url,), daemon=True,
                                      name=f"isrwatch-scrape-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()

    def wait_first(self) -> None:
        """Wait for every URL's first scrape to end (at most the scrape timeout and a second), so that the first
        interval reads every node as it is rather than as not yet scraped."""
        deadline = self._clock.monotonic_s() + self.timing.scrape_timeout_s + 1
        for state in self._states.values():
            state.first.wait(max(0.0, deadline - self._clock.monotonic_s()))

    def current(self, url: str) -> NodeScrape:
        """The URL's latest scrape, or why its node is not reporting now: its scrape in flight has run past its
        bound, or it has not been scraped yet."""
        with self._lock:
            state = self._states[url]
            latest, since, recent = state.latest, state.in_flight_since_s, list(state.recent_elapsed_s)
            now = self._clock.monotonic_s()
            running = None if since is None else now - since
            bound = self.timing.late_after_s(recent)
            if running is not None and running > bound:
                state.late += 1
                return NodeScrape(url, self._clock.wall_s(), now, running, None,
                                  f"no answer for {running:.1f} s (a scrape counts as late after {bound:.1f} s: "
                                  f"{LATE_FACTOR}x its slowest recent one, at least the request timeout)")
        if latest is None:
            return NodeScrape(url, self._clock.wall_s(), now, 0.0, None, "first scrape not answered yet")
        return latest

    def counts(self) -> dict[str, tuple[int, int]]:
        """URL -> (scrapes ended, intervals that found it late): what the progress and the tests count."""
        with self._lock:
            return {url: (s.scrapes, s.late) for url, s in self._states.items()}

    def close(self) -> None:
        """Stop scraping; a scrape in flight is abandoned (its thread is a daemon and ends within the timeout)."""
        self._closing.set()

    def _scrape_forever(self, url: str) -> None:
        state = self._states[url]
        while not self._closing.is_set():
            started = self._clock.monotonic_s()
            with self._lock:
                state.in_flight_since_s = started
            try:
                scrape = scrape_node(self._client, url, timeout_s=self.timing.scrape_timeout_s, clock=self._clock)
            except Exception as e:   # the client closed under a scrape in flight at shutdown, or a bug: never silent
                if self._closing.is_set():
                    return
                now = self._clock.monotonic_s()
                scrape = NodeScrape(url, self._clock.wall_s(), now, now - started, None,
                                    f"scrape failed: {type(e).__name__}: {e}")
            with self._lock:
                state.latest, state.in_flight_since_s = scrape, None
                state.scrapes += 1
                if scrape.reporting:
                    state.recent_elapsed_s.append(scrape.elapsed_s)
            state.first.set()
            self._closing.wait(max(0.0, self.timing.next_start_s(started, scrape) - self._clock.monotonic_s()))
