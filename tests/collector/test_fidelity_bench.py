"""bench/fidelity.py in full (make test-all): every plan on a real cluster, twice, beside the emulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.fidelity import main


@pytest.mark.slow
@pytest.mark.kafka
def test_every_fidelity_row_is_within_tolerance(tmp_path: Path) -> None:
    # --check: exit 1 on any row outside tolerance (the table printed shows which).
    assert main(["--check", "--workdir", str(tmp_path), "--json", str(tmp_path / "rows.json")]) == 0
