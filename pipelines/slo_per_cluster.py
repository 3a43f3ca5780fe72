"""The SLO arithmetic over one cluster's share of a micro-batch, for batches too large to collect to the driver.

The SLO job groups such a batch by cluster on the executors (jobs/per_cluster.py) and hands each group, with
that cluster's budget series, to `evaluate_cluster`: `evaluate_batch` over the cluster's rows alone. A series
belongs to one SLO in one cluster and a cluster's clock is its own partition_state, so the groups' timeslices
and statuses, put in `evaluate_batch`'s order (SLO by SLO, clusters sorted), are those of one call over the
whole batch. State and result cross as pickles between processes of one application (same code, same trust).
"""

from __future__ import annotations

import pickle

import pandas as pd

from pipelines.slo_math import BudgetSeries, SeriesKey, evaluate_batch, with_epoch_ms
from pipelines.slo_spec import Slo

Frames = list[pd.DataFrame]


def series_by_cluster(series: dict[SeriesKey, BudgetSeries]) -> dict[str, bytes]:
    """The job's series, a pickle per cluster."""
    parts: dict[str, dict[SeriesKey, BudgetSeries]] = {}
    for key in sorted(series):
        parts.setdefault(key[1], {})[key] = series[key]
    return {cluster: pickle.dumps(part) for cluster, part in parts.items()}


def evaluate_cluster(slos: tuple[Slo, ...], batch_id: int, cluster: str, rows: pd.DataFrame,
                     state: bytes | None) -> bytes:
    """One cluster's rows of the SLO job's union (tagged with `_source`, `ts` a timestamp) and its series ->
    (timeslice frames, status frames, the cluster's series), pickled."""
    series: dict[SeriesKey, BudgetSeries] = pickle.loads(state) if state is not None else {}
    slices, status = evaluate_batch(slos, series, with_epoch_ms(rows), batch_id)
    return pickle.dumps((slices, status, series))


def gather(slos: tuple[Slo, ...], results: dict[str, bytes],
           series: dict[SeriesKey, BudgetSeries]) -> tuple[Frames, Frames]:
    """Each stepped cluster's result -> timeslice and status frames in `evaluate_batch`'s order; `series`
    takes the clusters' new series."""
    order = {s.name: i for i, s in enumerate(slos)}
    slices: list[tuple[int, str, pd.DataFrame]] = []
    status: list[tuple[int, str, pd.DataFrame]] = []
    for cluster in sorted(results):
        cluster_slices, cluster_status, cluster_series = pickle.loads(results[cluster])
        series.update(cluster_series)
        slices += [(order[f["slo"].iloc[0]], cluster, f) for f in cluster_slices]
        status += [(order[f["slo"].iloc[0]], cluster, f) for f in cluster_status]
    return ([f for _, _, f in sorted(slices, key=lambda x: x[:2])],
            [f for _, _, f in sorted(status, key=lambda x: x[:2])])
