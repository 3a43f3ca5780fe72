"""Alert transitions as Alertmanager webhook payloads (version "4"), and their HMAC-SHA256 signature.

Existing Alertmanager receivers parse these unchanged: one POST per transition, with that alert alone
in `alerts`, grouped by alertname, cluster and the alert's entity. The one field Alertmanager does not send,
top-level `isrwatchDeliveryId`, is the delivery id (`<event_id>@<receiver>`, also the X-Isrwatch-Delivery
header): the same on every attempt and after restarts, so a receiver drops duplicates on it (docs/webhooks.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from schemas.gold import AlertStatus

SIGNATURE_HEADER = "X-Isrwatch-Signature"
DELIVERY_HEADER = "X-Isrwatch-Delivery"
ATTEMPT_HEADER = "X-Isrwatch-Attempt"       # gold.deliveries.attempt of this POST: 1, 2, ...
DELIVERY_ID_FIELD = "isrwatchDeliveryId"    # top level of the payload; Alertmanager receivers ignore it
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for an alert still firing


def rfc3339(ts: Any) -> str:
    if ts is None:
        return ZERO_TIME
    if isinstance(ts, int | float):
        ts = datetime.fromtimestamp(ts / 1000, tz=UTC)
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def delivery_id(event_id: str, receiver: str) -> str:
    """One transition to one receiver: the same on every attempt (gold.deliveries.delivery_id)."""
    return f"{event_id}@{receiver}"


def payload(event: dict[str, Any], receiver: str, external_url: str) -> dict[str, Any]:
    """`event` is a gold.alert_events row (labels as a dict)."""
    labels = dict(sorted(dict(event["labels"]).items()))
    annotations = {k: event[k] for k in ("summary", "description", "runbook") if event.get(k)}
    status = AlertStatus.RESOLVED if event["status"] == AlertStatus.RESOLVED else AlertStatus.FIRING
    group = {k: labels[k] for k in ("alertname", "cluster", "topic", "partition", "broker_id") if k in labels}
    group_key = "{}:{" + ",".join(f'{k}="{v}"' for k, v in group.items()) + "}"
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url,
        DELIVERY_ID_FIELD: delivery_id(str(event["event_id"]), receiver),
        "alerts": [{
            "status": status,
            "labels": labels,
            "annotations": annotations,
            "startsAt": rfc3339(event["starts_at"]),
            "endsAt": rfc3339(event["ends_at"]) if status == AlertStatus.RESOLVED else ZERO_TIME,
            "generatorURL": f"{external_url.rstrip('/')}/alerts/{event['fingerprint']}",
            "fingerprint": event["fingerprint"],
        }],
    }


def body_of(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), sort_keys=True).encode()


def signature(body: bytes, secret: str) -> str:
    """Header value: 'sha256=' + hex HMAC-SHA256 of the exact request body under the receiver's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str) -> bool:
    """What a receiver runs: constant-time comparison of the header with the expected signature."""
    return hmac.compare_digest(signature(body, secret), header)
