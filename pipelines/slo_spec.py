"""Durability and availability SLOs (conf/slos.yaml), parsed and checked before anything runs.

The file follows the shape of OpenSLO / Sloth: each SLO names an SLI, the topics it covers, an objective
and a rolling window, and how its error budget burn alerts (multi-window, multi-burn-rate, as in the
Google SRE workbook, chapter "Alerting on SLOs"). Errors name the file, the SLO and the field.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from foundation.durations import duration_ms

# What each SLI counts, per metric interval (one "timeslice" per partition, or records for durability).
SLIS: dict[str, str] = {
    "write_availability": "partition-intervals with a leader and ISR >= effective min ISR (acks=all writes accepted)",
    "read_availability": "partition-intervals with a leader (consumers can read)",
    "acked_durability": "acknowledged records (total) against acknowledged records lost (bad), from the ack ledger",
    "multi_copy_acks": "partition-intervals with a leader in which acks=all was NOT satisfied by a single "
                       "in-sync copy (ISR of 1 with effective min ISR 1 is the bad case)",
}
# The burn-rate windows slo_status carries; alert conditions pick pairs of them.
BURN_WINDOWS: dict[str, int] = {"5m": 300_000, "30m": 1_800_000, "1h": 3_600_000, "6h": 21_600_000,
                                "3d": 259_200_000}
# Google SRE workbook, table 5-8: page on 1h/5m at 14.4x (2% of a 30-day budget in an hour) or 6h/30m at 6x
# (5% in six hours); ticket on 3d/6h at 1x (10% in three days).
DEFAULT_PAGE = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
DEFAULT_TICKET = (("3d", "6h", 1.0),)
ACKS = ("0", "1", "all")


class SloConfigError(ValueError):
    """Raised when conf/slos.yaml is malformed: the message names the file, the SLO and the field."""


@dataclass(frozen=True)
class BurnCondition:
    """Fires when the burn rate over both the long and the short window exceeds the factor."""

    long: str
    short: str
    factor: float


@dataclass(frozen=True)
class Slo:
    name: str
    sli: str
    objective: float                 # a fraction, e.g. 0.999
    window_ms: int
    window: str
    topics: tuple[str, ...] = ("*",)
    acks: tuple[str, ...] = ("1", "all")
    description: str = ""
    page: tuple[BurnCondition, ...] = ()
    ticket: tuple[BurnCondition, ...] = ()

    def covers(self, topic: str) -> bool:
        return any(fnmatch.fnmatchcase(topic, p) for p in self.topics)

    @property
    def source(self) -> str:
        return "ack_ledger" if self.sli == "acked_durability" else "partition_state"


_FIELDS = {"name", "sli", "objective", "window", "topics", "acks", "description", "alerting"}


def parse_slos(raw: Any, origin: str) -> tuple[Slo, ...]:
    if not isinstance(raw, dict) or not isinstance(raw.get("slos"), list) or not raw["slos"]:
        raise SloConfigError(f"{origin}: expected a mapping with a non-empty list 'slos'")
    unknown = sorted(set(raw) - {"slos"})
    if unknown:
        raise SloConfigError(f"{origin}: unknown top-level key(s) {unknown}")
    slos = [_slo(s, i, origin) for i, s in enumerate(raw["slos"])]
    names = [s.name for s in slos]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SloConfigError(f"{origin}: SLO name(s) {dup} defined more than once")
    return tuple(slos)


def _slo(raw: Any, index: int, origin: str) -> Slo:
    where = f"{origin}: slo #{index + 1}"
    if not isinstance(raw, dict):
        raise SloConfigError(f"{where}: expected a mapping")
    if isinstance(raw.get("name"), str):
        where = f"{origin}: slo {raw['name']!r}"

    def fail(key: str, msg: str) -> SloConfigError:
        return SloConfigError(f"{where}: {key}: {msg}")

    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(sorted(_FIELDS))})")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]*", name):
        raise fail("name", "required: letters, digits, '_', '.' and '-'")
    if raw.get("sli") not in SLIS:
        raise fail("sli", f"{raw.get('sli')!r} is not one of {', '.join(SLIS)}")
    objective = raw.get("objective")
    # Percent, as OpenSLO and Sloth write it (99.9), so 0.999 is not silently read as 0.999 %.
    if isinstance(objective, bool) or not isinstance(objective, int | float) or not 1 < objective < 100:
        raise fail("objective", f"{objective!r}: a percentage strictly between 1 and 100, e.g. 99.9 "
                                "(not the fraction 0.999)")
    window = str(raw.get("window", "28d"))
    try:
        window_ms = duration_ms(window)
    except ValueError as e:
        raise fail("window", str(e)) from None
    if window_ms < BURN_WINDOWS["1h"]:
        raise fail("window", f"{window!r}: at least 1h")
    topics = raw.get("topics", ["*"])
    if isinstance(topics, str):
        topics = [topics]
    if not isinstance(topics, list) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise fail("topics", "a list of topic names or glob patterns, e.g. ['orders', 'payments-*']")
    acks = raw.get("acks", ["1", "all"])
    acks = [str(a) for a in (acks if isinstance(acks, list) else [acks])]
    if not acks or any(a not in ACKS for a in acks):
        raise fail("acks", f"{acks!r}: a list drawn from {', '.join(ACKS)}")
    if "acks" in raw and raw["sli"] != "acked_durability":
        raise fail("acks", "only the acked_durability SLI counts records by acks level")
    alerting = raw.get("alerting") or {}
    if not isinstance(alerting, dict) or set(alerting) - {"page", "ticket"}:
        raise fail("alerting", "a mapping with 'page' and/or 'ticket' (each a list of {long, short, factor}, "
                               "or [] to disable)")
    page = _conditions(alerting.get("page"), DEFAULT_PAGE, fail, "alerting.page")
    ticket = _conditions(alerting.get("ticket"), DEFAULT_TICKET, fail, "alerting.ticket")
    return Slo(name, raw["sli"], round(float(objective) / 100, 12), window_ms, window, tuple(topics), tuple(acks),
               str(raw.get("description", "")), page, ticket)


def _conditions(raw: Any, default: tuple[tuple[str, str, float], ...], fail: Any, key: str
                ) -> tuple[BurnCondition, ...]:
    if raw is None:
        return tuple(BurnCondition(*d) for d in default)
    if not isinstance(raw, list):
        raise fail(key, "expected a list of {long, short, factor}")
    out = []
    for item in raw:
        if not isinstance(item, dict) or set(item) != {"long", "short", "factor"}:
            raise fail(key, f"{item!r}: expected {{long, short, factor}}")
        for w in ("long", "short"):
            if str(item[w]) not in BURN_WINDOWS:
                raise fail(key, f"{w} window {item[w]!r} is not one of {', '.join(BURN_WINDOWS)}")
        if BURN_WINDOWS[str(item["short"])] >= BURN_WINDOWS[str(item["long"])]:
            raise fail(key, f"short window {item['short']!r} must be shorter than long window {item['long']!r}")
        factor = item["factor"]
        if isinstance(factor, bool) or not isinstance(factor, int | float) or factor <= 0:
            raise fail(key, f"factor {factor!r}: a number > 0")
        out.append(BurnCondition(str(item["long"]), str(item["short"]), float(factor)))
    return tuple(out)
