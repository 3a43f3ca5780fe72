"""FigureCache: figures built once per key, streamed as built, and one build at a time per key."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from dashboards.figure_cache import FigureCache


class Build:
    """A page build yielding two figures; counts its calls and can be held between them."""

    def __init__(self, *, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.first_out = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def __call__(self) -> Iterator[tuple[str, str]]:
        self.calls += 1
        yield "a", f"A{self.calls}"
        self.first_out.set()
        self.release.wait(10)
        if self.fail:
            raise RuntimeError("lakehouse gone")
        yield "b", f"B{self.calls}"


def test_a_built_page_is_served_again_without_building() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    assert list(cache.figures("k", build)) == [("a", "A1"), ("b", "B1")]
    assert list(cache.figures("k", build)) == [("a", "A1"), ("b", "B1")]
    assert build.calls == 1 and cache.get("k") == {"a": "A1", "b": "B1"}
    assert list(cache.figures("other", build)) == [("a", "A2"), ("b", "B2")]


def test_a_second_request_waits_for_the_build_under_way_and_gets_its_figures() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    build.release.clear()
    first = cache.figures("k", build)
    assert next(first) == ("a", "A1")  # the first request streams its first figure, then builds on
    got: list[tuple[str, str]] = []
    waiter = threading.Thread(target=lambda: got.extend(cache.figures("k", build)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and got == []  # waiting, not building alongside
    build.release.set()
    assert list(first) == [("b", "B1")]
    waiter.join(10)
    assert got == [("a", "A1"), ("b", "B1")] and build.calls == 1


def test_a_failed_build_is_not_remembered_and_a_waiter_builds_it_itself() -> None:
    cache: FigureCache[str] = FigureCache()
    failing = Build(fail=True)
    failing.release.clear()
    first = cache.figures("k", failing)
    next(first)
    good = Build()
    got: list[tuple[str, str]] = []
    waiter = threading.Thread(target=lambda: got.extend(cache.figures("k", good)))
    waiter.start()
    failing.release.set()
    with pytest.raises(RuntimeError, match="lakehouse gone"):
        list(first)
    waiter.join(10)
    assert got == [("a", "A1"), ("b", "B1")] and good.calls == 1
    assert cache.get("k") == {"a": "A1", "b": "B1"}


def test_a_build_abandoned_half_way_is_not_remembered() -> None:
    cache: FigureCache[str] = FigureCache()
    build = Build()
    figures = cache.figures("k", build)
    next(figures)
    figures.close()  # the browser went away after the first figure
    assert cache.get("k") is None
    assert list(cache.figures("k", build)) == [("a", "A2"), ("b", "B2")]


def test_the_cache_keeps_at_most_its_number_of_pages() -> None:
    cache: FigureCache[str] = FigureCache(max_pages=2)
    for key in ("k1", "k2", "k3"):
        list(cache.figures(key, Build()))
    assert len(cache) == 2 and cache.get("k1") is None and cache.get("k3") is not None
