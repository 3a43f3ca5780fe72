"""An alert's summary, description and runbook, rendered from one of its samples."""

from __future__ import annotations

import math
import string
from typing import Any

import numpy as np

from pipelines.alert_rules import Rule


class _Values(dict[str, Any]):
    """Template values: integral floats print as integers, unknown fields are an error caught at start-up."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def display(v: Any) -> Any:
    """A sample's value as labels and templates show it."""
    if isinstance(v, float | np.floating):
        if math.isnan(v):
            return "n/a"
        return int(v) if float(v).is_integer() else round(float(v), 3)
    if isinstance(v, np.integer | np.bool_):
        return v.item()
    return v


def render_annotations(rule: Rule, rec: dict[str, Any], labels: dict[str, str]) -> dict[str, str]:
    """summary, description and runbook rendered from one sample (its values shown once for the three)."""
    shown = _Values({k: display(v) for k, v in {**rec, **labels, "value": float(rec["_value"])}.items()})
    formatter = string.Formatter()
    return {name: formatter.vformat(getattr(rule, name), (), shown) for name in ("summary", "description", "runbook")}
