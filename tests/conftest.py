"""One SparkSession per test session; a fresh lakehouse per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from foundation.spark import build_spark_session

    session = build_spark_session("isrwatch-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def silver_lake(tmp_path_factory: pytest.TempPathFactory, spark: object) -> str:
    """Three emulated clusters validated into silver, with posture and SLO gold tables (tests/lakes.py)."""
    from tests.lakes import build_silver_lake

    return build_silver_lake(tmp_path_factory, spark)


@pytest.fixture
def lakehouse(tmp_path: Path) -> str:
    return str(tmp_path / "lakehouse")
