"""One SparkSession per test session; a fresh lakehouse per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Under pytest-xdist the worker's __main__ has neither __spec__ nor __file__, which pyspark.sql.connect
# (imported by Great Expectations) takes for a doctest run without Spark Connect's dependencies, and
# answers with sys.exit(0). A worker is no doctest run: give its __main__ a file name.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = "<pytest-xdist worker>"


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
