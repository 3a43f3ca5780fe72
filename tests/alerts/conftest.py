"""Fixtures of the alert tests' modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lakes import lose_two_bronze


@pytest.fixture(scope="module")
def bronze(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """The cluster losing two of its three brokers in bronze, once per test module (tests/lakes.py)."""
    return lose_two_bronze(tmp_path_factory, request.module.__name__.rsplit(".", 1)[-1])
