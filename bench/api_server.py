"""`isrwatch serve` in a subprocess, for the API benchmark (bench/api.py): started on a free port, waited for,
its CPU and memory read from /proc, stopped by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`isrwatch serve` in a subprocess of its own (stopped by its pid only)."""

    def __init__(self, data: Path, port: int, *, prebuild: bool = True) -> None:
        self.base = f"http://127.0.0.1:{port}"
        name = "serve" if prebuild else "serve-on-request"
        self.log = open(data / f"{name}.log", "w")  # noqa: SIM115 (open while the server runs; closed in stop())
        argv = [str(Path(sys.executable).parent / "isrwatch"), "serve", "--lakehouse", str(data), "--port", str(port)]
        if not prebuild:  # the shipped settings with the page keeper off: figures built only when a page asks
            settings = yaml.safe_load((ROOT / "conf" / "pipeline.yaml").read_text())
            settings["api"]["dashboard_prebuild"] = "0 seconds"
            config = data / f"{name}.yaml"
            config.write_text(yaml.safe_dump(settings))
            argv += ["--config", str(config)]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 90) -> float:
        began = time.monotonic()
        while time.monotonic() - began < timeout_s:
            if self.proc.poll() is not None:
                raise SystemExit(f"isrwatch serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - began
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"isrwatch serve did not answer /healthz within {timeout_s:.0f} s; see {self.log.name}")

    def cpu_s(self) -> float:
        """User + system CPU seconds the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
