"""A Spark standalone cluster on loopback for the tests and the bench (not part of the product).

Spark's own master and worker classes from the venv's pyspark, started as docs/cluster.md shows (the pip
pyspark has no sbin/start-master.sh): `spark-class org.apache.spark.deploy.master.Master …` and
`… worker.Worker spark://…`. `with StandaloneCluster(folder) as cluster:` waits until every worker has
registered with the master, and stops both (and the executors they started) on exit, even on a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from testing.s3proxy import free_port

SPARK_CLASS = Path(sys.executable).parent / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(RuntimeError):
    """The master or a worker did not start."""


def master_command(port: int, webui_port: int) -> list[str]:
    return [str(SPARK_CLASS), MASTER_CLASS, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui_port)]


def worker_command(master_url: str, cores: int, memory: str, work_dir: Path, webui_port: int) -> list[str]:
    return [str(SPARK_CLASS), WORKER_CLASS, master_url, "--host", "127.0.0.1", "--cores", str(cores),
            "--memory", memory, "--work-dir", str(work_dir), "--webui-port", str(webui_port)]


class StandaloneCluster:
    """One master and `workers` workers of `cores` cores and `memory` each, on 127.0.0.1."""

    def __init__(self, folder: Path, workers: int = 1, cores: int = 1, memory: str = "1g") -> None:
        self.folder = folder
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.webui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    @property
    def environment(self) -> dict[str, str]:
        # spark-class finds SPARK_HOME through the venv's Python; daemons need little heap. No AWS_* variable:
        # executors inherit their worker's environment, and an application brings its own credentials.
        mine = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**mine, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}

    def _start(self, name: str, cmd: list[str]) -> None:
        log = (self.folder / f"{name}.log").open("wb")
        self._logs.append(log)
        self.procs.append(subprocess.Popen(cmd, env=self.environment, stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True))

    def status(self) -> dict[str, Any]:
        """The master's own JSON status page (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as answer:
            return dict(json.load(answer))

    def start(self, timeout_s: float = 90.0) -> StandaloneCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._start("master", master_command(self.port, self.webui_port))
        for i in range(self.workers):
            self._start(f"worker-{i}", worker_command(self.master_url, self.cores, self.memory,
                                                      self.folder / f"work-{i}", free_port()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            exited = [" ".join(map(str, p.args)) for p in self.procs if p.poll() is not None]  # type: ignore[arg-type]
            if exited:
                self.stop()
                raise SparkClusterError(f"{exited[0]} exited: see {self.folder}/*.log")
            with contextlib.suppress(OSError, ValueError):
                alive = [w for w in self.status().get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) == self.workers:
                    return self
            time.sleep(0.25)
        self.stop()
        raise SparkClusterError(f"{self.workers} worker(s) did not register with {self.master_url} within "
                                f"{timeout_s:.0f} s: see {self.folder}/*.log")

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker `index` and the executors it started (its process group), as a machine lost would."""
        os.killpg(self.procs[1 + index].pid, signal.SIGKILL)

    def stop(self) -> None:
        # Workers first (each ends the executors it started), then the master.
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.procs.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
