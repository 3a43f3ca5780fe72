"""`isrwatch serve` as a user starts it: a child process on a free loopback port, ready once /healthz answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "served-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(lake: str, log_dir: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """The server over `lake` (its output in `log_dir`), with ISRWATCH_API_TOKEN = TOKEN and `env` added."""
    port = free_port()
    log = log_dir / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "serve", "--lakehouse", lake, "--port",
                                 str(port)], cwd=ROOT, env={**os.environ, "ISRWATCH_API_TOKEN": TOKEN, **(env or {})},
                                stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("isrwatch serve did not answer /healthz within 60 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
