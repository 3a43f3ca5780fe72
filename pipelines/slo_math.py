"""SLO arithmetic: timeslices from silver rows, rolling windows, error budget and burn rates.

A timeslice is one metric interval of one cluster for one SLO: `bad` and `total` events in it
(partition-intervals for the availability SLIs; for acked durability, records lost and records
acknowledged: a loss is found after the acknowledgement, often in an interval with no acks of its own,
so `bad` is not a subset of the same interval's `total`). Everything else is a ratio of sums over a
trailing event-time window (t - W, t]:

    error ratio  = bad / total, at most 1          (0 when nothing happened; 1 for a loss with no acks)
    burn rate    = error ratio / (1 - objective)   (1.0 spends the budget exactly over the SLO window)
    budget left  = 1 - error ratio over the SLO window / (1 - objective)   (negative once overspent)

`BudgetSeries` keeps the last `EXACT_HORIZON_MS` of timeslices exactly (every burn window up to 6 h is
exact) and older ones summed per minute, so a 28-day window costs ~40k numbers per SLO and cluster
instead of millions. Pure pandas/numpy: the SLO job feeds it, tests feed it hand-built slices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from pipelines.slo_spec import BURN_WINDOWS, BurnCondition, Slo

SeriesKey = tuple[str, str]   # (SLO name, cluster)

EXACT_HORIZON_MS = BURN_WINDOWS["6h"]
BUCKET_MS = 60_000
SLICE_COLUMNS = ["run_id", "ts", "bad", "total"]
_EPOCH = pd.Timestamp(0, tz="UTC")


def epoch_ms(ts: pd.Series) -> pd.Series:
    return (pd.to_datetime(ts, utc=True) - _EPOCH) // pd.Timedelta(milliseconds=1)


def with_epoch_ms(rows: pd.DataFrame) -> pd.DataFrame:
    """Silver rows with `ts` in epoch ms, as `evaluate_batch` takes them."""
    return rows.assign(ts=epoch_ms(rows["ts"]))


def timeslices(slo: Slo, rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run_id, ts): the SLO's bad and total events, from silver partition_state or ack_ledger rows.

    `rows` for partition_state needs leader, isr_size, effective_min_isr (pipelines/alert_signals shape);
    for ack_ledger the silver columns acks, records_acked, records_lost. `ts` is epoch milliseconds.
    """
    if not len(rows):
        return pd.DataFrame({c: pd.Series(dtype="int64" if c == "ts" else "float64") for c in SLICE_COLUMNS})
    r = rows[rows["topic"].map(slo.covers)]
    if slo.sli == "acked_durability":
        r = r[r["acks"].isin(slo.acks)]
        bad, total = r["records_lost"].astype("float64"), r["records_acked"].astype("float64")
    else:
        leader = r["leader"] >= 0
        if slo.sli == "write_availability":
            bad, total = ~(leader & (r["isr_size"] >= r["effective_min_isr"])), pd.Series(True, index=r.index)
        elif slo.sli == "read_availability":
            bad, total = ~leader, pd.Series(True, index=r.index)
        else:  # multi_copy_acks: only time with a leader counts; a single-copy ISR accepting acks=all is bad
            bad, total = leader & (r["isr_size"] <= 1) & (r["effective_min_isr"] <= 1), leader
        bad, total = bad.astype("float64"), total.astype("float64")
    out = pd.DataFrame({"run_id": r["run_id"].astype(str), "ts": r["ts"].astype("int64"),
                        "bad": bad, "total": total})
    return out.groupby(["run_id", "ts"], as_index=False, sort=True)[["bad", "total"]].sum()


@dataclass
class BudgetSeries:
    """One SLO in one cluster: exact recent timeslices plus per-minute sums of older ones."""

    exact: list[tuple[int, float, float]] = field(default_factory=list)       # ascending ts
    buckets: dict[int, list[float]] = field(default_factory=dict)             # minute -> [last ts, bad, total]

    def add(self, slices: pd.DataFrame) -> None:
        """Take timeslices (ts, bad, total) without computing anything, e.g. when restoring from gold."""
        new = [(int(t), float(b), float(n)) for t, b, n in zip(slices["ts"], slices["bad"], slices["total"],
                                                                strict=True)]
        self.exact = sorted(self.exact + new, key=lambda s: s[0])

    def evaluate(self, slo: Slo, slices: pd.DataFrame, at: np.ndarray | None = None) -> pd.DataFrame:
        """Add timeslices, then return the window sums and burn rates at each time of `at` (default: the
        slices' own times). The SLO job passes every time the cluster reported, so a sparse SLI (acks happen
        now and then) still gets a status per interval and its windows slide on while nothing happens."""
        self.add(slices)
        points = np.unique(slices["ts"].to_numpy(dtype=np.int64) if at is None else np.asarray(at, dtype=np.int64))
        ts, bad, total = self._series()
        cum_bad = np.concatenate([[0.0], np.cumsum(bad)])
        cum_total = np.concatenate([[0.0], np.cumsum(total)])
        hi = np.searchsorted(ts, points, side="right")

        def sums(window_ms: int) -> tuple[np.ndarray, np.ndarray]:
            lo = np.searchsorted(ts, points - window_ms, side="right")
            return cum_bad[hi] - cum_bad[lo], cum_total[hi] - cum_total[lo]

        budget = 1.0 - slo.objective
        out = pd.DataFrame({"ts": points})
        b, n = sums(slo.window_ms)
        out["bad_window"], out["total_window"] = b, n
        out["sli_value"] = 1.0 - error_ratio(b, n)
        out["error_budget_remaining"] = 1.0 - error_ratio(b, n) / budget
        for name, w in BURN_WINDOWS.items():
            out[f"burn_rate_{name}"] = error_ratio(*sums(w)) / budget
        out["page"] = breached(out, slo.page)
        out["ticket"] = breached(out, slo.ticket)
        self._age(int(points.max()) if len(points) else None, slo.window_ms)
        return out

    def _series(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        old = sorted(self.buckets.values(), key=lambda b: b[0])
        rows = [(int(b[0]), b[1], b[2]) for b in old] + self.exact
        arr = np.array(rows, dtype=np.float64).reshape(-1, 3)
        order = np.argsort(arr[:, 0], kind="stable")
        arr = arr[order]
        return arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2]

    def _age(self, latest: int | None, window_ms: int) -> None:
        """Fold slices older than the exact horizon into minute buckets; drop what left every window."""
        if latest is None:
            return
        horizon = latest - EXACT_HORIZON_MS
        keep = []
        for t, bad, n in self.exact:
            if t > horizon:
                keep.append((t, bad, n))
                continue
            b = self.buckets.setdefault(t // BUCKET_MS, [t, 0.0, 0.0])
            b[0], b[1], b[2] = max(b[0], t), b[1] + bad, b[2] + n
        self.exact = keep
        oldest = latest - max(window_ms, max(BURN_WINDOWS.values()))
        for key in [k for k, b in self.buckets.items() if b[0] <= oldest]:
            del self.buckets[key]


def error_ratio(bad: np.ndarray, total: np.ndarray) -> np.ndarray:
    """bad / total capped at 1; 0 when nothing happened, 1 when something bad happened with no events."""
    ratio = np.where(total > 0, bad / np.where(total > 0, total, 1), np.where(bad > 0, 1.0, 0.0))
    return np.clip(ratio, 0.0, 1.0)


def breached(status: pd.DataFrame, conditions: tuple[BurnCondition, ...]) -> np.ndarray:
    """Multi-window: a condition holds when both its long and its short window burn faster than the factor."""
    fired = np.zeros(len(status), dtype=bool)
    for c in conditions:
        fired |= ((status[f"burn_rate_{c.long}"] > c.factor) & (status[f"burn_rate_{c.short}"] > c.factor)).to_numpy()
    return fired


def evaluate_batch(slos: tuple[Slo, ...], series: dict[SeriesKey, BudgetSeries], rows: pd.DataFrame,
                   batch_id: int) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """One micro-batch of silver rows (tagged with `_source`, `ts` in epoch ms) -> timeslice and status frames.

    Every SLO gets a status at every interval its cluster reported, even without events of its own:
    partition_state is the clock when an SLO reads it (every partition reports every interval; the ack
    ledger is sparse). Slices of a cluster with no clock in this batch are still counted and stored, and
    show in the statuses of the next batch that has one.
    """
    uses_partition_state = any(s.source == "partition_state" for s in slos)
    clock = rows[rows["_source"] == "partition_state"] if uses_partition_state else rows
    reported = {str(c): g.unique() for c, g in clock.groupby("run_id", sort=True)["ts"]}
    slices_out, status_out = [], []
    for slo in slos:
        slices = timeslices(slo, rows[rows["_source"] == slo.source])
        by_cluster = {str(c): g for c, g in slices.groupby("run_id", sort=True)}
        for cluster in sorted(set(reported) | set(by_cluster)):
            group = by_cluster.get(cluster, slices.iloc[:0])
            points = reported.get(cluster, np.array([], dtype=np.int64))
            status = series.setdefault((slo.name, cluster), BudgetSeries()).evaluate(slo, group, at=points)
            common = {"slo": slo.name, "cluster": cluster, "sli": slo.sli, "slo_batch_id": batch_id}
            if len(group):
                slices_out.append(group.drop(columns="run_id").assign(**common))
            if len(status):
                status_out.append(status.assign(**common, objective=slo.objective, window=slo.window))
    return slices_out, status_out
