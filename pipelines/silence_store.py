"""The api.silences Delta table: silences are created and expired by appending versions (delta-rs), and read
back as the latest version of each id. The API writes it; the webhook dispatcher reads it before each
delivery."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from foundation.delta_io import KeptOpen, open_table
from pipelines.silences import Matcher, Silence, SilenceError, check_matchers, silenced_by
from schemas.api_tables import SILENCES

MAX_DURATION = timedelta(days=366)


def _silence(row: dict[str, Any]) -> Silence:
    return Silence(
        silence_id=row["silence_id"], version=row["version"],
        matchers=tuple(Matcher(m["name"], m["value"], m["is_regex"], m["is_equal"]) for m in row["matchers"]),
        starts_at=row["starts_at"], ends_at=row["ends_at"], created_by=row["created_by"],
        comment=row["comment"], updated_at=row["updated_at"])


def _row(s: Silence) -> dict[str, Any]:
    return {"silence_id": s.silence_id, "version": s.version,
            "matchers": [{"name": m.name, "value": m.value, "is_regex": m.is_regex, "is_equal": m.is_equal}
                         for m in s.matchers],
            "starts_at": s.starts_at, "ends_at": s.ends_at, "created_by": s.created_by, "comment": s.comment,
            "updated_at": s.updated_at}


class SilenceStore:
    def __init__(self, lakehouse: str, *, refresh_s: float = 1.0) -> None:
        self.lakehouse = lakehouse
        self.refresh_s = refresh_s
        self._writes = KeptOpen(SILENCES, lakehouse)
        self._cache: tuple[int, list[Silence]] | None = None
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def all(self) -> list[Silence]:
        """The current version of every silence, newest first; re-read only when the table changed."""
        with self._lock:
            if self._cache is not None and time.monotonic() - self._checked < self.refresh_s:
                return self._cache[1]
            table = open_table(SILENCES, self.lakehouse)
            if table is None:
                self._cache, self._checked = (-1, []), time.monotonic()
                return []
            version = table.version()
            if self._cache is None or self._cache[0] != version:
                latest: dict[str, Silence] = {}
                for row in table.to_pyarrow_table().to_pylist():
                    s = _silence(row)
                    if s.silence_id not in latest or s.version > latest[s.silence_id].version:
                        latest[s.silence_id] = s
                ordered = sorted(latest.values(), key=lambda s: (s.updated_at, s.silence_id), reverse=True)
                self._cache = (version, ordered)
            self._checked = time.monotonic()
            return self._cache[1]

    def get(self, silence_id: str) -> Silence | None:
        return next((s for s in self.all() if s.silence_id == silence_id), None)

    def matching(self, labels: dict[str, str], now: datetime | None = None) -> list[str]:
        return silenced_by(labels, self.all(), now or datetime.now(UTC))

    def create(self, matchers: list[Matcher], starts_at: datetime | None, ends_at: datetime, created_by: str,
               comment: str) -> Silence:
        now = datetime.now(UTC)
        start = starts_at or now
        check_matchers(matchers)
        if start.tzinfo is None or ends_at.tzinfo is None:
            raise SilenceError("startsAt/endsAt: give a time zone (e.g. 2026-11-23T10:00:00Z)")
        if ends_at <= now:
            raise SilenceError("endsAt: must be in the future")
        if ends_at <= start:
            raise SilenceError("endsAt: must be after startsAt")
        if ends_at - start > MAX_DURATION:
            raise SilenceError("endsAt: a silence may last at most 366 days")
        if not created_by.strip():
            raise SilenceError("createdBy: required")
        if not comment.strip():
            raise SilenceError("comment: required")
        s = Silence(str(uuid.uuid4()), 1, tuple(matchers), start.astimezone(UTC), ends_at.astimezone(UTC),
                    created_by, comment, now)
        self._append(s)
        return s

    def expire(self, silence_id: str) -> Silence | None:
        """End the silence now (a new version with ends_at = now); None when there is no such silence.
        Expiring an expired silence changes nothing."""
        s = self.get(silence_id)
        if s is None:
            return None
        now = datetime.now(UTC)
        if s.state(now) == "expired":
            return s
        ended = Silence(s.silence_id, s.version + 1, s.matchers, min(s.starts_at, now), now, s.created_by,
                        s.comment, now)
        self._append(ended)
        return ended

    def _append(self, s: Silence) -> None:
        self._writes.append(pa.Table.from_pylist([_row(s)], schema=SILENCES.arrow_schema))
        with self._lock:
            self._checked = float("-inf")   # read our own write
