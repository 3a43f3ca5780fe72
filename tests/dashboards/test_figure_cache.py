"""FigureCache: figures built once per key by a worker, streamed to every reader as built, and one build at a
time per key whatever its readers do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from dashboards.figure_cache import FigureCache


class Build:
    """A page build yielding two figures; counts its calls and can be held between them."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.release = threading.Event()
        self.release.set()

    def __call__(self) -> Iterator[tuple[str, str]]:
        self.calls += 1
        yield "a", f"A{self.calls}"
        assert self.release.wait(10), "the test never released the build"
        if self.fail:
            raise RuntimeError("lakehouse gone")
        yield "b", f"B{self.calls}"


def _reader(cache: FigureCache[str], key: str, build: Build, got: list[tuple[str, str]],
            errors: list[BaseException]) -> threading.Thread:
    def read() -> None:
        try:
            got.extend(cache.figures(key, build))
        except RuntimeError as e:
            errors.append(e)

    thread = threading.Thread(target=read)
    thread.start()
    return thread


def test_a_built_page_is_served_again_without_building() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    assert list(cache.figures("k", build)) == [("a", "A1"), ("b", "B1")]
    assert list(cache.figures("k", build)) == [("a", "A1"), ("b", "B1")]
    assert build.calls == 1 and cache.get("k") == {"a": "A1", "b": "B1"}
    assert list(cache.figures("other", build)) == [("a", "A2"), ("b", "B2")]
    assert cache.under_way() == 0


def test_readers_of_a_build_under_way_follow_it_figure_by_figure() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    build.release.clear()
    first = cache.figures("k", build)
    assert next(first) == ("a", "A1")  # streamed before the build ends
    got: list[tuple[str, str]] = []
    waiter = _reader(cache, "k", build, got, [])
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    waiter.join(0.1)
    assert waiter.is_alive() and got == [("a", "A1")]  # the second reader has the first figure too, and waits
    build.release.set()
    waiter.join(10)
    assert list(first) == [("b", "B1")]
    assert got == [("a", "A1"), ("b", "B1")] and build.calls == 1 and cache.under_way() == 0


def test_a_reader_that_stops_reading_holds_up_nobody_and_the_build_is_kept() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    slow = cache.figures("k", build)
    assert next(slow) == ("a", "A1")  # and never asks for the next figure
    got: list[tuple[str, str]] = []
    other = _reader(cache, "k", build, got, [])
    other.join(10)
    assert not other.is_alive() and got == [("a", "A1"), ("b", "B1")]
    slow.close()  # the browser went away
    # `other` may have read the remembered page after the build stored it and before its worker let go of it.
    deadline = time.monotonic() + 10
    while cache.under_way() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.get("k") == {"a": "A1", "b": "B1"} and build.calls == 1 and cache.under_way() == 0


def test_a_failed_build_fails_its_readers_and_is_not_remembered() -> None:
    cache: FigureCache[str] = FigureCache()
    failing = Build(fail=True)
    failing.release.clear()
    first = cache.figures("k", failing)
    next(first)
    errors: list[BaseException] = []
    waiter = _reader(cache, "k", failing, [], errors)
    waiter.join(0.3)
    assert waiter.is_alive()  # following the build under way, not building its own
    failing.release.set()
    with pytest.raises(RuntimeError, match="lakehouse gone"):
        list(first)
    waiter.join(10)
    assert [str(e) for e in errors] == ["lakehouse gone"] and failing.calls == 1
    assert cache.get("k") is None and cache.under_way() == 0
    good = Build()
    assert list(cache.figures("k", good)) == [("a", "A1"), ("b", "B1")]  # the next request builds again


def test_the_cache_keeps_at_most_its_number_of_pages() -> None:
    cache: FigureCache[str] = FigureCache(max_pages=2)
    for key in ("k1", "k2", "k3"):
        list(cache.figures(key, Build()))
    assert len(cache) == 2 and cache.get("k1") is None and cache.get("k3") is not None
