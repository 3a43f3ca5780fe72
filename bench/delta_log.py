"""Seeing new Delta commits cheaply, for the benches' pollers.

A poller shares the driver's interpreter with the queries it times, so it must not load tables: it
lists `_delta_log` and reads only the JSON of a commit it has not seen, for its added files' stats.
"""

from __future__ import annotations

import json
import os
from typing import Any


def new_commit_stats(table_path: str, after_version: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Every commit of the table newer than `after_version`, oldest first, with the `stats` of the files it
    added (empty when the table does not exist yet)."""
    log = os.path.join(table_path, "_delta_log")
    try:
        versions = sorted(int(e.name[:-5]) for e in os.scandir(log)
                          if e.name.endswith(".json") and e.name[:-5].isdigit())
    except FileNotFoundError:
        return []
    out = []
    for version in (v for v in versions if v > after_version):
        stats = []
        with open(os.path.join(log, f"{version:020d}.json")) as commit:
            for line in commit:
                add = json.loads(line).get("add")
                if add and add.get("stats"):
                    stats.append(json.loads(add["stats"]))
        out.append((version, stats))
    return out
