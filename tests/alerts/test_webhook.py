"""Webhook delivery against a real HTTP receiver on 127.0.0.1: Alertmanager payload, HMAC signature,
order, a receiver down across a dispatcher restart, 5xx retried, 4xx recorded and not retried.
(A dispatcher killed mid-delivery: test_webhook_records.py.)"""

from __future__ import annotations

import io
import random
import socket
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from foundation.delta_io import read_rows, write_once
from isrwatch.webhook_receiver import WebhookPrinter
from pipelines.alert_rules import AlertConfig, Receiver
from pipelines.alertmanager import SIGNATURE_HEADER
from pipelines.webhook_delivery import WebhookDispatcher
from schemas.gold import ALERT_EVENTS, DELIVERIES
from tests.alerts.receiver import Receiver as HttpReceiver
from tests.alerts.receiver import signed_with
from tests.alerts.test_engine import CONFIG

SECRET = "s3cret"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(n: int, batch: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        status = "firing" if i % 2 == 0 else "resolved"
        labels = {"alertname": "UnderMinIsr", "severity": "critical", "cluster": "c1", "topic": "t",
                  "partition": str(i // 2)}
        out.append({
            "event_id": f"{batch}-{i}", "eval_batch_id": batch, "seq": i, "status": status,
            "previous_status": "inactive" if status == "firing" else "firing", "ts": T0 + timedelta(seconds=i),
            "rule": "UnderMinIsr", "fingerprint": f"fp{i // 2}", "cluster": "c1", "severity": "critical",
            "scope": "partition", "labels": sorted(labels.items()), "summary": f"t-{i // 2}: ISR 1 below 2",
            "description": "", "runbook": "bring replicas back", "value": 1.0, "inhibited": False,
            "starts_at": T0 + timedelta(seconds=i - i % 2), "ends_at": T0 + timedelta(seconds=i) if i % 2 else None,
            "evaluated_at": T0,
        })
    return out


def store(lake: str, rows: list[dict[str, Any]], batch: int) -> None:
    write_once(ALERT_EVENTS, lake, pa.Table.from_pylist(rows, schema=ALERT_EVENTS.arrow_schema), "test", batch)


def dispatcher(lake: str, url: str, flush_every_s: float = 0.1, **receiver: Any) -> WebhookDispatcher:
    """Intents journaled in `journal_dir(lake)`. One lane unless `parallel` says otherwise: the receiver sees every
    transition in gold.alert_events order."""
    r = Receiver("hook", url, secret=SECRET, timeout_s=2, backoff_initial_s=0.05, backoff_max_s=0.2,
                 **{"parallel": 1, **receiver})
    config = AlertConfig(CONFIG.rules, (r,), external_url="http://isrwatch.example")
    return WebhookDispatcher(config, lake, flush_every_s=flush_every_s, rng=random.Random(1),
                             journal=journal_dir(lake))


def deliver(lake: str, url: str, rows: list[dict[str, Any]]) -> None:
    """`rows` as batch 0 of gold.alert_events, then a dispatcher run until it delivered them (its recovery queues
    them)."""
    store(lake, rows, 0)
    d = dispatcher(lake, url).start()
    try:
        assert d.wait_idle(20)
    finally:
        d.stop()


def journal_dir(lake: str) -> str:
    return f"{lake}/_webhook_intents/test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def receiver() -> Any:
    r = HttpReceiver().start()
    yield r
    r.stop()


def records(lake: str) -> list[dict[str, Any]]:
    """Every gold.deliveries row: intents (`sending`) and the rows that end attempts."""
    return sorted(read_rows(DELIVERIES, lake).to_pylist(), key=lambda d: (d["attempted_at"], d["attempt"]))


def deliveries(lake: str) -> list[dict[str, Any]]:
    """The attempts: the rows that end them (outcomes), without the intents."""
    return [d for d in records(lake) if d["outcome"] != "sending"]


@pytest.mark.parametrize(("secret", "outcome", "http_status"),
                         [(SECRET, "delivered", 200), ("another", "rejected", 401)])
def test_isrwatch_webhook_receiver_verifies_the_dispatchers_signed_posts_over_http(
        tmp_path: Path, secret: str, outcome: str, http_status: int) -> None:
    """`isrwatch webhook-receiver --secret` (its HTTP handler, as it serves) fed by the dispatcher: with the receiver's
    secret every transition is printed and delivered; with another, each is refused (401) and recorded rejected."""
    out = io.StringIO()
    printer = WebhookPrinter(0, secret, out)
    threading.Thread(target=printer.serve, daemon=True).start()
    try:
        deliver(str(tmp_path), f"http://127.0.0.1:{printer.server.server_port}/", events(6))
    finally:
        printer.server.shutdown()
        printer.server.server_close()
    attempts = deliveries(str(tmp_path))
    assert sorted(d["event_id"] for d in attempts) == [f"0-{i}" for i in range(6)]
    assert {(d["outcome"], d["http_status"]) for d in attempts} == {(outcome, http_status)}
    lines = out.getvalue().splitlines()
    if outcome == "delivered":
        assert printer.received == 6
        assert sorted(line.split()[1] for line in lines) == ["FIRING"] * 3 + ["RESOLVED"] * 3
    else:
        assert printer.received == 0
        assert lines == ["webhook  REJECTED: bad or missing X-Isrwatch-Signature"] * 6


def test_payload_is_alertmanager_v4_signed_and_in_order(tmp_path: Path, receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    rows = events(6)
    deliver(lake, receiver.url, rows)   # recovery finds the six undelivered transitions
    got = receiver.delivered()
    assert [r["headers"]["X-Isrwatch-Delivery"] for r in got] == [f"0-{i}@hook" for i in range(6)]
    assert all(signed_with(r["body"], SECRET, r["headers"][SIGNATURE_HEADER]) for r in got)
    assert not signed_with(got[0]["body"] + b" ", SECRET, got[0]["headers"][SIGNATURE_HEADER])
    first, second = got[0]["json"], got[1]["json"]
    assert set(first) == {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
                          "commonLabels", "commonAnnotations", "externalURL", "alerts", "isrwatchDeliveryId"}
    assert first["isrwatchDeliveryId"] == "0-0@hook"
    assert (first["version"], first["status"], first["receiver"]) == ("4", "firing", "hook")
    alert = first["alerts"][0]
    assert alert["labels"] == {"alertname": "UnderMinIsr", "cluster": "c1", "partition": "0",
                               "severity": "critical", "topic": "t"}
    assert alert["annotations"] == {"summary": "t-0: ISR 1 below 2", "runbook": "bring replicas back"}
    assert (alert["startsAt"], alert["endsAt"]) == ("2026-01-01T00:00:00.000Z", "0001-01-01T00:00:00Z")
    assert alert["fingerprint"] == "fp0" and alert["generatorURL"] == "http://isrwatch.example/alerts/fp0"
    assert second["status"] == "resolved" and second["alerts"][0]["endsAt"] == "2026-01-01T00:00:01.000Z"
    assert [(r["event_id"], r["attempt"], r["outcome"], r["http_status"]) for r in deliveries(lake)] == \
           [(f"0-{i}", 1, "delivered", 200) for i in range(6)]
    # Each attempt's intent was committed before its POST: all six in the lane's first commit.
    assert sorted((r["event_id"], r["attempt"], r["outcome"]) for r in records(lake)
                  if r["outcome"] == "sending") == [(f"0-{i}", 1, "sending") for i in range(6)]


def test_a_receivers_alerts_go_out_side_by_side_and_each_alerts_transitions_in_order(
        tmp_path: Path, receiver: HttpReceiver) -> None:
    """Four lanes: eight alerts' POSTs overlap at the receiver (each held 50 ms), and every alert's resolved arrives
    after its firing, for the transitions recovery queues and those submitted after, which meet in the lanes."""
    lake = str(tmp_path)
    receiver.hold_s = 0.05
    recovered, submitted = events(16), events(16, batch=1)
    store(lake, recovered, 0)
    d = dispatcher(lake, receiver.url, parallel=4).start()
    try:
        store(lake, submitted, 1)
        d.submit(submitted)
        assert d.wait_idle(30)
    finally:
        d.stop()
    got = [r["headers"]["X-Isrwatch-Delivery"].split("@")[0] for r in receiver.delivered()]
    assert sorted(got) == sorted(e["event_id"] for e in recovered + submitted)   # each once
    by_alert: dict[str, list[str]] = {}
    for event_id in got:
        seq = event_id.split("-")[1]
        by_alert.setdefault(f"fp{int(seq) // 2}", []).append(event_id)
    # An alert's transitions in gold.alert_events order: its firing, resolved, then the next batch's.
    assert by_alert == {f"fp{a}": [f"0-{2 * a}", f"0-{2 * a + 1}", f"1-{2 * a}", f"1-{2 * a + 1}"] for a in range(8)}
    assert 2 <= receiver.most_in_flight <= 4
    assert got != sorted(got, key=lambda i: tuple(map(int, i.split("-"))))   # not one queue: alerts overtook others
    assert [(r["event_id"], r["outcome"]) for r in deliveries(lake)].count(("0-0", "delivered")) == 1


@pytest.mark.parametrize("keep_alive", [True, False])
def test_a_lane_keeps_its_connection_open_where_the_receiver_allows(tmp_path: Path, keep_alive: bool) -> None:
    """Over HTTP/1.1 the six POSTs of one lane share one TCP connection, and a 500 answer does not close it; a receiver
    that closes each connection (HTTP/1.0) gets a new one per POST, and every transition still."""
    lake = str(tmp_path)
    receiver = HttpReceiver()
    receiver.keep_alive = keep_alive
    receiver.answers = [500]
    receiver.start()
    try:
        deliver(lake, receiver.url, events(6))
    finally:
        receiver.stop()
    assert [r["headers"]["X-Isrwatch-Delivery"] for r in receiver.delivered()] == [f"0-{i}@hook" for i in range(6)]
    ports = [r["client_port"] for r in receiver.requests]
    assert len(ports) == 7 and len(set(ports)) == (1 if keep_alive else 7)


def test_receiver_down_across_a_restart_loses_nothing(tmp_path: Path) -> None:
    lake, port = str(tmp_path), free_port()
    url = f"http://127.0.0.1:{port}/alerts"
    first = dispatcher(lake, url).start()
    rows = events(4)
    store(lake, rows, 0)
    first.submit(rows)
    first.wait_idle(1.5)            # nothing listens: every attempt is refused and retried
    first.stop()
    ended = deliveries(lake)
    refused = [r for r in ended if r["outcome"] == "retry"]
    assert refused and {r["event_id"] for r in refused} == {"0-0"}
    # The three behind the head had their intents committed (with a retry of the head) and were never sent.
    assert sorted((r["event_id"], r["attempt"]) for r in ended if r["outcome"] == "not_sent") == \
           [("0-1", 1), ("0-2", 1), ("0-3", 1)]
    assert len(ended) == len(refused) + 3
    receiver = HttpReceiver(port).start()
    try:
        more = events(2, batch=1)
        store(lake, more, 1)
        second = dispatcher(lake, url).start()  # recovers all six from gold.alert_events
        try:
            assert second.wait_idle(20)
        finally:
            second.stop()
        got = [r["headers"]["X-Isrwatch-Delivery"] for r in receiver.delivered()]
        assert got == [f"0-{i}@hook" for i in range(4)] + [f"1-{i}@hook" for i in range(2)]
        final = [r for r in deliveries(lake) if r["outcome"] == "delivered"]
        assert [(r["event_id"], r["attempt"]) for r in final] == \
               [("0-0", len(refused) + 1), ("0-1", 2), ("0-2", 2), ("0-3", 2), ("1-0", 1), ("1-1", 1)]
    finally:
        receiver.stop()


def test_5xx_is_retried_and_4xx_is_recorded_not_retried(tmp_path: Path, receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    receiver.answers = [500, 503, 200, 400]
    deliver(lake, receiver.url, events(3))
    assert [(r["event_id"], r["attempt"], r["outcome"], r["http_status"]) for r in deliveries(lake)] == [
        ("0-0", 1, "retry", 500), ("0-0", 2, "retry", 503), ("0-0", 3, "delivered", 200),
        ("0-1", 1, "rejected", 400), ("0-2", 1, "delivered", 200)]
    assert len(receiver.requests) == 5
    retry = deliveries(lake)[0]
    assert retry["next_attempt_at"] is not None and retry["error"] == "HTTP 500 Internal Server Error"


def test_gives_up_after_max_attempts(tmp_path: Path, receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    receiver.answers = [500, 500, 500]
    store(lake, events(1), 0)
    d = dispatcher(lake, receiver.url, max_attempts=3).start()
    try:
        assert d.wait_idle(20)
    finally:
        d.stop()
    assert [r["outcome"] for r in deliveries(lake)] == ["retry", "retry", "gave_up"]


def test_unsigned_without_a_secret_and_routing_by_severity(tmp_path: Path, receiver: HttpReceiver) -> None:
    lake = str(tmp_path)
    rows = events(2)
    rows[1] = {**rows[1], "severity": "info"}
    store(lake, rows, 0)
    r = Receiver("hook", receiver.url, severities=("critical",), timeout_s=2)
    d = WebhookDispatcher(AlertConfig(CONFIG.rules, (r,)), lake, flush_every_s=0.1, journal=journal_dir(lake)).start()
    try:
        assert d.wait_idle(20)
    finally:
        d.stop()
    got = receiver.delivered()
    assert len(got) == 1 and SIGNATURE_HEADER not in got[0]["headers"]


def test_an_active_silence_suppresses_delivery_of_matching_alerts_only(tmp_path: Path,
                                                                       receiver: HttpReceiver) -> None:
    from pipelines.silence_store import SilenceStore
    from pipelines.silences import Matcher

    lake = str(tmp_path)
    silences = SilenceStore(lake)
    active = silences.create([Matcher("partition", "0"), Matcher("alertname", "Under.*", is_regex=True)], None,
                             datetime.now(UTC) + timedelta(hours=1), "ops", "maintenance on t-0")
    expired = silences.create([Matcher("partition", "1")], None, datetime.now(UTC) + timedelta(hours=1), "ops", "x")
    silences.expire(expired.silence_id)
    store(lake, events(4), 0)      # partition 0 firing/resolved, partition 1 firing/resolved
    d = dispatcher(lake, receiver.url).start()
    try:
        assert d.wait_idle(20)
    finally:
        d.stop()
    assert [r["headers"]["X-Isrwatch-Delivery"] for r in receiver.delivered()] == ["0-2@hook", "0-3@hook"]
    outcomes = {r["event_id"]: (r["outcome"], r["error"]) for r in deliveries(lake)}
    assert outcomes == {"0-0": ("silenced", f"silenced by {active.silence_id}"),
                        "0-1": ("silenced", f"silenced by {active.silence_id}"),
                        "0-2": ("delivered", None), "0-3": ("delivered", None)}
    # A restart does not send the silenced ones again: silenced is a final outcome.
    again = dispatcher(lake, receiver.url)
    assert again.recover() == 0


def _receiver_view(receiver: HttpReceiver) -> list[tuple[str, float]]:
    """(status, seconds from T0 of the transition) of every POST the receiver took, in order."""
    out = []
    for r in receiver.delivered():
        alert = r["json"]["alerts"][0]
        at = alert["endsAt"] if alert["status"] == "resolved" else alert["startsAt"]
        out.append((alert["status"], (datetime.fromisoformat(at.replace("Z", "+00:00")) - ENGINE_T0).total_seconds()))
    return out


ENGINE_T0 = datetime(2026, 1, 1, tzinfo=UTC)   # tests/alerts/test_engine.py's T0


@pytest.mark.parametrize(("pattern", "told"), [
    # Three faults of one partition within 5 minutes, a minute or more apart: three incidents, each a pair.
    ("1" * 20 + "0" * 60 + "1" * 30 + "0" * 70 + "1" * 25 + "0" * 40,
     [("firing", 0.0), ("resolved", 20.0), ("firing", 80.0), ("resolved", 110.0), ("firing", 180.0),
      ("resolved", 205.0)]),
    # Flapping every second from 0 to 11 s: four changes are told, the rest held until it settles, resolved.
    ("10101010101" + "0" * 40,
     [("firing", 0.0), ("resolved", 1.0), ("firing", 2.0), ("resolved", 3.0), ("firing", 4.0), ("resolved", 41.0)]),
])
def test_the_receiver_gets_each_incident_and_ends_with_golds_state(
        tmp_path: Path, receiver: HttpReceiver, pattern: str, told: list[tuple[str, float]]) -> None:
    """The engine (flap_detection window 10m, max_changes 4, quiet 30s), its transitions in gold.alert_events as the
    jobs write them, delivered by the dispatcher: what the receiver gets, and the last of it equals gold's state."""
    from jobs.alert_stage import event_rows
    from pipelines.alert_engine import AlertEngine
    from pipelines.alert_rules import parse_alert_config
    from tests.alerts.test_alert_lifecycle import flipping

    config = parse_alert_config({"rules": [{"name": "Low", "source": "partition_state", "scope": "partition",
                                            "when": "isr_size < 3", "severity": "critical",
                                            "summary": "{topic}-{partition}"}],
                                 "flap_detection": {"window": "10m", "max_changes": 4, "quiet": "30s"}}, "x.yaml")
    engine = AlertEngine(config)
    transitions = [t for batch in flipping(pattern) for t in engine.step(batch)]
    lake = str(tmp_path)
    store(lake, event_rows(transitions, 0, T0), 0)
    d = dispatcher(lake, receiver.url).start()
    try:
        assert d.wait_idle(30)
    finally:
        d.stop()
    assert _receiver_view(receiver) == told
    alert = next(iter(engine.state.alerts.values()))
    assert receiver.delivered()[-1]["json"]["alerts"][0]["status"] == alert.status
