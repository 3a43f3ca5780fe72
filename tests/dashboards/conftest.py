"""One hand-written lakehouse for the dashboard tests (tests/dashboards/lake.py), built once; tests that
write get their own copy."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lakehouse_read.reader import LakehouseReader
from tests.dashboards.lake import build_lake


@pytest.fixture(scope="package")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_lake(tmp_path_factory.mktemp("dashboards") / "lakehouse")


@pytest.fixture
def reader(lake: Path) -> LakehouseReader:
    return LakehouseReader(lake, refresh_s=0)


@pytest.fixture
def lake_copy(lake: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(lake, tmp_path / "lakehouse"))
