"""Silence matching, as Alertmanager does it: every matcher must match the alert's labels; a regex matcher is
anchored (matches the whole value); a missing label has the value ''. A silence is pending before starts_at,
active until ends_at, expired after."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class SilenceError(ValueError):
    """A silence that cannot be stored: names the field and the problem."""


@dataclass(frozen=True)
class Matcher:
    name: str
    value: str
    is_regex: bool = False
    is_equal: bool = True

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        return re.compile(self.value)

    def matches(self, labels: dict[str, str]) -> bool:
        actual = labels.get(self.name, "")
        hit = self._pattern.fullmatch(actual) is not None if self.is_regex else actual == self.value
        return hit == self.is_equal


@dataclass(frozen=True)
class Silence:
    silence_id: str
    version: int
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    updated_at: datetime

    def state(self, now: datetime) -> str:
        if now < self.starts_at:
            return "pending"
        return "active" if now < self.ends_at else "expired"

    def silences(self, labels: dict[str, str], now: datetime) -> bool:
        return self.state(now) == "active" and all(m.matches(labels) for m in self.matchers)


def check_matchers(matchers: list[Matcher]) -> None:
    """Reject what Alertmanager rejects: no matchers, bad label names, bad regexes, and silences that
    would match every alert (all matchers match the empty string)."""
    if not matchers:
        raise SilenceError("matchers: at least one matcher is required")
    for i, m in enumerate(matchers):
        if not LABEL_NAME.match(m.name):
            raise SilenceError(f"matchers[{i}].name: {m.name!r} is not a label name")
        if m.is_regex:
            try:
                re.compile(m.value)
            except re.error as e:
                raise SilenceError(f"matchers[{i}].value: {m.value!r} is not a valid regex: {e}") from None
    if all(m.matches({}) for m in matchers):
        raise SilenceError("matchers: at least one matcher must not match the empty string "
                           "(this silence would silence every alert)")


def silenced_by(labels: dict[str, str], silences: list[Silence], now: datetime) -> list[str]:
    """Ids of the active silences that match these labels, sorted."""
    return sorted(s.silence_id for s in silences if s.silences(labels, now))
