"""pipelines.rule_metrics: the broker_metrics keys each alert rule's condition reads (which rules a node's missing
metrics keep from firing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.alert_rules import AlertConfigError
from pipelines.rule_metrics import metrics_read_by_rules_file


def test_the_shipped_rules_over_broker_metrics_and_what_their_conditions_read() -> None:
    read = metrics_read_by_rules_file()

    assert {rule: read.get(rule) for rule in ("OfflinePartitions", "ActiveControllerCount", "UncleanLeaderElection",
                                              "ProduceNotEnoughReplicas", "UnderMinIsr")} == {
        "OfflinePartitions": frozenset({"OfflinePartitionsCount"}),
        "ActiveControllerCount": frozenset({"ActiveControllerCount"}),
        "UncleanLeaderElection": frozenset({"UncleanLeaderElectionsPerSec"}),
        "ProduceNotEnoughReplicas": frozenset({"ErrorsPerSec:NOT_ENOUGH_REPLICAS"}),
        "UnderMinIsr": None}   # a partition_state rule: no metric of a node


def test_a_condition_may_read_several_metrics_and_a_meters_count(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text("""
receivers:
  - {name: pager, url: "http://127.0.0.1:9/", secret_env: NOT_SET_WHERE_THE_COLLECTOR_RUNS}
rules:
  - {name: Refusing, source: broker_metrics, scope: broker, severity: warning,
     when: "(ErrorsPerSec_NOT_ENOUGH_REPLICAS > 0) or (ErrorsPerSec_NOT_ENOUGH_REPLICAS_AFTER_APPEND_count > 3)"}
  - {name: Shrinking, source: broker_metrics, scope: broker, severity: info, when: "IsrShrinksPerSec > 0",
     value: BytesInPerSec}
  - {name: UnderMinIsr, source: partition_state, scope: partition, severity: critical,
     when: "isr_size < effective_min_isr"}
""")

    assert metrics_read_by_rules_file(rules) == {
        "Refusing": frozenset({"ErrorsPerSec:NOT_ENOUGH_REPLICAS", "ErrorsPerSec:NOT_ENOUGH_REPLICAS_AFTER_APPEND"}),
        "Shrinking": frozenset({"IsrShrinksPerSec"})}   # what `value` reads does not keep a rule from firing


def test_a_rule_naming_no_metric_is_refused_naming_file_rule_and_field(tmp_path: Path) -> None:
    rules = tmp_path / "alerts.yaml"
    rules.write_text("rules: [{name: Typo, source: broker_metrics, scope: broker, severity: info, "
                     "when: IsrShrinkPerSec > 0}]\n")

    with pytest.raises(AlertConfigError, match=rf"^{rules}: rule 'Typo': when: 'IsrShrinkPerSec > 0'"):
        metrics_read_by_rules_file(rules)
