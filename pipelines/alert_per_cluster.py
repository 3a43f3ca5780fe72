"""The alert engine over one cluster's share of a micro-batch, for batches too large to collect to the driver.

The alerts job groups such a batch by cluster on the executors (jobs/per_cluster.py) and hands each group,
with its cluster's slice of the engine state, to `step_cluster`: the same `AlertEngine` the driver runs, on
the same shaped samples. Nothing the engine keeps spans clusters (`EngineState.by_cluster`), so the
transitions of all groups, sorted as the engine sorts them, and the new state slices put back together, are
those one engine on the driver gives for the whole batch. Pure pandas: Spark only moves the rows.

State and result cross between driver and executors as JSON: the state as `EngineState.to_rows` (what
gold.alerts_engine_state stores), the result as that plus the transitions' fields and the late samples.
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd

from pipelines.alert_engine import AlertEngine
from pipelines.alert_rules import AlertConfig
from pipelines.alert_signals import shape_union
from pipelines.alert_state import EngineState, Transition, transition_order
from schemas.gold import AlertStatus


def state_bytes(state: EngineState) -> bytes:
    return json.dumps(state.to_rows()).encode()


def evaluate_cluster(config: AlertConfig, cluster: str, rows: pd.DataFrame, state: bytes | None) -> bytes:
    """One cluster's rows of the alerts job's union (tagged with `_source`) and its state -> its result (a
    `jobs.per_cluster.Step`: the cluster is the group's key, and every row says it too)."""
    return step_cluster(config, shape_union(rows), state)


def step_cluster(config: AlertConfig, frames: dict[str, pd.DataFrame], state: bytes | None) -> bytes:
    """The engine's step over one cluster's shaped samples, from and to the cluster's state as bytes."""
    engine = AlertEngine(config, EngineState.from_rows(json.loads(state)) if state is not None else None)
    transitions = engine.step(frames)
    return json.dumps({"state": engine.state.to_rows(), "late": engine.late,
                       "transitions": [asdict(t) for t in transitions]}).encode()


def gather(results: dict[str, bytes]) -> tuple[list[Transition], dict[str, EngineState], int]:
    """Each stepped cluster's result -> every transition in the engine's order, each cluster's new state, and
    the late samples."""
    decoded = {c: json.loads(r) for c, r in results.items()}
    transitions = sorted((Transition(**{**t, "status": AlertStatus(t["status"]),
                                        "previous": AlertStatus(t["previous"])})
                          for d in decoded.values() for t in d["transitions"]), key=transition_order)
    states = {c: EngineState.from_rows(d["state"]) for c, d in sorted(decoded.items())}
    return transitions, states, sum(int(d["late"]) for d in decoded.values())
