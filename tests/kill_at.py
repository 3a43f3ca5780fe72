"""Runs a job's script with one kill point armed (foundation/kill_points.py), in this process, for the crash tests.

    python -m tests.kill_at <job>:<batch>:<point> SCRIPT [ARGS...]
    python -m tests.kill_at validate:3:after_silver jobs/validate.py --lakehouse /tmp/lake --trigger available-now

The script runs as `python SCRIPT ARGS...` would run it (as `__main__`, with its own directory first on sys.path),
and the armed point SIGKILLs the process when the job reaches it.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from foundation import kill_points

# A folder in which each real kill leaves a file named by its point (set by tests/conftest.py for the whole run and
# inherited by every process it starts): a run of the suite checks that every declared point was reached.
KILLS_FOLDER = "ISRWATCH_TEST_KILLS"


def recorded(job: str, point: str) -> None:
    folder = os.environ.get(KILLS_FOLDER)
    if folder:
        (Path(folder) / f"{job}:{point}").touch()


def armed_sigkill(spec: str) -> kill_points.KillPoint:
    """The point `spec`, which records that it was reached, then SIGKILLs this process."""
    def record_and_kill() -> None:
        recorded(point.job, point.point)
        kill_points.sigkill()

    point = kill_points.KillPoint.parse(spec, record_and_kill)
    return point


def killed_at(point: str | None) -> list[str]:
    """The command's start that runs a script with `point` armed (the plain interpreter for None)."""
    return [sys.executable] if point is None else [sys.executable, "-m", "tests.kill_at", point]


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit("usage: python -m tests.kill_at <job>:<batch>:<point> SCRIPT [ARGS...]")
    kill_points.arm(armed_sigkill(argv[0]))
    script = str(Path(argv[1]).resolve())
    sys.argv = [script, *argv[2:]]
    sys.path.insert(0, str(Path(script).parent))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
