"""jobs/ge_process.py: Great Expectations' child process stays up through the stop signals a terminal or a supervisor
sends to the whole process group; the job closes it itself.

Run as a script of its own, as the pipeline is: a spawned child re-imports its parent's main module, and pytest's
has no file (pyspark's connect package then takes the child for a doctest run and exits)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_the_great_expectations_child_outlives_ctrl_c_and_sigterm_sent_to_the_group(tmp_path: Path) -> None:
    script = tmp_path / "ge_child.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3", "True", "False"], "answered after the signals; alive; gone once closed"
