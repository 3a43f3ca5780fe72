"""What each metrics URL gives isrwatch: the exporter naming recognised, the metrics found of those its node's role
is read for, the missing ones and the alert rules they blind. `isrwatch collect` warns while a URL gives none or
only part of them, and records a bronze.metrics_coverage row per URL at the start and whenever its coverage changes.

A broker exporting under Strimzi's rules, for one, gives 11 of the 15 broker metrics: Strimzi's rules leave out
RequestMetrics, so the produce error meters are missing and ProduceNotEnoughReplicas cannot fire for that broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from collector.metrics_scrape import ZOOKEEPER_ONLY, Exposition, NodeScrape, expected_keys, reported_node_id
from schemas.bronze import ExporterRules, NodeRole
from schemas.kafka_metrics import BROKER_KEYS, CONTROLLER_KEYS


@dataclass(frozen=True)
class MetricsCoverage:
    """One metrics URL at one scrape."""

    url: str
    node_id: int | None                 # None: isrwatch cannot tell which node the URL is
    role: NodeRole
    reporting: bool
    reason: str                         # why not, when not reporting
    exporter_rules: ExporterRules | None   # None when not reporting
    expected: tuple[str, ...]           # the MBEANS keys read from a node of this role
    missing: tuple[str, ...]            # those the exposition lacks (all of them while not reporting)
    rules_blind: tuple[str, ...]        # alert rules whose condition reads a missing key

    @property
    def found(self) -> int:
        return len(self.expected) - len(self.missing)

    @property
    def complete(self) -> bool:
        return self.reporting and self.node_id is not None and not self.missing

    @property
    def state(self) -> tuple[Any, ...]:
        """What a change of is recorded: everything but the reason's wording (a timeout's kind varies)."""
        return (self.node_id, self.role, self.reporting, self.exporter_rules, self.expected, self.missing,
                self.rules_blind)

    def _who(self) -> str:
        if self.node_id is None:
            return f"metrics URL {self.url}"
        node = "node" if self.role is NodeRole.UNKNOWN else self.role.value
        return f"{node} {self.node_id} ({self.url})"

    def _blind(self) -> str:
        return f" ({', '.join(self.rules_blind)} cannot fire)" if self.rules_blind else ""

    def warning(self) -> str | None:
        """The warning `isrwatch collect` prints for this URL, None when it gives every metric of its node."""
        if self.complete:
            return None
        if not self.reporting:
            return f"{self._who()}: not reporting ({self.reason}){self._blind()}"
        parts = []
        if self.exporter_rules is ExporterRules.UNRECOGNISED:
            parts.append(f"exports none of the metrics isrwatch reads (unrecognised exporter rules){self._blind()}")
        elif self.missing:
            parts.append(f"{self.found} of {len(self.expected)} metrics ({self.exporter_rules} rules); missing: "
                         f"{', '.join(self.missing)}{self._blind()}")
        if self.node_id is None:
            parts.append("cannot tell which node this is; pass ID=URL")
        return f"{self._who()}: {'; '.join(parts)}"

    def brief(self) -> str | None:
        """A few words for a progress line, None when complete."""
        if self.complete:
            return None
        who = self.url if self.node_id is None else f"{self.role.value} {self.node_id}"
        if not self.reporting:
            return f"{who} not reporting"
        what = ("unrecognised" if self.exporter_rules is ExporterRules.UNRECOGNISED
                else f"{self.found}/{len(self.expected)} ({self.exporter_rules})")
        return f"{who} {what}" + (", node unknown" if self.node_id is None else "")

    def row(self, ts_us: int) -> dict[str, Any]:
        """The bronze.metrics_coverage row (without run_id and batch_id)."""
        return {"ts": ts_us, "node_id": self.node_id, "metrics_url": self.url, "role": self.role.value,
                "reporting": self.reporting, "reason": self.reason,
                "exporter_rules": None if self.exporter_rules is None else self.exporter_rules.value,
                "metrics_found": self.found, "metrics_expected": len(self.expected), "missing": list(self.missing),
                "rules_blind": list(self.rules_blind)}


def node_of_url(url: str, exposition: Exposition, broker_addresses: Mapping[int, str]) -> int | None:
    """The node a metrics URL is: the id its exposition proves (app-info, or the active controller's own
    CurrentControllerId), else the one broker whose advertised host is the URL's host. Only a broker's exposition
    is matched by host: a controller on the same machine as one broker must not take that broker's id."""
    node = reported_node_id(exposition)
    if node is not None or not exposition.is_broker:
        return node
    host = urlsplit(url).hostname
    same_host = [b for b, address in broker_addresses.items() if address.rpartition(":")[0].strip("[]") == host]
    return same_host[0] if len(same_host) == 1 else None


def expected_of(exposition: Exposition | None, role: NodeRole) -> tuple[str, ...]:
    """The keys read from this node: as its exposition shows its role (a broker's; the active controller's, none of a
    standby controller's), else as `role` says (a role unknown: a broker's and a controller's). A ZooKeeper-only
    metric is expected only where it is exported."""
    if exposition is not None and (exposition.is_broker or exposition.is_controller):
        keys = expected_keys(exposition)
    else:
        keys = {NodeRole.BROKER: BROKER_KEYS, NodeRole.CONTROLLER: CONTROLLER_KEYS}.get(
            role, (*BROKER_KEYS, *CONTROLLER_KEYS))
    present = exposition.values if exposition is not None else {}
    return tuple(k for k in keys if k not in ZOOKEEPER_ONLY or k in present)


def role_of(exposition: Exposition | None, known: NodeRole) -> NodeRole:
    if exposition is not None and exposition.is_broker:
        return NodeRole.BROKER
    if exposition is not None and exposition.is_controller:
        return NodeRole.CONTROLLER
    return known


def coverage_of(scrape: NodeScrape, node_id: int | None, known_role: NodeRole,
                rule_metrics: Mapping[str, frozenset[str]]) -> MetricsCoverage:
    """The coverage of one scrape; `known_role` is what the collector knows of the node when its exposition does
    not show it, `rule_metrics` the alert rules' metric keys (rule name -> the keys its condition reads)."""
    exposition = scrape.exposition
    role = role_of(exposition, known_role)
    expected = expected_of(exposition, role)
    if exposition is None:
        missing = expected
    else:
        missing = tuple(k for k in expected if k not in exposition.values and k not in exposition.zero_when_absent)
    blind = tuple(sorted(rule for rule, keys in rule_metrics.items() if keys & set(missing)))
    return MetricsCoverage(scrape.url, node_id, role, scrape.reporting, scrape.reason,
                           None if exposition is None else exposition.rules, expected, missing, blind)


class CoverageTracker:
    """The latest coverage of every metrics URL, and which changed since it was last recorded (one per URL given
    on the command line: bounded)."""

    def __init__(self, rule_metrics: Mapping[str, Iterable[str]]) -> None:
        self.rule_metrics = {rule: frozenset(keys) for rule, keys in rule_metrics.items()}
        self.latest: dict[str, MetricsCoverage] = {}
        self._recorded: dict[str, tuple[Any, ...]] = {}

    def observe(self, scrapes: Iterable[tuple[int | None, NodeScrape]],
                known_roles: Mapping[int, NodeRole]) -> list[MetricsCoverage]:
        """Take this interval's scrapes (node id or None, scrape); the coverages to record: each URL's first and
        every one whose state differs from the one last recorded."""
        changed = []
        for node_id, scrape in scrapes:
            before = self.latest.get(scrape.url)
            known = known_roles.get(node_id, NodeRole.UNKNOWN) if node_id is not None else NodeRole.UNKNOWN
            if known is NodeRole.UNKNOWN and before is not None:
                known = before.role   # a node that stopped answering keeps the role it showed
            coverage = coverage_of(scrape, node_id, known, self.rule_metrics)
            self.latest[scrape.url] = coverage
            if self._recorded.get(scrape.url) != coverage.state:
                self._recorded[scrape.url] = coverage.state
                changed.append(coverage)
        return changed

    def warnings(self) -> list[str]:
        return [w for c in self.latest.values() if (w := c.warning()) is not None]

    def briefs(self) -> list[str]:
        return [b for c in self.latest.values() if (b := c.brief()) is not None]


def metrics_gaps(brokers: set[int], watched: set[int], controllers: set[int], scrapes: Mapping[int, NodeScrape],
                 unassigned: Iterable[NodeScrape], rule_metrics: Mapping[str, Iterable[str]]) -> list[tuple[str, str]]:
    """(warning, brief) for what no metrics URL watches: a broker of the cluster (`brokers`) that no URL is (`watched`:
    the nodes with a URL), whose metrics are then not read and for which BrokerNotReporting fires; and no URL being
    the active controller's while every controller URL answers, when the rules on controller metrics cannot fire. A
    URL that does not answer is its coverage's warning, not a gap."""
    gaps = [(f"broker {b}: no metrics URL is this broker's: its metrics are not read and BrokerNotReporting fires "
             f"for it (pass --metrics-url {b}=URL)", f"broker {b} unwatched")
            for b in sorted(brokers - watched - controllers)]
    expositions = [s.exposition for s in (*scrapes.values(), *unassigned) if s.exposition is not None]
    silent_controller = any(n in controllers and not s.reporting for n, s in scrapes.items())
    if not any(e.is_active_controller for e in expositions) and not silent_controller:
        controller_keys = set(CONTROLLER_KEYS)
        blind = sorted(rule for rule, keys in rule_metrics.items() if controller_keys & set(keys))
        gaps.append((f"no metrics URL is the active controller's: {', '.join(blind) or 'the controller metrics'} "
                     "cannot fire (pass each controller's --metrics-url)", "no active controller"))
    return gaps
