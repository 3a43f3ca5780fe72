"""A gold job's micro-batch evaluated on the executors, one group per cluster, when it is too large to collect.

`route` picks: a live micro-batch is collected to the driver (the fast path), a catch-up above
the job's `driver_max_rows` goes to `step_per_cluster`.

The alerts and SLO jobs keep state per cluster (alert lifecycles; SLO budget windows) and nothing across
clusters, so a batch can be grouped by cluster (`run_id`) and each group stepped on its own. Spark cogroups
the batch's rows with each cluster's state (bytes the job serialised) and hands both to a pure pandas `step`
in its Python workers; only each cluster's result (bytes again: its output rows and new state) comes back to
the driver, which writes and delivers as for a batch it had collected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame

T = TypeVar("T")

# step(cluster, the cluster's rows of the batch, its state or None) -> its result
Step = Callable[[str, pd.DataFrame, bytes | None], bytes]

_RESULT_SCHEMA = "run_id string, result binary"


def step_per_cluster(batch: DataFrame, states: dict[str, bytes], step: Step) -> dict[str, bytes]:
    """Each cluster that has rows in `batch` -> what `step` returned for it. Clusters with state but no rows
    are not stepped (their state is the caller's to keep)."""
    state = batch.sparkSession.createDataFrame(sorted(states.items()), "run_id string, state binary")

    def group(rows: pd.DataFrame, saved: pd.DataFrame) -> pd.DataFrame:
        if rows.empty:
            return pd.DataFrame({"run_id": pd.Series(dtype="object"), "result": pd.Series(dtype="object")})
        cluster = str(rows["run_id"].iloc[0])
        before = bytes(saved["state"].iloc[0]) if len(saved) else None
        return pd.DataFrame({"run_id": [cluster], "result": [step(cluster, rows, before)]})

    out = batch.groupBy("run_id").cogroup(state.groupBy("run_id")).applyInPandas(group, _RESULT_SCHEMA)
    return {str(r["run_id"]): bytes(r["result"]) for r in out.collect()}


@dataclass
class Routed(Generic[T]):
    result: T
    rows: int
    on_executors: bool


def route(batch: DataFrame, driver_max_rows: int, on_driver: Callable[[pd.DataFrame], T],
          on_executors: Callable[[DataFrame], T]) -> Routed[T]:
    """A micro-batch of up to `driver_max_rows` rows collected and handed to `on_driver`; a larger one handed,
    uncollected, to `on_executors`. Cached while it is counted and used, so the source is read once; on disk
    only, as validate caches its batch (a 10M-row catch-up cached in memory ran an executor out of heap)."""
    batch = batch.persist(StorageLevel.DISK_ONLY)
    try:
        rows = batch.count()
        if rows > driver_max_rows:
            return Routed(on_executors(batch), rows, True)
        return Routed(on_driver(batch.toPandas()), rows, False)
    finally:
        batch.unpersist()
