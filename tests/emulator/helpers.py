"""A small step DSL for scripted emulator scenarios."""

from __future__ import annotations

from typing import Any

import yaml

from broker_emulator.scenario import parse_scenario
from broker_emulator.simulation import Simulation


def simulate(text: str, **overrides: Any) -> Simulation:
    """Build a simulation from scenario YAML text (no sink)."""
    data = yaml.safe_load(text)
    data.update(overrides)
    return observe(Simulation(parse_scenario(data, "<test>")))


def observe(sim: Simulation) -> Simulation:
    """Keep every cluster event on `sim.seen` (the recorder drains the event log each interval)."""
    seen: list[tuple[Any, ...]] = []
    emit = sim.events.emit

    def keep(*args: Any, **kwargs: Any) -> int:
        seq = emit(*args, **kwargs)
        seen.append(sim.events.rows[-1])
        return seq

    sim.events.emit = keep  # type: ignore[method-assign]
    sim.seen = seen  # type: ignore[attr-defined]
    return sim


def leader_of(sim: Simulation, p: int = 0) -> int:
    return int(sim.table.leader[p])


def hw(sim: Simulation, p: int = 0) -> int:
    """The high watermark on the broker currently leading p."""
    t = sim.table
    return int(t.hw[p, t.slot_of(p, int(t.leader[p]))])


def leo(sim: Simulation, broker: int, p: int = 0) -> int:
    t = sim.table
    return int(t.leo[p, t.slot_of(p, broker)])


def isr(sim: Simulation, p: int = 0) -> list[int]:
    return sim.table.members(p, sim.table.isr[p])


def events(sim: Simulation, event_type: str) -> list[tuple[Any, ...]]:
    """Events of a type not yet drained to the recorder: (ts, seq, type, broker, topic, part, epoch, cause, ...)."""
    return [r for r in sim.seen if r[2] == event_type]  # type: ignore[attr-defined]
