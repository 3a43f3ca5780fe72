"""The alert engine over one cluster's share of a micro-batch, for batches too large to collect to the driver.

The alerts job groups such a batch by cluster on the executors and hands each group, with its cluster's
slice of the engine state, to `evaluate_cluster`: the same `AlertEngine` the driver runs, on the same shaped
samples. Nothing the engine keeps spans clusters (`EngineState.by_cluster`), so the transitions of all groups,
sorted as the engine sorts them, and the new state slices put back together, are those one engine on the
driver gives for the whole batch. Pure pandas: Spark only moves the rows.

Each group returns text rows: `state` (the cluster's new state, `EngineState.to_rows` as JSON), one
`transition` per transition (its fields as JSON) and `late` (samples the engine ignored as late).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pandas as pd

from pipelines.alert_engine import AlertEngine
from pipelines.alert_rules import AlertConfig
from pipelines.alert_signals import shape_union
from pipelines.alert_state import EngineState, Transition, transition_order

OUTPUT_COLUMNS = ("run_id", "kind", "payload")
OUTPUT_SCHEMA = "run_id string, kind string, payload string"


def state_payload(state: EngineState) -> str:
    return json.dumps(state.to_rows())


def evaluate_cluster(config: AlertConfig, rows: pd.DataFrame, state: pd.DataFrame) -> pd.DataFrame:
    """One cluster's rows of the batch (the union's columns) and its state (`run_id`, `state`: at most one
    row) -> its output rows. A cluster with state but no rows in this batch returns nothing: it keeps its state."""
    if rows.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in OUTPUT_COLUMNS})
    out = step_cluster(config, str(rows["run_id"].iloc[0]), shape_union(rows),
                       state["state"].iloc[0] if len(state) else None)
    return pd.DataFrame(out, columns=list(OUTPUT_COLUMNS))


def step_cluster(config: AlertConfig, cluster: str, frames: dict[str, pd.DataFrame],
                 state: str | None) -> list[dict[str, str]]:
    """The engine's step over one cluster's shaped samples, from and to the cluster's state as text."""
    engine = AlertEngine(config, EngineState.from_rows(json.loads(state)) if state is not None else None)
    transitions = engine.step(frames)
    out = [("state", state_payload(engine.state)), ("late", str(engine.late)),
           *(("transition", json.dumps(asdict(t))) for t in transitions)]
    return [{"run_id": cluster, "kind": kind, "payload": payload} for kind, payload in out]


def gather(rows: list[dict[str, Any]]) -> tuple[list[Transition], dict[str, EngineState], int]:
    """The groups' output rows -> every transition in the engine's order, each evaluated cluster's new state,
    and the late samples."""
    transitions = [Transition(**json.loads(r["payload"])) for r in rows if r["kind"] == "transition"]
    transitions.sort(key=transition_order)
    states = {str(r["run_id"]): EngineState.from_rows(json.loads(r["payload"])) for r in rows if r["kind"] == "state"}
    late = sum(int(r["payload"]) for r in rows if r["kind"] == "late")
    return transitions, states, late
