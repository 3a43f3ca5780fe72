"""A real S3-compatible server on loopback for the tests and the cluster demo (not part of the product).

s3proxy 4 (jvm/s3proxy/pom.xml, fetched by `make s3-jars`) with its filesystem back end: a bucket is a folder
under the server's root, an object a file. It enforces the conditional put (`If-None-Match: *`) that delta-rs
commits with, atomically, as AWS S3 does; so concurrent writers behave here as they would there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
JARS_DIR = ROOT / "jvm" / "s3proxy" / "jars"
LOGBACK = ROOT / "jvm" / "s3proxy" / "logback.xml"
ACCESS_KEY = "isrwatch-test"
SECRET_KEY = "isrwatch-test-secret"


class ObjectStoreFixtureError(RuntimeError):
    """The server's jars are missing, or it did not start."""


def free_port() -> int:
    """A loopback port nobody listens on now (the servers here and in testing/spark_standalone.py take one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Proxy:
    """`with S3Proxy(folder) as s3:` a server at `s3.endpoint` holding `s3.bucket`, stopped on exit."""

    def __init__(self, folder: Path, bucket: str = "lake") -> None:
        if not any(JARS_DIR.glob("s3proxy-*.jar")):
            raise ObjectStoreFixtureError(f"s3proxy jars not found in {JARS_DIR}: run `make s3-jars`")
        self.folder = folder
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def environment(self) -> dict[str, str]:
        """What a process needs to reach the store (foundation/object_store.py reads these)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def uri(self, path: str = "", scheme: str = "s3a") -> str:
        return f"{scheme}://{self.bucket}/{path.lstrip('/')}".rstrip("/")

    def start(self, timeout_s: float = 60.0) -> S3Proxy:
        data = self.folder / "data"
        (data / self.bucket).mkdir(parents=True, exist_ok=True)
        properties = self.folder / "s3proxy.properties"
        properties.write_text("\n".join([
            f"s3proxy.endpoint={self.endpoint}", "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={ACCESS_KEY}", f"s3proxy.credential={SECRET_KEY}",
            "jclouds.provider=filesystem-nio2", f"jclouds.filesystem.basedir={data}",
            "s3proxy.ignore-unknown-headers=true", ""]))
        self._log = log = (self.folder / "s3proxy.log").open("wb")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Dlogback.configurationFile={LOGBACK}", "-cp", f"{JARS_DIR}/*", "org.gaul.s3proxy.Main",
             "--properties", str(properties)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ObjectStoreFixtureError(f"s3proxy exited with {self.proc.returncode}: "
                                              f"{(self.folder / 's3proxy.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.endpoint, timeout=1):
                    return self
            except urllib.error.HTTPError:
                return self   # it answers (403 to an anonymous request): ready
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise ObjectStoreFixtureError(f"s3proxy did not answer on {self.endpoint} within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> S3Proxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
