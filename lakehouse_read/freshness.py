"""How far the queries that read bronze are behind it: validate (silver, and every page and rule over silver) and the
alert lane (the rules that page). Read from outside the pipeline, so a pipeline that stopped, crashed or falls
behind is seen as that, not as a quiet cluster.

A query's checkpoint says which bronze commits it has taken: the offsets of its newest committed batch
(foundation/streaming_checkpoint.py). validate's are Delta source offsets, which name a table by its id; the lane's
are `{table: last version read}`. Per bronze table, the commits after those are not taken yet; the oldest of them
was written when its commit file was (its modification time), and a query is behind by how long ago that was.

Cheap enough for every page: the newest version of a table is found by probing for commit files (from the last one
known, doubling, then halving; a few file looks when nothing changed), never by listing a `_delta_log` folder, which
grows by one file a commit; a query's commit folder is listed (Spark keeps its last 100 batches). The answer is kept
for `KEEP_S`.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from foundation.bronze_log import commit_path, log_versions
from foundation.object_store import lake_filesystem, storage_options
from foundation.streaming_checkpoint import (
    ALERT_LANE_CHECKPOINT,
    VALIDATE_CHECKPOINT,
    first_unread_version,
    last_committed_batch,
    parse_offset_log_entry,
)
from schemas.bronze import BRONZE_TABLES
from schemas.table import TableDef

# A query this long behind is said to be behind, on the pages and in the API. Both read bronze every second or so;
# half a minute is tens of batches late, not one slow batch.
BEHIND_AFTER_S = 30.0
KEEP_S = 2.0


@dataclass(frozen=True)
class Reader:
    """A query that reads bronze: its name, what falls behind with it, its checkpoint under the root, and whether
    every pipeline runs it (the alert lane runs only when a rule reads a silver table: without a checkpoint it is
    left out, not reported as not started)."""

    name: str
    feeds: str
    checkpoint: str
    always: bool


READERS = (Reader("validate", "silver tables, the pages and the rules over silver", VALIDATE_CHECKPOINT, True),
           Reader("alert lane", "the alerts on bronze", ALERT_LANE_CHECKPOINT, False))


@dataclass(frozen=True)
class TableLag:
    table: str                 # bronze.<name>
    newest_version: int        # the table's newest commit
    first_untaken: int         # the first commit the query has not taken whole
    commits_behind: int
    behind_since: datetime | None   # when the oldest commit not taken was written (None: none)
    behind_seconds: float

    def as_json(self) -> dict[str, Any]:
        return {"table": self.table, "newest_version": self.newest_version, "first_untaken": self.first_untaken,
                "commits_behind": self.commits_behind,
                "behind_since": None if self.behind_since is None else self.behind_since.isoformat(),
                "behind_seconds": round(self.behind_seconds, 1)}


@dataclass(frozen=True)
class ReaderLag:
    """`status`: `current`, `behind` (by more than BEHIND_AFTER_S), `not started` (bronze exists, the query has no
    committed batch) or `unreadable` (its checkpoint could not be read: `detail` says why)."""

    reader: Reader
    status: str
    tables: tuple[TableLag, ...] = ()
    detail: str = ""

    @property
    def behind_seconds(self) -> float:
        return max((t.behind_seconds for t in self.tables), default=0.0)

    def as_json(self) -> dict[str, Any]:
        return {"query": self.reader.name, "feeds": self.reader.feeds, "status": self.status,
                "behind_seconds": round(self.behind_seconds, 1), "detail": self.detail,
                "tables": [t.as_json() for t in self.tables if t.commits_behind]}

    def sentence(self) -> str:
        """What a page says about it; empty when it is current."""
        if self.status == "current":
            return ""
        if self.status != "behind":
            return f"{self.reader.name}: {self.detail} ({self.reader.feeds} are not updated)"
        worst = max(self.tables, key=lambda t: t.behind_seconds)
        since = "" if worst.behind_since is None else f" since {worst.behind_since:%H:%M:%S} UTC"
        commits = f"{worst.commits_behind:,} commit{'' if worst.commits_behind == 1 else 's'}"
        return (f"{self.reader.name} is {_duration(worst.behind_seconds)} behind bronze: {commits} of {worst.table} "
                f"not taken{since}; {self.reader.feeds} show the cluster as it was then")


@dataclass
class Freshness:
    """The lakehouse's bronze readers' lag, computed at most every KEEP_S (thread-safe)."""

    lakehouse: str
    checkpoint_root: str
    tables: tuple[TableDef, ...] = BRONZE_TABLES
    clock: Callable[[], float] = time.time
    _newest: dict[str, int] = field(default_factory=dict)      # per bronze table, the newest version seen
    _ids: dict[str, str] = field(default_factory=dict)         # Delta table id -> bronze table name
    _unknown: set[str] = field(default_factory=set)            # ids looked for once and not found
    _kept: tuple[float, list[ReaderLag]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def readers(self) -> list[ReaderLag]:
        """`measure`, at most every KEEP_S."""
        with self._lock:
            now = time.monotonic()
            if self._kept is None or now - self._kept[0] >= KEEP_S:
                self._kept = (now, self._measure())
            return self._kept[1]

    def warnings(self) -> list[str]:
        return [s for r in self.readers() if (s := r.sentence())]

    def measure(self) -> list[ReaderLag]:
        """Each query's lag now (none when there is no bronze yet)."""
        with self._lock:
            return self._measure()

    def _measure(self) -> list[ReaderLag]:
        now = self.clock()
        fs, root = lake_filesystem(self.lakehouse)
        newest = {td.name: self._newest_version(fs, posixpath.join(root, "bronze", td.name), td.name)
                  for td in self.tables}
        if all(v < 0 for v in newest.values()):
            return []  # no bronze yet: nothing to be behind
        out = []
        for reader in READERS:
            try:
                lag = self._lag(reader, fs, root, newest, now)
            except (OSError, ValueError, KeyError) as e:
                lag = ReaderLag(reader, "unreadable", detail=f"its checkpoint could not be read: {e}")
            if lag is not None:
                out.append(lag)
        return out

    def _lag(self, reader: Reader, fs: pafs.FileSystem, root: str, newest: dict[str, int],
             now: float) -> ReaderLag | None:
        cfs, croot = lake_filesystem(self.checkpoint_root)
        where = posixpath.join(croot, reader.checkpoint)
        names = [i.base_name for i in cfs.get_file_info(pafs.FileSelector(posixpath.join(where, "commits"),
                                                                           allow_not_found=True))]
        batch = last_committed_batch(names)
        if batch is None:
            if not reader.always:
                return None
            return ReaderLag(reader, "not started", detail=f"it has not committed a batch (checkpoint {where})")
        path = posixpath.join(where, "offsets", str(batch))
        with cfs.open_input_stream(path) as f:
            offsets = parse_offset_log_entry(f.read().decode(), path)[1]
        taken = self._taken(offsets)
        lags = []
        for name, version in newest.items():
            if version < 0 or name not in taken:
                continue
            first = taken[name]
            behind = max(0, version - first + 1)
            table = posixpath.join(root, "bronze", name)
            since = None if behind == 0 else _written_at(fs, table, first)
            lags.append(TableLag(f"bronze.{name}", version, first, behind, since,
                                 0.0 if since is None else max(0.0, now - since.timestamp())))
        status = "behind" if max((t.behind_seconds for t in lags), default=0.0) > BEHIND_AFTER_S else "current"
        return ReaderLag(reader, status, tuple(lags))

    def _taken(self, offsets: list[Any]) -> dict[str, int]:
        """Per bronze table a query's committed offsets cover: the first version it has not taken whole."""
        taken: dict[str, int] = {}
        for offset in offsets:
            if offset is None:
                continue
            if "reservoirId" not in offset:   # the bronze log source: {table: last version read}
                taken.update({name: int(v) + 1 for name, v in offset.items()})
                continue
            name = self._table_of(str(offset["reservoirId"]))
            if name is not None:
                first = first_unread_version(offset)
                taken[name] = 0 if first is None else first
        return taken

    def _table_of(self, table_id: str) -> str | None:
        """The bronze table with that Delta id (ids read once per process, and again once per id not known: a
        table created again has a new id; a query's offset for a table gone stays unknown)."""
        if table_id not in self._ids and table_id not in self._unknown:
            self._unknown.add(table_id)
            for td in self.tables:
                path = td.path(self.lakehouse)
                try:
                    self._ids[str(DeltaTable(path, storage_options=storage_options(path)).metadata().id)] = td.name
                except TableNotFoundError:
                    continue
        return self._ids.get(table_id)

    def _newest_version(self, fs: pafs.FileSystem, table: str, name: str) -> int:
        """The table's newest commit (-1: none), probed from the last one seen."""
        known = self._newest.get(name, -1)
        if known >= 0 and not _exists(fs, table, known):  # the table was replaced: start over
            known = -1
        if known < 0:
            versions = log_versions(table, fs)
            if not versions:
                return -1
            known = versions[-1]
        step = 1
        while _exists(fs, table, known + step):
            known += step
            step *= 2
        low, high = known, known + step   # low exists, high does not
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if _exists(fs, table, mid) else (low, mid)
        self._newest[name] = low
        return low


def _exists(fs: pafs.FileSystem, table: str, version: int) -> bool:
    return fs.get_file_info(commit_path(table, version)).type != pafs.FileType.NotFound


def _written_at(fs: pafs.FileSystem, table: str, version: int) -> datetime | None:
    info = fs.get_file_info(commit_path(table, version))
    return None if info.mtime is None else info.mtime.astimezone(UTC)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
