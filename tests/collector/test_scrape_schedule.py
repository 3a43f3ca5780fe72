"""collector.scrape_schedule: each metrics URL scraped at the exporter's pace, a node silent once its scrape in flight
runs past three of its recent scrapes' time. The exporter here answers when the test says, on a clock the test
sets: nothing depends on how fast this machine is."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from collector.metrics_scrape import NodeScrape, parse_exposition
from collector.scrape_schedule import ScrapeSchedule, ScrapeTiming
from tests.collector.test_metrics_scrape import CONTROLLER, WALL_AT_MONOTONIC_ZERO_S

URL = "http://controller:9404/metrics"
WAIT_S = 30   # bounds a wait for the schedule's thread, never reached when it works


class ManualClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def wall_s(self) -> float:
        return WALL_AT_MONOTONIC_ZERO_S + self.now_s

    def monotonic_s(self) -> float:
        return self.now_s


@dataclass
class GatedExporter:
    """Answers each request with the next response the test hands it; counts the requests that arrived."""

    responses: queue.Queue[httpx.Response | Exception] = field(default_factory=queue.Queue)
    arrived: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrived.release()
        response = self.responses.get(timeout=WAIT_S)
        if isinstance(response, Exception):
            raise response
        return response

    def wait_request(self) -> None:
        assert self.arrived.acquire(timeout=WAIT_S), "the schedule sent no scrape"

    def answer(self, status: int = 200) -> None:
        self.responses.put(httpx.Response(status, text=CONTROLLER if status == 200 else "busy"))


@pytest.fixture
def exporter() -> GatedExporter:
    return GatedExporter()


@pytest.fixture
def schedule(exporter: GatedExporter) -> Iterator[tuple[ScrapeSchedule, ManualClock]]:
    clock = ManualClock()
    client = httpx.Client(transport=httpx.MockTransport(exporter))
    scheduled = ScrapeSchedule(client, ScrapeTiming(interval_s=0.01, timeout_s=0.5, scrape_timeout_s=10.0),
                               clock=clock)
    yield scheduled, clock
    scheduled.close()
    for _ in range(4):   # release a scrape still waiting for its answer
        exporter.answer()
    client.close()


def wait_for_scrapes(schedule: ScrapeSchedule, ended: int) -> NodeScrape:
    """The URL's current scrape once `ended` scrapes of it have ended."""
    pause = threading.Event()   # never set: a sleep that pytest can interrupt
    for _ in range(WAIT_S * 100):
        if schedule.counts()[URL][0] >= ended:
            return schedule.current(URL)
        pause.wait(0.01)
    raise AssertionError(f"the schedule ended fewer than {ended} scrapes")


def test_a_slow_exporter_reports_until_its_scrape_runs_past_three_of_its_recent_ones(
        schedule: tuple[ScrapeSchedule, ManualClock], exporter: GatedExporter) -> None:
    scheduled, clock = schedule
    scheduled.start([URL])
    exporter.wait_request()
    first = scheduled.current(URL)
    assert (first.reporting, first.reason) == (False, "first scrape not answered yet")

    clock.now_s = 0.25            # the first answer took 0.25 s: the bound is max(0.5, 3 x 0.25) = 0.75 s
    exporter.answer()
    scheduled.wait_first()
    answered = wait_for_scrapes(scheduled, 1)
    assert answered.reporting and answered.elapsed_s == 0.25

    exporter.wait_request()       # the next scrape started at 0.25 s and hangs
    clock.now_s = 1.0             # in flight 0.75 s: its node still reports the last answer
    assert scheduled.current(URL) is answered
    clock.now_s = 1.25            # in flight 1.0 s > 0.75 s: silent
    late = scheduled.current(URL)
    assert (late.reporting, late.reason.split(" (")[0]) == (False, "no answer for 1.0 s")
    assert scheduled.counts() == {URL: (1, 1)}

    exporter.answer()             # the slow answer arrives after all: reporting again, with it
    resumed = wait_for_scrapes(scheduled, 2)
    assert resumed.reporting and resumed.elapsed_s == 1.0
    assert scheduled.counts() == {URL: (2, 1)}


def test_a_failed_scrape_is_not_reporting_and_is_retried_at_the_next_interval(
        schedule: tuple[ScrapeSchedule, ManualClock], exporter: GatedExporter) -> None:
    scheduled, clock = schedule
    scheduled.start([URL])
    exporter.wait_request()
    clock.now_s = 4.0             # a 4 s answer: the next scrape waits until 8 s of the clock, twice its time
    exporter.answer()
    answered = wait_for_scrapes(scheduled, 1)
    assert answered.reporting
    assert not exporter.arrived.acquire(timeout=0.3), "the exporter was given no rest after a 4 s scrape"

    clock.now_s = 8.0
    exporter.wait_request()
    exporter.answer(503)
    failed = wait_for_scrapes(scheduled, 2)
    assert (failed.reporting, failed.reason) == (False, "HTTP 503")
    exporter.wait_request()       # retried one interval (0.01 s) after the failed one started, the clock unmoved


def test_timing_bounds() -> None:
    timing = ScrapeTiming(interval_s=1.0, timeout_s=0.5, scrape_timeout_s=10.0)
    assert timing.late_after_s([]) == 10.0
    assert timing.late_after_s([0.05, 0.1]) == 0.5
    assert timing.late_after_s([2.0, 1.0]) == 6.0
    assert timing.late_after_s([4.3]) == 10.0
    exposition = parse_exposition(CONTROLLER)
    assert timing.next_start_s(100.0, NodeScrape(URL, 0.0, 0.0, 0.05, exposition)) == 101.0
    assert timing.next_start_s(100.0, NodeScrape(URL, 0.0, 0.0, 4.3, exposition)) == 108.6
    assert timing.next_start_s(100.0, NodeScrape(URL, 0.0, 0.0, 10.0, None, "no answer within 10 s")) == 101.0
    with pytest.raises(ValueError, match=r"scrape timeout \(0.2 s\) must be at least the request timeout \(0.5 s\)"):
        ScrapeTiming(interval_s=1.0, timeout_s=0.5, scrape_timeout_s=0.2)
    with pytest.raises(ValueError, match="interval_s must be positive"):
        ScrapeTiming(interval_s=0, timeout_s=0.5, scrape_timeout_s=10)


def test_a_scrape_that_raises_is_a_failed_scrape_and_the_url_is_scraped_on(
        schedule: tuple[ScrapeSchedule, ManualClock], exporter: GatedExporter) -> None:
    scheduled, _ = schedule
    scheduled.start([URL])
    exporter.wait_request()
    exporter.responses.put(RuntimeError("a bug in a library"))
    failed = wait_for_scrapes(scheduled, 1)
    assert (failed.reporting, failed.reason) == (False, "scrape failed: RuntimeError: a bug in a library")
    exporter.wait_request()
    exporter.answer()
    assert wait_for_scrapes(scheduled, 2).reporting
