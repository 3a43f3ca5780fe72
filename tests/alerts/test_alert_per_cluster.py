"""The engine run cluster by cluster (as the alerts job runs it on the executors for a large batch) gives the
transitions and state of one engine over every cluster at once: the same samples, batch after batch, through
the per-cluster path's round trip through bytes (pipelines/alert_per_cluster.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict

import pandas as pd
import pytest

from pipelines.alert_engine import AlertEngine
from pipelines.alert_per_cluster import gather, state_bytes, step_cluster
from pipelines.alert_rules import AlertConfigError, parse_alert_config
from pipelines.alert_state import EngineState, Transition
from tests.alerts.test_engine import CONFIG, at, controller, partitions


def events(cluster: str, s: float, leaves: int, rejoins: int) -> pd.DataFrame:
    """isr_membership samples: broker 3's replica of t-0 dropped from (or rejoining) the ISR."""
    return pd.DataFrame([{"run_id": cluster, "ts": at(s), "topic": "t", "partition": 0, "broker_id": 3,
                          "isr_leaves": leaves, "isr_rejoins": rejoins, "isr_removed_by_controller": 0}])


def second(s: int) -> dict[str, pd.DataFrame]:
    """Three clusters' samples at second `s`:
    - c1: partition 0 under min ISR from 5 s to 20 s (UnderMinIsr inhibits AtMinIsr), under-replicated again
      from 30 s to 70 s, its HW moving (hw_advance) with a lone leader and min ISR 1 from 40 s (SingleCopyAcks);
    - c2: partition 1 under min ISR every other second from 10 s (flap detection), partition 2 offline from 12 s
      to 18 s with the controller counting it (OfflinePartitions inhibits PartitionOffline), and silent
      (no sample at all) from 50 s to 60 s;
    - c3: broker 2 silent from 5 s to 30 s (BrokerNotReporting) and broker 3's replica of partition 0 dropped
      from the ISR and rejoining every 20 s (IsrThrash, a windowed rule)."""
    c1 = partitions(s, {0: 1 if 5 <= s < 20 else 2 if 30 <= s < 70 else 3}, hw=s * 10,
                    min_isr=1 if s >= 40 else 2, n=2).assign(run_id="c1")
    if s >= 40:
        c1.loc[c1["partition"] == 0, "isr_size"] = 1
    frames = {"partition_state": [c1], "broker_metrics": [controller(s).assign(run_id="c1")], "isr_membership": []}
    if not 50 <= s < 60:
        offline = 12 <= s < 18
        frames["partition_state"].append(
            partitions(s, {1: 1 if s >= 10 and s % 2 else 3, 2: 0 if offline else 3},
                       leader={2: -1} if offline else None).assign(run_id="c2"))
        frames["broker_metrics"].append(controller(s, OfflinePartitionsCount=1.0 if offline else 0.0)
                                        .assign(run_id="c2"))
    c3 = controller(s).assign(run_id="c3")
    frames["broker_metrics"].append(c3[c3["broker_id"] != 2] if 5 <= s < 30 else c3)
    if s % 20 == 0:
        frames["isr_membership"].append(events("c3", s, 1, 0))
    elif s % 20 == 10:
        frames["isr_membership"].append(events("c3", s, 0, 1))
    return {name: pd.concat(parts, ignore_index=True) for name, parts in frames.items() if parts}


def batches() -> list[dict[str, pd.DataFrame]]:
    """90 seconds in micro-batches of 1 to 7 seconds."""
    out, s, size = [], 0, 1
    while s < 90:
        seconds = [second(t) for t in range(s, min(s + size, 90))]
        out.append({name: pd.concat([b[name] for b in seconds if name in b], ignore_index=True)
                    for name in sorted({n for b in seconds for n in b})})
        s, size = s + size, size % 7 + 1
    return out


def per_cluster(state: EngineState, frames: dict[str, pd.DataFrame]) -> tuple[list[Transition], EngineState, int]:
    """What the job's executor route does with one batch, less Spark: split the state and the samples per
    cluster, step each cluster from and to bytes, gather."""
    parts = state.by_cluster()
    clusters = sorted({str(c) for f in frames.values() for c in f["run_id"]})
    results = {}
    for c in clusters:
        mine = {name: f[f["run_id"] == c].reset_index(drop=True) for name, f in frames.items()}
        results[c] = step_cluster(CONFIG, {n: f for n, f in mine.items() if len(f)},
                                  state_bytes(parts[c]) if c in parts else None)
    transitions, states, late = gather(results)
    return transitions, EngineState.joined({**parts, **states}.values()), late


def test_per_cluster_evaluation_equals_one_engine_over_all_clusters() -> None:
    whole = AlertEngine(CONFIG)
    split, split_late = EngineState(), 0
    expected: list[Transition] = []
    got: list[Transition] = []
    for frames in batches():
        expected += whole.step(frames)
        transitions, split, late = per_cluster(split, frames)
        got += transitions
        split_late += late
        assert split.to_rows() == whole.state.to_rows()
    assert [asdict(t) for t in got] == [asdict(t) for t in expected]
    assert split_late == whole.late
    fired = Counter((t.cluster, t.rule) for t in expected if t.status == "firing")
    for key in [("c1", "UnderMinIsr"), ("c1", "SingleCopyAcks"), ("c2", "OfflinePartitions"),
                ("c2", "PartitionOffline"), ("c3", "BrokerNotReporting"), ("c3", "IsrThrash")]:
        assert fired[key] >= 1, (key, fired)
    assert [a.rule for a in whole.state.alerts.values() if a.flapping] == ["UnderMinIsr"], "c2's partition 1 flaps"
    assert any(t.inhibited for t in expected if t.rule == "PartitionOffline")
    assert not [t for t in expected if t.cluster == "c3" and t.rule == "UnderMinIsr"]


def test_the_state_splits_by_cluster_and_joins_back_as_it_was() -> None:
    engine = AlertEngine(CONFIG)
    for frames in batches()[:12]:
        engine.step(frames)
    parts = engine.state.by_cluster()
    assert sorted(parts) == ["c1", "c2", "c3"]
    assert all(a.cluster == c for c, p in parts.items() for a in p.alerts.values())
    assert EngineState.joined(parts.values()).to_rows() == engine.state.to_rows()
    # One part joins to itself; replacing one cluster's part keeps the others' entries untouched.
    assert EngineState.joined([parts["c2"]]).to_rows() == parts["c2"].to_rows()
    kept = EngineState.joined({**parts, "c1": EngineState()}.values())
    assert not [a for a in kept.alerts.values() if a.cluster == "c1"]
    assert kept.by_cluster()["c2"].to_rows() == parts["c2"].to_rows()


def test_an_inhibition_across_clusters_is_refused() -> None:
    raw = {"rules": [{"name": "A", "source": "partition_state", "scope": "partition", "when": "offline",
                      "severity": "critical"},
                     {"name": "B", "source": "partition_state", "scope": "partition", "when": "isr_size < 2",
                      "severity": "warning",
                      "inhibited_by": [{"rule": "A", "equal": ["topic", "partition"]}]}]}
    with pytest.raises(AlertConfigError, match="rule 'B': inhibited_by 'A': equal must include 'cluster'"):
        parse_alert_config(raw, "alerts.yaml")
