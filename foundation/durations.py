"""The one way a duration is written in isrwatch's files and on its command lines: a number and its unit.

`30s`, `500ms`, `5m`, `2h`, `3d` (Prometheus' and Kafka tools' way, which alert rules and scenarios use) and
`10 seconds`, `100 milliseconds`, `1 minute`, `168 hours` (Spark's way, which conf/pipeline.yaml uses) are the
same grammar: a number, optional spaces, a unit short or long, singular or plural. A bare number has no unit and
is refused; a Kafka `.ms` key in a scenario takes an integer of milliseconds, as Kafka does.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(milliseconds?|ms|seconds?|s|minutes?|m|hours?|h|days?|d)\s*$")
_UNIT = {"ms": dt.timedelta(milliseconds=1), "millisecond": dt.timedelta(milliseconds=1),
         "s": dt.timedelta(seconds=1), "second": dt.timedelta(seconds=1),
         "m": dt.timedelta(minutes=1), "minute": dt.timedelta(minutes=1),
         "h": dt.timedelta(hours=1), "hour": dt.timedelta(hours=1),
         "d": dt.timedelta(days=1), "day": dt.timedelta(days=1)}
EXAMPLES = "'30s', '500ms', '5m' or '10 seconds'"


def parse_duration(text: Any) -> dt.timedelta:
    """A duration written as text with its unit; ValueError naming the text otherwise."""
    m = _DURATION.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"expected a duration such as {EXAMPLES}, got {text!r}")
    unit = m.group(2)
    return float(m.group(1)) * _UNIT[unit if unit in _UNIT else unit.rstrip("s")]


def duration_ms(text: Any) -> int:
    """`parse_duration` in whole milliseconds."""
    return round(parse_duration(text) / dt.timedelta(milliseconds=1))
