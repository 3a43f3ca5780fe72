"""Arrow rows as JSON-ready dicts: timestamps as ISO-8601 UTC strings ending in Z, Arrow maps as objects."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa


def iso(v: datetime | None) -> str | None:
    if v is None:
        return None
    return v.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def value(v: Any, map_columns: bool = False) -> Any:
    if isinstance(v, datetime):
        return iso(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None   # JSON has no NaN/Infinity
    if isinstance(v, list):
        if map_columns and all(isinstance(x, tuple) and len(x) == 2 for x in v):
            return {k: value(x) for k, x in v}
        return [value(x) for x in v]
    if isinstance(v, dict):
        return {k: value(x) for k, x in v.items()}
    return v


def rows(table: pa.Table) -> list[dict[str, Any]]:
    maps = {f.name for f in table.schema if pa.types.is_map(f.type)}
    return [{k: value(v, k in maps) for k, v in r.items()} for r in table.to_pylist()]
