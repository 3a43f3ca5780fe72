"""Small delta-rs helpers for the driver-side writers (alerts state, deliveries) and table upkeep.

delta-rs records app transactions but does not enforce them, so `write_once` reads the table's recorded
version for the app id and skips a write it already committed: a replayed micro-batch changes nothing.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from foundation.delta_checksum import write_with_checksum
from foundation.object_store import storage_options
from schemas.table import TableDef


def open_table(td: TableDef, lakehouse: str) -> DeltaTable | None:
    try:
        path = td.path(lakehouse)
        return DeltaTable(path, storage_options=storage_options(path))
    except TableNotFoundError:
        return None


# A table kept open between writes gets slower to write with every commit it has taken since it was opened (deltalake
# 1.6, one small append at a time on an idle machine: 17 ms each over the first 100 commits, 129 ms after 1,000;
# opened afresh every 100, 16-31 ms throughout), and a writer that commits every second keeps its tables open for days.
# So a kept table is opened again, from the newest checkpoint (delta-rs writes one every 100 versions by default),
# once it has taken this many commits.
REOPEN_AFTER_COMMITS = 100


@dataclass
class KeptTable:
    """A table kept open between writes, and the version it was opened at."""

    table: DeltaTable
    opened_at: int

    @classmethod
    def open(cls, td: TableDef, lakehouse: str) -> KeptTable | None:
        table = open_table(td, lakehouse)
        return None if table is None else cls(table, table.version())

    def worn(self) -> bool:
        """Whether it has taken enough commits since it was opened to be opened again (REOPEN_AFTER_COMMITS)."""
        return self.table.version() - self.opened_at >= REOPEN_AFTER_COMMITS


def read_rows(td: TableDef, lakehouse: str, columns: list[str] | None = None) -> pa.Table:
    """The table's rows, or an empty table with its schema when it does not exist yet."""
    table = open_table(td, lakehouse)
    if table is None:
        schema = td.arrow_schema if columns is None else pa.schema([td.arrow_schema.field(c) for c in columns])
        return schema.empty_table()
    return table.to_pyarrow_table(columns=columns)


def committed_version(td: TableDef, lakehouse: str, app_id: str) -> int:
    table = open_table(td, lakehouse)
    version = None if table is None else table.transaction_version(app_id)
    return -1 if version is None else int(version)


def write_once(td: TableDef, lakehouse: str, rows: pa.Table, app_id: str, version: int,
               mode: Literal["append", "overwrite"] = "append") -> bool:
    """Append (or overwrite) `rows` unless `app_id` already committed `version`; True when written."""
    return AppVersions(app_id).write_once(td, lakehouse, rows, version, mode)


_commit_locks: dict[str, threading.Lock] = {}
_commit_locks_guard = threading.Lock()


def committing(path: str) -> threading.Lock:
    """The lock this process's writers of the table at `path` commit under, one at a time.

    Writers in one process (the alerts job and the alert lane share gold.alerts and the engine's state, each
    overwriting its own rows) commit in turn rather than race Delta's optimistic concurrency: a commit that loses
    re-reads the log and tries again, work the lock saves. Their predicates (`stage = '<name>'`) keep a race harmless
    too, across processes as well: Delta's conflict check tells their files apart by the files' statistics."""
    with _commit_locks_guard:
        return _commit_locks.setdefault(path, threading.Lock())


@dataclass
class AppVersions:
    """`committed_version` and `write_once` for one app id, reading each table's version once.

    Only the process that owns an app id (it holds the streaming query's id) writes with it, so after the
    first look-up the driver knows the version without opening the table again: opening replays the log
    since the last checkpoint, which a table overwritten every micro-batch makes long (up to
    `maintain_every_batches` commits). For the same reason each table stays open between writes and is only
    brought up to date (`update_incremental`: the commits since, other writers' too) before the next one.
    """

    app_id: str
    known: dict[str, int] = field(default_factory=dict)  # table path -> last version committed
    opened: dict[str, KeptTable | None] = field(default_factory=dict)  # table path -> the table, at its last write

    def committed(self, td: TableDef, lakehouse: str) -> int:
        path = td.path(lakehouse)
        if path not in self.known:
            self.known[path] = committed_version(td, lakehouse, self.app_id)
        return self.known[path]

    def write_once(self, td: TableDef, lakehouse: str, rows: pa.Table, version: int,
                   mode: Literal["append", "overwrite"] = "append", predicate: str | None = None) -> bool:
        """`predicate` (an overwrite): replace only the rows matching it, which all of `rows` must."""
        if self.committed(td, lakehouse) >= version:
            return False
        extra: dict[str, Any] = {} if predicate is None else {"predicate": predicate}
        path = td.path(lakehouse)

        def write(table: DeltaTable | None) -> int:
            return write_with_checksum(_local_dir(td, lakehouse), rows.cast(td.arrow_schema), mode=mode, table=table,
                                       commit_properties=CommitProperties(
                                           app_transactions=[Transaction(self.app_id, version)]), **extra)

        self.opened[path], _ = _write_kept(td, lakehouse, self.opened.pop(path, None), write)
        self.known[path] = version
        return True


@dataclass
class KeptOpen:
    """Appends to one table from several threads, each keeping the table open between its appends: an append brings
    the thread's copy up to date (`update_incremental`: the commits since, other writers' too) instead of opening
    the table, which replays its log since the last checkpoint."""

    td: TableDef
    lakehouse: str
    local: threading.local = field(default_factory=threading.local)

    def append(self, rows: pa.Table, checksum: bool = True) -> int:
        """The version committed. Without `checksum` the version's `.crc` is left to the next append with one
        (`write_checksum` fills in every missing one since the newest): a reader meanwhile replays the log."""
        def write(table: DeltaTable | None) -> int:
            return write_with_checksum(_local_dir(self.td, self.lakehouse), rows.cast(self.td.arrow_schema),
                                       mode="append", table=table, checksum=checksum)

        table, self.local.table = getattr(self.local, "table", None), None  # out while in use (see _write_kept)
        self.local.table, version = _write_kept(self.td, self.lakehouse, table, write)
        return version


def _write_kept(td: TableDef, lakehouse: str, kept: KeptTable | None,
                write: Callable[[DeltaTable | None], int]) -> tuple[KeptTable | None, int]:
    """`write` with a table its keeper has taken out: brought up to date (`update_incremental`: the commits since,
    other writers' too), or opened when there is none or it is worn (None: the table does not exist yet, `write`
    creates it), under the process's commit lock for the table. The table to put back, and the version `write`
    committed. A write that raises puts nothing back: the next one opens the table afresh rather than trusting a
    copy that may be stuck (a conflict, a store listing a commit late). A table the write created is opened by the
    next."""
    with committing(td.path(lakehouse)):
        if kept is None or kept.worn():
            kept = KeptTable.open(td, lakehouse)
        else:
            kept.table.update_incremental()
        return kept, write(None if kept is None else kept.table)


def ensure_table(td: TableDef, lakehouse: str) -> None:
    """Create an empty table so readers (SQL, the API) find it before the first row arrives; a table written
    before its definition gained nullable columns gets them (its rows read null there), so appends go on."""
    table = open_table(td, lakehouse)
    if table is None:
        write_with_checksum(_local_dir(td, lakehouse), td.arrow_schema.empty_table(), mode="append")
        return
    have = set(table.schema().to_arrow().names)
    added = [f for f in td.arrow_schema if f.name not in have]
    if not added:
        return
    if not all(f.nullable for f in added):
        raise ValueError(f"{td.qualified_name} ({td.path(lakehouse)}): lacks column(s) "
                         f"{[f.name for f in added if not f.nullable]} that cannot be null: migrate it by hand")
    write_with_checksum(_local_dir(td, lakehouse), td.arrow_schema.empty_table(), mode="append", schema_mode="merge")


def compact_and_checkpoint(lakehouse: str, tables: tuple[TableDef, ...], retention_hours: int = 168) -> None:
    """Bound a long run's table size: merge small files, checkpoint the log, vacuum old files."""
    for td in tables:
        try:
            path = td.path(lakehouse)
            dt = DeltaTable(path, storage_options=storage_options(path))
        except TableNotFoundError:
            continue
        dt.optimize.compact()
        dt.create_checkpoint()
        dt.vacuum(retention_hours=retention_hours, enforce_retention_duration=False, dry_run=False)
        dt.cleanup_metadata()


def _local_dir(td: TableDef, lakehouse: str) -> str:
    """The table's location, created first when it is a local path (delta-rs does not create parents)."""
    path = td.path(lakehouse)
    if "://" not in path:
        os.makedirs(path, exist_ok=True)
    return path
