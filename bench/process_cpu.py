"""CPU time of process trees, read from /proc, for the benches that share two cores between systems.

A system that answers faster by burning more of the shared cores slows the others: the alert latency bench prints
how much CPU each side used over the measured runs, beside the latencies.
"""

from __future__ import annotations

import os


def _table() -> tuple[dict[int, list[int]], dict[int, int]]:
    """(children by parent pid, CPU ticks by pid: user + system, its own and its waited-for children's)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, ..., utime at [11]
        children.setdefault(int(fields[1]), []).append(int(entry))
        ticks[int(entry)] = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return children, ticks


def tree_cpu_seconds(pids: list[int]) -> float:
    """CPU seconds the processes `pids` and their live descendants have used (with the children they waited for)."""
    children, ticks = _table()
    total, todo, seen = 0, list(pids), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += ticks.get(pid, 0)
        todo += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")
