"""Idempotent driver-side writes (isrwatch/delta_io.py): a replayed version changes nothing, and an app's
versions are read from the table once per process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import isrwatch.delta_io as delta_io
from isrwatch.delta_io import AppVersions, write_once
from schemas.gold import DELIVERIES


def _empty() -> pa.Table:
    return DELIVERIES.arrow_schema.empty_table()


def test_app_versions_skip_a_replayed_version_and_read_the_table_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lake = str(tmp_path / "lakehouse")
    assert write_once(DELIVERIES, lake, _empty(), "app", 0)
    reads: list[str] = []
    real = delta_io.committed_version

    def counting(td: Any, lakehouse: str, app_id: str) -> int:
        reads.append(app_id)
        return real(td, lakehouse, app_id)

    monkeypatch.setattr(delta_io, "committed_version", counting)
    versions = AppVersions("app")
    assert versions.committed(DELIVERIES, lake) == 0
    assert not versions.write_once(DELIVERIES, lake, _empty(), 0)  # a replay of version 0: nothing written
    assert versions.write_once(DELIVERIES, lake, _empty(), 1)
    assert versions.write_once(DELIVERIES, lake, _empty(), 2)
    assert versions.committed(DELIVERIES, lake) == 2
    assert reads == ["app"]  # looked up once; afterwards the driver knew
    table = DeltaTable(DELIVERIES.path(lake))
    assert table.version() == 2 and table.transaction_version("app") == 2
    # Another process (a restart) reads what was committed.
    assert AppVersions("app").committed(DELIVERIES, lake) == 2
    assert AppVersions("other").committed(DELIVERIES, lake) == -1
