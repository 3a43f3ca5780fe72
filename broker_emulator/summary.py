"""The run summary printed at the end of `isrwatch emulate` (and stored with every batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from schemas.bronze import EventType

if TYPE_CHECKING:
    from broker_emulator.brokers import Brokers
    from broker_emulator.clock import EventQueue, SimClock
    from broker_emulator.consumers import Consumers
    from broker_emulator.events import EventLog
    from broker_emulator.invariants import Invariants
    from broker_emulator.ledger import Ledger
    from broker_emulator.metrics import Metrics
    from broker_emulator.produce import Produce
    from broker_emulator.scenario import Scenario
    from broker_emulator.state import PartitionTable


class SummaryHost(Protocol):
    """What the summary reads of a run: its totals, counts and sizes."""

    @property
    def run_id(self) -> str: ...
    @property
    def scenario(self) -> Scenario: ...
    @property
    def clock(self) -> SimClock: ...
    @property
    def queue(self) -> EventQueue: ...
    @property
    def table(self) -> PartitionTable: ...
    @property
    def brokers(self) -> Brokers: ...
    @property
    def events(self) -> EventLog: ...
    @property
    def ledger(self) -> Ledger: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def consumers(self) -> Consumers: ...
    @property
    def produce(self) -> Produce: ...
    @property
    def invariants(self) -> Invariants: ...


def build_summary(sim: SummaryHost) -> dict[str, Any]:
    tot = sim.ledger.totals
    counts = sim.events.counts
    elections: dict[str, int] = {}
    rejected: dict[str, int] = {}
    for key, n in sorted(counts.items()):
        kind, cause = key.split(":", 1)
        if kind == EventType.ELECTION:
            elections[cause] = elections.get(cause, 0) + n
        elif kind == EventType.PRODUCE_REJECTED:
            rejected[cause] = rejected.get(cause, 0) + n
    meters = sim.metrics.totals
    return {
        "run_id": sim.run_id,
        "scenario": sim.scenario.name,
        "seed": sim.scenario.seed,
        "simulated_ms": sim.clock.now_ms,
        "brokers": len(sim.brokers.ids),
        "partitions": sim.table.count,
        "records": {"sent": dict(sorted(tot.sent.items())), "acked": dict(sorted(tot.acked.items())),
                    "failed": dict(sorted(tot.failed.items())), "lost": dict(sorted(tot.lost.items()))},
        "lost_by": dict(sorted(tot.lost_by.items())),
        "elections": elections,
        "isr_shrinks": meters.get("IsrShrinksPerSec", 0),
        "isr_expands": meters.get("IsrExpandsPerSec", 0),
        "failed_isr_updates": meters.get("FailedIsrUpdatesPerSec", 0),
        "produce_errors": rejected,
        "client_errors": dict(sorted(sim.produce.client.errors.items())),
        "consumed": {g.spec.group: g.total_consumed for g in sim.consumers.groups},
        "read_then_lost": {g.spec.group: g.total_reset for g in sim.consumers.groups},
        "faults": sum(n for k, n in counts.items() if k.startswith("fault:")),
        "events": sim.events.seq,
        "simulation_events": sim.queue.processed,
        "invariant_checks": sim.invariants.checks,
        "invariant_violations": 0,
    }


def format_summary(s: dict[str, Any]) -> str:
    r = s["records"]
    lines = [f"run {s['run_id']}: {s['simulated_ms'] / 1000:.0f} simulated s, {s['brokers']} brokers, "
             f"{s['partitions']} partitions, {s['simulation_events']} simulation events"]
    for level in sorted(set(r["sent"]) | set(r["acked"])):
        lines.append(f"  acks={level:<3} sent {r['sent'].get(level, 0):>10}  acked {r['acked'].get(level, 0):>10}  "
                     f"failed {r['failed'].get(level, 0):>8}  lost {r['lost'].get(level, 0):>8}")
    if s["lost_by"]:
        lines.append("  acked records lost by: " + ", ".join(f"{k}={v}" for k, v in s["lost_by"].items()))
    lines.append("  elections: " + (", ".join(f"{k}={v}" for k, v in s["elections"].items()) or "none"))
    lines.append(f"  ISR shrinks {s['isr_shrinks']}, expands {s['isr_expands']}, "
                 f"failed ISR updates {s['failed_isr_updates']}")
    lines.append("  rejected produces: " + (", ".join(f"{k}={v}" for k, v in s["produce_errors"].items()) or "none"))
    lines.append("  batch failures the producers saw: "
                 + (", ".join(f"{k}={v}" for k, v in s["client_errors"].items()) or "none"))
    for group, n in s.get("consumed", {}).items():
        lines.append(f"  consumer group {group}: read {n}, read then lost {s['read_then_lost'].get(group, 0)}")
    lines.append(f"  faults injected {s['faults']}; invariant checks {s['invariant_checks']}, "
                 f"violations {s['invariant_violations']}")
    return "\n".join(lines)
