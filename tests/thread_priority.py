"""The CPU priority (nice value) of a JVM's threads as Linux shows them, for the tests of jvm/local-master's plugin."""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path
from typing import Any


def nice(task: Path) -> int:
    """A thread's nice value: field 19 of /proc/<pid>/task/<tid>/stat (after the parenthesised name)."""
    return int((task / "stat").read_text().rsplit(")", 1)[1].split()[16])


def jvm_process(spark: Any) -> Path:
    """/proc's folder of the session's driver JVM."""
    return Path("/proc") / str(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def thread_nices(process: Path) -> list[tuple[str, int]]:
    """(name, nice value) of each thread of `process`; a thread that ends while it is read (the JVM starts and ends
    threads all the time) is left out."""
    out = []
    for task in (process / "task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            out.append(((task / "comm").read_text().strip(), nice(task)))
    return out


def stream_thread_nices(spark: Any) -> dict[str, int]:
    """query name -> nice value of its stream execution thread, in the session's JVM. /proc cuts a thread's name to 15
    characters ("stream executio" for every query): the JVM's own thread dump names each and gives its kernel id."""
    process = jvm_process(spark)
    dump = subprocess.run(["jcmd", process.name, "Thread.print"], capture_output=True, text=True, check=True).stdout
    threads = re.findall(r'^"stream execution thread for (\S+) \[.*? nid=(\w+)', dump, re.MULTILINE)
    return {name: nice(process / "task" / str(int(nid, 0))) for name, nid in threads}
