"""The fidelity bench's measures: one set of numbers from a bronze run, emulated or collected, by the same code.

Times are seconds from the fault (or from its heal); every measure reads the bronze tables both writers fill
(`partition_state`, `broker_metrics`, `cluster_events`), so a difference in a row is a difference between the
emulator and Kafka, not between two ways of counting.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pandas as pd

from foundation.delta_io import read_rows
from schemas.bronze import BROKER_METRICS, CLUSTER_EVENTS, PARTITION_STATE

GAUGES = ("UnderReplicatedPartitions", "UnderMinIsrPartitionCount", "OfflinePartitionsCount")
METERS = ("IsrShrinksPerSec", "IsrExpandsPerSec", "FailedIsrUpdatesPerSec")


@dataclass(frozen=True)
class Window:
    """When the fault began and when it was healed (UTC epoch ms), and on which brokers."""

    brokers: tuple[int, ...]
    fault_ms: int
    heal_ms: int


def of_run(lake: str, run_id: str) -> dict[str, pd.DataFrame]:
    out = {}
    for table in (PARTITION_STATE, BROKER_METRICS, CLUSTER_EVENTS):
        frame = read_rows(table, lake).to_pandas()
        frame = frame[frame["run_id"] == run_id].copy()
        frame["ms"] = (frame["ts"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
        out[table.name] = frame
    return out


def measure(lake: str, run_id: str, window: Window, min_isr: int) -> dict[str, Any]:
    tables = of_run(lake, run_id)
    state, metrics, events = tables["partition_state"], tables["broker_metrics"], tables["cluster_events"]
    if state.empty:
        raise ValueError(f"no partition_state rows for run {run_id} in {lake}")
    out: dict[str, Any] = {
        "fence_s": _fence_s(events, state, window),
        "shrink_s": _shrink_s(state, window),
        "rejoin_s": _rejoin_s(state, window),
        "unfenced_s": _unfenced_s(events, window),
        "leader_changes": _leader_changes(state),
        "isr_joins": _isr_joins(state, window),
        "hw_advance_under_min_isr": _hw_under_min_isr(state, min_isr),
    }
    during = metrics[(metrics["ms"] >= window.fault_ms) & (metrics["ms"] <= window.heal_ms)]
    for gauge in GAUGES:
        rows = during[(during["name"] == gauge) & (during["broker_id"] < 1000)]   # brokers, not the controller
        out[f"max {gauge}"] = {int(b): int(v) for b, v in rows.groupby("broker_id")["value"].max().items()}
    for meter in METERS:
        out[meter] = _meter_total(metrics, metrics["name"] == meter)
    errors = metrics[metrics["name"] == "ErrorsPerSec"]
    out["ErrorsPerSec"] = {mbean.rsplit("error=", 1)[1]: total for mbean in sorted(set(errors["mbean"]))
                           if (total := _meter_total(errors, errors["mbean"] == mbean))}
    return out


def sample_ms(lake: str, run_id: str) -> float:
    """How often a run's partition state was read: the median gap between its snapshots, in ms."""
    state = of_run(lake, run_id)["partition_state"]
    return float(pd.Series(sorted(set(state["ms"]))).diff().median())


def _fence_s(events: pd.DataFrame, state: pd.DataFrame, w: Window) -> float | None:
    """From the fault to the first state snapshot at or after a faulted broker's fencing. The collector sees a
    fencing only when it next reads the cluster, and stamps it then; the emulator knows the instant, so its
    fencing is read on its own snapshot grid (which the bench sets to the collector's cadence) to be seen alike."""
    fenced = events[(events["event_type"] == "fenced") & events["broker_id"].isin(w.brokers)
                    & (events["ms"] >= w.fault_ms)]
    if fenced.empty:
        return None
    at = int(fenced["ms"].min())
    later = state.loc[state["ms"] >= at, "ms"]
    return ((int(later.min()) if not later.empty else at) - w.fault_ms) / 1000


def _shrink_s(state: pd.DataFrame, w: Window) -> float | None:
    """From the fault to the first snapshot where a faulted broker is out of the ISR of a partition it holds."""
    after = state[state["ms"] >= w.fault_ms]
    out_of_isr = after.apply(lambda r: any(b in list(r["replicas"]) and b not in list(r["isr"])
                                           for b in w.brokers), axis=1)
    hit = after[out_of_isr]
    return None if hit.empty else (int(hit["ms"].min()) - w.fault_ms) / 1000


def _unfenced_s(events: pd.DataFrame, w: Window) -> float | None:
    """From the heal to the event in which the last faulted broker is unfenced again (the real cluster: it is
    back in the brokers' metadata; a restarted one has started, recovered its logs and registered first)."""
    after = events[(events["event_type"] == "unfenced") & (events["ms"] >= w.heal_ms)]
    firsts = [after.loc[after["broker_id"] == b, "ms"].min() for b in w.brokers]
    return None if any(pd.isna(f) for f in firsts) else (int(max(firsts)) - w.heal_ms) / 1000


def _rejoin_s(state: pd.DataFrame, w: Window) -> float | None:
    """From the heal to the first snapshot in which every partition's ISR holds all its replicas."""
    after = state[state["ms"] >= w.heal_ms]
    whole = after.assign(whole=after.apply(lambda r: set(r["isr"]) == set(r["replicas"]), axis=1))
    for ms, snapshot in whole.groupby("ms"):
        if snapshot["whole"].all():
            return (int(ms) - w.heal_ms) / 1000
    return None


def _leader_changes(state: pd.DataFrame) -> int:
    changes = 0
    for _, rows in state.sort_values("ms").groupby(["topic", "partition"]):
        leaders = rows["leader"].tolist()
        changes += sum(1 for a, b in itertools.pairwise(leaders) if a != b)
    return changes


def _isr_joins(state: pd.DataFrame, w: Window) -> int:
    """Replicas of the faulted brokers that were out of an ISR during the fault and back in it after the heal: the
    expansions a leader may count. (Counted per replica, not from one snapshot to the next: a snapshot read from
    a resumed broker's stale metadata can show a leader or an ISR that has already changed.)"""
    during = state[(state["ms"] >= w.fault_ms) & (state["ms"] < w.heal_ms)]
    last = state[state["ms"] >= w.heal_ms]
    out: set[tuple[str, int, int]] = set()
    for topic, partition, isr, replicas in zip(during["topic"], during["partition"], during["isr"],
                                               during["replicas"], strict=True):
        out.update((topic, int(partition), b) for b in w.brokers if b in list(replicas) and b not in list(isr))
    back = {(topic, int(partition), b) for topic, partition, isr in zip(last["topic"], last["partition"],
                                                                          last["isr"], strict=True)
            for b in list(isr)}
    return len(out & back)


def _hw_under_min_isr(state: pd.DataFrame, min_isr: int) -> int:
    """Records the HW moved past while the ISR stayed below min ISR (Kafka 4 with ELR: none)."""
    moved = 0
    for _, rows in state.sort_values("ms").groupby(["topic", "partition"]):
        prev = None
        for isr, hw, leader in zip(rows["isr"], rows["high_watermark"], rows["leader"], strict=True):
            under = len(isr) < min_isr
            if prev is not None and under and prev[0] and prev[2] == leader and hw > prev[1]:
                moved += int(hw - prev[1])
            prev = (under, hw, leader)
    return moved


def _meter_total(metrics: pd.DataFrame, which: pd.Series) -> int:
    """Events counted over the run, summed over brokers: per broker process, the last count less the first
    (or the last count, for a process that started during the run: its meters start at zero)."""
    rows = metrics[which]
    if rows.empty:
        return 0
    run_start = int(metrics["ms"].min())
    total = 0
    for (_b, _mbean, started), r in rows.groupby(["broker_id", "mbean", "process_start_ts"]):
        counts = r.sort_values("ms")["count"]
        began_during = pd.Timestamp(started).value // 1_000_000 > run_start
        total += int(counts.iloc[-1]) - (0 if began_during else int(counts.iloc[0]))
    return total
