"""Webhook delivery for a lakehouse on an S3-compatible store (s3proxy on loopback): the intents' journal on the
machine's local disk, folded into gold.deliveries on the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.delta_io import read_rows
from pipelines.alert_rules import AlertConfig, Receiver
from pipelines.webhook_delivery import WebhookDispatcher, intents_directory
from schemas.gold import DELIVERIES
from testing.s3proxy import S3Proxy
from tests.alerts.receiver import Receiver as HttpReceiver
from tests.alerts.test_webhook import CONFIG, events, store


def test_webhook_intents_on_a_store_lakehouse_are_journaled_on_local_disk_and_folded_into_the_store(
        on_store: S3Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The intent before each POST goes to a journal in the machine's state directory (an object store has no
    append-and-fsync); the flush folds it, with the outcomes, into gold.deliveries on the store."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    lake = on_store.uri("webhooks")
    journal = intents_directory(lake, "lane")
    assert journal.parent.parent == tmp_path / "state" / "isrwatch" / "webhook-intents" and journal.name == "lane"
    assert journal.parent.name.startswith("lake_webhooks-")
    # The same lakehouse however spelt; another path, or the same one on another store, elsewhere.
    assert intents_directory(on_store.uri("webhooks", scheme="s3") + "/", "lane") == journal
    assert intents_directory(on_store.uri("a/b"), "lane") != intents_directory(on_store.uri("a_b"), "lane")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert intents_directory(lake, "lane") != journal
    monkeypatch.setenv("AWS_ENDPOINT_URL", on_store.endpoint)
    store(lake, events(3), 0)
    receiver = HttpReceiver().start()
    try:
        config = AlertConfig(CONFIG.rules, (Receiver("hook", receiver.url, timeout_s=2, parallel=1),))
        d = WebhookDispatcher(config, lake, flush_every_s=0.1, journal=journal).start()
        try:
            assert d.wait_idle(30)
        finally:
            d.stop()
    finally:
        receiver.stop()
    assert [r["headers"]["X-Isrwatch-Delivery"] for r in receiver.requests] == [f"0-{i}@hook" for i in range(3)]
    rows = read_rows(DELIVERIES, lake).to_pylist()   # read back through the store
    assert sorted((r["delivery_id"], r["outcome"]) for r in rows) == sorted(
        (f"0-{i}@hook", outcome) for i in range(3) for outcome in ("sending", "delivered"))
    assert [p.name for p in journal.iterdir()] == []   # every segment folded
    assert not (on_store.folder / "data" / "lake" / "webhooks" / "_webhook_intents").exists()
