"""IsrThrash end to end on the run that showed the flapping: the default scenario, seed 7 (audit-2's follower on
broker 5 falls out of and back into the ISR five times between 30 s and 80 s).

Emulator -> bronze -> the alert lane (checking each row as validate does) in several micro-batches -> gold.alert_events,
scored against the ISR-thrash truth computed from bronze (pipelines/alert_truth.py). On main before the fix,
IsrThrash for audit-2 flipped between firing and resolved at every other partition's event: thousands of
pairs for one incident.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import yaml

from broker_emulator.scenario import load_scenario
from broker_emulator.simulation import Simulation
from foundation.bronze_sink import DeltaSink
from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import read_rows
from pipelines.alert_truth import score, thrash_episodes
from schemas.bronze import CLUSTER_EVENTS, RUNS, TOPIC_CONFIGS
from schemas.gold import ALERT_EVENTS
from tests.alerts.test_alerts_job import run_in_process

ROOT = Path(__file__).resolve().parents[2]


def _seed_7_bronze(lake: str, scratch: str) -> None:
    """The run's bronze tables IsrThrash reads (cluster_events, with runs and topic_configs for validation).
    Its 225k produce_rejected events, which no ISR rule reads and which dominate validation time, are left out;
    each of the emulator's flushes is appended as one commit, so validate still sees several files."""
    scenario = load_scenario(ROOT / "conf/scenarios/default.yaml").with_overrides(seed=7, duration_ms=90_000)
    Simulation(scenario, DeltaSink(scratch, "default-s7")).run()
    for td in (RUNS, TOPIC_CONFIGS, CLUSTER_EVENTS):
        rows = read_rows(td, scratch)
        if td is CLUSTER_EVENTS:
            rows = rows.filter(pc.not_equal(rows["event_type"], "produce_rejected"))
        for batch in sorted(set(rows["batch_id"].to_pylist())):
            # As the emulator lands them: bronze columns are nullable in Delta, validation checks them.
            write_with_checksum(td.path(lake), rows.filter(pc.equal(rows["batch_id"], batch)).cast(
                td.landing_schema), mode="append")


def test_isr_thrash_fires_once_per_incident_on_the_seed_7_default_run(spark: Any, tmp_path: Path) -> None:
    lake = str(tmp_path / "lakehouse")
    _seed_7_bronze(lake, str(tmp_path / "scratch"))
    raw = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    raw["rules"] = [r for r in raw["rules"] if r["name"] == "IsrThrash"]
    raw["receivers"] = []
    rules = tmp_path / "alerts.yaml"
    rules.write_text(yaml.safe_dump(raw))
    # One bronze commit a table per micro-batch: the windows are carried across batches in the engine state.
    running = run_in_process(spark, lake, str(rules))
    assert running.lane is not None and running.lane.stage.stats.batch_id >= 2, "three or more micro-batches"

    events = read_rows(ALERT_EVENTS, lake).to_pandas()
    truth = thrash_episodes(read_rows(CLUSTER_EVENTS, lake).to_pandas())
    # The only thrash of the run: audit-2's follower on broker 5, from its third drop; its window holds until after
    # the run.
    assert [(r.topic, r.partition) for r in truth.itertuples()] == [("audit", 2)], truth
    # One firing, at the incident's start, with the window's counts; nothing else fired or resolved.
    assert events[["status", "summary"]].values.tolist() == [
        ["firing", "audit-2: the replica on broker 5 left the ISR 3 times in 5 min (rejoined 2)"]]
    assert events["ts"].iloc[0] == truth["start"].iloc[0]
    summary, matches = score(truth, events)
    row = summary.set_index("cls").loc["isr_thrash"]
    assert (row["recall"], row["precision"], row["pairs_max"]) == (1.0, 1.0, 1.0)
    assert list(matches.loc[matches["cls"] == "isr_thrash", "pairs"]) == [1]
