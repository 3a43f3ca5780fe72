"""Webhook delivery: every firing/resolved transition POSTed to its receivers, in order, recorded in gold.deliveries.

Each receiver has `parallel` lanes (threads), so a slow or dead receiver delays only itself and never the alert
evaluation, which hands transitions over with `submit` and returns. An alert (its fingerprint) always goes to the
same lane of its receiver, and a lane delivers strictly in gold.alert_events order: an alert's transitions arrive
in order, while different alerts' go out side by side (as Alertmanager's aggregation groups notify independently),
so a burst of N alerts takes about N/parallel POSTs' time. A lane's head is retried with exponential backoff and
full jitter (5xx, 408, 429, connection errors, timeouts) until it is delivered, rejected (any other 4xx: recorded,
not retried) or given up (`give_up_after` / `max_attempts`). A transition matched by an active silence
(api.silences, set through the API) is recorded as silenced and not sent.

Every attempt is on record, written before the POST and again after it: an intent row (outcome `sending`)
is committed before the POST, and the outcome row (same delivery_id and attempt) after. A lane commits the
intents of its head and the items queued behind it together (at most `INTENTS_PER_COMMIT`, each at its next
attempt number) and POSTs them in order. An intent is committed to a write-ahead journal on the dispatcher's
local disk (foundation/journal.py, ~0.5 ms, where a delta-rs commit to gold.deliveries takes 30-85 ms at p50 on
the way from the hand-over to the POST: bench/intent_store.py), which the flusher folds into gold.deliveries with the
outcome rows. The journal is beside a local lakehouse, and in this machine's state directory for a lakehouse on an
object store (`intents_directory`). A lane POSTs an item only once its intent is committed;
outcome rows are buffered and flushed every `flush_every_s`. So a POST that was made always has a committed
intent (unless the machine's disk is lost with the journal, below), while its outcome may be lost with the
process. At most `INTENTS_PER_COMMIT` intents of a lane are committed and not yet POSTed; when the lane stops
(not when it dies) those get the outcome `not_sent`.

Restart: `recover()` folds the intents a crash left in the journal into gold.deliveries, gives every intent
without an outcome the outcome `unknown` (the receiver may have got it) and re-queues every routed
transition in gold.alert_events without a final outcome, at the next attempt number, so a receiver down
across a restart still gets everything, in order. A journal lost with its machine (a driver restarted elsewhere)
loses the record of the attempts since the last flush, not a delivery: their transitions have no final outcome
in gold.deliveries, so they are sent again, under the same delivery id and possibly an attempt number already
used. Delivery is at least
once; receivers de-duplicate on the delivery id (`<event_id>@<receiver>`), the same on every attempt, in
the X-Isrwatch-Delivery header and the payload's `isrwatchDeliveryId` (docs/webhooks.md).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import urllib3

from foundation import kill_points, object_store
from foundation.delta_io import KeptOpen, ensure_table, read_rows
from foundation.journal import Journal
from foundation.object_store import is_object_store, lake_filesystem
from pipelines.alert_rules import AlertConfig, Receiver
from pipelines.alertmanager import (
    ATTEMPT_HEADER,
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    body_of,
    delivery_id,
    payload,
    signature,
)
from pipelines.silence_store import SilenceStore
from schemas.gold import ALERT_EVENTS, DELIVERIES, NOTIFIED, DeliveryOutcome

FINAL = (DeliveryOutcome.DELIVERED, DeliveryOutcome.REJECTED, DeliveryOutcome.GAVE_UP, DeliveryOutcome.SILENCED)
INTENT = DeliveryOutcome.SENDING          # the row committed before a POST; every other outcome ends an attempt
RETRYABLE_4XX = (408, 429)
INTENTS_PER_COMMIT = 50     # at most this many intents committed ahead of their POSTs per lane, in one commit
UNKNOWN_ERROR = "no outcome recorded before the dispatcher stopped: the receiver may have got it"


@dataclass
class Pending:
    event: dict[str, Any]
    attempt: int = 0              # attempts begun so far (gold.deliveries.attempt of the last one)
    first_try: float | None = None
    due: float = 0.0
    intended: int | None = None   # attempt whose intent is committed and whose POST is not made yet

    @property
    def event_id(self) -> str:
        return str(self.event["event_id"])


def routed(event: dict[str, Any], receiver: Receiver) -> bool:
    """A firing or resolved transition goes to the receivers whose routes match it, unless it is inhibited or held
    back because its alert is flapping (the engine tells the receivers the true state once it settles)."""
    return (event["status"] in NOTIFIED and not event["inhibited"] and not event.get("flapping")
            and receiver.routes(event["severity"], dict(event["labels"])))


class Lane(threading.Thread):
    def __init__(self, dispatcher: WebhookDispatcher, receiver: Receiver, index: int) -> None:
        super().__init__(name=f"webhook-{receiver.name}-{index}", daemon=True)
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
                    break
                head = self.queue[0]
                wait = head.due - time.monotonic()
                if wait > 0:
                    self.cond.wait(min(wait, 0.5))
                    continue
                # The items behind the head that intents may be committed for (bounded: few intents are left
                # never sent by a crash).
                coming = list(islice(self.queue, 1, INTENTS_PER_COMMIT))
            try:
                done = self._attempt(head, coming)
            except Exception as e:  # a fault of isrwatch's own must not end the lane: report it, back off, try again
                self.d.log(f"webhook {self.receiver.name}: {head.event_id}: {type(e).__name__}: {e}")
                head.due, done = time.monotonic() + self.receiver.backoff_max_s, False
            if done:
                with self.cond:
                    self.queue.popleft()
        self._not_sent()

    def _attempt(self, item: Pending, coming: list[Pending]) -> bool:
        """One POST; True when the item is finished (delivered, rejected, given up or silenced)."""
        r = self.receiver
        silenced_by = self.d.silences.matching(item.event["labels"])
        if silenced_by:
            # Alertmanager semantics: a silence suppresses the notification, not the alert (it stays in
            # gold.alerts and gold.alert_events). Final: when the silence ends, later transitions go out.
            # Not sent, so no intent is needed; one committed before the silence began is ended by this row.
            item.attempt = item.intended or item.attempt + 1
            item.intended = None
            self.d.record(item, r, DeliveryOutcome.SILENCED, None, f"silenced by {', '.join(silenced_by)}", 0.0, None)
            return True
        if item.intended is None and not self._commit_intents(item, coming):
            return False
        assert item.intended is not None, f"{item.event_id}: POST without a committed intent"
        item.attempt, item.intended = item.intended, None
        ident = delivery_id(item.event_id, r.name)
        body = body_of(payload(item.event, r.name, self.d.config.external_url))
        headers = {"Content-Type": "application/json", DELIVERY_HEADER: ident, ATTEMPT_HEADER: str(item.attempt),
                   "User-Agent": "isrwatch"}
        if r.secret:
            headers[SIGNATURE_HEADER] = signature(body, r.secret)
        now = time.monotonic()
        item.first_try = item.first_try if item.first_try is not None else now
        began, status, error = time.monotonic(), None, None
        try:
            resp = self.d.http[r.name].request("POST", r.url, body=body, headers=headers, redirect=False,
                                               timeout=urllib3.Timeout(total=r.timeout_s))
            status = resp.status
            if not 200 <= status < 300:
                error = f"HTTP {status} {resp.reason}"
        except (urllib3.exceptions.HTTPError, OSError) as e:  # refused, reset, timed out
            error = f"{type(e).__name__}: {e}"
        took_ms = (time.monotonic() - began) * 1000
        self.d.posted()
        if status is not None and 200 <= status < 300:
            outcome = DeliveryOutcome.DELIVERED
        elif status is not None and 400 <= status < 500 and status not in RETRYABLE_4XX:
            outcome = DeliveryOutcome.REJECTED
        elif (r.max_attempts is not None and item.attempt >= r.max_attempts) or \
                time.monotonic() - item.first_try >= r.give_up_after_s:
            outcome = DeliveryOutcome.GAVE_UP
        else:
            outcome = DeliveryOutcome.RETRY
        next_at = None
        if outcome == DeliveryOutcome.RETRY:
            # Full jitter (AWS architecture blog): uniform in [0, min(cap, initial * 2^(n-1))].
            delay = self.d.rng.uniform(0, min(r.backoff_max_s, r.backoff_initial_s * 2 ** (item.attempt - 1)))
            item.due = time.monotonic() + delay
            next_at = datetime.now(UTC).timestamp() + delay
        self.d.record(item, r, outcome, status, error, took_ms, next_at)
        return outcome != DeliveryOutcome.RETRY

    def _unintended(self, items: list[Pending]) -> list[Pending]:
        """Those without a committed intent that no active silence matches now."""
        return [i for i in items if i.intended is None and not self.d.silences.matching(i.event["labels"])]

    def _commit_intents(self, head: Pending, nearest: list[Pending]) -> bool:
        """Commit the intents of the head and of the nearest items behind it, in one commit, now."""
        batch = [head, *self._unintended(nearest)]
        try:
            self.d.commit_intents([(i, i.attempt + 1) for i in batch], self.receiver)
        except Exception as e:  # no intent, no POST: wait and try again
            self.d.log(f"webhook {self.receiver.name}: writing intents to gold.deliveries failed: {e}")
            head.due = time.monotonic() + self.receiver.backoff_initial_s
            return False
        for item in batch:
            item.intended = item.attempt + 1
        return True

    def _not_sent(self) -> None:
        """Stopping between POSTs: end the intents committed for items not POSTed."""
        with self.cond:
            left = [i for i in self.queue if i.intended is not None]
        for item in left:
            item.attempt, item.intended = item.intended or item.attempt, None
            self.d.record(item, self.receiver, DeliveryOutcome.NOT_SENT, None, "stopped before the POST", 0.0, None,
                          quiet=True)
        if left:
            self.d.log(f"webhook {self.receiver.name}: stopped with {len(left)} intent(s) not sent")


class WebhookDispatcher:
    def __init__(self, config: AlertConfig, lakehouse: str, *, flush_every_s: float = 0.5,
                 rng: random.Random | None = None, log: Callable[[str], None] = lambda _: None,
                 owns: Callable[[str], bool] = lambda _rule: True, journal: str | Path) -> None:
        self.config, self.lakehouse, self.flush_every_s = config, lakehouse, flush_every_s
        # Which rules' gold.alert_events rows are this dispatcher's to recover (the alert lane and the alerts job
        # each have one: jobs/alert_stage.py).
        self.owns = owns
        self.rng = rng or random.Random()
        self.log = log
        self.silences = SilenceStore(lakehouse)
        self.stopping = threading.Event()
        self.lanes = {r.name: [Lane(self, r, i) for i in range(r.parallel)] for r in config.receivers}
        # Kept-alive connections, one per lane at most (no TCP handshake per POST in a burst). Neither retries nor
        # redirects: a lane retries with its own backoff, and a redirected webhook is a receiver misconfigured.
        self.http = {r.name: urllib3.PoolManager(maxsize=r.parallel, retries=False) for r in config.receivers}
        self._records: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self.deliveries = KeptOpen(DELIVERIES, lakehouse)  # each lane and the flusher keep it open
        # The intents' write-ahead journal (its own directory: one dispatcher writes it).
        self.journal = Journal(journal, DELIVERIES.arrow_schema)
        self._flusher = threading.Thread(target=self._flush_loop, name="webhook-records", daemon=True)
        self.delivered = 0
        self.posts = 0

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> WebhookDispatcher:
        ensure_table(DELIVERIES, self.lakehouse)
        self.recover()
        for lane in self._all_lanes():
            lane.start()
        self._flusher.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        for lane in self._all_lanes():
            with lane.cond:
                lane.cond.notify_all()
            if lane.is_alive():
                lane.join(10)
        if self._flusher.is_alive():
            self._flusher.join(10)
        self.flush()
        self.journal.close()
        for pool in self.http.values():
            pool.clear()

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every lane's queue is empty and its records are flushed (tests, demo)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(lane.idle() for lane in self._all_lanes()):
                self.flush()
                return True
            time.sleep(0.05)
        return False

    # -- input -----------------------------------------------------------------------------------------
    def recover(self) -> int:
        """Fold the journal a crash left, end every intent left without an outcome (`unknown`), then queue every
        routed transition that has no final outcome yet, in alert_events order, at its next attempt number."""
        columns = ["delivery_id", "event_id", "receiver", "rule", "fingerprint", "alert_status", "attempt", "outcome"]
        done = [d for d in read_rows(DELIVERIES, self.lakehouse, columns).to_pylist() if self.owns(d["rule"])]
        segments = self.journal.seal()
        # A crash between a fold's commit and its segments' removal leaves rows the table holds already.
        on_record = {(d["delivery_id"], d["attempt"], d["outcome"]) for d in done}
        journaled = [r for s in segments for r in s.rows.to_pylist()
                     if (r["delivery_id"], r["attempt"], r["outcome"]) not in on_record]
        done += [{c: r[c] for c in columns} for r in journaled]
        ended = {(d["delivery_id"], d["attempt"]) for d in done if d["outcome"] != INTENT}
        unresolved = {(d["delivery_id"], d["attempt"]): d for d in done
                      if d["outcome"] == INTENT and (d["delivery_id"], d["attempt"]) not in ended}
        now = datetime.now(UTC)
        unknown = [{**d, "outcome": DeliveryOutcome.UNKNOWN, "http_status": None, "error": UNKNOWN_ERROR,
                    "attempted_at": now, "duration_ms": 0.0, "next_attempt_at": None} for d in unresolved.values()]
        if journaled or unknown:
            self.deliveries.append(pa.Table.from_pylist(journaled + unknown, schema=DELIVERIES.arrow_schema))
        self.journal.drop(segments)
        if unknown:
            self.log(f"webhooks: {len(unknown)} attempt(s) without an outcome recorded as unknown (sent again)")
        events = read_rows(ALERT_EVENTS, self.lakehouse)
        if not events.num_rows:
            return 0
        events = events.filter(pc.is_in(events["status"], pa.array([s.value for s in NOTIFIED])))
        final = {(d["event_id"], d["receiver"]) for d in done if d["outcome"] in FINAL}
        attempts: dict[tuple[str, str], int] = {}
        for d in done:   # intents count: an attempt that may have been sent is never numbered again
            key = (d["event_id"], d["receiver"])
            attempts[key] = max(attempts.get(key, 0), d["attempt"])
        rows = sorted((e for e in events.to_pylist() if self.owns(e["rule"])),
                      key=lambda e: (e["eval_batch_id"], e["seq"]))
        queued = 0
        for r in self.config.receivers:
            for e in rows:
                key, lane = (e["event_id"], r.name), self.lane(r.name, e)
                if key in final:
                    lane.known.add(e["event_id"])
                elif routed(_as_event(e), r):
                    lane.add(Pending(_as_event(e), attempts.get(key, 0)))
                    queued += 1
        if queued:
            self.log(f"webhooks: {queued} undelivered transition(s) queued again after restart")
        return queued

    def submit(self, events: list[dict[str, Any]]) -> None:
        """Hand over committed gold.alert_events rows (in order); returns at once."""
        for e in events:
            event = _as_event(e)
            for r in self.config.receivers:
                if routed(event, r):
                    self.lane(r.name, event).add(Pending(event))

    def lane(self, receiver: str, event: dict[str, Any]) -> Lane:
        """The receiver's lane for the event's alert: the same for all its transitions, in every process."""
        lanes = self.lanes[receiver]
        return lanes[zlib.crc32(str(event["fingerprint"]).encode()) % len(lanes)]

    def _all_lanes(self) -> list[Lane]:
        return [lane for lanes in self.lanes.values() for lane in lanes]

    # -- records ---------------------------------------------------------------------------------------
    def commit_intents(self, attempts: list[tuple[Pending, int]], r: Receiver) -> None:
        """One commit of intent rows (outcome `sending`), before any of these attempts' POSTs."""
        now = datetime.now(UTC)
        rows = pa.Table.from_pylist([_row(item, r, attempt, INTENT, None, None, now, 0.0, None)
                                     for item, attempt in attempts], schema=DELIVERIES.arrow_schema)
        self.journal.append(rows)

    def posted(self) -> None:
        """A POST was answered (or failed); its outcome is not recorded yet."""
        with self._lock:
            self.posts += 1
            n = self.posts
        kill_points.reached("webhook", n, "after_post")  # its n-th POST answered, its outcome not recorded

    def record(self, item: Pending, r: Receiver, outcome: DeliveryOutcome, status: int | None, error: str | None,
               took_ms: float, next_at: float | None, *, quiet: bool = False) -> None:
        next_ts = None if next_at is None else datetime.fromtimestamp(next_at, tz=UTC)
        row = _row(item, r, item.attempt, outcome, status, error, datetime.now(UTC), took_ms, next_ts)
        with self._lock:
            self._records.append(row)
            self.delivered += outcome == DeliveryOutcome.DELIVERED
        if outcome != DeliveryOutcome.DELIVERED and not quiet:
            self.log(f"webhook {r.name}: {item.event['rule']} {item.event['status']} attempt {item.attempt}: "
                     f"{outcome} ({error or status})")

    def flush(self) -> int:
        """The outcome rows buffered and the journal's intents, in one commit to gold.deliveries. The outcomes are
        taken first: an outcome's intent was journaled before its POST, so it is in the segments sealed after."""
        with self._flushing:  # one at a time: a segment sealed by one flush is not folded by another
            return self._flush()

    def _flush(self) -> int:
        with self._lock:
            rows, self._records = self._records, []
        segments = self.journal.seal()
        tables = [s.rows for s in segments]
        if rows:
            tables.append(pa.Table.from_pylist(rows, schema=DELIVERIES.arrow_schema))
        if sum(t.num_rows for t in tables):
            try:
                self.deliveries.append(pa.concat_tables(tables))
            except Exception:
                with self._lock:  # keep them for the next flush (the segments stay on disk until folded)
                    self._records[:0] = rows
                raise
        self.journal.drop(segments)
        return len(rows)

    def _flush_loop(self) -> None:
        while not self.stopping.wait(self.flush_every_s):
            try:
                self.flush()
            except Exception as e:  # a failed flush keeps nothing from retrying; report and go on
                self.log(f"webhooks: writing gold.deliveries failed: {e}")


def intents_directory(lakehouse: str, dispatcher: str) -> Path:
    """Where a dispatcher journals its intents: beside a local lakehouse; for a lakehouse on an object store, which
    has no append-and-fsync, under this machine's state directory ($XDG_STATE_HOME, else ~/.local/state), in a folder
    named after the lakehouse (its bucket and path, and a digest of those with the store's endpoint: `s3://` and
    `s3a://` name the same one, two stores' same bucket and path do not), so a restart on this machine finds it."""
    if not is_object_store(lakehouse):
        return Path(lake_filesystem(lakehouse)[1]) / "_webhook_intents" / dispatcher
    parts = urlsplit(lakehouse)
    where = re.sub(r"/+", "/", f"{parts.netloc}/{parts.path}").strip("/")
    digest = hashlib.sha256(f"{object_store.current().endpoint or 'aws'}|{where}".encode()).hexdigest()[:12]
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    name = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', where)}-{digest}"
    return state / "isrwatch" / "webhook-intents" / name / dispatcher


def _row(item: Pending, r: Receiver, attempt: int, outcome: DeliveryOutcome, status: int | None, error: str | None,
         at: datetime, took_ms: float, next_at: datetime | None) -> dict[str, Any]:
    return {"delivery_id": delivery_id(item.event_id, r.name), "event_id": item.event_id, "receiver": r.name,
            "rule": item.event["rule"], "fingerprint": item.event["fingerprint"],
            "alert_status": item.event["status"], "attempt": attempt, "outcome": outcome, "http_status": status,
            "error": error, "attempted_at": at, "duration_ms": took_ms, "next_attempt_at": next_at}


def _as_event(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "labels": dict(row["labels"])}  # Arrow maps arrive as (key, value) lists
