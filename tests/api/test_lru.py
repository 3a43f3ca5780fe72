"""The bounded cache behind the API's encoded responses and the dashboards' built figures."""

from __future__ import annotations

import pytest

from lakehouse_read.lru import Lru


def test_the_least_recently_used_entry_leaves_first() -> None:
    cache: Lru[str] = Lru(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"  # a is now the most recent
    cache.put("c", "C")
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == ("A", None, "C", 2)
    cache.put("a", "A2")  # replacing refreshes too
    cache.put("d", "D")
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == ("A2", None, "D")


def test_a_cache_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="max_entries must be >= 1, got 0"):
        Lru(0)
