"""Processes the fixture and the demo start: each in its own process group (a terminal's Ctrl-C reaches only
the parent, which stops them in order) and signalled when the parent dies, so none outlives a killed parent;
`Child`, an isrwatch subprocess whose output is logged and partly echoed; waiting on a condition while every
child stays alive."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
ISRWATCH = [sys.executable, "-m", "isrwatch.cli"]
_PR_SET_PDEATHSIG = 1


class DemoError(Exception):
    """Raised when a step of the demo cannot go on (a child exited, the cluster did not recover in time)."""


def own_group_dying_with_parent(sig: int) -> Callable[[], None]:
    """A `preexec_fn`: run in the child between fork and exec, it gives the child its own process group and
    has the kernel send it `sig` when the parent dies."""

    def preexec() -> None:
        os.setpgrp()
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)

    return preexec


def reap(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """Wait for `process`, already signalled to stop, up to `timeout_s`; then SIGKILL its process group and wait."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


# ---- isrwatch children ------------------------------------------------------------------------------------------

class Child:
    """An isrwatch subprocess whose output goes to a log file, the lines `echo` accepts also to our stdout."""

    def __init__(self, name: str, args: list[str], log_dir: Path, echo: Callable[[str], bool]) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.proc = subprocess.Popen([*ISRWATCH, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1,
                                     preexec_fn=own_group_dying_with_parent(signal.SIGTERM))
        self.lines: list[str] = []
        self._echo = echo
        self._log: IO[str] = open(self.log_path, "w")  # noqa: SIM115 - closed by the reader thread
        self._reader = threading.Thread(target=self._read, name=f"demo-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self._log:
            for line in self.proc.stdout:
                self.lines.append(line.rstrip("\n"))
                self._log.write(line)
                self._log.flush()
                if self._echo(line):
                    print(line, end="", flush=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def saw(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Signal it (its own clean stop), wait, then SIGKILL; its exit status."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            reap(self.proc, timeout_s)
        self._reader.join(5)
        return self.proc.returncode

    def tail(self, n: int = 15) -> str:
        return "\n".join(f"    {line}" for line in self.lines[-n:])


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, children: list[Child]) -> float:
    began = time.monotonic()
    while not condition():
        for child in children:
            if not child.alive():
                raise DemoError(f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}")
        if time.monotonic() - began > timeout_s:
            raise DemoError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)
    return time.monotonic() - began


def hold(seconds: float, children: list[Child]) -> None:
    deadline = time.monotonic() + seconds
    wait_for(lambda: time.monotonic() >= deadline, seconds + 5, "a pause", children)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
