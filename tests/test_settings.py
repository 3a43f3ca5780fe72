"""Settings overrides land even when the settings file lacks the section, or leaves it empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.settings import SettingsError, load_settings


@pytest.mark.parametrize("text", ["lakehouse: x\n", "lakehouse: x\nalerts:\n", "lakehouse: x\nalerts: {}\n"])
def test_overrides_apply_to_missing_or_empty_sections(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text(text)
    s = load_settings(conf, {"alerts.trigger": "available-now", "alerts.webhooks": False, "api.port": 9999,
                             "validate.trigger": None})
    assert (s.alerts.trigger, s.alerts.webhooks, s.api.port) == ("available-now", False, 9999)
    assert s.validate_.trigger == "live"          # None means "not given"


def test_an_override_with_a_bad_value_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text("lakehouse: x\n")
    with pytest.raises(SettingsError, match=r"api\.port: 70000"):
        load_settings(conf, {"api.port": 70000})


@pytest.mark.parametrize("key", ["lane: true", "silver_rules_in: validate"])
def test_a_removed_alerts_setting_is_named_with_why_it_went(tmp_path: Path, key: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"alerts:\n  {key}\n")
    name = key.split(":")[0]
    with pytest.raises(SettingsError, match=rf"pipeline\.yaml: alerts\.{name}: no longer a setting \(delete it\): "
                                            r"the alert lane always evaluates the rules on silver tables"):
        load_settings(path)
