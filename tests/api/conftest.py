"""The lakehouse the API, fuzz and browser tests share, built by the real thing: the session's silver lake
(tests/lakes.py: the emulator's healthy, lose-two and unclean-election clusters through validate, posture and
SLO jobs), copied, with the alert lane and the alerts job run over it (available-now, no webhooks)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from foundation.settings import PipelineSettings, load_settings
from jobs.alerts import start_alerts
from tests.alerts.lane_runs import lane_to_the_end

TOKEN = "test-token-0123456789"


@pytest.fixture(scope="package")
def api_lake(tmp_path_factory: pytest.TempPathFactory, spark: Any, silver_lake: str) -> str:
    lake = str(shutil.copytree(silver_lake, tmp_path_factory.mktemp("api") / "lakehouse"))
    settings = load_settings(overrides={"lakehouse": lake, "alerts.trigger": "available-now",
                                        "alerts.webhooks": False, "validate.trigger": "available-now"})
    lane_to_the_end(spark, settings)
    running = start_alerts(spark, settings, log=lambda _: None)
    running.query.awaitTermination()
    assert running.query.exception() is None, running.query.exception()
    return lake


def api_settings(lake: str, **api: Any) -> PipelineSettings:
    settings = load_settings(overrides={"lakehouse": lake})
    settings.api = settings.api.model_validate({**settings.api.model_dump(), "token": TOKEN, **api})
    return settings


@pytest.fixture(scope="package")
def client(api_lake: str) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings(api_lake))) as c:
        yield c


@pytest.fixture
def lake_copy(api_lake: str, tmp_path: Path) -> str:
    """A private copy for tests that write (silences)."""
    return str(shutil.copytree(api_lake, tmp_path / "lakehouse"))
