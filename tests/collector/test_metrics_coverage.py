"""collector.metrics_coverage's tracker: a row per URL at the start and at each change, the warnings while a URL gives
none or part of its node's metrics; on expositions recorded from a real cluster (data/, test_exporter_dialects.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from collector.metrics_coverage import CoverageTracker, metrics_gaps
from collector.metrics_scrape import NodeScrape, parse_exposition
from schemas.bronze import METRICS_COVERAGE, ExporterRules, NodeRole

DATA = Path(__file__).parent / "data"
RULES = {"ProduceNotEnoughReplicas": ["ErrorsPerSec:NOT_ENOUGH_REPLICAS"],
         "OfflinePartitions": ["OfflinePartitionsCount"]}
BROKER_URL, CONTROLLER_URL, STRANGER_URL = ("http://10.0.0.1:9404/metrics", "http://10.0.0.9:9404/metrics",
                                            "http://10.0.0.7:7071/metrics")


def answer(url: str, recorded: str | None, at_s: float, reason: str = "") -> NodeScrape:
    exposition = None if recorded is None else parse_exposition((DATA / recorded).read_text())
    return NodeScrape(url, 1795823400.0 + at_s, at_s, 0.01, exposition, reason)


def test_a_row_per_url_at_the_start_then_only_when_its_coverage_changes() -> None:
    tracker = CoverageTracker(RULES)
    roles = {1: NodeRole.BROKER}

    first = tracker.observe([(1, answer(BROKER_URL, "broker-1-strimzi.prom", 1.0)),
                             (3000, answer(CONTROLLER_URL, "controller-3000-isrwatch.prom", 1.0))], roles)
    assert [(c.node_id, c.exporter_rules, c.found, len(c.expected)) for c in first] == [
        (1, ExporterRules.STRIMZI, 11, 15), (3000, ExporterRules.ISRWATCH, 6, 6)]
    same = tracker.observe([(1, answer(BROKER_URL, "broker-1-strimzi.prom", 2.0)),
                            (3000, answer(CONTROLLER_URL, "controller-3000-isrwatch.prom", 2.0))], roles)
    assert same == []

    silent = tracker.observe([(1, answer(BROKER_URL, None, 3.0, "no answer within 0.5 s (ReadTimeout)"))], roles)
    assert [(c.reporting, c.role, c.found, c.exporter_rules, c.rules_blind) for c in silent] == [
        (False, NodeRole.BROKER, 0, None, ("ProduceNotEnoughReplicas",))]
    # Only the wording of why differs: no new row.
    assert tracker.observe([(1, answer(BROKER_URL, None, 4.0, "no answer within 0.5 s (ConnectTimeout)"))],
                           roles) == []
    back = tracker.observe([(1, answer(BROKER_URL, "broker-1-isrwatch.prom", 5.0))], roles)
    assert [(c.reporting, c.exporter_rules, c.found, c.complete) for c in back] == [
        (True, ExporterRules.ISRWATCH, 15, True)]


def test_the_warnings_name_every_url_giving_less_than_all_its_nodes_metrics() -> None:
    tracker = CoverageTracker(RULES)
    tracker.observe([(1, answer(BROKER_URL, "broker-1-strimzi.prom", 1.0)),
                     (3000, answer(CONTROLLER_URL, "controller-3000-strimzi.prom", 1.0)),
                     (None, answer(STRANGER_URL, "broker-1-confluent.prom", 1.0))], {1: NodeRole.BROKER})

    assert tracker.warnings() == [
        f"broker 1 ({BROKER_URL}): 11 of 15 metrics (strimzi rules); missing: ErrorsPerSec:NOT_LEADER_OR_FOLLOWER, "
        "ErrorsPerSec:NOT_ENOUGH_REPLICAS, ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND, "
        "ErrorsPerSec:REQUEST_TIMED_OUT (ProduceNotEnoughReplicas cannot fire)",
        f"metrics URL {STRANGER_URL}: cannot tell which node this is; pass ID=URL"]
    assert tracker.briefs() == ["broker 1 11/15 (strimzi)", f"{STRANGER_URL} 15/15 (confluent), node unknown"]

    tracker.observe([(1, answer(BROKER_URL, None, 2.0, "HTTP 503"))], {1: NodeRole.BROKER})
    assert tracker.warnings()[0] == (f"broker 1 ({BROKER_URL}): not reporting (HTTP 503) "
                                     "(ProduceNotEnoughReplicas cannot fire)")


def test_rows_have_the_tables_columns() -> None:
    tracker = CoverageTracker(RULES)
    (coverage,) = tracker.observe([(None, answer(STRANGER_URL, "broker-1-strimzi.prom", 1.0))], {})

    row = coverage.row(1_795_823_401_000_000)
    assert set(row) | {"run_id", "batch_id"} == set(METRICS_COVERAGE.arrow_schema.names)
    assert row == {"ts": 1_795_823_401_000_000, "node_id": None, "metrics_url": STRANGER_URL, "role": "broker",
                   "reporting": True, "reason": "", "exporter_rules": "strimzi", "metrics_found": 11,
                   "metrics_expected": 15, "missing": ["ErrorsPerSec:NOT_LEADER_OR_FOLLOWER",
                                                       "ErrorsPerSec:NOT_ENOUGH_REPLICAS",
                                                       "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                                                       "ErrorsPerSec:REQUEST_TIMED_OUT"],
                   "rules_blind": ["ProduceNotEnoughReplicas"]}


def test_collect_refuses_alert_rules_it_cannot_read_before_connecting(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text("rules: [{name: Broken, source: broker_metrics, scope: broker, when: NoSuchMetric > 0, "
                     "severity: critical}]\n")
    done = subprocess.run([sys.executable, "-m", "isrwatch.cli", "collect", "--bootstrap-servers", "127.0.0.1:1",
                           "--lakehouse", str(tmp_path / "lake"), "--no-canary", "--alert-rules", str(rules)],
                          capture_output=True, text=True, timeout=60)

    assert done.returncode == 2
    assert done.stderr.startswith(f"isrwatch collect: {rules}: rule 'Broken': when: 'NoSuchMetric > 0'"), done.stderr
    assert not (tmp_path / "lake").exists()


def test_a_broker_no_url_watches_and_no_url_of_the_active_controller_are_gaps_named_in_warnings() -> None:
    """Brokers 1-3 in the cluster, a URL for broker 1 only: brokers 2 and 3 are unwatched (BrokerNotReporting fires for
    them), and with no active controller's metrics the rules on controller metrics are named as blind. A controller
    URL that does not answer is its coverage's warning, not a second one here."""
    broker = answer(BROKER_URL, "broker-1-isrwatch.prom", 1.0)
    gaps = metrics_gaps({1, 2, 3}, {1}, set(), {1: broker}, [], RULES)
    assert [brief for _, brief in gaps] == ["broker 2 unwatched", "broker 3 unwatched", "no active controller"]
    assert gaps[0][0] == ("broker 2: no metrics URL is this broker's: its metrics are not read and BrokerNotReporting "
                          "fires for it (pass --metrics-url 2=URL)")
    assert gaps[2][0] == ("no metrics URL is the active controller's: OfflinePartitions cannot fire (pass each "
                          "controller's --metrics-url)")
    controller = answer(CONTROLLER_URL, "controller-3000-isrwatch.prom", 1.0)
    assert metrics_gaps({1}, {1, 3000}, {3000}, {1: broker, 3000: controller}, [], RULES) == []
    silent = answer(CONTROLLER_URL, None, 1.0, "no answer within 0.5 s (ReadTimeout)")
    assert metrics_gaps({1}, {1, 3000}, {3000}, {1: broker, 3000: silent}, [], RULES) == []
