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
