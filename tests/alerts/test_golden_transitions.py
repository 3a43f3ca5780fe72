"""The alert lane's transitions on the shipped scenarios equal those of the evaluator it replaced.

tests/alerts/golden/transitions.json holds the transitions (cluster, rule, fingerprint, status, event time, value) of
gold.alert_events that isrwatch 0d38079 gave with validate evaluating the rules on silver tables, on the shipped
scenarios at seed 1 (all but `default` and `healthy-baseline`, whose 3-minute emulations cost the suite 50 s and
fire no rule the others do not), and the BrokerRestarting transitions of their controlled shutdowns since that rule
came. The lane, the one evaluator of those rules now, must give exactly them. A change that means to alter them
regenerates the file and says why in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker_emulator.scenario import load_scenario
from broker_emulator.simulation import Simulation
from foundation.bronze_sink import DeltaSink
from foundation.delta_io import read_rows
from foundation.settings import load_settings
from schemas.gold import ALERT_EVENTS
from tests.alerts.lane_runs import lane_to_the_end

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("golden") / "transitions.json"
LEFT_OUT = ("default", "healthy-baseline")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> str:
    lake = str(tmp_path_factory.mktemp("golden") / "lakehouse")
    for path in sorted((ROOT / "conf/scenarios").glob("*.yaml")):
        if path.stem not in LEFT_OUT:
            Simulation(load_scenario(path).with_overrides(seed=1), DeltaSink(lake, f"{path.stem}-s1")).run()
    return lake


def test_the_lane_gives_the_golden_transitions_on_the_shipped_scenarios(emulated: str, spark: Any) -> None:
    settings = load_settings(overrides={"lakehouse": emulated, "validate.trigger": "available-now",
                                        "alerts.webhooks": False})
    lane_to_the_end(spark, settings)
    got = sorted([e["cluster"], e["rule"], e["fingerprint"], e["status"], str(e["ts"]), e["value"]]
                 for e in read_rows(ALERT_EVENTS, emulated).to_pylist())
    golden = json.loads(GOLDEN.read_text())["transitions"]
    assert len(golden) == 449 and {t[0] for t in golden} == {
        f"{p.stem}-s1" for p in (ROOT / "conf/scenarios").glob("*.yaml") if p.stem not in LEFT_OUT}
    assert got == golden
