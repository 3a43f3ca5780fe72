"""Load conf/alerts.yaml (or another file): YAML errors and rule errors name the file, rule and field."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from foundation.yaml_file import read_yaml
from pipelines.alert_engine import _inhibitors_first
from pipelines.alert_rules import AlertConfig, AlertConfigError, parse_alert_config
from pipelines.alert_signals import SOURCES

DEFAULT_ALERTS = Path(__file__).resolve().parent.parent / "conf" / "alerts.yaml"


def load_alert_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> AlertConfig:
    source = Path(path) if path is not None else DEFAULT_ALERTS
    raw = read_yaml(source, AlertConfigError)
    config = parse_alert_config(raw, str(source), dict(os.environ) if env is None else env)
    try:
        _inhibitors_first(config.rules)
    except ValueError as e:
        raise AlertConfigError(f"{source}: {e}") from None
    return config


def split_by_layer(config: AlertConfig, origin: str = "alert rules") -> tuple[AlertConfig, AlertConfig]:
    """The rules on silver tables and the rules on gold tables, each with every receiver: the alert lane evaluates
    the first on each bronze commit, the alerts job the second (docs/alerts.md). An inhibition between the
    two sets would need both engines' alerts at once: refused, naming the rules."""
    silver = tuple(r for r in config.rules if SOURCES[r.source].layer == "silver")
    gold = tuple(r for r in config.rules if SOURCES[r.source].layer == "gold")
    layer = {r.name: SOURCES[r.source].layer for r in config.rules}
    for r in config.rules:
        for inh in r.inhibited_by:
            if layer[inh.rule] != layer[r.name]:
                raise AlertConfigError(
                    f"{origin}: rule {r.name!r} (on a {layer[r.name]} table) is inhibited_by {inh.rule!r} (on a "
                    f"{layer[inh.rule]} table): the alert lane evaluates the rules on silver tables and the alerts job "
                    f"those on gold tables, so an inhibition must stay within one of the two")
    return replace(config, rules=silver), replace(config, rules=gold)


# What the alert lane reads (jobs/alert_lane.py): every table the rules on silver tables read, so that it evaluates all
# of them.
LANE_TABLES = ("partition_state", "broker_metrics", "ack_ledger", "cluster_events")
assert {s.table for s in SOURCES.values() if s.layer == "silver"} <= set(LANE_TABLES), "a silver source the lane misses"
