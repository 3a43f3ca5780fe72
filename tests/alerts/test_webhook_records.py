"""Every delivery attempt on record: an intent row is journaled before each POST (and folded into gold.deliveries)
and the outcome row written after it, so a dispatcher SIGKILLed between a POST and its outcome (a real subprocess,
tests/alerts/webhook_child.py) leaves an attempt that the next start records as `unknown` and sends again,
with the same delivery id in the X-Isrwatch-Delivery header and the payload's `isrwatchDeliveryId`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from foundation.delta_io import KeptOpen
from foundation.journal import Journal
from pipelines.webhook_delivery import UNKNOWN_ERROR
from schemas.gold import DELIVERIES
from tests.alerts.receiver import Receiver as HttpReceiver
from tests.alerts.test_webhook import dispatcher, events, journal_dir, records, store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver() -> Any:
    r = HttpReceiver().start()
    yield r
    r.stop()


def child(lake: str, url: str, *, kill_at: str | None = None,
          flush_every_s: float = 0.5) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.alerts.webhook_child", lake, url,
                             "--flush-every", str(flush_every_s), *(["--kill-at", kill_at] if kill_at else [])],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def killed(proc: subprocess.Popen[str]) -> None:
    """Waits for the child's end: it must have been SIGKILLed."""
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == -signal.SIGKILL, err[-2000:]


def posts(receiver: HttpReceiver) -> list[tuple[str, int]]:
    """(delivery id, attempt) of every POST the receiver got, in order; the payload's id is the header's."""
    got = []
    for r in receiver.requests:
        ident = r["headers"]["X-Isrwatch-Delivery"]
        assert r["json"]["isrwatchDeliveryId"] == ident
        got.append((ident, int(r["headers"]["X-Isrwatch-Attempt"])))
    return got


def attempts(lake: str) -> dict[tuple[str, int], list[str]]:
    """(delivery id, attempt) -> its rows' outcomes in the order written (the intent first): gold.deliveries's and the
    journal's, which a dispatcher killed may have left unfolded."""
    out: dict[tuple[str, int], list[str]] = {}
    left = Journal(journal_dir(lake), DELIVERIES.arrow_schema).seal()
    for r in records(lake) + [r for s in left for r in s.rows.to_pylist()]:
        out.setdefault((r["delivery_id"], r["attempt"]), []).append(r["outcome"])
    return out


def recover_and_deliver(lake: str, url: str) -> None:
    d = dispatcher(lake, url).start()
    try:
        assert d.wait_idle(30)
    finally:
        d.stop()


def test_a_kill_between_post_and_outcome_leaves_both_attempts_on_record(tmp_path: Path,
                                                                         receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    store(lake, events(3), 0)
    # Killed once the receiver answered its second POST, before that outcome is recorded (and the first's is
    # still buffered: flushes every 60 s).
    killed(child(lake, receiver.url, kill_at="webhook:2:after_post", flush_every_s=60))
    assert posts(receiver) == [("0-0@hook", 1), ("0-1@hook", 1)]
    assert [r["status"] for r in receiver.requests] == [200, 200]
    # On record: the intents of the lane's three due items, journaled together before the first POST, not folded
    # into gold.deliveries yet.
    assert records(lake) == []
    assert attempts(lake) == {(f"0-{i}@hook", 1): ["sending"] for i in range(3)}

    recover_and_deliver(lake, receiver.url)
    assert Journal(journal_dir(lake), DELIVERIES.arrow_schema).seal() == []  # folded into gold.deliveries
    assert attempts(lake) == {**{(f"0-{i}@hook", 1): ["sending", "unknown"] for i in range(3)},
                              **{(f"0-{i}@hook", 2): ["sending", "delivered"] for i in range(3)}}
    unknown = [r for r in records(lake) if r["outcome"] == "unknown"]
    assert {(r["error"], r["http_status"]) for r in unknown} == {(UNKNOWN_ERROR, None)}
    # The receiver got 0-0 and 0-1 twice (at least once), the same id in header and payload each time, in order.
    assert posts(receiver) == [("0-0@hook", 1), ("0-1@hook", 1),
                               ("0-0@hook", 2), ("0-1@hook", 2), ("0-2@hook", 2)]
    bodies = Counter(r["body"] for r in receiver.requests)
    assert sorted(bodies.values()) == [1, 2, 2]   # a resent transition's body is the same bytes


def test_every_post_the_receiver_got_has_an_attempt_on_record_across_a_kill(tmp_path: Path,
                                                                            receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    n_events, kill_after_posts = 120, 70
    store(lake, events(n_events), 0)
    receiver.answers = [200] * 9 + [503]     # one retry before the kill, to number a second attempt
    proc = child(lake, receiver.url, flush_every_s=0.05)

    def kill_the_dispatcher(n: int) -> None:
        if n == kill_after_posts:            # from outside, right after answering: wherever the lane is
            os.kill(proc.pid, signal.SIGKILL)

    receiver.after_answer = kill_the_dispatcher
    killed(proc)
    receiver.after_answer = None
    assert kill_after_posts <= len(receiver.requests) <= kill_after_posts + 1   # one may be on its way
    recover_and_deliver(lake, receiver.url)

    sent, on_record = posts(receiver), attempts(lake)
    assert len(set(sent)) == len(sent), "an attempt number was POSTed twice"
    missing = [p for p in sent if on_record.get(p, [None])[0] != "sending"]
    assert missing == [], f"POSTs without an intent on record: {missing}"
    # Every attempt has its intent and exactly one row that ends it.
    assert {k: v for k, v in on_record.items() if len(v) != 2 or v[0] != "sending"} == {}
    ends = {k: v[1] for k, v in on_record.items()}
    # An attempt on record that the receiver never got is one whose intent was committed ahead of the crash.
    assert {ends[k] for k in set(ends) - set(sent)} <= {"unknown"}
    # The kill left at least the answered POST without its outcome: sent again as a new attempt.
    assert sum(e == "unknown" for e in ends.values()) >= 1
    assert Counter(ends.values())["retry"] == 1
    delivered = Counter(k[0] for k, e in ends.items() if e == "delivered")
    assert delivered == {f"0-{i}@hook": 1 for i in range(n_events)}
    # POSTs answered 200 = delivered outcomes + the unknown ones the receiver did get and acknowledge.
    answered = dict(zip(sent, (r["status"] for r in receiver.requests), strict=True))
    ok = sum(status == 200 for status in answered.values())
    assert ok == n_events + sum(ends[k] == "unknown" and status == 200 for k, status in answered.items())


def test_the_delivery_id_is_in_header_and_payload_and_the_same_on_every_attempt(tmp_path: Path,
                                                                                receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    receiver.answers = [500, 503, 200]
    store(lake, events(2), 0)
    recover_and_deliver(lake, receiver.url)  # each intent journaled, then folded with the outcomes
    assert posts(receiver) == [("0-0@hook", 1), ("0-0@hook", 2), ("0-0@hook", 3), ("0-1@hook", 1)]
    assert [r["json"]["isrwatchDeliveryId"] for r in receiver.requests] == ["0-0@hook"] * 3 + ["0-1@hook"]
    assert len({r["body"] for r in receiver.requests[:3]}) == 1
    # Each retry is an attempt of its own, with its own intent committed before its POST.
    assert attempts(lake) == {("0-0@hook", 1): ["sending", "retry"], ("0-0@hook", 2): ["sending", "retry"],
                              ("0-0@hook", 3): ["sending", "delivered"], ("0-1@hook", 1): ["sending", "delivered"]}


def test_intents_folded_before_a_crash_are_not_recorded_twice(tmp_path: Path, receiver: HttpReceiver) -> None:
    """A crash between a fold's commit and its segments' removal: the journal still holds intents gold.deliveries
    has. The next start records each once, with one `unknown` end, and sends the attempt again."""
    lake = str(tmp_path)
    store(lake, events(1), 0)
    intent = pa.Table.from_pylist([{
        "delivery_id": "0-0@hook", "event_id": "0-0", "receiver": "hook", "rule": events(1)[0]["rule"],
        "fingerprint": events(1)[0]["fingerprint"], "alert_status": "firing", "attempt": 1, "outcome": "sending",
        "http_status": None, "error": None, "attempted_at": datetime.now(UTC), "duration_ms": 0.0,
        "next_attempt_at": None}], schema=DELIVERIES.arrow_schema)
    Journal(journal_dir(lake), DELIVERIES.arrow_schema).append(intent)
    KeptOpen(DELIVERIES, lake).append(intent)
    recover_and_deliver(lake, receiver.url)
    assert attempts(lake) == {("0-0@hook", 1): ["sending", "unknown"], ("0-0@hook", 2): ["sending", "delivered"]}
    assert posts(receiver) == [("0-0@hook", 2)]
