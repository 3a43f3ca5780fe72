"""Load conf/alerts.yaml (or another file): YAML errors and rule errors name the file, rule and field."""

from __future__ import annotations

import os
from pathlib import Path

from foundation.yaml_file import read_yaml
from pipelines.alert_engine import _inhibitors_first
from pipelines.alert_rules import AlertConfig, AlertConfigError, parse_alert_config

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
