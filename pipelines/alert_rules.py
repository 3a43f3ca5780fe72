"""Alert rules and receivers (conf/alerts.yaml), parsed and checked before anything runs.

A rule is a condition (`when`, a pandas expression over one source's columns, see
pipelines/alert_signals.py) at a scope, held for `for` in event time before it fires. Everything a rule
names is checked here, so a typo fails at start-up with the file, the rule and the field named.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from foundation.durations import duration_ms
from pipelines.alert_signals import SCOPE_KEYS, SOURCES, empty_frame

SEVERITIES = ("critical", "warning", "info")
AGGREGATES = ("sum", "max", "min", "mean")


class AlertConfigError(ValueError):
    """A malformed alerts file: the message names the file, the rule (or receiver) and the field."""


@dataclass(frozen=True)
class Inhibition:
    """While an alert of `rule` fires with the same values for `equal` labels, this rule's alerts are
    evaluated and recorded but not delivered (Alertmanager's inhibit_rules, per rule)."""

    rule: str
    equal: tuple[str, ...]


@dataclass(frozen=True)
class Rule:
    name: str
    source: str
    scope: str
    when: str
    severity: str
    for_ms: int = 0
    window_ms: int = 0
    keep_firing_for_ms: int = 0      # a firing alert stays firing this long after its condition stops holding
    aggregate: str = "sum"
    value: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    description: str = ""
    runbook: str = ""
    inhibited_by: tuple[Inhibition, ...] = ()

    @property
    def entity_keys(self) -> tuple[str, ...]:
        return SCOPE_KEYS[self.scope]


@dataclass(frozen=True)
class FlapDetection:
    """An alert whose condition changed more than `max_changes` times within `window_ms` since it first fired is
    flapping. Flapping acts on notifications, never on the alert's state (gold keeps following the condition):
    its transitions are recorded and held back from the receivers until it settles, when the receivers get one
    notification with its true state. It settles when the changes in the trailing window fall back to
    `max_changes`, or when its condition has not changed for `quiet_ms`; a quiet spell also forgets the changes,
    so incidents separated by one are separate incidents, never one flapping alert. `max_changes` 0 turns flap
    detection off."""

    window_ms: int = 600_000
    max_changes: int = 4
    quiet_ms: int = 30_000

    def flapping(self, changes: int) -> bool:
        return self.max_changes > 0 and changes > self.max_changes


@dataclass(frozen=True)
class Receiver:
    name: str
    url: str
    severities: tuple[str, ...] = SEVERITIES
    match_labels: dict[str, str] = field(default_factory=dict)
    secret: str | None = None
    timeout_s: float = 5.0
    max_attempts: int | None = None      # None: retry until give_up_after
    give_up_after_s: float = 3600.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    # How many of the receiver's alerts are POSTed at once; each alert's transitions stay in order (as Alertmanager's
    # aggregation groups, which notify independently): a burst of N alerts takes ~N/parallel POSTs' time, not N.
    parallel: int = 4

    def routes(self, severity: str, labels: dict[str, str]) -> bool:
        return severity in self.severities and all(labels.get(k) == v for k, v in self.match_labels.items())


@dataclass(frozen=True)
class AlertConfig:
    rules: tuple[Rule, ...]
    receivers: tuple[Receiver, ...]
    resolved_retention_ms: int = 3_600_000
    external_url: str = "http://127.0.0.1:8000"
    flap_detection: FlapDetection = field(default_factory=FlapDetection)

    def rule(self, name: str) -> Rule:
        return next(r for r in self.rules if r.name == name)


MAX_PARALLEL = 32  # concurrent POSTs to one receiver: enough for any burst, few enough not to flood it

_RULE_FIELDS = {"name", "source", "scope", "when", "for", "window", "keep_firing_for", "aggregate", "value",
                "severity", "labels", "summary", "description", "runbook", "inhibited_by"}
_TOP_LEVEL = {"rules", "receivers", "resolved_retention", "external_url", "flap_detection"}
_RECEIVER_FIELDS = {"name", "url", "severities", "match_labels", "secret", "secret_env", "timeout", "max_attempts",
                    "give_up_after", "backoff_initial", "backoff_max", "parallel"}


def parse_alert_config(raw: Any, origin: str, env: dict[str, str] | None = None) -> AlertConfig:
    """Build the config from parsed YAML; `origin` (the file) and `env` (for secret_env) come from the caller."""
    if not isinstance(raw, dict):
        raise AlertConfigError(f"{origin}: expected a mapping with 'rules' and 'receivers'")
    unknown = sorted(set(raw) - _TOP_LEVEL)
    if unknown:
        raise AlertConfigError(f"{origin}: unknown top-level key(s) {unknown}")
    rules_raw = raw.get("rules")
    if not isinstance(rules_raw, list) or not rules_raw:
        raise AlertConfigError(f"{origin}: 'rules' must be a non-empty list")
    rules = [_rule(r, i, origin) for i, r in enumerate(rules_raw)]
    names = [r.name for r in rules]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise AlertConfigError(f"{origin}: rule name(s) {dup} defined more than once")
    by_name = {r.name: r for r in rules}
    for r in rules:
        for inh in r.inhibited_by:
            if inh.rule not in by_name or inh.rule == r.name:
                raise AlertConfigError(f"{origin}: rule {r.name!r}: inhibited_by: unknown rule {inh.rule!r}")
            labels = {"cluster", *by_name[inh.rule].entity_keys, *by_name[inh.rule].labels}
            missing = [k for k in inh.equal if k not in labels or k not in {"cluster", *r.entity_keys, *r.labels}]
            if missing:
                raise AlertConfigError(f"{origin}: rule {r.name!r}: inhibited_by: equal label(s) {missing} "
                                       f"are not labels of both {r.name!r} and {inh.rule!r}")
            if "cluster" not in inh.equal:
                # Each cluster's alerts are evaluated on their own (on the executors, in parallel): an alert
                # of one cluster silencing another cluster's would tie them together.
                raise AlertConfigError(f"{origin}: rule {r.name!r}: inhibited_by {inh.rule!r}: equal must "
                                       f"include 'cluster' (an alert inhibits only alerts of its own cluster)")
    receivers_raw = raw.get("receivers") or []
    if not isinstance(receivers_raw, list):
        raise AlertConfigError(f"{origin}: 'receivers' must be a list")
    receivers = [_receiver(x, i, origin, env or {}) for i, x in enumerate(receivers_raw)]
    try:
        retention = duration_ms(raw.get("resolved_retention", "1h"))
    except ValueError as e:
        raise AlertConfigError(f"{origin}: resolved_retention: {e}") from None
    external = str(raw.get("external_url", AlertConfig.external_url))
    return AlertConfig(tuple(rules), tuple(receivers), retention, external, _flap_detection(raw, origin))


def _flap_detection(raw: dict[str, Any], origin: str) -> FlapDetection:
    section = raw.get("flap_detection")
    if section is None:
        return FlapDetection()
    where = f"{origin}: flap_detection"
    if not isinstance(section, dict):
        raise AlertConfigError(f"{where}: expected a mapping with 'window', 'max_changes' and 'quiet'")
    unknown = sorted(set(section) - {"window", "max_changes", "quiet"})
    if unknown:
        raise AlertConfigError(f"{where}: {unknown[0]}: unknown field (known: max_changes, quiet, window)")
    durations = {}
    for key, default in (("window", "10m"), ("quiet", "30s")):
        try:
            durations[key] = duration_ms(section.get(key, default))
        except ValueError as e:
            raise AlertConfigError(f"{where}: {key}: {e}") from None
    window, quiet = durations["window"], durations["quiet"]
    changes = section.get("max_changes", FlapDetection.max_changes)
    if isinstance(changes, bool) or not isinstance(changes, int) or changes < 0:
        raise AlertConfigError(f"{where}: max_changes: expected an integer >= 0 (0: off), got {changes!r}")
    if window <= 0 and changes:
        raise AlertConfigError(f"{where}: window: must be longer than 0 while max_changes is set")
    if quiet <= 0 and changes:
        raise AlertConfigError(f"{where}: quiet: must be longer than 0 while max_changes is set")
    return FlapDetection(window, changes, quiet)


def _rule(raw: Any, index: int, origin: str) -> Rule:
    where = f"{origin}: rule #{index + 1}"
    if not isinstance(raw, dict):
        raise AlertConfigError(f"{where}: expected a mapping")
    if isinstance(raw.get("name"), str):
        where = f"{origin}: rule {raw['name']!r}"

    def fail(key: str, msg: str) -> AlertConfigError:
        return AlertConfigError(f"{where}: {key}: {msg}")

    unknown = sorted(set(raw) - _RULE_FIELDS)
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(sorted(_RULE_FIELDS))})")
    for key in ("name", "source", "scope", "when", "severity"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise fail(key, "required, a non-empty string")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", raw["name"]):
        raise fail("name", f"{raw['name']!r}: letters, digits and '_' only")
    source = SOURCES.get(raw["source"])
    if source is None:
        raise fail("source", f"unknown source {raw['source']!r} (known: {', '.join(SOURCES)})")
    scope = raw["scope"]
    if scope not in SCOPE_KEYS:
        raise fail("scope", f"unknown scope {scope!r} (known: {', '.join(SCOPE_KEYS)})")
    if not set(SCOPE_KEYS[scope]) <= set(SCOPE_KEYS[source.grain]):
        raise fail("scope", f"source {source.name!r} describes a {source.grain}, not a {scope}")
    if raw["severity"] not in SEVERITIES:
        raise fail("severity", f"{raw['severity']!r} is not one of {', '.join(SEVERITIES)}")
    aggregate = raw.get("aggregate", "sum")
    if aggregate not in AGGREGATES:
        raise fail("aggregate", f"{aggregate!r} is not one of {', '.join(AGGREGATES)}")
    times = {}
    for key in ("for", "window", "keep_firing_for"):
        try:
            times[key] = duration_ms(raw.get(key, "0s"))
        except ValueError as e:
            raise fail(key, str(e)) from None
    labels = raw.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str | int | float) for v in labels.values()):
        raise fail("labels", "expected a mapping of label name to text")
    reserved = sorted(set(labels) & {"alertname", "severity", "cluster", *SCOPE_KEYS["partition"], "broker_id", "slo"})
    if reserved:
        raise fail("labels", f"{reserved} are set by isrwatch")
    frame = empty_frame(source, scope)
    for key in ("when", "value"):
        if raw.get(key) is not None:
            _check_expression(str(raw[key]), frame, fail(key, "").args[0])
    for key in ("summary", "description", "runbook"):
        text = raw.get(key, "")
        if not isinstance(text, str):
            raise fail(key, "expected text")
        names = {*frame.columns, "value", "alertname", "severity", "cluster", *labels}
        _check_template(text, names, fail(key, "").args[0])
    inhibited = []
    for item in raw.get("inhibited_by") or []:
        if not isinstance(item, dict) or not isinstance(item.get("rule"), str):
            raise fail("inhibited_by", "expected a list of {rule: <name>, equal: [labels]}")
        inhibited.append(Inhibition(item["rule"], tuple(str(x) for x in item.get("equal") or ())))
    return Rule(raw["name"], source.name, scope, str(raw["when"]), raw["severity"], times["for"], times["window"],
                times["keep_firing_for"], aggregate, None if raw.get("value") is None else str(raw["value"]),
                {str(k): str(v) for k, v in labels.items()}, raw.get("summary", ""), raw.get("description", ""),
                raw.get("runbook", ""), tuple(inhibited))


def _check_expression(expr: str, frame: pd.DataFrame, where: str) -> None:
    try:
        frame.eval(expr, engine="python")
    except Exception as e:  # pandas raises many kinds (UndefinedVariableError, SyntaxError, TypeError)
        raise AlertConfigError(f"{where}{expr!r}: {type(e).__name__}: {e}") from None


def _check_template(text: str, names: set[str], where: str) -> None:
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise AlertConfigError(f"{where}{text!r}: {e}") from None
    unknown = sorted({f.split(".")[0].split("[")[0] for f in fields} - names)
    if unknown:
        raise AlertConfigError(f"{where}unknown template field(s) {unknown}; available: {', '.join(sorted(names))}")


def _receiver(raw: Any, index: int, origin: str, env: dict[str, str]) -> Receiver:
    where = f"{origin}: receiver #{index + 1}"
    if not isinstance(raw, dict):
        raise AlertConfigError(f"{where}: expected a mapping")
    if isinstance(raw.get("name"), str):
        where = f"{origin}: receiver {raw['name']!r}"
    unknown = sorted(set(raw) - _RECEIVER_FIELDS)
    if unknown:
        raise AlertConfigError(f"{where}: {unknown[0]}: unknown field")
    for key in ("name", "url"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise AlertConfigError(f"{where}: {key}: required, a non-empty string")
    if not re.match(r"^https?://", raw["url"]):
        raise AlertConfigError(f"{where}: url: {raw['url']!r} is not an http(s) URL")
    severities = tuple(raw.get("severities") or SEVERITIES)
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        raise AlertConfigError(f"{where}: severities: {bad} not among {', '.join(SEVERITIES)}")
    secret = raw.get("secret")
    if raw.get("secret_env"):
        secret = env.get(str(raw["secret_env"]))
        if not secret:
            raise AlertConfigError(f"{where}: secret_env: environment variable {raw['secret_env']!r} is not set")
    try:
        timeout = duration_ms(raw.get("timeout", "5s")) / 1000
        initial = duration_ms(raw.get("backoff_initial", "500ms")) / 1000
        cap = duration_ms(raw.get("backoff_max", "30s")) / 1000
        give_up = duration_ms(raw.get("give_up_after", "1h")) / 1000
    except ValueError as e:
        raise AlertConfigError(f"{where}: {e}") from None
    attempts = raw.get("max_attempts")
    if attempts is not None and (not isinstance(attempts, int) or attempts < 1):
        raise AlertConfigError(f"{where}: max_attempts: expected an integer >= 1, got {attempts!r}")
    parallel = raw.get("parallel", 4)
    if not isinstance(parallel, int) or isinstance(parallel, bool) or not 1 <= parallel <= MAX_PARALLEL:
        raise AlertConfigError(f"{where}: parallel: expected an integer from 1 to {MAX_PARALLEL}, got {parallel!r}")
    match = {str(k): str(v) for k, v in (raw.get("match_labels") or {}).items()}
    return Receiver(raw["name"], raw["url"], severities, match,
                    None if secret is None else str(secret), timeout, attempts, give_up, initial, cap, parallel)
