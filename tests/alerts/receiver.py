"""The one webhook receiver of the tests and the benches: an HTTP server on 127.0.0.1 that records every POST."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def signed_with(body: bytes, secret: str, header: str) -> bool:
    """Whether `header` is the HMAC-SHA256 of `body` under `secret` as docs/alerts.md tells a receiver to check it
    ('sha256=' + hex digest), computed here rather than by the product's own `verify`."""
    return header == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Receiver:
    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[int] = []      # statuses to answer with, in order; then 200
        self.after_answer: Callable[[int], None] | None = None  # called with the POST's number once answered
        self.hold_s = 0.0                 # each POST is answered this long after it arrived
        self.in_flight = 0
        self.most_in_flight = 0           # the most POSTs being answered at once
        self.keep_alive = False           # HTTP/1.1, connections kept open (the default: HTTP/1.0, one per POST)
        self.lock = threading.Lock()
        self.got = threading.Condition(self.lock)
        self.port = port
        self.server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/alerts"

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if outer.keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                arrived = time.monotonic()
                with outer.lock:
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                time.sleep(outer.hold_s)
                with outer.got:
                    outer.in_flight -= 1
                    status = outer.answers.pop(0) if outer.answers else 200
                    outer.requests.append({"headers": dict(self.headers), "body": body,
                                           "json": json.loads(body), "status": status,
                                           "client_port": self.client_address[1], "at": time.time(),
                                           "arrived": arrived})
                    n = len(outer.requests)
                    outer.got.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                if outer.after_answer is not None:
                    outer.after_answer(n)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def wait_for(self, n: int, timeout: float = 30) -> list[dict[str, Any]]:
        with self.got:
            self.got.wait_for(lambda: len(self.requests) >= n, timeout)
            return list(self.requests)

    def arrivals(self) -> list[tuple[float, dict[str, Any]]]:
        """Every alert POSTed, with when its POST arrived (this process's monotonic clock), in arrival order."""
        with self.lock:
            return [(r["arrived"], a) for r in self.requests for a in r["json"]["alerts"]]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()

    def delivered(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if 200 <= r["status"] < 300]


def rules_file(tmp: Path, url: str) -> str:
    """The shipped rules, delivering critical and warning alerts to `url` (retrying after 50 ms), written in `tmp`."""
    raw = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    raw["receivers"] = [{"name": "test", "url": url, "backoff_initial": "50ms", "severities": ["critical", "warning"]}]
    path = tmp / "alerts.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)
