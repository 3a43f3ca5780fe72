"""Built dashboard figures, remembered per page, scope and table versions, each page built once at a time.

Every open dashboard polls, and a page's figures only change when a table it reads does: until then every
request gets the same figures without rebuilding them. Figures are kept as the JSON text a page embeds and
the figures endpoint sends, not as dicts: serialised once, and no containers for the cyclic garbage
collector to walk (a day's heatmap as dicts is thousands of lists).

A page is built by a worker thread of the cache, not by the request that asked first: every request for a
page under way (a browser's, the page keeper's) follows the same build and streams each figure as soon as it
is built, and a reader that is slow or goes away holds up nobody (the build runs to its end and is kept).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

from lakehouse_read.lru import Lru

F = TypeVar("F")  # a built figure
# Builds are CPU-bound Python: more workers than cores would only interleave them.
BUILD_WORKERS = 2


class _Build(Generic[F]):
    """A build under way: its figures so far, and how it ended."""

    def __init__(self) -> None:
        self.figures: list[tuple[str, F]] = []
        self.done = False
        self.error: BaseException | None = None
        self.changed = threading.Condition()


class FigureCache(Generic[F]):
    def __init__(self, max_pages: int = 64, workers: int = BUILD_WORKERS) -> None:
        self._built: Lru[dict[str, F]] = Lru(max_pages)
        self._building: dict[Hashable, _Build[F]] = {}
        self._lock = threading.Lock()
        self._workers = ThreadPoolExecutor(workers, thread_name_prefix="isrwatch-figures")

    def get(self, key: Hashable) -> dict[str, F] | None:
        return self._built.get(key)

    def figures(self, key: Hashable, build: Callable[[], Iterator[tuple[str, F]]]) -> Iterator[tuple[str, F]]:
        """The page's figures, (id, figure) in page order: remembered ones at once; else each as soon as it is
        built, by a build of `build` started now or already under way. Raises what the build raised (then
        nothing is remembered, and the next request builds again)."""
        built = self._built.get(key)
        if built is None:
            with self._lock:
                under_way = self._building.get(key)
                if under_way is None:
                    built = self._built.get(key)  # a build may have ended since the first look
                    if built is None:
                        under_way = self._building[key] = _Build()
                        self._workers.submit(self._run, key, under_way, build)
        if built is not None:
            yield from built.items()
            return
        assert under_way is not None
        yield from _follow(under_way)

    def under_way(self) -> int:
        """Builds not ended yet."""
        with self._lock:
            return len(self._building)

    def _run(self, key: Hashable, under_way: _Build[F], build: Callable[[], Iterator[tuple[str, F]]]) -> None:
        try:
            for item in build():
                with under_way.changed:
                    under_way.figures.append(item)
                    under_way.changed.notify_all()
            self._built.put(key, dict(under_way.figures))  # before the build leaves _building: no gap
        except BaseException as e:  # handed to every reader of this build
            under_way.error = e
        finally:
            with self._lock:
                del self._building[key]
            with under_way.changed:
                under_way.done = True
                under_way.changed.notify_all()

    def __len__(self) -> int:
        return len(self._built)


def _follow(under_way: _Build[F]) -> Iterator[tuple[str, F]]:
    sent = 0
    while True:
        with under_way.changed:
            while sent >= len(under_way.figures) and not under_way.done:
                under_way.changed.wait()
            if sent < len(under_way.figures):
                item = under_way.figures[sent]
            elif under_way.error is not None:
                raise under_way.error
            else:
                return
        sent += 1
        yield item
