"""The emulator as the benches run it: `isrwatch emulate` in a process of its own, quiet, writing into a lakehouse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SCENARIO = ROOT / "conf" / "scenarios" / "default.yaml"


def start_emulator(lake: str, *args: str, scenario: Path = DEFAULT_SCENARIO) -> subprocess.Popen[bytes]:
    """`isrwatch emulate --scenario SCENARIO --lakehouse LAKE --quiet ARGS...`, started (wait on it)."""
    return subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "emulate", "--scenario", str(scenario),
                             "--lakehouse", lake, "--quiet", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
