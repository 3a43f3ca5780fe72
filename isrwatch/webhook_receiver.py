"""`isrwatch webhook-receiver`: a small Alertmanager-compatible webhook endpoint that prints what it gets.

For the demo and for trying rules out: it listens on 127.0.0.1, answers 200 to every well-formed POST
(401 when a secret is set and the X-Isrwatch-Signature header does not verify, 400 for a body that is
not an Alertmanager version-4 payload), and prints one line per alert. Optionally it appends every
payload to a JSON-lines file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from foundation.logs import logger
from pipelines.alertmanager import SIGNATURE_HEADER, verify

log = logger("webhook_receiver")


def add_receiver_parser(sub: Any) -> None:
    p = sub.add_parser("webhook-receiver", help="print the alerts POSTed to a local webhook (Alertmanager format)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--port", type=int, default=9095, help="port on 127.0.0.1 (conf/alerts.yaml's receiver uses 9095)")
    p.add_argument("--secret", default=None, help="verify the HMAC-SHA256 signature with this secret")
    p.add_argument("--jsonl", default=None, help="also append each payload to this file")


def alert_line(alert: dict[str, Any]) -> str:
    labels = alert.get("labels", {})
    entity = " ".join(f"{k}={labels[k]}" for k in ("topic", "partition", "broker_id", "slo") if k in labels)
    summary = alert.get("annotations", {}).get("summary", "")
    return (f"webhook  {alert.get('status', '?').upper():<8} {labels.get('severity', '?'):<8} "
            f"{labels.get('alertname', '?'):<24} {labels.get('cluster', '?')} {entity}  {summary}")


class WebhookPrinter:
    def __init__(self, port: int, secret: str | None, out: TextIO, jsonl: str | None = None) -> None:
        self.secret, self.out, self.jsonl = secret, out, jsonl
        self.lock = threading.Lock()
        self.received = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the dispatcher's lanes keep their connections open

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(outer.handle(body, self.headers.get(SIGNATURE_HEADER)))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)

    def handle(self, body: bytes, signature: str | None) -> int:
        if self.secret is not None and (signature is None or not verify(body, self.secret, signature)):
            self._print(f"webhook  REJECTED: bad or missing {SIGNATURE_HEADER}")
            return 401
        try:
            message = json.loads(body)
            alerts = message["alerts"]
            if message.get("version") != "4" or not isinstance(alerts, list):
                raise ValueError("not an Alertmanager version 4 payload")
        except (ValueError, KeyError, TypeError) as e:
            self._print(f"webhook  REJECTED: {e}")
            return 400
        with self.lock:
            self.received += len(alerts)
            for alert in alerts:
                print(alert_line(alert), file=self.out, flush=True)
            if self.jsonl:
                with open(self.jsonl, "a") as f:
                    f.write(json.dumps(message) + "\n")
        return 200

    def _print(self, line: str) -> None:
        with self.lock:
            print(line, file=self.out, flush=True)

    def serve(self) -> None:
        self.server.serve_forever()


def main_receiver(args: argparse.Namespace) -> int:
    try:
        printer = WebhookPrinter(args.port, args.secret, sys.stdout, args.jsonl)
    except OSError as e:
        log.error(f"isrwatch webhook-receiver: cannot listen on 127.0.0.1:{args.port}: {e}")
        return 2
    log.info(f"isrwatch webhook-receiver: listening on http://127.0.0.1:{args.port}/ (Ctrl-C stops)")
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` from a script stops it like Ctrl-C
    with contextlib.suppress(KeyboardInterrupt):
        printer.serve()
    log.info(f"isrwatch webhook-receiver: {printer.received} alerts received")
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
