"""The current metrics coverage of each node: the newest silver.metrics_coverage row per node and cluster.

A bronze writer records a node's coverage at the start and whenever it changes (collector/metrics_coverage.py), so
the newest row is the node's coverage now and its `ts` when that began. The table stays small: remembered until
its next version.
"""

from __future__ import annotations

from typing import Any

from lakehouse_read.jsonable import rows
from lakehouse_read.reader import LakehouseReader, UnknownTable

METRICS_COVERAGE = "silver.metrics_coverage"


def metrics_coverage(reader: LakehouseReader) -> list[dict[str, Any]]:
    """Per cluster and node (a collector's metrics URL, or an emulator's node id): its newest row, as `cluster`,
    `node_id`, `metrics_url`, `role`, `reporting`, `reason`, `exporter_rules`, `metrics_found`, `metrics_expected`,
    `missing`, `rules_blind` and `since` (that row's ts); sorted by cluster, then role, node id and URL."""
    def build(r: LakehouseReader) -> list[dict[str, Any]]:
        newest: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in rows(r.read(METRICS_COVERAGE).sort_by([("ts", "ascending"), ("batch_id", "ascending")])):
            # A collector's URL is one node whether or not its id is known yet; the emulator's nodes have no URL.
            node = (row["run_id"], row["metrics_url"], row["node_id"] if row["metrics_url"] is None else None)
            newest[node] = row
        items = [{"cluster": row["run_id"], "node_id": row["node_id"], "metrics_url": row["metrics_url"],
                  "role": row["role"], "reporting": row["reporting"], "reason": row["reason"],
                  "exporter_rules": row["exporter_rules"], "metrics_found": row["metrics_found"],
                  "metrics_expected": row["metrics_expected"], "missing": row["missing"],
                  "rules_blind": row["rules_blind"], "since": row["ts"]} for row in newest.values()]
        return sorted(items, key=lambda i: (i["cluster"], i["role"], i["node_id"] is None, i["node_id"] or 0,
                                            i["metrics_url"] or ""))
    try:
        return reader.derive(METRICS_COVERAGE, "newest_by_node", build)
    except UnknownTable:
        return []
