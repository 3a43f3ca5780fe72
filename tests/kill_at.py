"""Runs a job's script with one kill point armed (foundation/kill_points.py), in this process, for the crash tests.

    python -m tests.kill_at <job>:<batch>:<point> SCRIPT [ARGS...]
    python -m tests.kill_at validate:3:after_silver jobs/validate.py --lakehouse /tmp/lake --trigger available-now

The script runs as `python SCRIPT ARGS...` would run it (as `__main__`, with its own directory first on sys.path),
and the armed point SIGKILLs the process when the job reaches it.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from foundation import kill_points


def killed_at(point: str | None) -> list[str]:
    """The command's start that runs a script with `point` armed (the plain interpreter for None)."""
    return [sys.executable] if point is None else [sys.executable, "-m", "tests.kill_at", point]


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: python -m tests.kill_at <job>:<batch>:<point> SCRIPT [ARGS...]")
    kill_points.arm(kill_points.KillPoint.parse(argv[0]))
    script = str(Path(argv[1]).resolve())
    sys.argv = [script, *argv[2:]]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
