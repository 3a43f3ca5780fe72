"""Writes a bronze writer's batches (the emulator's, the collector's) to bronze Delta tables with delta-rs,
idempotently.

Each append records an app transaction (app id `isrwatch-<writer>/<run_id>`, version = batch id).
delta-rs records app transactions but does not enforce them, so the sink reads the table's recorded
version first and skips a batch it has already written: a restarted run never duplicates rows.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import KeptTable, compact_and_checkpoint
from foundation.object_store import storage_options
from schemas.bronze import COMMITTED_FIRST
from schemas.table import TableDef


class SinkSchemaError(Exception):
    """Raised when an existing bronze table's columns differ from its definition (nothing is written)."""


class DeltaSink:
    """Appends batches; every `maintain_every` batches it compacts, checkpoints and vacuums.

    A live run commits once a second per table: without maintenance a day is 86,400 small files and
    log entries per table. Compaction merges them, a checkpoint bounds log replay, and vacuum removes
    the compacted-away files older than `vacuum_retention_hours`.
    """

    def __init__(self, lakehouse: str, run_id: str, *, writer: str = "emulator", maintain_every: int = 600,
                 vacuum_retention_hours: int = 24) -> None:
        if maintain_every < 1:
            raise ValueError(f"maintain_every must be >= 1, got {maintain_every}")
        self.lakehouse = lakehouse
        self.run_id = run_id
        self.app_id = f"isrwatch-{writer}/{run_id}"
        self.maintain_every = maintain_every
        self.vacuum_retention_hours = vacuum_retention_hours
        self.batches_written = 0
        self.checked: set[str] = set()
        # Per table, kept between batches: the table open at its latest version (opening it replays the log
        # since the last checkpoint, twice per table and batch before: ~16 ms of the ~27 ms an append took; opened
        # again once worn, foundation/delta_io.KeptTable), and the last batch id this run committed to it, read
        # from the table once (this sink is the run's only writer). Dropped after maintenance, whose commits the
        # open tables have not seen.
        self._open: dict[str, KeptTable] = {}
        self._written: dict[str, int] = {}

    def written_version(self, td: TableDef) -> int:
        """The last batch id this run committed to `td`, or -1."""
        try:
            version = self._table(td).transaction_version(self.app_id)
        except TableNotFoundError:
            return -1
        return -1 if version is None else int(version)

    def _check_existing_schema(self, td: TableDef) -> None:
        """Refuse to append to a table whose columns differ (e.g. written by an older isrwatch)."""
        if td.name in self.checked:
            return
        try:
            existing = [f.name for f in self._table(td).schema().fields]
        except TableNotFoundError:
            existing = list(td.arrow_schema.names)
        if existing != list(td.arrow_schema.names):
            raise SinkSchemaError(f"{td.qualified_name} at {td.path(self.lakehouse)} has columns {existing}, "
                                  f"expected {list(td.arrow_schema.names)}: write to another --lakehouse "
                                  "(or move this one away); nothing was written")
        self.checked.add(td.name)

    def write_batch(self, batch_id: int, tables: dict[TableDef, pa.Table]) -> list[str]:
        for td in tables:  # every table checked before any is written
            self._check_existing_schema(td)
        for td, table in tables.items():
            if not table.schema.equals(td.arrow_schema):
                raise ValueError(f"{td.qualified_name}: batch schema differs from the table definition:\n"
                                 f"{table.schema}\nexpected:\n{td.arrow_schema}")
            if td.name not in self._written:
                self._written[td.name] = self.written_version(td)
        due = [td for td in sorted(tables, key=write_order) if self._written[td.name] < batch_id]
        # The reference tables and the events commit first, one by one (schemas.bronze.COMMITTED_FIRST): a reader that
        # sees a batch's rows in any other table finds its run, topics and events already there. The others are
        # independent tables; delta-rs writes without the GIL, so they commit side by side.
        for td in [td for td in due if td.name in COMMITTED_FIRST]:
            self._append(td, tables[td], batch_id)
        rest = [td for td in due if td.name not in COMMITTED_FIRST]
        if len(rest) > 1:
            list(_commit_pool().map(lambda td: self._append(td, tables[td], batch_id), rest))
        elif rest:
            self._append(rest[0], tables[rest[0]], batch_id)
        written = [td.name for td in due]
        if written:
            self.batches_written += 1
            if self.batches_written % self.maintain_every == 0:
                compact_and_checkpoint(self.lakehouse, tuple(tables), self.vacuum_retention_hours)
                self._open.clear()
        return written

    def _append(self, td: TableDef, table: pa.Table, batch_id: int) -> None:
        path = td.path(self.lakehouse)
        if "://" not in path:
            os.makedirs(path, exist_ok=True)
        kept = self._opened(td)
        write_with_checksum(path, table.cast(td.landing_schema), table=None if kept is None else kept.table,
                            mode="append",
                            commit_properties=CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)]))
        self._written[td.name] = batch_id

    def _table(self, td: TableDef) -> DeltaTable:
        path = td.path(self.lakehouse)
        return DeltaTable(path, storage_options=storage_options(path))

    def _opened(self, td: TableDef) -> KeptTable | None:
        """The table open at its latest version (None before its first commit: the write creates it)."""
        kept = self._open.get(td.name)
        if kept is None or kept.worn():
            kept = KeptTable.open(td, self.lakehouse)
            if kept is None:
                return None
            self._open[td.name] = kept
        return kept


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _commit_pool() -> ThreadPoolExecutor:
    """One pool per process for every sink's side-by-side commits (at most the five tables not committed first of one
    batch at a time per sink): a pool per sink would leave four idle threads behind each sink ever made."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=5, thread_name_prefix="isrwatch-bronze-sink"))
        return _POOL[0]


def write_order(td: TableDef) -> tuple[int, str]:
    """schemas.bronze.COMMITTED_FIRST in its order, then by name."""
    rank = COMMITTED_FIRST.index(td.name) if td.name in COMMITTED_FIRST else len(COMMITTED_FIRST)
    return rank, td.name
