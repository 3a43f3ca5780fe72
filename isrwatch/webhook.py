"""Webhook delivery: every firing/resolved transition POSTed to its receivers, in order, recorded in gold.deliveries.

One lane (thread) per receiver, so a slow or dead receiver delays only itself and never the alert
evaluation, which hands transitions over with `submit` and returns. A lane delivers its transitions
strictly in gold.alert_events order: the head is retried with exponential backoff and full jitter
(5xx, 408, 429, connection errors, timeouts) until it is delivered, rejected (any other 4xx: recorded,
not retried) or given up (`give_up_after` / `max_attempts`). A transition matched by an active silence
(api.silences, set through the API) is recorded as silenced and not sent. Every attempt is a
gold.deliveries row.

Restart: `recover()` re-queues every routed transition in gold.alert_events without a final outcome in
gold.deliveries, so a receiver down across a restart still gets everything, in order. Delivery is
at least once (a POST whose record was not yet flushed is sent again); receivers de-duplicate with the
X-Isrwatch-Delivery header, which is the same on every attempt.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from isrwatch.delta_io import append, ensure_table, read_rows
from isrwatch.silence_store import SilenceStore
from pipelines.alert_rules import AlertConfig, Receiver
from pipelines.alertmanager import DELIVERY_HEADER, SIGNATURE_HEADER, body_of, payload, signature
from schemas.gold import ALERT_EVENTS, DELIVERIES

FINAL = ("delivered", "rejected", "gave_up", "silenced")
RETRYABLE_4XX = (408, 429)


@dataclass
class Pending:
    event: dict[str, Any]
    attempt: int = 0              # attempts made so far
    first_try: float | None = None
    due: float = 0.0

    @property
    def event_id(self) -> str:
        return str(self.event["event_id"])


def routed(event: dict[str, Any], receiver: Receiver) -> bool:
    return (event["status"] in ("firing", "resolved") and not event["inhibited"]
            and receiver.routes(event["severity"], dict(event["labels"])))


class Lane(threading.Thread):
    def __init__(self, dispatcher: WebhookDispatcher, receiver: Receiver) -> None:
        super().__init__(name=f"webhook-{receiver.name}", daemon=True)
        self.d, self.receiver = dispatcher, receiver
        self.queue: deque[Pending] = deque()
        self.known: set[str] = set()   # event ids queued or finished: never queued twice
        self.cond = threading.Condition()

    def add(self, item: Pending) -> None:
        with self.cond:
            if item.event_id in self.known:
                return
            self.known.add(item.event_id)
            self.queue.append(item)
            self.cond.notify()

    def idle(self) -> bool:
        with self.cond:
            return not self.queue

    def run(self) -> None:
        while not self.d.stopping.is_set():
            with self.cond:
                while not self.queue and not self.d.stopping.is_set():
                    self.cond.wait(0.5)
                if self.d.stopping.is_set():
                    return
                head = self.queue[0]
                wait = head.due - time.monotonic()
                if wait > 0:
                    self.cond.wait(min(wait, 0.5))
                    continue
            if self._attempt(head):
                with self.cond:
                    self.queue.popleft()

    def _attempt(self, item: Pending) -> bool:
        """One POST; True when the item is finished (delivered, rejected or given up)."""
        r = self.receiver
        silenced_by = self.d.silences.matching(item.event["labels"])
        if silenced_by:
            # Alertmanager semantics: a silence suppresses the notification, not the alert (it stays in
            # gold.alerts and gold.alert_events). Final: when the silence ends, later transitions go out.
            item.attempt += 1
            self.d.record(item, r, "silenced", None, f"silenced by {', '.join(silenced_by)}", 0.0, None)
            return True
        body = body_of(payload(item.event, r.name, self.d.config.external_url))
        headers = {"Content-Type": "application/json", DELIVERY_HEADER: f"{item.event_id}@{r.name}",
                   "User-Agent": "isrwatch"}
        if r.secret:
            headers[SIGNATURE_HEADER] = signature(body, r.secret)
        item.attempt += 1
        now = time.monotonic()
        item.first_try = item.first_try if item.first_try is not None else now
        began, status, error = time.monotonic(), None, None
        try:
            req = urllib.request.Request(r.url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=r.timeout_s) as resp:
                status = resp.status
        except urllib.error.HTTPError as e:
            status, error = e.code, f"HTTP {e.code} {e.reason}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            error = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        took_ms = (time.monotonic() - began) * 1000
        if status is not None and 200 <= status < 300:
            outcome = "delivered"
        elif status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX:
            outcome = "rejected"
        elif (r.max_attempts is not None and item.attempt >= r.max_attempts) or \
                time.monotonic() - item.first_try >= r.give_up_after_s:
            outcome = "gave_up"
        else:
            outcome = "retry"
        next_at = None
        if outcome == "retry":
            # Full jitter (AWS architecture blog): uniform in [0, min(cap, initial * 2^(n-1))].
            delay = self.d.rng.uniform(0, min(r.backoff_max_s, r.backoff_initial_s * 2 ** (item.attempt - 1)))
            item.due = time.monotonic() + delay
            next_at = datetime.now(UTC).timestamp() + delay
        self.d.record(item, r, outcome, status, error, took_ms, next_at)
        return outcome != "retry"


class WebhookDispatcher:
    def __init__(self, config: AlertConfig, lakehouse: str, *, flush_every_s: float = 0.5,
                 rng: random.Random | None = None, log: Callable[[str], None] = lambda _: None) -> None:
        self.config, self.lakehouse, self.flush_every_s = config, lakehouse, flush_every_s
        self.rng = rng or random.Random()
        self.log = log
        self.silences = SilenceStore(lakehouse)
        self.stopping = threading.Event()
        self.lanes = {r.name: Lane(self, r) for r in config.receivers}
        self._records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._flusher = threading.Thread(target=self._flush_loop, name="webhook-records", daemon=True)
        self.delivered = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> WebhookDispatcher:
        ensure_table(DELIVERIES, self.lakehouse)
        self.recover()
        for lane in self.lanes.values():
            lane.start()
        self._flusher.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for lane in self.lanes.values():
            with lane.cond:
                lane.cond.notify_all()
            if lane.is_alive():
                lane.join(10)
        if self._flusher.is_alive():
            self._flusher.join(10)
        self.flush()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every lane's queue is empty and its records are flushed (tests, demo)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(lane.idle() for lane in self.lanes.values()):
                self.flush()
                return True
            time.sleep(0.05)
        return False

    # -- input -----------------------------------------------------------------------------------------
    def recover(self) -> int:
        """Queue every routed transition that has no final outcome yet, in alert_events order."""
        events = read_rows(ALERT_EVENTS, self.lakehouse)
        if not events.num_rows:
            return 0
        events = events.filter(pc.is_in(events["status"], pa.array(["firing", "resolved"])))
        done = read_rows(DELIVERIES, self.lakehouse, ["event_id", "receiver", "attempt", "outcome"]).to_pylist()
        final = {(d["event_id"], d["receiver"]) for d in done if d["outcome"] in FINAL}
        attempts: dict[tuple[str, str], int] = {}
        for d in done:
            key = (d["event_id"], d["receiver"])
            attempts[key] = max(attempts.get(key, 0), d["attempt"])
        rows = sorted(events.to_pylist(), key=lambda e: (e["eval_batch_id"], e["seq"]))
        queued = 0
        for lane in self.lanes.values():
            for e in rows:
                key = (e["event_id"], lane.receiver.name)
                if key in final:
                    lane.known.add(e["event_id"])
                elif routed(_as_event(e), lane.receiver):
                    lane.add(Pending(_as_event(e), attempts.get(key, 0)))
                    queued += 1
        if queued:
            self.log(f"webhooks: {queued} undelivered transition(s) queued again after restart")
        return queued

    def submit(self, events: list[dict[str, Any]]) -> None:
        """Hand over committed gold.alert_events rows (in order); returns at once."""
        for e in events:
            event = _as_event(e)
            for lane in self.lanes.values():
                if routed(event, lane.receiver):
                    lane.add(Pending(event))

    # -- records ---------------------------------------------------------------------------------------
    def record(self, item: Pending, r: Receiver, outcome: str, status: int | None, error: str | None,
               took_ms: float, next_at: float | None) -> None:
        now = datetime.now(UTC)
        row = {"delivery_id": f"{item.event_id}@{r.name}", "event_id": item.event_id, "receiver": r.name,
               "rule": item.event["rule"], "fingerprint": item.event["fingerprint"],
               "alert_status": item.event["status"], "attempt": item.attempt, "outcome": outcome,
               "http_status": status, "error": error, "attempted_at": now, "duration_ms": took_ms,
               "next_attempt_at": None if next_at is None else datetime.fromtimestamp(next_at, tz=UTC)}
        with self._lock:
            self._records.append(row)
        self.delivered += outcome == "delivered"
        if outcome != "delivered":
            self.log(f"webhook {r.name}: {item.event['rule']} {item.event['status']} attempt {item.attempt}: "
                     f"{outcome} ({error or status})")

    def flush(self) -> int:
        with self._lock:
            rows, self._records = self._records, []
        if rows:
            try:
                append(DELIVERIES, self.lakehouse, pa.Table.from_pylist(rows, schema=DELIVERIES.arrow_schema))
            except Exception:
                with self._lock:  # keep them for the next flush
                    self._records[:0] = rows
                raise
        return len(rows)

    def _flush_loop(self) -> None:
        while not self.stopping.wait(self.flush_every_s):
            try:
                self.flush()
            except Exception as e:  # a failed flush keeps nothing from retrying; report and go on
                self.log(f"webhooks: writing gold.deliveries failed: {e}")


def _as_event(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "labels": dict(row["labels"])}  # Arrow maps arrive as (key, value) lists
