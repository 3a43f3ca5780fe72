"""jobs/ge_process.py: Great Expectations' child process stays up through the stop signals a terminal or a supervisor
sends to the whole process group; the job closes it itself.

Run in a process of its own, started as a script (as the pipeline is) and as `python -c` code: a spawned child of a
parent whose main module has no file (`-c`, or `python -m pytest`) keeps spawn's bare main, which pyspark's connect
package, imported by GE, takes for a doctest run and exits; the child's start names a file for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import multiprocessing, os, signal, sys
sys.path.insert(0, {root!r})
from jobs.ge_process import GeProcess

if __name__ == "__main__":
    ge = GeProcess()
    assert ge.outcomes({{}}) == {{}}
    (child,) = multiprocessing.active_children()
    os.kill(child.pid, signal.SIGINT)
    os.kill(child.pid, signal.SIGTERM)
    answered = sum(ge.outcomes({{}}) == {{}} for _ in range(3))   # a child the signals ended breaks the pool here
    alive = child.is_alive()
    ge.close()
    print(answered, alive, child.is_alive())
"""


@pytest.mark.parametrize("started_as", ["script", "code"])
def test_the_great_expectations_child_outlives_ctrl_c_and_sigterm_sent_to_the_group(tmp_path: Path,
                                                                                    started_as: str) -> None:
    code = SCRIPT.format(root=str(ROOT))
    script = tmp_path / "ge_child.py"
    script.write_text(code)
    command = [str(script)] if started_as == "script" else ["-c", code]
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "True", "False"], "answered after the signals; alive; gone once closed"
