"""Spark's phases of the pipeline's micro-batches, and the jobs' own steps inside them, from `pipeline run
--progress-log` (jobs/progress_log.py): where a live batch's time goes, printed by the benches that run the pipeline
live."""

from __future__ import annotations

import statistics
from datetime import datetime
from typing import Any

from bench.percentiles import percentile

PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


def breakdown(progress: list[dict[str, Any]], since_wall: float) -> None:
    """Spark's phases of the measured micro-batches that read rows, per query (jobs/progress_log.py):
    addBatch is the foreachBatch body (validate: its steps below; alerts: collect, the rules on gold tables,
    hand-over to the webhook lanes, gold commits)."""
    print("\n  isrwatch's micro-batches that read rows, Spark's phases in ms (p50 / p95):")
    # The lane's batches read their rows themselves (Spark sees none): its steps line says how many.
    read = {(p["name"], p["batchId"]): p["rows"] for p in progress if "steps" in p and p.get("rows", 0) > 0}
    for name in ("alert_lane", "validate", "alerts"):
        batches = [p for p in progress if p["name"] == name and "durationMs" in p
                   and (p.get("numInputRows", 0) > 0 or (name, p["batchId"]) in read)
                   and datetime.fromisoformat(p["timestamp"]).timestamp() >= since_wall]
        if not batches:
            continue
        cells = []
        for phase in PHASES:
            values = [float(p["durationMs"].get(phase, 0)) for p in batches]
            cells.append(f"{phase} {statistics.median(values):.0f} / {percentile(values, 95):.0f}")
        rows = [p.get("numInputRows", 0) or read[(name, p["batchId"])] for p in batches]
        print(f"  {name:<10} {len(batches)} batches, {statistics.median(rows):.0f} rows (p50): " + ", ".join(cells))
    # the jobs' own steps inside addBatch, for the same batches (the steps lines carry no timestamp: by batch id)
    for name in ("alert_lane", "validate"):
        measured = {p["batchId"] for p in progress if p["name"] == name and "durationMs" in p
                    and datetime.fromisoformat(p["timestamp"]).timestamp() >= since_wall}
        steps = [p["steps"] for p in progress if "steps" in p and p["name"] == name and p["batchId"] in measured]
        if steps:
            names = list(dict.fromkeys(n for s in steps for n in s))
            # each step over the batches that took it (the lane records its batch 0 before it ends, the rest behind)
            took = {n: [1000 * s[n] for s in steps if n in s] for n in names}
            cells = [f"{n} {statistics.median(took[n]):.0f} / {percentile(took[n], 95):.0f}"
                     + (f" ({len(took[n])} batches)" if len(took[n]) < len(steps) else "") for n in names]
            print(f"  {name}'s addBatch, its own steps in ms (p50 / p95): " + ", ".join(cells))
