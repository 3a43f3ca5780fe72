"""Seeing new Delta commits cheaply, for the benches' pollers.

A poller shares the driver's interpreter with the queries it times, so it must not load tables: it
lists `_delta_log` and reads only the JSON of a commit it has not seen, for its added files' stats. The reading
itself is the alert lane's (foundation/bronze_log.py); this module shapes it for the pollers.
"""

from __future__ import annotations

import json
from typing import Any

from foundation.bronze_log import data_adds, log_versions


def new_commits(table_path: str, after_version: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Every commit of the table newer than `after_version`, oldest first, with the `add` actions of new data it
    holds (empty when the table does not exist yet)."""
    return [(v, data_adds(table_path, v)) for v in log_versions(table_path) if v > after_version]


def new_commit_stats(table_path: str, after_version: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """`new_commits`, each with the `stats` of the files it added."""
    return [(version, [json.loads(a["stats"]) for a in adds if a.get("stats")])
            for version, adds in new_commits(table_path, after_version)]

