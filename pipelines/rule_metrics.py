"""Which broker_metrics metrics each alert rule's condition reads: the rules a node's missing metrics keep from
firing (`isrwatch collect` names them in its warnings and in bronze.metrics_coverage)."""

from __future__ import annotations

import re
from pathlib import Path

from foundation.yaml_file import read_yaml
from pipelines.alert_config import DEFAULT_ALERTS
from pipelines.alert_rules import AlertConfig, AlertConfigError, parse_alert_config
from pipelines.alert_signals import METERS, SOURCES, metric_column
from schemas.kafka_metrics import MBEANS

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A column of the broker_metrics source -> the MBEANS key it holds (a meter's rate, or its `_count`).
_KEY_OF_COLUMN = {**{metric_column(k): k for k in MBEANS}, **{f"{metric_column(k)}_count": k for k in METERS}}


def metrics_read_by_rules(config: AlertConfig) -> dict[str, frozenset[str]]:
    """Rule name -> the MBEANS keys its `when` reads, for each rule over the broker_metrics table that reads any.

    >>> from pipelines.alert_config import load_alert_config
    >>> metrics_read_by_rules(load_alert_config())["ProduceNotEnoughReplicas"]
    frozenset({'ErrorsPerSec:NOT_ENOUGH_REPLICAS'})
    """
    read = {}
    for rule in config.rules:
        if SOURCES[rule.source].table != "broker_metrics":
            continue
        keys = frozenset(_KEY_OF_COLUMN[name] for name in _IDENTIFIER.findall(rule.when) if name in _KEY_OF_COLUMN)
        if keys:
            read[rule.name] = keys
    return read


def metrics_read_by_rules_file(path: str | Path | None = None) -> dict[str, frozenset[str]]:
    """`metrics_read_by_rules` of an alerts file (default conf/alerts.yaml), its rules checked as the pipeline checks
    them. Its receivers are not read: whoever asks delivers nothing (a receiver's secret_env need not be set)."""
    source = Path(path) if path is not None else DEFAULT_ALERTS
    raw = read_yaml(source, AlertConfigError)
    if isinstance(raw, dict):
        raw = {**raw, "receivers": []}
    return metrics_read_by_rules(parse_alert_config(raw, str(source), {}))
