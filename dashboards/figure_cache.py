"""Built dashboard figures, remembered per page, scope and table versions, each page built once at a time.

Every open dashboard polls, and a page's figures only change when a table it reads does: until then every
request gets the same figures without rebuilding them. Figures are kept as the JSON text a page embeds and
the figures endpoint sends, not as dicts: serialised once, and no containers for the cyclic garbage
collector to walk (a day's heatmap as dicts is thousands of lists).

Two requests for a page nobody has built yet (or the page keeper and a browser) would build it twice, each
slower for sharing the cores: the second waits for the first and is served what it built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from api.lru import Lru

# How long a request waits for another thread building the same page before building it itself.
WAIT_FOR_BUILDER_SECONDS = 60.0

F = TypeVar("F")  # a built figure


class FigureCache(Generic[F]):
    def __init__(self, max_pages: int = 64) -> None:
        self._built: Lru[dict[str, F]] = Lru(max_pages)
        self._building: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> dict[str, F] | None:
        return self._built.get(key)

    def figures(self, key: Hashable, build: Callable[[], Iterator[tuple[str, F]]]) -> Iterator[tuple[str, F]]:
        """The page's figures, (id, figure) in page order: remembered ones at once; else each as soon as `build`
        yields it (the caller streams it), remembered once all are built. While another thread builds the
        same key, waits for it instead of building alongside."""
        while True:
            built = self._built.get(key)
            if built is not None:
                yield from built.items()
                return
            with self._lock:
                builder = self._building.get(key)
                if builder is None:
                    mine = self._building[key] = threading.Event()
            if builder is None:
                break
            builder.wait(WAIT_FOR_BUILDER_SECONDS)
            if self._built.get(key) is None:  # the other build failed or is stuck: build it here
                with self._lock:
                    if self._building.get(key) is builder:
                        del self._building[key]
        try:
            figures: dict[str, F] = {}
            for fid, figure in build():
                figures[fid] = figure
                yield fid, figure
            self._built.put(key, figures)
        finally:
            with self._lock:
                if self._building.get(key) is mine:
                    del self._building[key]
            mine.set()

    def __len__(self) -> int:
        return len(self._built)
