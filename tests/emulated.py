"""Emulated clusters written into a lakehouse in this process: how the tests put bronze rows down."""

from __future__ import annotations

from typing import Any

from broker_emulator.scenario import Scenario, parse_scenario
from broker_emulator.simulation import Simulation
from foundation.bronze_sink import DeltaSink


def emulate_into(lakehouse: str, scenario: dict[str, Any] | Scenario, run_id: str) -> dict[str, Any]:
    """The scenario (a scenario file's mapping, or one already parsed) run to its end into the lakehouse's bronze
    tables under `run_id`; its summary."""
    parsed = scenario if isinstance(scenario, Scenario) else parse_scenario(scenario, "<test>")
    return Simulation(parsed, DeltaSink(lakehouse, run_id)).run()
