"""Alerts scored against the emulator's ground truth, per failure class: recall, precision, detection delay.

The truth is read from bronze (partition_state and the emulator's ack ledger, which covers every record) and
cut into episodes; the alerts are the firing intervals in gold.alert_events. Pure pandas: bench/alert_quality.py
reads the tables and calls `episodes` and `score`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from pipelines.alert_signals import shape_isr_membership
from schemas.bronze import UNCLEAN_ELECTIONS, EventType
from schemas.gold import AlertStatus

CLASSES: dict[str, tuple[str, ...]] = {
    "writes_refused": ("UnderMinIsr",),
    "acked_data_lost": ("AckedRecordsLost",),
    # UncleanLeaderElection says "acknowledged records may be lost": its truth is the election itself.
    "unclean_elections": ("UncleanLeaderElection",),
    "offline_partitions": ("OfflinePartitions", "PartitionOffline"),
    "single_copy_acks": ("SingleCopyAcks",),
    "isr_thrash": ("IsrThrash",),
}
CLASS_DOCS: dict[str, str] = {
    "writes_refused": "the partition has a leader and ISR < effective min ISR: acks=all produce is refused",
    "acked_data_lost": "the ack ledger reports acknowledged records lost (one episode per partition and interval)",
    "unclean_elections": "the controller elected an out-of-sync leader (cluster_events election, cause unclean "
                         "or last_known_leader): acknowledged records may be lost",
    "offline_partitions": "the partition has no leader (leader -1): no reads, no writes",
    "single_copy_acks": "a lone in-sync leader (ISR 1, effective min ISR <= 1, RF > 1) acknowledged acks=all "
                        "records in the interval",
    "isr_thrash": "a follower keeps leaving and rejoining the ISR: one replica dropped by its leader at least 3 "
                  "times within the last 5 minutes (cluster_events; removals by the controller, when a broker "
                  "stops or is fenced, are no leave), until that stops holding",
}
THRASH_WINDOW = pd.Timedelta(minutes=5)
THRASH_MIN_LEAVES = 3
CLUSTER_SCOPED = {"OfflinePartitions", "UncleanLeaderElection"}  # their alerts carry no topic/partition label

EPISODE_COLUMNS = ["cls", "cluster", "topic", "partition", "start", "end", "records"]
INTERVAL_COLUMNS = ["rule", "cluster", "topic", "partition", "fired", "resolved", "inhibited"]
SUMMARY_COLUMNS = ["cls", "episodes", "detected", "recall", "alerts", "true_alerts", "precision",
                   "delay_p50_s", "delay_p95_s", "delay_max_s", "pairs_max", "pairs_mean"]
MATCH_COLUMNS = ["cls", "cluster", "topic", "partition", "start", "end", "detected", "delay_s", "rule", "pairs"]
_KEYS = ["run_id", "topic", "partition"]
_SAMPLE_KEYS = ["run_id", "ts", "topic", "partition"]


def _require(frame: pd.DataFrame, columns: Iterable[str], argument: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{argument}: missing column(s) {', '.join(missing)}")


def _sizes(values: pd.Series) -> pd.Series:
    return values.map(lambda v: 0 if v is None else len(v)).astype("int64")


def _runs(samples: pd.DataFrame, cond: np.ndarray, cls: str) -> pd.DataFrame:
    """Maximal runs of consecutive samples where `cond` holds; `samples` sorted by partition then ts."""
    keys = samples[_KEYS]
    new_partition = (keys != keys.shift()).any(axis=1).to_numpy()
    prev = np.concatenate([[False], cond[:-1]]) & ~new_partition
    run = np.cumsum(cond & ~prev)
    hit = samples.loc[cond, _SAMPLE_KEYS].assign(run=run[cond])
    out = hit.groupby("run", sort=False).agg(
        cluster=("run_id", "first"), topic=("topic", "first"), partition=("partition", "first"),
        start=("ts", "first"), end=("ts", "last"))
    return out.reset_index(drop=True).assign(cls=cls, records=0.0)




def episodes(partition_state: pd.DataFrame, ack_ledger: pd.DataFrame,
             cluster_events: pd.DataFrame | None = None) -> pd.DataFrame:
    """Ground-truth episodes (`CLASS_DOCS`): cls, cluster, topic, partition, start, end, records (lost, else 0).

    Without `cluster_events` there are no unclean-election episodes.
    """
    _require(partition_state, [*_SAMPLE_KEYS, "leader", "isr", "effective_min_isr", "replicas"], "partition_state")
    _require(ack_ledger, [*_SAMPLE_KEYS, "acks", "records_acked", "records_lost"], "ack_ledger")
    if cluster_events is not None:
        _require(cluster_events, [*_SAMPLE_KEYS, "event_type", "cause", "detail"], "cluster_events")
    acks_all = (ack_ledger[ack_ledger["acks"] == "all"].astype({"partition": "int64"})
                .groupby(_SAMPLE_KEYS, as_index=False)["records_acked"].sum()
                .rename(columns={"records_acked": "acks_all_acked"}))
    s = (partition_state[[*_SAMPLE_KEYS, "leader", "isr", "effective_min_isr", "replicas"]]
         .astype({"partition": "int64"})
         .sort_values([*_KEYS, "ts"], kind="stable")
         .merge(acks_all, how="left", on=_SAMPLE_KEYS)
         .reset_index(drop=True))
    isr, rf = _sizes(s["isr"]).to_numpy(), _sizes(s["replicas"]).to_numpy()
    led, min_isr = (s["leader"] >= 0).to_numpy(), s["effective_min_isr"].to_numpy()
    single = led & (isr == 1) & (min_isr <= 1) & (rf > 1) & (s["acks_all_acked"].fillna(0) > 0).to_numpy()
    parts = [_runs(s, led & (isr < min_isr), "writes_refused"), _runs(s, ~led, "offline_partitions"),
             _runs(s, single, "single_copy_acks")]
    lost = (ack_ledger.astype({"partition": "int64"})
            .groupby(_SAMPLE_KEYS, as_index=False)["records_lost"].sum())
    lost = lost[lost["records_lost"] > 0]
    parts.append(pd.DataFrame({"cls": "acked_data_lost", "cluster": lost["run_id"], "topic": lost["topic"],
                               "partition": lost["partition"], "start": lost["ts"], "end": lost["ts"],
                               "records": lost["records_lost"].astype("float64")}))
    if cluster_events is not None:
        ce = cluster_events
        unclean = ce[(ce["event_type"] == EventType.ELECTION) & ce["cause"].isin(UNCLEAN_ELECTIONS)]
        parts.append(pd.DataFrame({"cls": "unclean_elections", "cluster": unclean["run_id"],
                                   "topic": unclean["topic"], "partition": unclean["partition"],
                                   "start": unclean["ts"], "end": unclean["ts"], "records": 0.0}))
        parts.append(thrash_episodes(ce))
    out = pd.concat([p[EPISODE_COLUMNS] for p in parts if len(p)] or [parts[0][EPISODE_COLUMNS]], ignore_index=True)
    out = out.astype({"partition": "int64", "records": "float64"})
    return out.sort_values(["cls", "cluster", "topic", "partition", "start"], kind="stable", ignore_index=True)


def thrash_episodes(cluster_events: pd.DataFrame) -> pd.DataFrame:
    """ISR thrash (`CLASS_DOCS`): per partition, the spans in which one of its replicas' last 5 minutes hold at least
    three leaves (its leader dropping it from the ISR). A replica's count only changes at a leave or when one leaves
    the window, so those are the only times looked at; a span ends at the first of them where no replica of the
    partition thrashes any more."""
    moves = shape_isr_membership(cluster_events)
    moves = moves[moves["isr_leaves"] > 0]
    ts = pd.DatetimeIndex(moves["ts"])
    tz = "UTC" if ts.tz is not None else None
    moves = moves.assign(ts=(ts.tz_convert("UTC").tz_localize(None) if tz else ts).to_numpy("datetime64[ns]"))
    window = THRASH_WINDOW.to_timedelta64()
    found = []
    for (cluster, topic, partition), g in moves.groupby(_KEYS, sort=True):
        leaves = {b: np.sort(np.repeat(r["ts"].to_numpy(), r["isr_leaves"].to_numpy()))
                  for b, r in g.groupby("broker_id", sort=True)}
        times = np.unique(np.concatenate([t for ts in leaves.values() for t in (ts, ts + window)]))

        def in_window(ts: np.ndarray, at: np.ndarray) -> np.ndarray:
            return np.searchsorted(ts, at, side="right") - np.searchsorted(ts, at - window, side="right")

        holds = np.any([in_window(ts, times) >= THRASH_MIN_LEAVES for ts in leaves.values()], axis=0)
        starts = np.flatnonzero(holds & ~np.concatenate([[False], holds[:-1]]))
        for i in starts:
            stop = i + int(np.argmin(holds[i:])) if not holds[i:].all() else len(times) - 1
            found.append({"cls": "isr_thrash", "cluster": cluster, "topic": topic, "partition": int(partition),
                          "start": pd.Timestamp(times[i], tz=tz), "end": pd.Timestamp(times[stop], tz=tz),
                          "records": 0.0})
    out = pd.DataFrame(found, columns=EPISODE_COLUMNS)
    # The input's own timestamp type: the other classes' episodes and the alerts are compared with these.
    return out.astype({"start": cluster_events["ts"].dtype, "end": cluster_events["ts"].dtype,
                       "partition": "int64", "records": "float64"})


def _labels(value: Any) -> dict[str, str]:
    """A Delta map as pandas sees it: a dict, or a list of (key, value) pairs (pyarrow)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    return {k: v for k, v in value}


def firing_intervals(alert_events: pd.DataFrame) -> pd.DataFrame:
    """One row per firing transition: rule, cluster, topic, partition, fired, resolved (NaT if open), inhibited.

    Each firing is paired with the next `resolved` event of the same fingerprint (events ordered by ts, then input).
    A firing event whose `previous_status` is firing (an alert fired inhibited, delivered when its inhibitor
    resolved) continues its interval: it is not another alert.
    """
    _require(alert_events, ["status", "rule", "fingerprint", "cluster", "labels", "ts", "inhibited"], "alert_events")
    e = alert_events.reset_index(drop=True).sort_values("ts", kind="stable")
    resolved_ts = e["ts"].where(e["status"] == AlertStatus.RESOLVED)
    next_resolved = resolved_ts.groupby(e["fingerprint"]).bfill()
    firing = e["status"] == AlertStatus.FIRING
    if "previous_status" in e.columns:
        firing &= e["previous_status"] != AlertStatus.FIRING
    f, labels = e[firing], e.loc[firing, "labels"].map(_labels)
    partition = labels.map(lambda d: int(d["partition"]) if d.get("partition") is not None else None)
    out = pd.DataFrame({
        "rule": f["rule"], "cluster": f["cluster"], "topic": labels.map(lambda d: d.get("topic")),
        "partition": partition.astype(object), "fired": f["ts"], "resolved": next_resolved[firing],
        "inhibited": f["inhibited"].fillna(False).astype(bool)})
    return out.reset_index(drop=True)[INTERVAL_COLUMNS]


def _matches(eps: pd.DataFrame, alerts: pd.DataFrame, grace: pd.Timedelta) -> pd.DataFrame:
    """(episode id, alert id, fired, rule, start, rank) for every alert interval overlapping an episode's graced
    window. `rank` orders the candidates for an episode: 0 the alert overlaps the episode itself; 1 it fired within
    the grace after the episode ended (a sample after an instant event); 2 it resolved within the grace before the
    episode began, so it answered an earlier incident."""
    e = eps[["cluster", "topic", "partition", "start", "end"]].rename_axis("eid").reset_index()
    a = alerts.rename_axis("aid").reset_index()
    scoped = a["rule"].isin(CLUSTER_SCOPED)
    per_part = a[~scoped & a["topic"].notna() & a["partition"].notna()].astype({"partition": "int64"})
    pairs = pd.concat([
        e.merge(per_part, on=["cluster", "topic", "partition"]),
        e.merge(a[scoped].drop(columns=["topic", "partition"]), on="cluster"),
    ], ignore_index=True)
    if not len(pairs):
        return pd.DataFrame(columns=["eid", "aid", "fired", "rule", "start", "rank"])

    def overlapping(slack: pd.Timedelta) -> pd.Series:
        return (pairs["fired"] <= pairs["end"] + slack) & (
            pairs["resolved"].isna() | (pairs["resolved"] >= pairs["start"] - slack))

    pairs["rank"] = np.where(overlapping(pd.Timedelta(0)), 0, np.where(pairs["fired"] > pairs["end"], 1, 2))
    return pairs.loc[overlapping(grace), ["eid", "aid", "fired", "rule", "start", "rank"]]


def score(episodes: pd.DataFrame, alert_events: pd.DataFrame,
          grace_ms: int = 15_000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary per class, matches per episode): an alert of a class's rules matches an episode of the class in
    its cluster (and partition, unless the rule is cluster-scoped) when [fired, resolved or +inf] overlaps
    [start - grace, end + grace]. Inhibited alerts count: they were evaluated and recorded.

    A flapping alert is not rewarded: an alert interval is true only as the one chosen for an episode and rule
    (the earliest overlapping the episode itself, else the earliest firing within the grace after it, else the
    earliest resolved within the grace before it), so a second firing/resolved pair of a rule during one incident
    counts against precision unless it is chosen for another episode. The same order picks the alert an episode's
    delay is measured to. An instant episode (an election) is seen by the next sample, after it: two bursts of
    elections seconds apart are two alerts, each chosen for its own burst. `pairs` is, per episode, the most
    firings one rule had during it (at least 1 when detected)."""
    _require(episodes, ["cls", "cluster", "topic", "partition", "start", "end"], "episodes")
    if grace_ms < 0:
        raise ValueError(f"grace_ms: must be >= 0, got {grace_ms}")
    intervals = firing_intervals(alert_events)
    grace = pd.Timedelta(milliseconds=grace_ms)
    rows, per_episode = [], []
    for cls, rules in CLASSES.items():
        eps = episodes[episodes["cls"] == cls].reset_index(drop=True)
        alerts = intervals[intervals["rule"].isin(rules)].reset_index(drop=True)
        m = _matches(eps, alerts, grace)
        during = (m.assign(exact=m["rank"] == 0).groupby(["eid", "rule"])["exact"].sum().clip(lower=1) if len(m)
                  else pd.Series(dtype=int))
        per_rule = during.groupby(level="eid").max() if len(m) else pd.Series(dtype=int)
        chosen = m.sort_values(["eid", "rule", "rank", "fired"], kind="stable").drop_duplicates(["eid", "rule"])
        true_aids = chosen["aid"]
        first = m.sort_values(["eid", "rank", "fired", "rule"], kind="stable").drop_duplicates("eid").set_index("eid")
        delay = ((first["fired"] - first["start"]).dt.total_seconds().clip(lower=0.0)
                 if len(first) else pd.Series(dtype="float64"))
        idx = pd.RangeIndex(len(eps))
        detected = idx.isin(first.index)
        per_episode.append(eps[["cls", "cluster", "topic", "partition", "start", "end"]].assign(
            detected=detected, delay_s=delay.reindex(idx).astype("float64").to_numpy(),
            rule=first["rule"].reindex(idx).astype(object).where(detected, None).to_numpy(),
            pairs=per_rule.reindex(idx).fillna(0).astype("int64").to_numpy()))
        d = delay.to_numpy(dtype="float64")
        n_eps, n_det, n_alerts, n_true = len(eps), int(detected.sum()), len(alerts), int(true_aids.nunique())
        pairs = per_rule.to_numpy(dtype="float64")
        rows.append({
            "cls": cls, "episodes": n_eps, "detected": n_det, "recall": n_det / n_eps if n_eps else np.nan,
            "alerts": n_alerts, "true_alerts": n_true, "precision": n_true / n_alerts if n_alerts else np.nan,
            "delay_p50_s": float(np.percentile(d, 50)) if len(d) else np.nan,
            "delay_p95_s": float(np.percentile(d, 95)) if len(d) else np.nan,
            "delay_max_s": float(d.max()) if len(d) else np.nan,
            "pairs_max": float(pairs.max()) if len(pairs) else np.nan,
            "pairs_mean": float(pairs.mean()) if len(pairs) else np.nan})
    matches = pd.concat(per_episode, ignore_index=True)[MATCH_COLUMNS]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS), matches
