"""What the alert engine remembers and emits: one `Alert` per rule and entity, the `Transition`s a step
causes, and `EngineState`, which the alerts job stores in gold.alerts_engine_state after every micro-batch
and reloads on restart (pipelines/alert_engine.py runs the lifecycle over them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from schemas.gold import AlertStatus

OPEN = (AlertStatus.PENDING, AlertStatus.FIRING)


@dataclass
class Alert:
    """One rule × entity: its current lifecycle status and what the last sample said."""

    rule: str
    fingerprint: str
    cluster: str
    labels: dict[str, str]
    status: AlertStatus
    since_ms: int          # pending since (and, while firing, when the condition began)
    fired_ms: int | None
    resolved_ms: int | None
    last_ms: int
    value: float
    annotations: dict[str, str]
    inhibited: bool = False
    cleared_ms: int | None = None   # firing, condition false since (held by keep_firing_for)
    changes: list[int] = field(default_factory=list)  # condition changes in the flap window, since it first fired
    flapping: bool = False          # its notifications are held back (pipelines/alert_rules.py FlapDetection)
    condition: bool | None = None   # the condition at its last evaluation (None: state from before this field)
    held: bool = False              # a notification was held back: the receivers do not know its state yet
    told: str | None = None         # the status the receivers were last told (None: none yet, or state from before)


_ALERT_FIELDS = tuple(f.name for f in fields(Alert))


@dataclass
class Transition:
    rule: str
    fingerprint: str
    cluster: str
    status: AlertStatus
    previous: AlertStatus
    ts_ms: int
    severity: str
    scope: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float
    starts_ms: int
    ends_ms: int | None
    inhibited: bool
    flapping: bool = False  # held back from the receivers: the alert is flapping


@dataclass
class EngineState:
    alerts: dict[str, Alert] = field(default_factory=dict)                 # key: rule/fingerprint
    last_seen: dict[str, int] = field(default_factory=dict)                # key: cluster/broker_id
    windows: dict[str, list[tuple[int, dict[str, float]]]] = field(default_factory=dict)  # key: rule/fingerprint
    window_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    window_evaluated: dict[str, int] = field(default_factory=dict)         # key: rule/fingerprint -> last point
    last_hw: dict[str, dict[str, int]] = field(default_factory=dict)      # cluster -> topic/partition -> HW
    shut_down: dict[str, int] = field(default_factory=dict)  # cluster/broker_id -> its controlled shutdown, until back
    back_from_shutdown: dict[str, int] = field(default_factory=dict)  # cluster/broker_id -> back, for a minute

    def to_rows(self) -> list[dict[str, str]]:
        # An Alert's fields read directly: dataclasses.asdict deep-copies every value on the way, ~80 % of this
        # method's time (27 ms for 287 alerts), and json.dumps copies nothing.
        rows = [{"kind": "alert", "key": k, "state": json.dumps({n: getattr(a, n) for n in _ALERT_FIELDS},
                                                                sort_keys=True)}
                for k, a in sorted(self.alerts.items())]
        rows += [{"kind": "last_seen", "key": k, "state": json.dumps(v)} for k, v in sorted(self.last_seen.items())]
        rows += [{"kind": "window", "key": k, "state": json.dumps({
            "samples": v, "labels": self.window_labels[k], "evaluated": self.window_evaluated.get(k)})}
                 for k, v in sorted(self.windows.items()) if v]
        # An open alert of a windowed rule whose samples have all left the window keeps its last point.
        rows += [{"kind": "window_evaluated", "key": k, "state": json.dumps(v)}
                 for k, v in sorted(self.window_evaluated.items()) if not self.windows.get(k)]
        rows += [{"kind": "last_hw", "key": c, "state": json.dumps(v, sort_keys=True)}
                 for c, v in sorted(self.last_hw.items())]
        rows += [{"kind": "shut_down", "key": k, "state": json.dumps(v)} for k, v in sorted(self.shut_down.items())]
        rows += [{"kind": "back_from_shutdown", "key": k, "state": json.dumps(v)}
                 for k, v in sorted(self.back_from_shutdown.items())]
        return rows

    @classmethod
    def from_rows(cls, rows: list[dict[str, str]]) -> EngineState:
        s = cls()
        for r in rows:
            data = json.loads(r["state"])
            if r["kind"] == "alert":
                s.alerts[r["key"]] = Alert(**{**data, "status": AlertStatus(data["status"])})
            elif r["kind"] == "last_seen":
                s.last_seen[r["key"]] = int(data)
            elif r["kind"] == "window":
                s.windows[r["key"]] = [(int(t), dict(v)) for t, v in data["samples"]]
                s.window_labels[r["key"]] = dict(data["labels"])
                if data.get("evaluated") is not None:
                    s.window_evaluated[r["key"]] = int(data["evaluated"])
            elif r["kind"] == "window_evaluated":
                s.window_evaluated[r["key"]] = int(data)
            elif r["kind"] == "last_hw":
                s.last_hw[r["key"]] = {k: int(v) for k, v in data.items()}
            elif r["kind"] == "shut_down":
                s.shut_down[r["key"]] = int(data)
            elif r["kind"] == "back_from_shutdown":
                s.back_from_shutdown[r["key"]] = int(data)
        return s

    def forget_unused_windows(self) -> None:
        """Drop the last evaluated point of windows with neither samples nor an alert: nothing reads it, and it
        names no cluster (so the state could not be split by cluster)."""
        for key in [k for k in self.window_evaluated if not self.windows.get(k) and k not in self.alerts]:
            del self.window_evaluated[key]

    def by_cluster(self) -> dict[str, EngineState]:
        """The state split per cluster. Nothing in it spans clusters: every entry names its cluster, and an
        alert inhibits only alerts of its own cluster (pipelines/alert_rules.py checks `equal` holds it), so
        each cluster's alerts can be evaluated apart from the others' with the same outcome."""
        parts: dict[str, EngineState] = {}

        def part(cluster: str) -> EngineState:
            return parts.setdefault(cluster, EngineState())

        for k, a in self.alerts.items():
            part(a.cluster).alerts[k] = a
        for k, seen in self.last_seen.items():
            part(k.split("/", 1)[0]).last_seen[k] = seen
        for k, samples in self.windows.items():
            p = part(self.window_labels[k]["cluster"])
            p.windows[k], p.window_labels[k] = samples, self.window_labels[k]
        for k, point in self.window_evaluated.items():
            labels = self.window_labels.get(k) or (self.alerts[k].labels if k in self.alerts else None)
            if labels is None:
                raise ValueError(f"engine state: window {k!r} has neither samples nor an alert")
            part(labels["cluster"]).window_evaluated[k] = point
        for c, hw in self.last_hw.items():
            part(c).last_hw[c] = hw
        for k, at in self.shut_down.items():
            part(k.split("/", 1)[0]).shut_down[k] = at
        for k, at in self.back_from_shutdown.items():
            part(k.split("/", 1)[0]).back_from_shutdown[k] = at
        return {c: parts[c] for c in sorted(parts)}

    @classmethod
    def joined(cls, parts: Iterable[EngineState]) -> EngineState:
        """One state from per-cluster parts (`by_cluster`'s, some of them stepped since)."""
        out = cls()
        for p in parts:
            out.alerts.update(p.alerts)
            out.last_seen.update(p.last_seen)
            out.windows.update(p.windows)
            out.window_labels.update(p.window_labels)
            out.window_evaluated.update(p.window_evaluated)
            out.last_hw.update(p.last_hw)
            out.shut_down.update(p.shut_down)
            out.back_from_shutdown.update(p.back_from_shutdown)
        return out


def transition_order(t: Transition) -> tuple[int, str, str, str]:
    """The order a step's transitions are emitted in (event time first): the same however they were evaluated."""
    return (t.ts_ms, t.rule, t.fingerprint, t.status)


def fingerprint(rule: str, labels: dict[str, str]) -> str:
    """Stable across restarts and hosts: a hash of the rule and its identifying labels."""
    text = rule + "\x00" + "\x00".join(f"{k}={labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
