"""The one percentile the benches print: `statistics.quantiles` over the values, inclusive of the smallest and the
largest (so p0 is the minimum and p100 the maximum), linear between neighbours, as numpy's default does."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The `q`-th percentile (0-100) of `values`; NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0 and 100, got {q!r}")
    data = sorted(values)
    if not data:
        return math.nan
    if len(data) == 1 or q == 0:
        return float(data[0])
    if q == 100:
        return float(data[-1])
    # 1,000 cut points: each percentile with one decimal is one of them.
    cuts = statistics.quantiles(data, n=1000, method="inclusive")
    return float(cuts[round(q * 10) - 1])
