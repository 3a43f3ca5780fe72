"""Seeing new Delta commits cheaply, for the benches' pollers.

A poller shares the driver's interpreter with the queries it times, so it must not load tables: it
lists `_delta_log` and reads only the JSON of a commit it has not seen, for its added files' stats.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote


def new_commits(table_path: str, after_version: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Every commit of the table newer than `after_version`, oldest first, with the `add` actions it holds
    (empty when the table does not exist yet)."""
    log = os.path.join(table_path, "_delta_log")
    try:
        versions = sorted(int(e.name[:-5]) for e in os.scandir(log)
                          if e.name.endswith(".json") and e.name[:-5].isdigit())
    except FileNotFoundError:
        return []
    out = []
    for version in (v for v in versions if v > after_version):
        with open(os.path.join(log, f"{version:020d}.json")) as commit:
            adds = [add for line in commit if (add := json.loads(line).get("add"))]
        out.append((version, adds))
    return out


def new_commit_stats(table_path: str, after_version: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """`new_commits`, each with the `stats` of the files it added."""
    return [(version, [json.loads(a["stats"]) for a in adds if a.get("stats")])
            for version, adds in new_commits(table_path, after_version)]


def added_files(table_path: str, adds: list[dict[str, Any]]) -> list[str]:
    """The local paths of the files `adds` added (their `path` is relative to the table and URL-encoded)."""
    return [os.path.join(table_path, unquote(a["path"])) for a in adds]
