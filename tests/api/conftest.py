"""The lakehouse the API, fuzz and browser tests share, built once for the package by the real thing: the
emulator runs two clusters (three brokers losing two; the seed's unclean election), then validate, posture,
SLO and alerts jobs run over them (available-now, no webhooks)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from broker_emulator.delta_sink import DeltaSink
from broker_emulator.scenario import load_scenario, parse_scenario
from broker_emulator.simulation import Simulation
from isrwatch.settings import PipelineSettings, load_settings
from jobs.alerts import start_alerts
from tests.alerts.conftest import LOSE_TWO, TABLES, UNCLEAN, run_gold_jobs
from tests.pipeline.test_validate import validate

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789"


@pytest.fixture(scope="package")
def api_lake(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> str:
    lake = str(tmp_path_factory.mktemp("api") / "lakehouse")
    Simulation(parse_scenario(LOSE_TWO, "<test>"), DeltaSink(lake, "lose-two-s3")).run()
    unclean = load_scenario(ROOT / "conf/scenarios/unclean-election-loses-d-and-e.yaml")
    Simulation(unclean, DeltaSink(lake, UNCLEAN)).run()
    validate(spark, lake, TABLES)
    run_gold_jobs(spark, lake)
    settings = load_settings(overrides={"lakehouse": lake, "alerts.trigger": "available-now",
                                        "alerts.webhooks": False, "alerts.wait_for_tables_seconds": 0})
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
